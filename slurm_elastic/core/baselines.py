"""Baseline policies ONES is compared with: ``fifo``, ``tiresias`` and ``optimus``.

This module owns the three baseline planners of ONES's evaluation (Bian et al., SC'21, §4.1 and
Table 3) plus a FIFO reference, and the remaining-work estimate shared with ONES
(:func:`progress_shapes`, :func:`expected_remaining`). Each planner only chooses GPU counts;
placement (running workers stay where they are) and batch sizing come from
:func:`~slurm_elastic.core.planner.build_plan`. Pure: no I/O, no clock (``snapshot.now`` is the
time), no randomness (the ``rng`` argument is unused: all three are deterministic). State between
calls lives only in the returned memo. Every plan passes
:func:`~slurm_elastic.core.constraints.validate_plan`, and every active elastic job that does not
run gets a reason a user can read. These policies must not touch rigid jobs, must not scale a
batch the compared system kept fixed, and ``fifo`` and ``tiresias`` must not grow or shrink jobs
to fit the free GPUs (they have no elasticity).

``fifo`` — first in, first out, no elasticity.
    Running jobs keep their GPU count (clamped into ``min_gpus..max_gpus``); FIFO never preempts
    a healthy running job. Waiting jobs (pending or preempted) start in order of submission at
    ``requested_gpus`` clamped into ``min_gpus..max_gpus``, with the user's batch
    (:func:`~slurm_elastic.core.sizing.size_for` at that count: ``k * base_local_batch``, which is
    ``base_batch`` at the requested size). Strict FIFO (default) stops at the first waiting job
    that does not fit (head-of-line blocking); ``backfill=True`` lets later jobs that fit start
    anyway. This is greedy backfill without reservations (EASY backfill needs run-time
    estimates, which the snapshot does not have), so a stream of small jobs can delay the head.
    Choices: a job that cannot run even on the whole schedulable cluster (its size exceeds the
    schedulable GPUs, or no valid batch exists at that size) is skipped with its reason instead
    of blocking the queue forever. When GPUs are lost (a node goes down or drains), running jobs
    fully on schedulable GPUs keep theirs first, then the others in submit order while GPUs
    last; a running job that no longer fits is preempted and takes its FIFO place next round.

``tiresias`` — discretised two-dimensional LAS (Gu et al., NSDI'19), as ONES ran it:
    fixed job size (``requested_gpus`` clamped into the job's range, the user's batch, never
    resized), preemptive, no prediction. Attained service is GPU time,
    ``run_time * size`` (seconds x GPUs). Jobs sit in ``len(thresholds) + 1`` queues: a job with
    service ``s`` is in queue ``q = #{thresholds <= s}``; lower queues have priority. Each call
    orders all active elastic jobs by ``(queue, submit_time, job_id)`` (FIFO by submission
    within a queue) and admits them greedily while GPUs last; a job that does not fit is skipped
    and later, smaller jobs may run (as Tiresias's simulator does). Running jobs not admitted are
    preempted. Default ``thresholds = (3250.0, 7200.0)`` GPU-seconds: the queue limits of the
    Tiresias authors' simulator (SymbioticLab/Tiresias, ``simulator/jobs.py``: three queues
    with limits 3250 and 7200 GPU-s), i.e. roughly "under an hour", "under two hours" and "the
    rest" for a single-GPU job. Starvation guard: with ``promote_after > 0`` a waiting job that
    has not run for ``promote_after`` seconds is moved to the highest-priority queue, and its
    service count restarts there (it is demoted again only after it attains ``thresholds[0]``
    more GPU-seconds), as the simulator resets a promoted job's executed time. The memo records
    when each job was last seen running and the service at its last promotion. Off by default
    (ONES's comparison does not mention it). Differences from Tiresias: its own guard promotes
    after waiting ``PromoteKnob x`` the job's executed time (``solve_starvation`` in its
    simulator); here the wait is an absolute number of seconds. Tiresias's simulator keeps
    running jobs ahead of waiting ones within a queue; here the order within a queue is strictly
    by submission. Tiresias's placement (consolidation by model skew) is the shared packing
    placement.

``optimus`` — Optimus (Peng et al., EuroSys'18) as ONES compared it (elastic job size,
    fixed batch, all-reduce instead of parameter servers):
    every job keeps its user's global batch ``base_batch`` whatever its mode; the per-GPU batch is
    ``ceil(B / k)`` with gradient accumulation when it does not fit (endo-elastic sizing). Each
    round: (1) in submit order, every job gets its smallest feasible GPU count while GPUs last (a
    job that does not fit waits; later jobs may still take their minimum; Optimus gives every job
    one worker first); (2) repeatedly, one more GPU goes to the job whose predicted remaining time
    ``T_j(k) = Y_j / X_j(k)`` drops most, ``T_j(k) - T_j(k + 1)``, until no GPU is left or no job
    gains. ``X_j`` is the job's throughput at the fixed batch on ``k`` packed GPUs (its profile,
    corrected by its measured throughput); ``Y_j`` is the expected remaining samples of the ONES
    progress model (:func:`expected_remaining`), Optimus's own online-fitted convergence model
    being unavailable. Ties go to the earlier submission. Periodic: re-plans every ``interval``
    seconds (Optimus's 10 minutes, which ONES used too); between re-plans running jobs keep
    their allocation (a job whose GPUs were lost moves, or is preempted when none are left for
    it) and, by default, waiting jobs wait for the
    next round, which is why ONES reports Optimus's queuing time as about half the interval;
    ``start_between_rounds=True`` instead starts waiting jobs at their minimum on GPUs idle now.
    Optimus's score (``Plan.score``) is the summed predicted remaining time of the jobs it runs.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from slurm_elastic.core import sizing
from slurm_elastic.core.model import ClusterSnapshot, Job, JobId, JobState
from slurm_elastic.core.planner import PlanResult, build_plan
from slurm_elastic.core.remaining import expected_remaining, progress_shapes
from slurm_elastic.errors import ConfigError

FloatArr = NDArray[np.float64]


# -- remaining work (shared with ONES) -----------------------------------------------------------


def _clamp(job: Job, k: int) -> int:
    return min(job.max_gpus, max(job.min_gpus, k))


def _fixed_size(job: Job) -> int:
    """The size a rigid scheduler gives: ``requested_gpus`` clamped into the job's range."""
    return _clamp(job, job.requested_gpus)


