"""Ares elastic fair queuing (EFQ): serve jobs in the order they would finish under fair sharing.

Source: Liu et al., "Ares: Fair and Efficient Scheduling of Deep Learning Jobs with Elastic Fair
Queuing" (ACM TOCS 2025), §3.2-3.5. This module owns the ``efq`` planner and its reference
system. Pure: no I/O, no clock (``snapshot.now`` is the time), no randomness (``rng`` is unused);
all state between calls (the virtual clock, every job's virtual finish time, the GPS set) lives in
the returned :class:`EfqMemo`, never in attributes.

**Reference system (GPS).** ``M`` GPUs shared equally by the ``N_t`` jobs active *in GPS*. The
virtual time ``V`` starts at 0 and grows at ``dV/dt = M / N_t`` (GPU-seconds of service per job),
frozen while GPS is empty. A job ``j`` arriving at ``a_j`` with work ``L_j`` (GPU-seconds at its
requested size) gets the virtual finish time ``F_j = V(a_j) + L_j``, fixed for good; it leaves
GPS when ``V`` reaches ``F_j``, whether or not it is still running for real (GPS is an independent
fluid system). Arrivals are replayed at their ``submit_time``, so ``V`` is exact whatever the
times of the planner's calls.

**Work** ``L_j = k0 * W_j / X_j(k0)``: ``k0`` is the requested size (clamped into the job's
range), ``X_j`` the profile's throughput at the fixed global batch (endo-elastic), ``W_j`` the
job's total samples: ``target_epochs * epoch_size`` when declared; else, when the snapshot has a
fitted progress model, samples processed plus the model's expected remaining samples; else, with
``default_epochs_to_go > 0``, that prior; else the work is *unknown*.

**Fair-share pool** (§3.5). Jobs with unknown work are not queued: they share a pool of
``floor(M * U / (U + K))`` GPUs (``U`` pool jobs, ``K`` EFQ jobs active now) equally, in submit
order, each within its feasible range; pool GPUs they cannot use go back to EFQ. A pool job whose
work becomes known later (e.g. once the progress model is fitted) joins EFQ with
``F_j = V(a_j) + L_j``, ``V(a_j)`` being remembered from its arrival.

**Serving.** Each call, jobs are taken in ascending ``(F_j, submit_time, job_id)``; running jobs
not reached are preempted (EFQ is preemptive). A job starts at ``k0`` GPUs and is doubled while
the doubled size fits in the free GPUs, stays within ``max_gpus`` and keeps its normalised
per-GPU efficiency ``(X(k)/k) / (X(k0)/k0) >= alpha``. Endo-elastic: the global batch stays the
job's ``base_batch`` whatever its mode (per-GPU batch ``ceil(B/k)``, gradient accumulation when
it does not fit). GPUs left after every queued job has been served grow pool jobs; any others stay
idle (the threshold's purpose, §3.3).

Choices where the paper is vague (docs/planners.md): ``M`` is the number of schedulable GPUs
minus the pool's GPUs at the previous call, constant between calls; a job that does not fit at
``k0`` starts at the largest feasible size the free GPUs allow (at least ``min_gpus``) instead of
blocking, and later jobs may take GPUs it cannot use (it preempts them at the next call); a job
first seen after the virtual clock has passed its submit time arrives at the clock; a job that
leaves the cluster early (finished or cancelled) stays in GPS until ``V`` reaches its ``F_j``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from slurm_elastic.core import sizing
from slurm_elastic.core.baselines import never_at_fixed_batch
from slurm_elastic.core.model import ClusterSnapshot, Job, JobId, JobState
from slurm_elastic.core.planner import PlanResult, build_plan
from slurm_elastic.core.remaining import expected_remaining, progress_shapes
from slurm_elastic.errors import ConfigError

FloatArr = NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class EfqMemo:
    """What ``efq`` carries between calls.

    Attributes:
        clock: the real time (seconds) up to which the virtual clock has been advanced (``None``
            before the first call).
        vtime: ``V(clock)`` in GPU-seconds.
        capacity: ``M``, GPUs of the reference system since ``clock``.
        finish: ``F_j`` (GPU-seconds of virtual time) of every job with known work that is still
            active in the cluster or in GPS.
        arrival_v: ``V(a_j)`` of every job seen and still active in the cluster.
        pool: jobs served by the fair-share pool at the last call (unknown work).
        grids: uncorrected fixed-batch throughput by (job shape, largest count), reused.
    """

    clock: float | None = None
    vtime: float = 0.0
    capacity: int = 0
    finish: dict[JobId, float] = field(default_factory=dict)
    arrival_v: dict[JobId, float] = field(default_factory=dict)
    pool: frozenset[JobId] = frozenset()
    grids: dict[tuple[object, ...], FloatArr] = field(default_factory=dict)

    def gps_active(self) -> int:
        """``N`` at ``clock``: jobs whose virtual finish lies ahead of the virtual time."""
        return sum(1 for f in self.finish.values() if f > self.vtime)


def advance_gps(vtime: float, finish: list[float], capacity: int, duration: float) -> float:
    """Advance the virtual time by ``duration`` real seconds of GPS with ``capacity`` GPUs.

    Args:
        vtime: ``V`` at the start (GPU-seconds).
        finish: virtual finish times of the jobs in GPS (those ``<= vtime`` are already gone).
        capacity: ``M`` (GPUs); 0 freezes the clock.
        duration: real seconds (>= 0).

    Returns:
        ``V`` after ``duration``: piecewise linear with slope ``M / N``, ``N`` dropping as ``V``
        passes each finish time; constant while GPS is empty.
    """
    times = np.asarray(finish, dtype=np.float64)
    ahead: list[float] = np.sort(times[times > vtime]).tolist()
    left = duration
    i = 0
    while left > 0 and i < len(ahead) and capacity > 0:
        n = len(ahead) - i
        rate = capacity / n
        need = (ahead[i] - vtime) / rate
        if need > left:
            return vtime + left * rate
        left -= need
        vtime = ahead[i]
        while i < len(ahead) and ahead[i] <= vtime:
            i += 1
    return vtime


def _sizing(job: Job, k: int, snapshot: ClusterSnapshot) -> sizing.Sizing | None:
    """Endo-elastic configuration: the user's global batch on ``k`` GPUs, LR unchanged."""
    return sizing.size_for(job, k, snapshot.profiles[job.model], fixed_batch=True)


