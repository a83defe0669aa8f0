"""The baselines DL2 is compared with besides Optimus: ``drf`` and ``tetris``.

This module owns the two cluster schedulers of DL2's evaluation (Peng et al., arXiv:1909.06040,
§6.2) that ONES's comparison lacks, adapted, as ``drl`` is, to all-reduce jobs whose GPU count a
scheduler decides anew each round. Both are pure (snapshot in, plan out; ``snapshot.now`` is the
time, the ``rng`` is unused) and deterministic, and like ``drl`` they keep the user's global batch
(:func:`~slurm_elastic.core.baselines.fixed_batch_sizing`) and never preempt: a running job keeps
at least its smallest size, decided anew above that each round (DL2 decides every job's worker
count each time slot; the comparison keeps the guarantee ``drl`` has). Only when GPUs are lost and
the running jobs' smallest sizes no longer fit is a running job left out, with its reason. A
running job whose GPUs go only in whole blocks is planned only at sizes those blocks reach
(``Job.unreachable_sizes``). Every active elastic job that does not run gets a reason.

``drf`` — Dominant Resource Fairness (Ghodsi et al., NSDI'11), the scheduler DL2 learns from and
    its main baseline ("allocates resources to jobs based on the fairness of dominant
    resources"). GPUs are the one resource a plan allocates, so a job's dominant share is its GPUs
    over the schedulable GPUs, and DRF is progressive filling: GPUs go, a job's next size at a
    time, to the job with the smallest share (the earlier submission on ties) until no job can
    take its next size. A waiting job has share 0, so every waiting job is offered its smallest
    size, in submission order, before any job grows. Choices: a job whose next size does not
    fit in what is left stops growing and the others go on (water-filling: DRF leaves no GPU idle
    that a job could take), where DL2's own simulator stops at the first job that does not fit;
    a job never grows past ``max_gpus`` (DL2's 16 workers) nor past the GPU count that holds its
    batch.

``tetris`` — Tetris (Grandl et al., SIGCOMM'14) as DL2 describes it: it "preferentially allocates
    resources to jobs with the shortest remaining completion time and highest resource packing
    efficiency; once it selects a job with the highest score ... it always adds tasks to the job
    until the number of tasks reaches a user-defined threshold". Tetris's score is the alignment
    of a task's demand with the free resources plus ``epsilon`` times a remaining-work term, with
    ``epsilon`` the ratio of the two terms' means so that neither dominates. Here, with one
    resource: a job's next task is its next size step (``min_gpus`` for a waiting job), its
    alignment ``step x free / total^2`` (the dot product of its demand and the free GPUs, both as
    shares of the cluster), and its remaining completion time ``T`` the expected remaining samples
    (the ONES progress model, as ``optimus`` and ``drl`` use) over its throughput at its threshold.
    Each pick scores every job below its threshold whose next step fits, ``a - (mean a / mean T)
    x T`` (shorter remaining time scores higher), and the best one (the earlier submission on ties)
    grows to its threshold, or to the largest size that fits. The threshold is the job's request
    (``requested_gpus`` within its feasible range). What no job can take below its threshold stays
    idle, as in DL2's description.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from slurm_elastic.core.baselines import (
    FixedBatchTable,
    fixed_batch_sizing,
    fixed_batch_tables,
    keep_running,
    never_at_fixed_batch,
    submit_order,
)
from slurm_elastic.core.model import ClusterSnapshot, Job, JobId
from slurm_elastic.core.planner import PlanResult, build_plan
from slurm_elastic.core.remaining import expected_remaining, progress_shapes
from slurm_elastic.core.sizing import Sizing
from slurm_elastic.errors import ConfigError

FloatArr = NDArray[np.float64]


def _fixed_range(job: Job, total: int) -> tuple[int, int] | None:
    """The GPU counts that hold ``job``'s fixed batch on the schedulable GPUs (``None``: none)."""
    hi = min(job.max_gpus, total, job.base_batch)
    return (job.min_gpus, hi) if job.min_gpus <= hi else None


def _next_size(job: Job, k: int, hi: int) -> int | None:
    """The smallest size above ``k`` and at most ``hi`` that the job can be planned at."""
    gaps = job.unreachable_sizes
    for size in range(k + 1, hi + 1):
        if size not in gaps:
            return size
    return None