submit_order: Callable[[Job], tuple[float, str]] = operator.attrgetter("submit_time", "job_id")
"""The sort key of first come, first served: submission time, then job id (a getter written in C:
``drl`` sorts every active job with it at every round)."""


def _never_fits(snapshot: ClusterSnapshot, job: Job, k: int, total: int) -> str | None:
    """Why ``job`` cannot run on ``k`` GPUs whatever the others do (``None`` if it can)."""
    if k > total:
        return f"cannot run: needs {k} GPUs, only {total} are schedulable now"
    if sizing.size_for(job, k, snapshot.profiles[job.model]) is None:
        return f"cannot run: no valid batch on {k} GPUs"
    return None


def keep_running(snapshot: ClusterSnapshot, jobs: Sequence[Job], size_of: Callable[[Job], int | None],
                  policy: str, free: int) -> tuple[dict[JobId, int], dict[JobId, str], int]:
    """Keep running jobs at ``size_of(job)`` GPUs while GPUs last.

    Jobs entirely on schedulable GPUs come first (in submit order), so only jobs that lost GPUs
    (down or draining nodes) can be preempted here.

    Returns:
        ``(counts, reasons, free GPUs left)``.
    """
    sched = snapshot.schedulable_set()
    counts: dict[JobId, int] = {}
    reasons: dict[JobId, str] = {}
    running = sorted((j for j in jobs if j.state is JobState.RUNNING),
                     key=lambda j: (not j.placement.gpu_set() <= sched, *submit_order(j)))
    for job in running:
        k = size_of(job)
        if k is None:
            reasons[job.job_id] = f"preempted by {policy}: no valid configuration at its size"
        elif k <= free:
            counts[job.job_id] = k
            free -= k
        else:
            reasons[job.job_id] = (f"preempted by {policy}: keeping {k} GPUs needs more than the {free} "
                                   "left after GPUs were lost")
    return counts, reasons, free


