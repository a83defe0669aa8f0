"""Jobs from ``sacct`` segments: one :class:`JobUsage` per job, its satellites joined to it, and the
per-job figures the allocation report aggregates (GPU-seconds in a window, utilization over time,
finish-time fairness, journaled resizes).

The definitions (segments, satellites, windows, FTF) are those of
:mod:`slurm_elastic.reports.allocation`'s docstring. Pure: records in, values out; no file, no plot.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from slurm_elastic.contract import is_elastic, satellite_parent
from slurm_elastic.core.actions import ActionKind
from slurm_elastic.core.model import JobState
from slurm_elastic.slurm.records import AccountingRecord

if TYPE_CHECKING:
    from slurm_elastic.store import JournalEntry


RESIZE_KINDS = frozenset({ActionKind.SHRINK, ActionKind.GROW, ActionKind.MOVE})
"""Journaled action kinds that change a job's GPUs."""


@dataclass(frozen=True, slots=True)
class Segment:
    """One ``sacct`` record of a job: one shape of its allocation.

    Attributes:
        slurm_job_id: the record's job id (a satellite's own id).
        partition: partition of the record.
        start: seconds since the epoch, ``None`` if it never started.
        end: ``start + elapsed`` for a started segment (sacct's end, or now for a running one).
        elapsed: seconds it held its allocation.
        gpus: GPUs allocated.
        resizing: the record says ``RESIZING`` (an earlier shape of a resized job).
        satellite: the record is a satellite allocation of the job.
        finished: the record's state is terminal (RESIZING counts as closed).
    """

    slurm_job_id: int
    partition: str
    start: float | None
    end: float | None
    elapsed: float
    gpus: int
    resizing: bool
    satellite: bool
    finished: bool


@dataclass(frozen=True, slots=True)
class JobUsage:
    """One job with all its segments (see the module docstring for the definitions).

    Attributes:
        job_id: the Slurm job id (a satellite's parent id).
        user, account, partition: of the job's first primary segment.
        elastic: AdminComment of a primary segment starts with ``slurm-elastic``.
        state: Slurm state of the last primary segment (``COMPLETED``, ``RUNNING`` ...).
        submit: first submission (seconds since the epoch), ``None`` if unknown.
        segments: primary segments in time order, then satellites in time order.
    """

    job_id: str
    user: str
    account: str
    partition: str
    elastic: bool
    state: str
    submit: float | None
    segments: tuple[Segment, ...]

    @property
    def primary(self) -> tuple[Segment, ...]:
        """The job's own segments (no satellites)."""
        return tuple(s for s in self.segments if not s.satellite)

    @property
    def start(self) -> float | None:
        """First start of a primary segment."""
        starts = [s.start for s in self.primary if s.start is not None]
        return min(starts) if starts else None

    @property
    def finished(self) -> bool:
        """The last primary segment ended (and is not an earlier RESIZING shape)."""
        prim = self.primary
        return bool(prim) and prim[-1].finished and not prim[-1].resizing and prim[-1].start is not None

    @property
    def end(self) -> float | None:
        """End of the last segment when the job finished, else ``None``."""
        if not self.finished:
            return None
        ends = [s.end for s in self.segments if s.end is not None]
        return max(ends) if ends else None

    @property
    def exec_seconds(self) -> float:
        """Sum of the primary segments' elapsed."""
        return float(sum(s.elapsed for s in self.primary))

    @property
    def gpu_seconds(self) -> float:
        """GPUs x elapsed over every segment (satellites included), unclipped."""
        return float(sum(s.gpus * s.elapsed for s in self.segments))

    @property
    def first_gpus(self) -> int:
        """GPUs of the first primary segment."""
        prim = self.primary
        return prim[0].gpus if prim else 0

    @property
    def has_gpus(self) -> bool:
        """Some segment held a GPU."""
        return any(s.gpus > 0 for s in self.segments)

    @property
    def resizes_slurm(self) -> int:
        """RESIZING segments plus satellite allocations."""
        return sum(1 for s in self.segments if s.resizing or s.satellite)

    @property
    def satellites(self) -> int:
        """Satellite allocations counted in this job."""
        return len({s.slurm_job_id for s in self.segments if s.satellite})

    @property
    def queue(self) -> float | None:
        """First start - first submission."""
        start = self.start
        return start - self.submit if start is not None and self.submit is not None else None

    @property
    def jct(self) -> float | None:
        """End - first submission, for finished jobs."""
        end = self.end
        return end - self.submit if end is not None and self.submit is not None else None