class EfqPlanner:
    """The ``efq`` policy (Ares).

    Args:
        alpha: scaling-control threshold: a job's size is doubled only while its per-GPU
            efficiency, relative to its requested size, stays at least ``alpha`` (0 < alpha <= 1;
            the paper's default 0.75).
        default_epochs_to_go: prior total epochs of jobs that declared none while no progress
            model is fitted; 0 (default) sends such jobs to the fair-share pool instead.
    """

    name = "efq"
    interval = 0.0
    epoch_events = False
    uses_progress = True  # predicted work comes from snapshot.progress_model once it is fitted

    def __init__(self, alpha: float = 0.75, default_epochs_to_go: float = 0.0) -> None:
        if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 0.0 < alpha <= 1.0:
            raise ConfigError(f"efq.alpha = {alpha!r}: must lie in (0, 1]")
        if (isinstance(default_epochs_to_go, bool) or not isinstance(default_epochs_to_go, int | float)
                or not math.isfinite(default_epochs_to_go) or default_epochs_to_go < 0):
            raise ConfigError(f"efq.default_epochs_to_go = {default_epochs_to_go!r}: must be >= 0 epochs "
                              "(0 = unknown work goes to the fair-share pool)")
        self.alpha = float(alpha)
        self.default_epochs_to_go = float(default_epochs_to_go)

    # -- work estimates --------------------------------------------------------------------------

    def _grid(self, job: Job, snapshot: ClusterSnapshot, total: int, cache: dict[tuple[object, ...], FloatArr],
              out: dict[tuple[object, ...], FloatArr]) -> FloatArr:
        cap = max(0, min(job.max_gpus, total, job.base_batch))
        key = (*sizing.shape_key(job, fixed_batch=True), cap)
        grid = out.get(key)
        if grid is None:
            grid = cache.get(key)
            if grid is None:
                model = snapshot.profiles[job.model]
                grid = sizing.throughput_grid(job, model, cap, corrected=False, fixed_batch=True)[:, 0]
            out[key] = grid
        return grid

    def _total_samples(self, snapshot: ClusterSnapshot, jobs: list[Job]) -> list[float | None]:
        """Each job's total work in samples, or ``None`` when it cannot be estimated."""
        out: list[float | None] = [None] * len(jobs)
        rest: list[int] = []
        for i, job in enumerate(jobs):
            if job.target_epochs is not None and job.target_epochs > 0:
                out[i] = job.target_epochs * job.epoch_size
            else:
                rest.append(i)
        if rest and snapshot.progress_model is not None:
            sub = [jobs[i] for i in rest]
            remaining = expected_remaining(*progress_shapes(snapshot, sub, 1.0))
            for i, r in zip(rest, remaining, strict=True):
                out[i] = float(jobs[i].samples_processed + r)
        elif rest and self.default_epochs_to_go > 0:
            for i in rest:
                out[i] = self.default_epochs_to_go * jobs[i].epoch_size
        return out

    # -- the call --------------------------------------------------------------------------------

    def plan(self, snapshot: ClusterSnapshot, memo: Any, rng: np.random.Generator) -> PlanResult:
        """Advance the reference system to ``now``, then serve jobs in virtual-finish order."""
        m = memo if isinstance(memo, EfqMemo) else EfqMemo()
        now = snapshot.now
        jobs = sorted(snapshot.elastic_jobs(), key=lambda j: (j.submit_time, j.job_id))
        total = len(snapshot.schedulable_gpus())
        grids: dict[tuple[object, ...], FloatArr] = {}
        tables = {j.job_id: self._grid(j, snapshot, total, m.grids, grids) for j in jobs}
        ranges: dict[tuple[int, int], tuple[int, int] | None] = {}  # feasible sizes by (table, min GPUs)

        # Virtual clock: replay unseen arrivals at their submit times, then advance to now.
        clock = m.clock if m.clock is not None else min([now, *(j.submit_time for j in jobs)])
        vtime = m.vtime
        capacity = m.capacity if m.clock is not None else total
        finish = dict(m.finish)
        arrival_v = {jid: v for jid, v in m.arrival_v.items()}
        unseen = [j for j in jobs if j.job_id not in arrival_v]
        totals = dict(zip((j.job_id for j in jobs), self._total_samples(snapshot, jobs), strict=True))
        k0s = {j.job_id: self._k0(j, tables[j.job_id], ranges) for j in jobs}

        def work(job: Job) -> float | None:
            w = totals[job.job_id]
            t = tables[job.job_id]
            k0 = k0s[job.job_id]
            if w is None or k0 == 0:
                return None
            return k0 * w / float(t[k0])

        for job in unseen:
            at = max(clock, min(job.submit_time, now))
            vtime = advance_gps(vtime, list(finish.values()), capacity, at - clock)
            clock = at
            arrival_v[job.job_id] = vtime
            lj = work(job)
            if lj is not None:
                finish[job.job_id] = vtime + lj
        vtime = advance_gps(vtime, list(finish.values()), capacity, now - clock)
        clock = max(clock, now)
        # Pool jobs whose work became known join the queue with F = V(a_j) + L_j.
        for job in jobs:
            if job.job_id not in finish and (lj := work(job)) is not None:
                finish[job.job_id] = arrival_v[job.job_id] + lj

        counts: dict[JobId, int] = {}
        reasons: dict[JobId, str] = {}
        queued = sorted((j for j in jobs if j.job_id in finish),
                        key=lambda j: (finish[j.job_id], j.submit_time, j.job_id))
        pool = [j for j in jobs if j.job_id not in finish]
        free = total
        pool_gpus = (total * len(pool)) // (len(pool) + len(queued)) if pool else 0
        used = self._fair_share(pool, tables, pool_gpus, counts, reasons, snapshot)
        free -= used
        for rank, job in enumerate(queued, start=1):
            t = tables[job.job_id]
            k0 = k0s[job.job_id]
            what = "preempted by efq" if job.state is JobState.RUNNING else "waiting"
            if k0 == 0:
                reasons[job.job_id] = never_at_fixed_batch(job, total)
                continue
            k = k0 if k0 <= free else self._largest_below(job, t, free)
            if k == 0:
                reasons[job.job_id] = (f"{what}: queue position {rank} by virtual finish time "
                                       f"F={finish[job.job_id]:.4g} GPU-s; needs {job.min_gpus} GPUs at least, "
                                       f"{free} left after jobs that finish earlier under fair sharing")
                continue
            if k == k0:
                base = t[k0] / k0
                while 2 * k <= free and 2 * k < len(t) and t[2 * k] > 0 and (t[2 * k] / (2 * k)) >= self.alpha * base:
                    k *= 2
            counts[job.job_id] = k
            free -= k
        if free > 0:  # work left over after the queue: grow pool jobs
            for job in pool:
                t = tables[job.job_id]
                if job.job_id in counts:
                    extra = min(free, len(t) - 1 - counts[job.job_id])
                    if extra > 0:
                        counts[job.job_id] += extra
                        free -= extra
        gps_n = sum(1 for f in finish.values() if f > vtime)
        capacity_next = max(0, total - used)
        # Forget jobs gone from the cluster and from GPS.
        present = {j.job_id for j in jobs}
        finish = {jid: f for jid, f in finish.items() if jid in present or f > vtime}
        arrival_v = {jid: v for jid, v in arrival_v.items() if jid in present}
        notes = (f"virtual time V={vtime:.6g} GPU-s, {gps_n} job(s) in the fair-sharing reference, "
                 f"{len(pool)} in the fair-share pool ({used} GPUs)",)
        plan = build_plan(snapshot, self.name, counts, reasons=reasons,
                          choose=lambda job, k: _sizing(job, k, snapshot), notes=notes)
        new = EfqMemo(clock, vtime, capacity_next, finish, arrival_v, frozenset(j.job_id for j in pool), grids)
        return PlanResult(plan, new)

    # -- helpers ---------------------------------------------------------------------------------

    @staticmethod
    def _k0(job: Job, t: FloatArr, ranges: dict[tuple[int, int], tuple[int, int] | None]) -> int:
        """The requested size clamped into the feasible range (0 if no size is feasible); ``ranges``
        keeps each table's feasible sizes (jobs of one shape share their table)."""
        if (id(t), job.min_gpus) not in ranges:
            ranges[(id(t), job.min_gpus)] = sizing.feasible_span(t, job.min_gpus)
        span = ranges[(id(t), job.min_gpus)]
        return 0 if span is None else min(max(job.requested_gpus, span[0]), span[1])

    @staticmethod
    def _largest_below(job: Job, t: FloatArr, free: int) -> int:
        for k in range(min(free, len(t) - 1), job.min_gpus - 1, -1):
            if k >= 1 and t[k] > 0:
                return k
        return 0

    def _fair_share(self, pool: list[Job], tables: dict[JobId, FloatArr], gpus: int, counts: dict[JobId, int],
                    reasons: dict[JobId, str], snapshot: ClusterSnapshot) -> int:
        """Instantaneous fair sharing of ``gpus`` among the pool jobs; returns the GPUs used."""
        if not pool:
            return 0
        share = gpus // len(pool)
        left = gpus
        for job in pool:
            span = sizing.feasible_span(tables[job.job_id], job.min_gpus)
            if span is None:
                reasons[job.job_id] = never_at_fixed_batch(job, len(snapshot.schedulable_gpus()))
                continue
            k = min(max(share, span[0]), span[1])
            if k <= left:
                counts[job.job_id] = k
                left -= k
            else:
                reasons[job.job_id] = (f"waiting in the fair-share pool (work unknown): needs {k} GPUs, "
                                       f"{left} of the pool's {gpus} are left")
        for job in pool:  # round the pool's remainder out one GPU at a time
            if left <= 0:
                break
            if job.job_id in counts and counts[job.job_id] + 1 < len(tables[job.job_id]):
                counts[job.job_id] += 1
                left -= 1
        return gpus - left