# -- fifo ----------------------------------------------------------------------------------------


class FifoPlanner:
    """The ``fifo`` policy: requested sizes, submit order, no elasticity, no preemption.

    Args:
        backfill: let later waiting jobs that fit start when the head of the queue does not
            (greedy backfill without reservations); ``False`` is strict FIFO.
    """

    name = "fifo"
    interval = 0.0
    epoch_events = False
    uses_progress = False

    def __init__(self, backfill: bool = False) -> None:
        if not isinstance(backfill, bool):
            raise ConfigError(f"fifo.backfill = {backfill!r}: must be true or false")
        self.backfill = backfill

    def plan(self, snapshot: ClusterSnapshot, memo: Any, rng: np.random.Generator) -> PlanResult:
        """Keep running jobs, then start waiting ones in submit order while they fit."""
        jobs = snapshot.elastic_jobs()
        total = len(snapshot.schedulable_gpus())

        def current(job: Job) -> int | None:
            k = _clamp(job, job.num_gpus)
            return None if sizing.size_for(job, k, snapshot.profiles[job.model]) is None else k

        counts, reasons, free = keep_running(snapshot, jobs, current, self.name, total)
        head: tuple[Job, int] | None = None
        for job in sorted((j for j in jobs if j.is_waiting), key=submit_order):
            k = _fixed_size(job)
            never = _never_fits(snapshot, job, k, total)
            if never is not None:
                reasons[job.job_id] = never
            elif head is not None and not self.backfill:
                reasons[job.job_id] = (f"waiting behind job {head[0].job_id}, the head of the fifo queue "
                                       f"(it needs {head[1]} GPUs, {free} are free)")
            elif k <= free:
                counts[job.job_id] = k
                free -= k
            else:
                if head is None:
                    head = (job, k)
                where = "the head of the fifo queue" if head[0] is job else "in the fifo queue"
                tail = "; backfill lets later jobs that fit start" if self.backfill else ""
                reasons[job.job_id] = f"waiting, {where}: needs {k} GPUs, {free} are free{tail}"
        return PlanResult(build_plan(snapshot, self.name, counts, reasons=reasons), None)


# -- tiresias ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TiresiasMemo:
    """What ``tiresias`` carries between calls.

    Attributes:
        last_run: per active job, the last ``now`` at which it was seen running (seconds).
        service_offset: per promoted job, its attained service (GPU-seconds) when last
            promoted; its queue is decided by the service attained since.
    """

    last_run: dict[JobId, float] = field(default_factory=dict)
    service_offset: dict[JobId, float] = field(default_factory=dict)