def _segment(rec: AccountingRecord, satellite: bool) -> Segment:
    start = float(rec.start_time) if rec.start_time is not None else None
    elapsed = float(max(0, rec.elapsed))
    return Segment(
        slurm_job_id=rec.slurm_job_id, partition=rec.partition, start=start,
        end=start + elapsed if start is not None else None, elapsed=elapsed, gpus=max(0, rec.allocated_gpus),
        resizing="RESIZING" in rec.slurm_state, satellite=satellite,
        finished=rec.state is JobState.FINISHED,
    )


def _order(seg: Segment) -> tuple[float, int, float]:
    return (seg.start if seg.start is not None else math.inf, 0 if seg.resizing else 1,
            seg.end if seg.end is not None else math.inf)


def _parent_of(rec: AccountingRecord, satellites: Mapping[str, str]) -> str | None:
    """The record's parent job: from its AdminComment, else from the daemon's satellite map."""
    parent = satellite_parent(rec.admin_comment)
    if parent is None:
        parent = satellites.get(str(rec.job_id), satellites.get(str(rec.slurm_job_id)))
    return parent if parent is not None and parent != str(rec.job_id) else None


def group_jobs(records: Iterable[AccountingRecord], satellites: Mapping[str, str] | None = None) -> list[JobUsage]:
    """Group ``sacct`` records into jobs: a resized job's segments and its satellites become one job.

    Pure. Records of one id keep their order of time; satellites whose parent is not among the
    records form a job of the parent's id with the satellite's attributes.

    Args:
        records: ``sacct`` records.
        satellites: the daemon's satellite map, satellite job id -> parent job id
            (:meth:`Store.satellites` with ``include_ended=True``); it places a record whose
            AdminComment names no parent. ``None``: AdminComments only.

    Returns:
        Jobs sorted by first submission, then id.
    """
    sat_map: Mapping[str, str] = satellites if satellites is not None else {}
    own: dict[str, list[AccountingRecord]] = {}
    sats: dict[str, list[AccountingRecord]] = {}
    for rec in records:
        parent = _parent_of(rec, sat_map)
        (sats.setdefault(parent, []) if parent is not None else own.setdefault(str(rec.job_id), [])).append(rec)
    jobs: list[JobUsage] = []
    for job_id in sorted(set(own) | set(sats), key=_id_key):
        prim = sorted(own.get(job_id, []), key=lambda r: _order(_segment(r, False)))
        sat = sats.get(job_id, [])
        segs = tuple(sorted((_segment(r, False) for r in prim), key=_order)) + tuple(
            sorted((_segment(r, True) for r in sat), key=_order))
        head = prim[0] if prim else min(sat, key=lambda r: _order(_segment(r, True)))
        last = prim[-1] if prim else head
        submits = [float(r.submit_time) for r in (prim or sat) if r.submit_time is not None]
        jobs.append(JobUsage(
            job_id=job_id, user=head.user, account=head.account, partition=head.partition,
            elastic=any(is_elastic(r.admin_comment) for r in (prim or sat)),
            state=",".join(last.slurm_state), submit=min(submits) if submits else None, segments=segs,
        ))
    jobs.sort(key=lambda j: (j.submit if j.submit is not None else math.inf, _id_key(j.job_id)))
    return jobs


def _id_key(job_id: str) -> tuple[int, str]:
    digits = ""
    for ch in job_id:
        if not ch.isdigit():
            break
        digits += ch
    return (int(digits) if digits else 0, job_id)


def clipped_gpu_seconds(seg: Segment, lo: float, hi: float) -> float:
    if seg.start is None or seg.end is None or seg.gpus == 0 or seg.elapsed == 0:
        return 0.0
    span = seg.end - seg.start
    inside = max(0.0, min(seg.end, hi) - max(seg.start, lo))
    return seg.gpus * seg.elapsed * (inside / span if span > 0 else 1.0)


