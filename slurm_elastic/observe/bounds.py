"""What a job's own reports may claim: bounded by what it asked for, by the clock and by physics.

A report's MAC proves only that the job's owner wrote it, so a signed report is still the user's
word. This module owns the rules a verified report must keep before the daemon plans with it
(:class:`ReportLimits`, built per job by :func:`limits_of`); a report that breaks one is refused
(:class:`~slurm_elastic.observe.job_reports.ReportRefused`) and its job quarantined, so the job is
planned from priors, exactly as if it had never reported (docs/security.md):

* ``world`` (workers) at most the GPUs the job may ever hold: its ``--elastic`` maximum, else
  :data:`MAX_WORLD`;
* ``global_batch`` at most the declared ``--elastic-batch`` maximum; without one, at most ``world``
  times the ``max_local_batch`` of the model the job is planned with (what fits in a GPU's memory):
  the profile of the model its reports name when the site has one, else the ``default_model``'s.
  It was the largest of every profile, so a job planned as cifar10 could claim ncf's 32,768 per
  GPU, and the planners extrapolated its profile far past what was measured (issue 37). A job of a
  model the site has not profiled that trains at larger batches declares ``--elastic-batch``, or
  names a profiled model. A smaller batch than declared is the job's own loss (a slower job is
  given less), so it is not refused;
* ``throughput`` at most :data:`THROUGHPUT_SLACK` times the best throughput of the fastest known
  model at that world (over every shipped and site profile and every per-GPU batch that fits). The
  daemon knows which model a job trains only from the job's word (the ``model`` its launcher
  reports, planned with that profile when the site has one, else as the ``default_model``), and
  a lighter model is legitimately faster than the default one (a small CNN on the dev cluster's
  CPUs reports 7,200 samples/s on one worker, above 4 x ResNet-18 on a V100), so the bound is what
  no known model reaches, not what the default model does. A job may run on faster GPUs than the
  profiles' V100, not on a machine many times faster. Within the bound, what a report can change in
  a plan is its own job's: the planners' measured-over-predicted correction, clipped
  (``core/sizing.py``), and the job's own throughput model fitted from its step times
  (``slurm_elastic_predictor.calibrate``; multipliers of the prior's terms within [0.01, 100]), so a
  job that claims to scale better than it does is given at most its ``--elastic`` maximum;
* ``t`` no later than now (plus :data:`CLOCK_SKEW_S`) and no earlier than the job's submission;
* ``samples`` never decreasing, and growing no faster than that throughput bound allows between
  two reports of the job's rank 0 (a leaving worker's ``left`` farewell is its own process's
  count and is checked for time, world and batch only);
* ``epochs`` (what the job says it trains, which its remaining work is planned from) at most
  :data:`MAX_EPOCHS`; what it changes in a plan beyond that is bounded by the trust guard
  (``core/trust.py``: ``target_epochs`` is a reported field, planned also from the job's prior);
* nothing after an ``end`` report in the same run: a job that says its training ended and then
  reports progress lied once (its end report made the daemon leave it alone: no shrink, no order).

Pure: the caller passes ``now``, the job's record and the profiles.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from slurm_elastic.contract import ContractError, parse_elastic_request
from slurm_elastic.slurm.records import JobRecord, run_start_of
from slurm_elastic.store import ProgressRow
from slurm_elastic_predictor.throughput import ThroughputModel

MAX_WORLD = 65536
"""Workers a job without an ``--elastic`` maximum may report (the grammar's largest GPU count)."""
THROUGHPUT_SLACK = 4.0
"""How many times the profile's best throughput a report may claim (GPUs newer than a V100)."""
CLOCK_SKEW_S = 60.0
"""How far a report's time may lie after the daemon's clock (the job's nodes' clocks drift)."""
BATCH_SLACK = 2
"""Samples one report may add beyond the throughput bound, in global batches (a step in flight)."""
MAX_EPOCHS = 1_000_000
"""Most epochs a report may say its job trains (no training makes a million passes over its data)."""


class ReportOutOfBounds(ValueError):  # noqa: N818 (an outcome: the report is refused)
    """A verified report that claims what its job cannot have done (the message names the value and the rule)."""


@dataclass(frozen=True, slots=True)
class ReportLimits:
    """The bounds of one job's reports (see the module docstring).

    Attributes:
        job_id: the job.
        max_world: most workers it may report.
        max_batch: its declared global batch maximum, or ``None`` when it declared no range.
        max_local_batch: per-GPU batch limit of the model it is planned with when its report names
            no profiled model (without a declared range): the ``default_model``'s.
        local_batches: per-GPU batch limit of each profiled model, by name: a report naming one (or
            following a rank-0 report that did) is planned as that model and bounded by it.
        peak: the throughput models whose best, at each world, bounds its throughput (empty:
            unbounded).
        earliest: no report before this time (its submission, less the skew).
        latest: no report after this time (now, plus the skew).
        run_start: when Slurm started the job's current run, if it was requeued (``None``
            otherwise). A requeued job trains again from its checkpoint, or from zero without one
            (a node lost, a preemption it could not checkpoint for): its first report after that
            start may count fewer samples than the last one before it.
    """

    job_id: str
    max_world: int
    max_batch: int | None
    max_local_batch: int
    local_batches: Mapping[str, int]
    peak: tuple[ThroughputModel, ...]
    earliest: float
    latest: float
    run_start: float | None = None

    def ceiling(self, world: int) -> float:
        """The most samples/s a report at ``world`` workers may claim."""
        if not self.peak or world < 1:
            return float("inf")
        best = max(_best(model, world) for model in self.peak)
        return THROUGHPUT_SLACK * best if best > 0 else float("inf")

    def starts_a_run(self, row: ProgressRow, previous: ProgressRow) -> bool:
        """``row`` is the first report of a requeued job's current run: ``previous`` was written
        before Slurm started that run, and ``row`` after it (the job's clock may lag by the skew)."""
        start = self.run_start
        return start is not None and previous.t < start <= row.t + CLOCK_SKEW_S

    def check(self, row: ProgressRow, previous: ProgressRow | None) -> None:
        """Refuse a row that breaks a bound; ``previous`` is the job's last rank-0 row (not ``left``).

        Raises:
            ReportOutOfBounds: naming the value and the rule.
        """
        def refuse(what: str, rule: str) -> ReportOutOfBounds:
            return ReportOutOfBounds(f"job {self.job_id}: report {row.kind} at t={row.t:.0f}: {what} ({rule})")

        if row.t > self.latest:
            raise refuse(f"t={row.t!r}", f"rule: not after now + {CLOCK_SKEW_S:.0f} s ({self.latest:.0f})")
        if row.t < self.earliest:
            raise refuse(f"t={row.t!r}", f"rule: not before the job's submission ({self.earliest:.0f})")
        if row.world > self.max_world:
            raise refuse(f"world={row.world}", f"rule: at most the job's --elastic maximum, {self.max_world}")
        if self.max_batch is not None:
            if row.global_batch > self.max_batch:
                raise refuse(f"global_batch={row.global_batch}",
                             f"rule: at most the declared --elastic-batch maximum, {self.max_batch}")
        else:
            named = row.model or (previous.model if previous is not None else None)
            model = named if named in self.local_batches else None
            limit = self.local_batches[model] if model is not None else self.max_local_batch
            if row.global_batch > max(1, row.world) * limit:
                raise refuse(f"global_batch={row.global_batch} on {row.world} worker(s)",
                             f"rule: at most {limit} per worker, what fits in a GPU for the model it is planned "
                             f"as ({model or 'the default model'})")
        if row.epochs is not None and row.epochs > MAX_EPOCHS:
            raise refuse(f"epochs={row.epochs!r}", f"rule: at most {MAX_EPOCHS:,}")
        if row.throughput is not None and row.throughput > self.ceiling(row.world):
            raise refuse(f"throughput={row.throughput!r} on {row.world} worker(s)",
                         f"rule: at most {THROUGHPUT_SLACK:g} x the fastest known model's best, "
                         f"{self.ceiling(row.world):.0f}/s")
        if row.kind == "left" or previous is None:
            return
        if previous.kind == "end" and not self.starts_a_run(row, previous):
            raise refuse(f"a {row.kind} report after the job's end report (t={previous.t:.0f})",
                         "rule: a job that reported its end reports nothing more in that run")
        if row.samples < previous.samples and not self.starts_a_run(row, previous):
            raise refuse(f"samples={row.samples}", f"rule: never fewer than the last report's {previous.samples}"
                         + (", in the same run (Slurm started this run at "
                            f"{self.run_start:.0f})" if self.run_start is not None else ""))
        dt = max(0.0, row.t - previous.t)
        world = max(row.world, previous.world)
        most = self.ceiling(world) * dt + BATCH_SLACK * max(row.global_batch, previous.global_batch, 1)
        if row.samples - previous.samples > most:
            raise refuse(f"samples={row.samples} {dt:.1f} s after {previous.samples}",
                         f"rule: at most {most:.0f} more at {world} worker(s)")


def _best(model: ThroughputModel, world: int) -> float:
    """``model``'s best samples/s at ``world`` workers, over every per-GPU batch that fits."""
    local = np.unique(np.clip(2 ** np.arange(0, 17), 1, model.max_local_batch))
    return float(np.max(model.throughput(local * world, world)))


def limits_of(rec: JobRecord, *, now: float, profiles: Mapping[str, ThroughputModel],
              default_model: str) -> ReportLimits:
    """The bounds of ``rec``'s reports now (a job whose request does not parse gets the loosest),
    for a job planned as ``default_model`` unless its reports name another profiled model."""
    try:
        req = parse_elastic_request(rec.admin_comment, job_id=rec.job_id)
    except ContractError:
        req = None
    local_batches = {name: m.max_local_batch for name, m in profiles.items()}
    planned = local_batches.get(default_model, max(local_batches.values(), default=1 << 16))
    max_world = req.max_gpus if req is not None and req.max_gpus else MAX_WORLD
    max_batch = None
    if req is not None and req.min_batch is not None:
        max_batch = req.max_batch or max(req.min_batch, max_world * planned)
    return ReportLimits(
        job_id=rec.job_id, max_world=max_world, max_batch=max_batch, max_local_batch=planned,
        local_batches=local_batches,
        peak=tuple(profiles.values()),
        earliest=float(rec.submit_time or 0) - CLOCK_SKEW_S, latest=now + CLOCK_SKEW_S,
        run_start=run_start_of(rec),
    )