class TiresiasPlanner:
    """The ``tiresias`` policy: discretised 2D-LAS over GPU-time with fixed job sizes.

    Args:
        thresholds: queue limits in GPU-seconds of attained service, strictly increasing and
            positive; ``n`` limits make ``n + 1`` queues (default: the Tiresias simulator's).
        promote_after: seconds a waiting job may go without running before it is promoted to
            the highest-priority queue; 0 disables promotion.
    """

    name = "tiresias"
    interval = 0.0
    epoch_events = False
    uses_progress = False

    def __init__(self, thresholds: Sequence[float] = (3250.0, 7200.0), promote_after: float = 0.0) -> None:
        try:
            if isinstance(thresholds, str):
                raise TypeError(thresholds)
            limits = tuple(float(t) for t in thresholds)
        except (TypeError, ValueError):
            raise ConfigError(f"tiresias.thresholds = {thresholds!r}: must be a list of GPU-seconds") from None
        if not all(math.isfinite(t) and t > 0 for t in limits) or any(
                b <= a for a, b in itertools.pairwise(limits)):
            raise ConfigError(f"tiresias.thresholds = {thresholds!r}: must be positive, finite and strictly "
                              "increasing GPU-seconds")
        if not (math.isfinite(promote_after) and promote_after >= 0):
            raise ConfigError(f"tiresias.promote_after = {promote_after}: must be >= 0 seconds (0 = off)")
        self.thresholds = limits
        self.promote_after = float(promote_after)

    def queue_of(self, service: float) -> int:
        """Queue index (0 = highest priority) of a job with ``service`` GPU-seconds attained."""
        return bisect.bisect_right(self.thresholds, service)

    def plan(self, snapshot: ClusterSnapshot, memo: Any, rng: np.random.Generator) -> PlanResult:
        """Order jobs by (queue, submit time) and admit them at their fixed size while GPUs last."""
        m = memo if isinstance(memo, TiresiasMemo) else TiresiasMemo()
        now = snapshot.now
        jobs = snapshot.elastic_jobs()
        total = len(snapshot.schedulable_gpus())
        last_run: dict[JobId, float] = {}
        offset: dict[JobId, float] = {}
        queue: dict[JobId, int] = {}
        service: dict[JobId, float] = {}
        promoted: list[JobId] = []
        for job in jobs:
            jid = job.job_id
            attained = job.run_time * _fixed_size(job)
            if job.state is JobState.RUNNING:
                last_run[jid] = now
            else:
                seen = job.last_change_time if job.state is JobState.PREEMPTED else None
                last_run[jid] = max(m.last_run.get(jid, -math.inf), job.submit_time if seen is None else seen)
            if jid in m.service_offset:
                offset[jid] = min(m.service_offset[jid], attained)
            q = self.queue_of(attained - offset.get(jid, 0.0))
            if (q > 0 and job.is_waiting and self.promote_after > 0
                    and now - last_run[jid] >= self.promote_after):
                offset[jid] = attained
                q = 0
                promoted.append(jid)
            queue[jid] = q
            service[jid] = attained - offset.get(jid, 0.0)

        counts: dict[JobId, int] = {}
        reasons: dict[JobId, str] = {}
        free = total
        for job in sorted(jobs, key=lambda j: (queue[j.job_id], *submit_order(j))):
            jid = job.job_id
            k = _fixed_size(job)
            never = _never_fits(snapshot, job, k, total)
            if never is not None:
                reasons[jid] = never
            elif k <= free:
                counts[jid] = k
                free -= k
            else:
                what = "preempted by tiresias" if job.state is JobState.RUNNING else "waiting"
                reasons[jid] = (f"{what}: queue {queue[jid]} ({service[jid]:.0f} GPU-s attained) needs {k} GPUs, "
                                f"{free} are left after higher-priority jobs")
        notes: tuple[str, ...] = ()
        if promoted:
            notes = (f"promoted to queue 0 after waiting {self.promote_after:g} s: {', '.join(sorted(promoted))}",)
        plan = build_plan(snapshot, self.name, counts, reasons=reasons, notes=notes)
        return PlanResult(plan, TiresiasMemo(last_run, offset))