def _largest_size(job: Job, lo: int, hi: int) -> int | None:
    """The largest size in ``lo..hi`` that the job can be planned at."""
    gaps = job.unreachable_sizes
    for size in range(hi, lo - 1, -1):
        if size not in gaps:
            return size
    return None


def _kept(job: Job, span: tuple[int, int] | None) -> int | None:
    """The size a running job keeps at least: its smallest size it can be planned at."""
    if span is None:
        return None
    return _next_size(job, span[0] - 1, max(span[0], min(job.num_gpus, span[1])))


def _keep_minimums(snapshot: ClusterSnapshot, jobs: Sequence[Job], spans: dict[JobId, tuple[int, int] | None],
                   policy: str, total: int) -> tuple[dict[JobId, int], dict[JobId, str], int]:
    """Running jobs at their smallest sizes (:func:`~slurm_elastic.core.baselines.keep_running`: jobs
    wholly on schedulable GPUs first), and a reason for each waiting job that holds its batch on no count.

    Returns:
        ``(counts, reasons, free GPUs left)``.
    """
    counts, reasons, free = keep_running(snapshot, jobs, lambda j: _kept(j, spans[j.job_id]), policy, total)
    for job in jobs:
        if job.is_waiting and spans[job.job_id] is None:
            reasons[job.job_id] = never_at_fixed_batch(job, total)
    return counts, reasons, free


def _plan(snapshot: ClusterSnapshot, policy: str, counts: dict[JobId, int], reasons: dict[JobId, str],
          memo: Any = None) -> PlanResult:
    def choose(job: Job, k: int) -> Sizing | None:
        return fixed_batch_sizing(job, k, snapshot)

    return PlanResult(build_plan(snapshot, policy, counts, reasons=reasons, choose=choose), memo)


# -- drf -----------------------------------------------------------------------------------------


class DrfPlanner:
    """The ``drf`` policy: progressive filling of GPUs by dominant share (no parameters)."""

    name = "drf"
    interval = 0.0
    epoch_events = False
    uses_progress = False

    def plan(self, snapshot: ClusterSnapshot, memo: Any, rng: np.random.Generator) -> PlanResult:
        """Give each job its next size in turn, the smallest share first, while GPUs last."""
        jobs = sorted(snapshot.elastic_jobs(), key=submit_order)
        total = len(snapshot.schedulable_gpus())
        spans = {j.job_id: _fixed_range(j, total) for j in jobs}
        counts, reasons, free = _keep_minimums(snapshot, jobs, spans, self.name, total)
        for job in jobs:  # share 0: every waiting job is offered its smallest size first
            span = spans[job.job_id]
            if not job.is_waiting or span is None:
                continue
            if span[0] <= free:
                counts[job.job_id] = span[0]
                free -= span[0]
            else:
                reasons[job.job_id] = (f"waiting: needs {span[0]} GPUs at least, {free} are left after the "
                                       "drf shares of earlier and smaller jobs")
        rank = {j.job_id: i for i, j in enumerate(jobs)}
        heap = [(k, rank[jid], jid) for jid, k in counts.items()]  # share k / total: ordered by k
        heapq.heapify(heap)
        by_id = {j.job_id: j for j in jobs}
        while heap and free > 0:
            k, i, jid = heapq.heappop(heap)
            job = by_id[jid]
            span = spans[jid]
            nxt = None if span is None else _next_size(job, k, span[1])
            if nxt is None or nxt - k > free:
                continue  # this job takes no more; the others go on
            counts[jid] = nxt
            free -= nxt - k
            heapq.heappush(heap, (nxt, i, jid))
        return _plan(snapshot, self.name, counts, reasons)


# -- tetris --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TetrisMemo:
    """What ``tetris`` carries between calls: its throughput grids and predictions (as
    :class:`~slurm_elastic.core.baselines.OptimusMemo`'s, for the jobs' remaining times)."""

    grids: dict[tuple[object, ...], FloatArr] = field(default_factory=dict)
    predictions: dict[tuple[object, ...], float] = field(default_factory=dict)