def percentile(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def hours(seconds: float) -> float:
    return seconds / 3600.0


def group_rows(key: str, jobs: Sequence[JobUsage], seconds: Mapping[tuple[str, int], float],
                attr: str, total: float) -> list[dict[str, Any]]:
    """GPU-hours by ``attr`` (account/user/partition); ``seconds[(job_id, k)]`` is segment k's GPU-seconds."""
    rows: dict[str, dict[str, Any]] = {}
    members: dict[str, set[str]] = {}
    for job in jobs:
        for k, seg in enumerate(job.segments):
            name = seg.partition if attr == "partition" else str(getattr(job, attr))
            row = rows.setdefault(name, {key: name, "jobs": 0, "elastic_jobs": 0, "gpu_hours": 0.0,
                                         "elastic_gpu_hours": 0.0, "rigid_gpu_hours": 0.0, "share": None})
            if job.job_id not in members.setdefault(name, set()):
                members[name].add(job.job_id)
                row["jobs"] += 1
                row["elastic_jobs"] += int(job.elastic)
            h = hours(seconds[job.job_id, k])
            row["gpu_hours"] += h
            row["elastic_gpu_hours" if job.elastic else "rigid_gpu_hours"] += h
    for row in rows.values():
        row["share"] = row["gpu_hours"] / hours(total) if total > 0 else None
    return sorted(rows.values(), key=lambda r: (-r["gpu_hours"], r[key]))


def utilization(jobs: Sequence[JobUsage], lo: float, hi: float, total_gpus: int | None) -> list[dict[str, Any]]:
    deltas: dict[float, int] = {lo: 0}
    for job in jobs:
        for seg in job.segments:
            if seg.start is None or seg.end is None or seg.gpus == 0:
                continue
            a, b = max(seg.start, lo), min(seg.end, hi)
            if b <= a:
                continue
            deltas[a] = deltas.get(a, 0) + seg.gpus
            deltas[b] = deltas.get(b, 0) - seg.gpus
    deltas.setdefault(hi, 0)
    points = []
    held = 0
    for t in sorted(deltas):
        held += deltas[t]
        points.append({"t": t, "gpus_held": held, "total_gpus": total_gpus,
                       "utilization": held / total_gpus if total_gpus else None})
    return points


def time_mean_held(points: Sequence[Mapping[str, Any]], lo: float, hi: float) -> float | None:
    if hi <= lo:
        return None
    area = sum(p["gpus_held"] * (q["t"] - p["t"]) for p, q in itertools.pairwise(points))
    return float(area / (hi - lo))


def in_system(jobs: Sequence[JobUsage], now: float) -> tuple[np.ndarray, np.ndarray]:
    """Time-integral of the number of GPU jobs in the system: breakpoints and cumulative integral."""
    deltas: dict[float, int] = {}
    for j in jobs:
        if j.submit is None:
            continue
        end = j.end if j.end is not None else now
        if end <= j.submit:
            continue
        deltas[j.submit] = deltas.get(j.submit, 0) + 1
        deltas[end] = deltas.get(end, 0) - 1
    if not deltas:
        return np.zeros(1), np.zeros(1)
    ts = np.array(sorted(deltas), dtype=np.float64)
    counts = np.cumsum([deltas[t] for t in sorted(deltas)]).astype(np.float64)
    cum = np.concatenate([[0.0], np.cumsum(counts[:-1] * np.diff(ts))])
    return ts, cum


def finish_time_fairness(job: JobUsage, ts: np.ndarray, cum: np.ndarray, total_gpus: int | None) -> float | None:
    jct, exec_s = job.jct, job.exec_seconds
    if jct is None or job.submit is None or job.end is None or not total_gpus or exec_s <= 0:
        return None
    span = job.end - job.submit
    n_avg = 1.0
    if span > 0:
        n_avg = max(1.0, (float(np.interp(job.end, ts, cum)) - float(np.interp(job.submit, ts, cum))) / span)
    mean_gpus = job.gpu_seconds / exec_s
    fair = exec_s * max(1.0, n_avg * mean_gpus / total_gpus)
    return jct / fair if fair > 0 else None


def journal_stats(entries: Sequence[JournalEntry]) -> tuple[int, int, float | None, float | None]:
    resizes = [e for e in entries if e.action.kind in RESIZE_KINDS]
    failed = sum(1 for e in resizes if e.state == "failed")
    costs = [e.finished - e.started for e in resizes if e.state == "done" and e.finished is not None]
    return len(resizes), failed, (float(np.mean(costs)) if costs else None), (max(costs) if costs else None)