# -- optimus -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OptimusMemo:
    """What ``optimus`` carries between calls.

    Attributes:
        last_plan_time: ``now`` of the last full re-plan (``None`` before the first).
        grids: uncorrected fixed-batch throughput per GPU count, by (job shape, largest count),
            reused across calls.
        predictions: predicted throughput at the jobs' current configurations (their measured
            correction's denominator; :func:`~slurm_elastic.core.sizing.correction`), reused across calls.
    """

    last_plan_time: float | None = None
    grids: dict[tuple[object, ...], FloatArr] = field(default_factory=dict)
    predictions: dict[tuple[object, ...], float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class FixedBatchTable:
    """One job's fixed-batch throughput ``x[k]`` (samples/s, corrected) and feasible range."""

    x: FloatArr
    kmin: int  # 0 when no count is feasible
    kmax: int


def fixed_batch_tables(snapshot: ClusterSnapshot, jobs: Sequence[Job], total: int,
                       cache: dict[tuple[object, ...], FloatArr], out: dict[tuple[object, ...], FloatArr],
                       known: dict[tuple[object, ...], float],
                       predictions: dict[tuple[object, ...], float]) -> list[FixedBatchTable]:
    """Each job's fixed-batch throughput by GPU count (0..``min(max_gpus, total)``), corrected by
    its measured throughput, and the range of counts that hold its batch.

    Uncorrected grids are shared by job shape: taken from ``cache`` (the last call's) when there,
    and every grid used is put in ``out`` (this call's, to carry). ``known`` and ``predictions`` are
    the last and this call's predicted throughputs at the jobs' configurations
    (:func:`~slurm_elastic.core.sizing.correction`).
    """
    tables: list[FixedBatchTable] = []
    ranges: dict[tuple[object, ...], tuple[int, int] | None] = {}  # by (shape, min GPUs): the correction keeps it
    for job in jobs:
        model = snapshot.profiles[job.model]
        cap = max(0, min(job.max_gpus, total))
        key = (*sizing.shape_key(job, fixed_batch=True), cap)
        raw = out.get(key)
        if raw is None:
            raw = cache.get(key)
            if raw is None:
                raw = sizing.throughput_grid(job, model, cap, corrected=False, fixed_batch=True)[:, 0]
            out[key] = raw
        # The correction is measured at the job's real configuration, so it uses the job itself.
        factor = sizing.correction(job, model, known, predictions)
        x = raw if factor == 1.0 else raw * factor
        if (key, job.min_gpus) not in ranges:
            ranges[(key, job.min_gpus)] = sizing.feasible_span(raw, job.min_gpus)
        tables.append(FixedBatchTable(x, *(ranges[(key, job.min_gpus)] or (0, 0))))
    return tables


def never_at_fixed_batch(job: Job, total: int) -> str:
    """Why ``job`` runs on no GPU count of ``total`` at its fixed batch, as a waiting reason."""
    if job.min_gpus > total:
        return f"cannot run: needs {job.min_gpus} GPUs at least, only {total} are schedulable now"
    return (f"cannot run: no GPU count in {job.min_gpus}:{min(job.max_gpus, total)} holds its fixed "
            f"batch of {job.base_batch}")


def fixed_batch_sizing(job: Job, k: int, snapshot: ClusterSnapshot) -> sizing.Sizing | None:
    """The configuration of ``job`` on ``k`` GPUs at its user's global batch ``base_batch``.

    Endo-elastic sizing whatever the job's mode: per-GPU batch ``ceil(B / k)``, gradient
    accumulation when that does not fit, learning rate unchanged (it is the user's, at ``B``).
    """
    return sizing.size_for(job, k, snapshot.profiles[job.model], fixed_batch=True)


class OptimusPlanner:
    """The ``optimus`` policy: greedy marginal gain in predicted remaining time, fixed batch.

    Args:
        interval: seconds between re-plans (Optimus's 600 s rounds); 0 re-plans at every call.
        start_between_rounds: between re-plans, start waiting jobs at their minimum on idle GPUs
            (``False``: they wait for the next round, as in ONES's comparison).
        default_epochs_to_go: progress prior for jobs that declared no epoch count (as ONES).
    """

    name = "optimus"
    interval: float  # the parameter
    epoch_events = False
    uses_progress = True  # reads snapshot.progress_model for remaining work

    def __init__(self, interval: float = 600.0, start_between_rounds: bool = False,
                 default_epochs_to_go: float = 10.0) -> None:
        if not (math.isfinite(interval) and interval >= 0):
            raise ConfigError(f"optimus.interval = {interval}: must be >= 0 seconds")
        if not isinstance(start_between_rounds, bool):
            raise ConfigError(f"optimus.start_between_rounds = {start_between_rounds!r}: must be true or false")
        if not (math.isfinite(default_epochs_to_go) and default_epochs_to_go >= 1):
            raise ConfigError(f"optimus.default_epochs_to_go = {default_epochs_to_go}: must be >= 1")
        self.interval = float(interval)
        self.start_between_rounds = start_between_rounds
        self.default_epochs_to_go = float(default_epochs_to_go)

    def plan(self, snapshot: ClusterSnapshot, memo: Any, rng: np.random.Generator) -> PlanResult:
        """Re-plan greedily every ``interval`` seconds; keep the allocation in between."""
        m = memo if isinstance(memo, OptimusMemo) else OptimusMemo()
        jobs = sorted(snapshot.elastic_jobs(), key=submit_order)
        total = len(snapshot.schedulable_gpus())
        grids: dict[tuple[object, ...], FloatArr] = {}
        predictions: dict[tuple[object, ...], float] = {}  # only this call's are carried, like the grids
        tabs = fixed_batch_tables(snapshot, jobs, total, m.grids, grids, m.predictions, predictions)
        tab = {j.job_id: t for j, t in zip(jobs, tabs, strict=True)}

        def choose(job: Job, k: int) -> sizing.Sizing | None:
            return fixed_batch_sizing(job, k, snapshot)

        last = m.last_plan_time
        if last is not None and 0 <= snapshot.now - last < self.interval:

            def kept(job: Job) -> int | None:
                t = tab[job.job_id]
                return min(max(job.num_gpus, t.kmin), t.kmax) if t.kmin else None

            counts, reasons, free = keep_running(snapshot, jobs, kept, self.name, total)
            next_round = last + self.interval
            for job in (j for j in jobs if j.is_waiting):
                t = tab[job.job_id]
                if not t.kmin:
                    reasons[job.job_id] = never_at_fixed_batch(job, total)
                elif self.start_between_rounds and t.kmin <= free:
                    counts[job.job_id] = t.kmin
                    free -= t.kmin
                else:
                    reasons[job.job_id] = f"waiting for the next optimus round at t={next_round:g} s"
            plan = build_plan(snapshot, self.name, counts, reasons=reasons, choose=choose,
                              notes=("between re-plans: allocation kept",))
            return PlanResult(plan, OptimusMemo(last, grids, predictions))

        y = expected_remaining(*progress_shapes(snapshot, jobs, self.default_epochs_to_go))
        counts = {}
        reasons = {}
        free = total
        for job in jobs:
            t = tab[job.job_id]
            if not t.kmin:
                reasons[job.job_id] = never_at_fixed_batch(job, total)
            elif t.kmin <= free:
                counts[job.job_id] = t.kmin
                free -= t.kmin
            else:
                what = "preempted by optimus" if job.state is JobState.RUNNING else "waiting"
                reasons[job.job_id] = (f"{what}: needs {t.kmin} GPUs at least, {free} are left after the "
                                       "minimums of earlier jobs")

        def gain(i: int) -> float:
            t, k = tabs[i], counts[jobs[i].job_id]
            if k >= t.kmax or t.x[k + 1] <= 0:
                return 0.0
            return float(y[i] * (1.0 / t.x[k] - 1.0 / t.x[k + 1]))

        heap: list[tuple[float, int]] = []
        for i, job in enumerate(jobs):
            if job.job_id in counts and (g := gain(i)) > 0:
                heap.append((-g, i))
        heapq.heapify(heap)
        while free > 0 and heap:
            _, i = heapq.heappop(heap)
            counts[jobs[i].job_id] += 1
            free -= 1
            if (g := gain(i)) > 0:
                heapq.heappush(heap, (-g, i))
        score = float(sum(y[i] / tabs[i].x[counts[j.job_id]] for i, j in enumerate(jobs) if j.job_id in counts))
        plan = build_plan(snapshot, self.name, counts, reasons=reasons, choose=choose, score=score)
        return PlanResult(plan, OptimusMemo(snapshot.now, grids, predictions))