class TetrisPlanner:
    """The ``tetris`` policy: pick by packing and shortest remaining time, grow to the threshold.

    Args:
        default_epochs_to_go: progress prior for jobs that declared no epoch count (as ``optimus``).
    """

    name = "tetris"
    interval = 0.0
    epoch_events = False
    uses_progress = True  # reads snapshot.progress_model for remaining work

    def __init__(self, default_epochs_to_go: float = 10.0) -> None:
        if not (np.isfinite(default_epochs_to_go) and default_epochs_to_go >= 1):
            raise ConfigError(f"tetris.default_epochs_to_go = {default_epochs_to_go}: must be >= 1")
        self.default_epochs_to_go = float(default_epochs_to_go)

    def plan(self, snapshot: ClusterSnapshot, memo: Any, rng: np.random.Generator) -> PlanResult:
        """Running jobs keep their smallest size; then the best-scored job grows to its threshold,
        and again, while some job's next step fits."""
        m = memo if isinstance(memo, TetrisMemo) else TetrisMemo()
        jobs = sorted(snapshot.elastic_jobs(), key=submit_order)
        total = len(snapshot.schedulable_gpus())
        grids: dict[tuple[object, ...], FloatArr] = {}
        predictions: dict[tuple[object, ...], float] = {}
        tabs = fixed_batch_tables(snapshot, jobs, total, m.grids, grids, m.predictions, predictions)
        spans = {j.job_id: (t.kmin, t.kmax) if t.kmin else None for j, t in zip(jobs, tabs, strict=True)}
        counts, reasons, free = _keep_minimums(snapshot, jobs, spans, self.name, total)
        y = expected_remaining(*progress_shapes(snapshot, jobs, self.default_epochs_to_go))
        thresholds = [min(max(j.requested_gpus, t.kmin), t.kmax) for j, t in zip(jobs, tabs, strict=True)]
        remaining = np.array([_remaining_time(y[i], tabs[i], thresholds[i]) for i in range(len(jobs))])
        open_ = np.array([i for i, j in enumerate(jobs) if spans[j.job_id] is not None
                          and counts.get(j.job_id, 0) < thresholds[i]
                          and (j.job_id in counts or j.is_waiting)], dtype=np.int64)
        # A job's next task is fixed until it is picked, and a picked job leaves: its step is found once.
        steps = np.array([_step(jobs[i], counts.get(jobs[i].job_id, 0), tabs[i], thresholds[i]) for i in open_],
                         dtype=np.int64)
        while len(open_) and free > 0:
            fits = (steps > 0) & (steps <= free)
            if not fits.any():
                break
            idx = open_[fits]
            step = steps[fits].astype(np.float64)
            t = remaining[idx]
            align = step * free / float(total * total)
            eps = align.mean() / t.mean() if t.mean() > 0 else 0.0
            best = int(idx[int(np.argmax(align - eps * t))])  # argmax: the first (earliest) on ties
            job = jobs[best]
            k = counts.get(job.job_id, 0)
            size = _largest_size(job, max(k + 1, tabs[best].kmin), min(thresholds[best], k + free))
            assert size is not None  # its next step fits, so some size in k+1..k+free does
            counts[job.job_id] = size
            free -= size - k
            keep = open_ != best
            open_, steps = open_[keep], steps[keep]
        for job in jobs:
            span = spans[job.job_id]
            if job.is_waiting and job.job_id not in counts and span is not None:
                reasons[job.job_id] = (f"waiting: {free} GPUs are left after tetris packed the jobs it "
                                       f"scored higher (it needs {span[0]})")
        return _plan(snapshot, self.name, counts, reasons, TetrisMemo(grids, predictions))


def _remaining_time(samples: float, tab: FixedBatchTable, k: int) -> float:
    """Seconds left at ``k`` GPUs (``inf`` where no count holds the batch)."""
    if not tab.kmin or tab.x[k] <= 0:
        return float("inf")
    return float(samples / tab.x[k])


def _step(job: Job, k: int, tab: FixedBatchTable, threshold: int) -> int:
    """GPUs the job's next task takes (0: it has none below its threshold)."""
    if k == 0:
        return tab.kmin
    nxt = _next_size(job, k, threshold)
    return 0 if nxt is None else nxt - k

