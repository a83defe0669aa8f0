"""Measured scaling of each job from its launcher's progress rows: throughput and efficiency at each size.

The definitions are those of :mod:`slurm_elastic.reports.allocation`'s docstring ("Scaling").
Pure: progress rows in, values out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from slurm_elastic.reports.usage import JobUsage, hours

if TYPE_CHECKING:
    from slurm_elastic.store import ProgressRow


MEASURED_KINDS = frozenset({"progress", "end"})
"""Progress row kinds whose ``throughput`` measures a window at one size (a ``resize`` row's includes its pause)."""


@dataclass(frozen=True, slots=True)
class SizeThroughput:
    """What a job's progress rows measured at one size.

    Attributes:
        gpus: the size (GPUs = workers).
        seconds: ``T(k)``, summed windows measured at this size (seconds of training, pauses excluded).
        throughput: ``X(k)``, samples/s over those windows (window-length weighted).
    """

    gpus: int
    seconds: float
    throughput: float

    @property
    def per_gpu(self) -> float:
        """Throughput per GPU (samples/s/GPU)."""
        return self.throughput / self.gpus


@dataclass(frozen=True, slots=True)
class JobScaling:
    """A job's scaling and resize pauses from its launcher's progress rows (definitions in the module docstring).

    Attributes:
        measured: one entry per measured size, smallest first.
        seen: every size a row named (measured or not), smallest first.
        resizes: ``resize`` rows (in-place resizes and recoveries from a lost worker).
        pauses: their ``pause_s`` (seconds), where given.
    """

    measured: tuple[SizeThroughput, ...]
    seen: tuple[int, ...]
    resizes: int
    pauses: tuple[float, ...]

    @property
    def efficiency(self) -> tuple[float, ...] | None:
        """``E(k)`` at each measured size, ``None`` below two measured sizes."""
        if len(self.measured) < 2:
            return None
        base = self.measured[0].per_gpu
        return tuple(m.per_gpu / base for m in self.measured)

    @property
    def weight(self) -> float:
        """Measured GPU-seconds, ``sum(k T(k))``: the weight of this job's mean efficiency."""
        return float(sum(m.gpus * m.seconds for m in self.measured))

    @property
    def mean_efficiency(self) -> float | None:
        """GPU-seconds-weighted mean of ``E(k)``, ``None`` below two measured sizes."""
        eff = self.efficiency
        if eff is None or self.weight <= 0:
            return None
        return float(sum(m.gpus * m.seconds * e for m, e in zip(self.measured, eff, strict=True)) / self.weight)

    @property
    def note(self) -> str:
        """Why the efficiency is unknown, or which sizes were seen without a measurement; ``""`` if nothing to say."""
        unmeasured = sorted(set(self.seen) - {m.gpus for m in self.measured})
        gap = f"no throughput measured at {', '.join(map(str, unmeasured))} GPUs" if unmeasured else ""
        if not self.measured:
            return "no throughput measured (reports without a measured window)"
        if len(self.measured) == 1:
            k = self.measured[0].gpus
            one = f"ran at one measured size ({k} GPU{'' if k == 1 else 's'})"
            return f"{one}; {gap}" if gap else one
        return gap


def job_scaling(rows: Sequence[ProgressRow]) -> JobScaling:
    """Measure a job's throughput per size and its resize pauses from its progress rows. Pure.

    Args:
        rows: the job's progress rows (:meth:`Store.progress_of`; read: ``t``, ``kind``, ``world``,
            ``throughput`` (samples/s or ``None``), ``pause_s``), in any order; sorted by ``t`` here.

    Returns:
        The per-size throughput (see the module docstring), sizes seen, and resize reports.
    """
    ordered = sorted(rows, key=lambda r: r.t)
    seconds: dict[int, float] = {}
    samples: dict[int, float] = {}
    seen: set[int] = set()
    resizes = 0
    pauses: list[float] = []
    prev: float | None = None
    for r in ordered:
        t, k, kind = float(r.t), r.world, r.kind
        if k > 0:
            seen.add(k)
        if kind == "resize":
            resizes += 1
            if r.pause_s is not None:
                pauses.append(float(r.pause_s))
        elif kind in MEASURED_KINDS and prev is not None and t > prev and k > 0:
            thr = r.throughput
            if thr is not None and thr > 0:
                seconds[k] = seconds.get(k, 0.0) + (t - prev)
                samples[k] = samples.get(k, 0.0) + float(thr) * (t - prev)
        prev = t
    measured = tuple(SizeThroughput(k, seconds[k], samples[k] / seconds[k]) for k in sorted(seconds))
    return JobScaling(measured, tuple(sorted(seen)), resizes, tuple(pauses))


def weighted_efficiency(scalings: Iterable[JobScaling]) -> float | None:
    scaled = [s for s in scalings if s.mean_efficiency is not None]
    weight = sum(s.weight for s in scaled)
    if weight <= 0:
        return None
    return float(sum(s.weight * (s.mean_efficiency or 0.0) for s in scaled) / weight)


def scaling_table_rows(jobs: Sequence[JobUsage], scaling: Mapping[str, JobScaling | None],
                  progress_known: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The ``scaling`` rows (elastic jobs and jobs with reports) and the ``scaling_by_account`` rows."""
    no_reports = "no launcher reports" if progress_known else "no store given: launcher reports unknown"
    rows = []
    members: dict[str, list[JobScaling | None]] = {}
    for j in jobs:
        sc = scaling.get(j.job_id)
        if sc is None and not j.elastic:
            continue
        members.setdefault(j.account, []).append(sc)
        eff = sc.efficiency if sc is not None else None
        rows.append({
            "job_id": j.job_id, "user": j.user, "account": j.account, "elastic": j.elastic,
            "sizes": [m.gpus for m in sc.measured] if sc is not None else None,
            "measured_s": [m.seconds for m in sc.measured] if sc is not None else None,
            "throughput": [m.throughput for m in sc.measured] if sc is not None else None,
            "throughput_per_gpu": [m.per_gpu for m in sc.measured] if sc is not None else None,
            "efficiency": list(eff) if eff is not None else None,
            "mean_efficiency": sc.mean_efficiency if sc is not None else None,
            "note": sc.note if sc is not None else no_reports,
        })
    by_account = []
    for account in sorted(members):
        mine = members[account]
        reporting = [s for s in mine if s is not None]
        scaled = [e for s in reporting if (e := s.mean_efficiency) is not None]
        if not progress_known:
            note = "no store given"
        elif not reporting:
            note = "no job with launcher reports"
        elif not scaled:
            note = "no job measured at two or more sizes"
        elif len(reporting) < len(mine):
            note = f"{len(mine) - len(reporting)} job(s) without launcher reports"
        else:
            note = ""
        by_account.append({
            "account": account, "jobs": len(mine), "jobs_reporting": len(reporting), "jobs_scaled": len(scaled),
            "measured_gpu_hours": hours(sum(s.weight for s in reporting)) if progress_known else None,
            "mean_efficiency": weighted_efficiency(reporting), "min_efficiency": min(scaled) if scaled else None,
            "note": note,
        })
    return rows, by_account
