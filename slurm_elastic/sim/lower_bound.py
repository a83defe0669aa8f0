"""A clairvoyant lower bound on the average JCT of a simulated run (issue 16, part 4).

This module owns the bound's definition and its exact computation. It is pure: it reads the jobs'
physics (:mod:`slurm_elastic.sim.truth`, through :class:`~slurm_elastic.sim.workload.SimJobSpec`)
and never simulates, schedules or reads a clock. docs/planners.md ("A lower bound on average JCT")
says why each part is valid.

A *configuration* is what a plan may give a running job and the simulator then runs it at: ``k``
GPUs in ``min_gpus..min(max_gpus, cluster GPUs)`` on any shape the cluster's nodes allow (GPUs per
node, at most ``gpus_per_node`` on each of at most ``nodes`` nodes), a global batch ``B`` in
``max(min_batch, k)..max_batch`` (exactly ``base_batch`` for an endo-elastic job), an accumulation
``a >= 1`` and a per-GPU batch ``l`` in ``1..local_limit`` with ``l * k * a >= B``: the rules of
:func:`~slurm_elastic.core.constraints.validate_plan`, which the simulator enforces. The simulator
trains what the launcher makes of it (:func:`~slurm_elastic.sim.job.launcher_batch`): ``k``
workers of ``L`` samples (``l * a`` for an exo-elastic job, ``round(B / k)`` for an endo one), in
``a' = ceil(L / local_limit)`` micro-steps of ``l' = ceil(L / a')``. Alone in a configuration a job
finishes in ``T = epoch_size * epochs_needed(k L) * step_time(l', shape, a') / (k L)`` seconds and
uses ``k * T`` GPU-seconds.

* :func:`job_best`: the job's least ``T`` (its fastest way to finish) and its least ``k * T`` (its
  cheapest), each minimised exactly over every configuration (see :func:`job_best`).
* The *solo* bound: the mean over the counted jobs of ``T_min``: no job finishes sooner than
  ``T_min`` after its arrival.
* The *capacity* bound: the cluster as one machine serving ``G`` GPU-seconds per second, job ``j``
  released at its arrival ``r_j`` with work ``p_j = W_min_j / G``; preemptive shortest remaining
  processing time (:func:`srpt_completions`) minimises the sum of completion times there
  (``1|r_j,pmtn|sum C_j``), so its mean ``C_j - r_j`` bounds the mean JCT from below.
* The *fluid* bound (:func:`fluid_bound`): each job's least time on each GPU count gives the
  least GPUs it must hold to progress at a given rate (:func:`gpu_envelope`); a linear program
  spreads every job's work over time under the cluster's GPUs and each job's fastest rate, and
  charges each job the mean time of its work plus half its fastest time. Tighter than both others
  on a shared cluster: the capacity bound lets every job run at its cheapest rate *and* finish as
  if it had the whole cluster, the solo bound ignores the other jobs.
* ``lower_bound_avg_jct`` = the largest of the three.

All run over the *counted* jobs only, the ones the run's ``avg_jct`` averages (finished, not
dropped): a real run's schedule restricted to those jobs is a schedule of them alone, so SRPT over
exactly them is a valid bound on their mean (SRPT over every job, averaged over the counted ones,
would not be: it may delay a counted job behind one that the run dropped). None depends on how
the run went beyond which jobs it finished.

Every physics the simulator adds (resize and restart pauses, start-up overhead, shared host cores)
only slows a job or holds GPUs longer, so the bounds hold with them too; with ``equal_start`` a
job can start outside its declared ranges, so no bound is computed for such runs
(:func:`~slurm_elastic.sim.metrics.metrics`).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np
import scipy.sparse as sps
from numpy.typing import NDArray
from scipy.optimize import linprog

from slurm_elastic.core.model import ElasticMode
from slurm_elastic.sim.job import DONE_EPS
from slurm_elastic.sim.truth import MeasuredSpeed, Shape
from slurm_elastic.sim.workload import SimJobSpec
from slurm_elastic_predictor import portable

log = logging.getLogger(__name__)

SLACK = 1.0 - 2 * DONE_EPS
"""Every time a bound is built from (``T_min``, ``W_min``, each ``T_k``) is multiplied by this: the
simulator finishes a job at ``1 - DONE_EPS`` of its work, and the vectorised search may round
differently from the simulator's scalar step time."""

FLUID_BUDGET = 300_000
"""Most variables of the fluid bound's linear program (a few seconds with HiGHS here); past it at
:data:`FLUID_MIN_INTERVALS` intervals, no fluid bound (10,000-job traces)."""
FLUID_MIN_INTERVALS = 20
FLUID_COARSEST = 4.0
"""Longest interval of the fluid bound, in median fastest job times. Measured (seed 1), interval
over that median, then the fluid bound against the largest other: ones-longhorn at 64 GPUs 0.91,
1,097 s against 782; at 32 GPUs 2.42, 3,552 against 3,364; at 16 GPUs 5.79, 9,371 against 9,404;
Philly-like 2,000 jobs on 640 GPUs 4.52, 692 against 872 (1.6 s); 5,000 jobs 9.09, 558 against
798 (2.1 s)."""
FLUID_MAX_INTERVALS = 400
LP_SLACK = 1.0 - 1e-4
"""The fluid bound is the LP optimum times this. HiGHS meets each constraint to 1e-7 (its primal
feasibility tolerance); a job's work short by that much, counted at a horizon up to a thousand
mean JCTs away, moves the mean by up to 1e-4 of it."""

@dataclass(frozen=True, slots=True)
class JobBest:
    """A job's best configurations, alone on the cluster (``inf`` when it has none).

    Attributes:
        time: least seconds from its start to its end (``T_min``).
        gpu_seconds: least GPU-seconds it can finish with (``W_min``).
    """

    time: float
    gpu_seconds: float


@dataclass(frozen=True, slots=True)
class LowerBound:
    """The two bounds on the mean JCT of a set of jobs (seconds; ``None`` for no job).

    Attributes:
        solo: mean of each job's ``T_min``.
        capacity: mean JCT of preemptive SRPT on one machine of ``G`` GPU-seconds per second.
        jobs: how many jobs the means are over.
        fluid: the fluid relaxation (:func:`fluid_bound`), ``None`` when not computed.
    """

    solo: float | None
    capacity: float | None
    jobs: int
    fluid: float | None = None

    @property
    def value(self) -> float | None:
        """The tightest (largest) bound."""
        if self.solo is None or self.capacity is None:
            return None
        return max(self.solo, self.capacity, self.fluid if self.fluid is not None else 0.0)


def srpt_completions(releases: Sequence[float], work: Sequence[float]) -> list[float]:
    """Completion times of preemptive shortest-remaining-processing-time on one unit-speed machine.

    Event-driven and exact: between two releases the job with the least remaining work runs; a
    release may preempt it. ``O(n log n)`` with a heap. Ties go to the job listed first.

    Args:
        releases: release time of each job (any order).
        work: processing time of each job (>= 0), in the same order.

    Returns:
        Each job's completion time, in the input order.

    Raises:
        ValueError: lengths differ, or a time or work is negative or not finite.
    """
    if len(releases) != len(work):
        raise ValueError(f"{len(releases)} releases and {len(work)} works")
    if any(not (math.isfinite(x) and x >= 0) for x in (*releases, *work)):
        raise ValueError("releases and works must be finite and >= 0")
    order = sorted(range(len(releases)), key=lambda i: (releases[i], i))
    done = [0.0] * len(order)
    heap: list[tuple[float, int]] = []
    t = 0.0
    nxt = 0
    while nxt < len(order) or heap:
        if not heap:
            t = max(t, releases[order[nxt]])
        while nxt < len(order) and releases[order[nxt]] <= t:
            i = order[nxt]
            heapq.heappush(heap, (float(work[i]), i))
            nxt += 1
        left, i = heapq.heappop(heap)
        release = releases[order[nxt]] if nxt < len(order) else math.inf
        if t + left <= release:
            t += left
            done[i] = t
        else:  # runs until the next release, then competes again with what is left
            heapq.heappush(heap, (left - (release - t), i))
            t = release
    return done


def _shapes(k: int, per_node: int, nodes: int, biggest: int | None = None) -> Iterator[Shape]:
    """Every way to hold ``k`` GPUs: descending counts, each <= ``per_node``, at most ``nodes`` of them."""
    biggest = per_node if biggest is None else biggest
    if k == 0:
        yield ()
        return
    if nodes == 0:
        return
    for first in range(min(k, biggest), 0, -1):
        if first * nodes < k:
            break
        for rest in _shapes(k - first, per_node, nodes - 1, first):
            yield (first, *rest)


def _curves(speed: MeasuredSpeed, k: int, per_node: int, nodes: int) -> list[Shape]:
    """One shape per distinct step-time curve among the shapes of ``k`` GPUs: the simulator times a
    measured shape by its own curve, any other by its (GPUs, nodes) curve or the fitted model.

    So the curves are the measured shapes of ``k`` GPUs that fit, and for each node count ``n`` the
    first shape of ``n`` nodes (in :func:`_shapes`'s order) that is not measured, found without
    listing every shape of ``k`` GPUs (their number grows like ``k**(per_node - 1)``).
    """
    out: list[Shape] = [shape for shape in speed.by_shape
                        if isinstance(shape, tuple) and _fits(shape, k, per_node, nodes)]
    for n in range(-(-k // per_node), min(k, nodes) + 1):
        rep = next((shape for shape in _shapes_of_length(k, n, per_node) if shape not in speed.by_shape), None)
        if rep is not None:
            out.append(rep)
    return out


def _fits(shape: Shape, k: int, per_node: int, nodes: int) -> bool:
    """Whether :func:`_shapes` lists ``shape`` among the ways to hold ``k`` GPUs."""
    return (0 < len(shape) <= nodes and sum(shape) == k and all(1 <= c <= per_node for c in shape)
            and list(shape) == sorted(shape, reverse=True))


def _shapes_of_length(k: int, n: int, biggest: int) -> Iterator[Shape]:
    """The shapes of :func:`_shapes` with exactly ``n`` counts, in the same order."""
    if n == 0:
        if k == 0:
            yield ()
        return
    for first in range(min(k - (n - 1), biggest), 0, -1):
        if first * n < k:
            break
        for rest in _shapes_of_length(k - first, n - 1, first):
            yield (first, *rest)


class _Epochs:
    """``g(B) = epoch_size * epochs_needed(B) / B`` (seconds of work per second of sample rate) of one
    job, its ``work_scale`` included, and the least ``epochs_needed`` over the batches from ``B`` on.

    ``epochs_needed`` is constant (a set epoch count) or piecewise linear in ``log2 B`` between the
    measured batches and flat outside them, so its least value from ``B`` on is at ``B`` or at a
    measured batch above it.
    """

    def __init__(self, spec: SimJobSpec) -> None:
        self.spec = spec
        self.scale = spec.work_scale  # a factor of every epochs_needed (a set epoch count's too)
        conv = spec.model_truth.convergence if spec.epochs is None else None
        self._log_batches = conv.batches if conv is not None else None
        self._epochs_at = conv.epochs_at if conv is not None else None
        measured = [] if conv is None else sorted({round(2.0 ** b) for b in conv.batches})
        self.points = np.array(measured, dtype=np.float64)

    def epochs(self, batch: NDArray[np.float64]) -> NDArray[np.float64]:
        """Epochs to the target at each global batch, ``work_scale`` included, as the simulator's truth
        (:meth:`~slurm_elastic.sim.workload.SimJobSpec.epochs_needed`)."""
        if self._log_batches is None or self._epochs_at is None:
            return np.full(batch.shape, float(self.spec.epochs_needed(1.0)))
        out: NDArray[np.float64] = self.scale * np.interp(portable.log2(np.maximum(batch, 1.0)), self._log_batches,
                                                          self._epochs_at)
        return out

    def g(self, batch: NDArray[np.float64]) -> NDArray[np.float64]:
        return self.spec.epoch_size * self.epochs(batch) / batch

    def least_from(self, batch: float) -> float:
        """``min epochs_needed(B)`` over ``B >= batch``."""
        cands = np.array([batch, *self.points[self.points > batch].tolist()])
        return float(np.min(self.epochs(cands)))


def job_best(spec: SimJobSpec, gpus: int, gpus_per_node: int) -> JobBest:
    """The job's least time and least GPU-seconds alone on a cluster of ``gpus`` GPUs, over every
    configuration the module docstring defines, exactly (then times ``SLACK``): the least of
    :func:`_count_times`, and the least ``k`` times it."""
    return _best_of(_count_times(spec, gpus, gpus_per_node))


def _best_of(times: Sequence[tuple[int, float]], scale: float = 1.0) -> JobBest:
    """The least ``T_k`` and the least ``k * T_k`` of :func:`_count_times`' pairs, times ``SLACK``
    and ``scale`` (``inf`` for a job with no GPU count)."""
    if not times:
        return JobBest(math.inf, math.inf)
    return JobBest(min(t for _, t in times) * SLACK * scale, min(k * t for k, t in times) * SLACK * scale)


def _count_times(spec: SimJobSpec, gpus: int, gpus_per_node: int) -> tuple[tuple[int, float], ...]:
    """``(k, T_k)`` for each GPU count ``k`` the job can run on: its least time alone on ``k`` GPUs
    over every configuration the module docstring defines, exactly (without ``SLACK``).

    What a configuration trains is the launcher's per-worker batch ``L``
    (:func:`~slurm_elastic.sim.job.launcher_batch`): ``k L`` samples a step, in
    ``a = ceil(L / limit)`` micro-steps of ``l = ceil(L / a)``, in ``T = g(k L) * step(l, shape, a)``.
    An endo-elastic job has one ``L`` per ``k``, ``round(base_batch / k)``. An exo-elastic job may
    have any ``L >= ceil(lo / k)`` (a plan's ``l * a`` with ``l k a >= B >= lo``): every ``L`` up to
    ``max(ceil(max_batch / k), limit)`` is tried on each distinct step-time curve of the shapes of
    ``k`` GPUs, and the larger ones are bounded by their compute alone,
    ``T >= epoch_size * min epochs(B >= k L) * a compute(l) / (k L) >= epoch_size * min epochs *
    min_l (compute(l) / l) / k`` (``a l >= L``).
    """
    speed = spec.model_truth.speed
    nodes = max(1, gpus // gpus_per_node)
    limit = spec.local_limit
    locals_ = np.arange(1, limit + 1, dtype=np.int64)
    epochs = _Epochs(spec)
    out = []
    for k in range(max(1, spec.min_gpus), min(spec.max_gpus, gpus) + 1):
        last = 0
        if spec.mode is ElasticMode.ENDO:
            b = spec.base_batch
            if not (spec.min_batch <= b <= spec.max_batch and b >= k):
                continue
            per = np.array([max(1, round(b / k))], dtype=np.int64)
        else:
            lo, hi = max(spec.min_batch, k), spec.max_batch
            if lo > hi:
                continue
            first = -(-lo // k)
            last = max(first, -(-hi // k), limit)
            per = np.arange(first, last + 1, dtype=np.int64)
        steps = np.maximum(1, -(-per // limit))
        idx = -(-per // steps) - 1  # the micro-batch's index in 1..limit
        work = epochs.g((k * per).astype(np.float64))
        tail = spec.epoch_size * epochs.least_from(float(k * (last + 1))) / k if last else math.inf
        best = math.inf
        for shape in _curves(speed, k, gpus_per_node, nodes):
            compute, sync = _step_parts(speed, limit, shape)
            best = min(best, float(np.min(work * (steps * compute[idx] + sync[idx]))))
            if last:  # larger per-worker batches: compute alone
                best = min(best, tail * float(np.min(compute / locals_)))
        if math.isfinite(best):
            out.append((k, best))
    return tuple(out)


@lru_cache(maxsize=65536)
def _step_parts(speed: MeasuredSpeed, l_max: int, shape: Shape) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """:meth:`MeasuredSpeed.step_parts` of per-GPU batches ``1..l_max`` (read-only): jobs of one model
    that differ in their batch range share every curve."""
    compute, sync = (np.array(part, dtype=np.float64) for part in
                     speed.step_parts(np.arange(1, l_max + 1, dtype=np.int64), shape))
    compute.flags.writeable = False
    sync.flags.writeable = False
    return compute, sync


def _shape_key(spec: SimJobSpec) -> SimJobSpec:
    """What the best configuration depends on: all but identity, arrival, request and ``work_scale`` (a
    factor of both ``T`` and ``W``); the base batch only for an endo-elastic job."""
    base = spec.base_batch if spec.mode is ElasticMode.ENDO else 0
    return replace(spec, job_id="", submit_time=0.0, user="", account="", category="", work_scale=1.0,
                   requested_gpus=0, base_batch=base)


@lru_cache(maxsize=4096)
def _unit_times(key: SimJobSpec, gpus: int, gpus_per_node: int) -> tuple[tuple[int, float], ...]:
    return _count_times(key, gpus, gpus_per_node)


def job_curves(specs: Sequence[SimJobSpec], gpus: int, gpus_per_node: int) -> dict[str, tuple[tuple[int, float], ...]]:
    """Each job's ``(k, T_k)`` (:func:`_count_times`, scaled by its ``work_scale``, times ``SLACK``),
    each job shape searched once per process (the search is pure, so its results are cached)."""
    return {spec.job_id: tuple((k, t * spec.work_scale * SLACK)
                               for k, t in _unit_times(_shape_key(spec), gpus, gpus_per_node))
            for spec in specs}


def job_bests(specs: Sequence[SimJobSpec], gpus: int, gpus_per_node: int) -> dict[str, JobBest]:
    """:func:`job_best` of every job, each job shape searched once per process (``T`` and ``W`` scale
    with ``work_scale``)."""
    return {spec.job_id: _best_of(_unit_times(_shape_key(spec), gpus, gpus_per_node), spec.work_scale)
            for spec in specs}


def gpu_envelope(times: Sequence[tuple[int, float]]) -> list[tuple[float, float]]:
    """The least GPUs a job holds to progress at a given rate, as segments ``(rate width, slope)``.

    A job on ``k`` GPUs progresses at most at ``1/T_k`` (a fraction of its work per second). Over a
    stretch of time in which it does a fraction ``x`` of its work, mixing configurations, the
    GPU-seconds it holds are at least ``duration * g(x / duration)``, where ``g`` is the lower
    convex hull of the points ``(1/T_k, k)`` and the origin (Jensen's inequality; every
    configuration, slowed down or paused, lies on or above it). The segments run from rate 0 to the
    job's fastest rate ``1/T_min``, slopes (GPU-seconds per unit of work) ascending; the first slope
    is ``W_min``.
    """
    hull = [(0.0, 0.0)]
    for rate, k in sorted((1.0 / t, float(k)) for k, t in times if t > 0 and math.isfinite(t)):
        while len(hull) >= 2:
            (x1, y1), (x2, y2) = hull[-2], hull[-1]
            if (x2 - x1) * (k - y1) - (y2 - y1) * (rate - x1) > 0:
                break
            hull.pop()  # the last point lies on or above the chord to the new one
        hull.append((rate, k))
    return [(x2 - x1, (y2 - y1) / (x2 - x1)) for (x1, y1), (x2, y2) in itertools.pairwise(hull) if x2 > x1]


def _fluid_intervals(releases: NDArray[np.float64], segments: NDArray[np.int64], start: float, end: float,
                     typical: float) -> int:
    """The most intervals (at most :data:`FLUID_MAX_INTERVALS`) whose LP stays within
    :data:`FLUID_BUDGET` variables; 0 when even :data:`FLUID_MIN_INTERVALS` would not, or when the
    intervals would be longer than :data:`FLUID_COARSEST` times ``typical`` (the median job's
    fastest time): coarser than that, the bound fell below the others wherever it was measured,
    and is not worth its solving time."""
    span = end - start
    for n in range(FLUID_MAX_INTERVALS, FLUID_MIN_INTERVALS - 1, -10):
        first = np.minimum(np.floor((releases - start) / span * n), n - 1)
        if float(np.sum(segments * (n - first))) <= FLUID_BUDGET:
            return n if span / n <= FLUID_COARSEST * typical else 0
    return 0


def fluid_bound(releases: Sequence[float], curves: Sequence[Sequence[tuple[int, float]]], gpus: int,
                horizon: float) -> float | None:
    """A lower bound on the mean JCT of the jobs, the fluid relaxation, in a linear program.

    Time from the first release to ``horizon`` is cut into equal intervals. In interval ``t`` job
    ``j`` does a fraction ``x_jt`` of its work, no faster than its fastest rate over the part of the
    interval after its release, and holds at least the GPU-seconds of :func:`gpu_envelope` for it
    (one variable per envelope segment, each capped by its rate width); the jobs' GPU-seconds in an
    interval are at most ``G`` times its length. What a job does after ``horizon`` is one more
    variable, free of both limits and counted as done at ``horizon``, so every schedule, however
    late it ends, is a solution. Every job does all its work. A job's work is spread over time
    with density at most ``1/T_min``, so it completes at least ``T_min/2`` after the mean time of
    its work (the latest such spread is the uniform one ending at completion), and that mean is at
    least ``sum_t x_jt * b_jt`` (``b_jt``: the interval's start, or the release if later; the
    horizon for the rest). The least of ``mean_j(sum_t x_jt b_jt + T_min_j/2 - r_j)`` is therefore
    a lower bound on the mean JCT of every schedule. Solved with HiGHS; the optimum times
    ``LP_SLACK`` (the solver's tolerances). ``None`` when the jobs are too many for
    :data:`FLUID_BUDGET` variables at intervals no longer than :data:`FLUID_COARSEST` median
    fastest times (see :func:`_fluid_intervals`), or the solver fails (logged). The horizon changes how tight the
    bound is, never whether it holds.
    """
    envelopes = [gpu_envelope(c) for c in curves]
    if not envelopes or any(not e for e in envelopes) or gpus < 1:
        return None
    r = np.asarray(releases, dtype=np.float64)
    start = float(r.min())
    if not horizon > start:
        return None
    t_min = np.array([min(t for _, t in c) for c in curves])
    n = _fluid_intervals(r, np.array([len(e) for e in envelopes], dtype=np.int64), start, horizon,
                         float(np.median(t_min)))
    if not n:
        return None
    edges = np.linspace(start, horizon, n + 1)
    begins, ends, lengths = edges[:-1], edges[1:], np.diff(edges)
    n_jobs = len(envelopes)
    # Column blocks: first each job's work after the horizon (no GPUs, no rate cap, done at the
    # horizon), then each job's segments in each interval from its release on.
    rows_job: list[NDArray[np.int64]] = [np.arange(n_jobs)]
    rows_t: list[NDArray[np.int64]] = [np.zeros(n_jobs, dtype=np.int64)]
    slopes: list[NDArray[np.float64]] = [np.zeros(n_jobs)]
    costs: list[NDArray[np.float64]] = [np.full(n_jobs, horizon)]
    caps: list[NDArray[np.float64]] = [np.ones(n_jobs)]
    for j, env in enumerate(envelopes):
        first = int(np.searchsorted(ends, r[j], side="right"))
        b = np.maximum(begins[first:], r[j])
        avail = ends[first:] - b
        ts = np.arange(first, n)[avail > 0]
        b, avail = b[avail > 0], avail[avail > 0]
        for width, slope in env:
            rows_job.append(np.full(len(ts), j))
            rows_t.append(ts)
            slopes.append(np.full(len(ts), slope))
            costs.append(b)
            caps.append(width * avail)
    job_of, t_of = np.concatenate(rows_job), np.concatenate(rows_t)
    m = len(job_of)
    cols = np.arange(m)
    a_eq = sps.csr_matrix((np.ones(m), (job_of, cols)), shape=(n_jobs, m))
    a_ub = sps.csr_matrix((np.concatenate(slopes), (t_of, cols)), shape=(n, m))
    res = linprog(np.concatenate(costs), A_ub=a_ub, b_ub=gpus * lengths, A_eq=a_eq, b_eq=np.ones(n_jobs),
                  bounds=np.column_stack([np.zeros(m), np.concatenate(caps)]), method="highs")
    if res.status != 0:
        log.warning("no fluid bound: the linear program of %d jobs did not solve (%s)", n_jobs, res.message)
        return None
    return float((res.fun + np.sum(t_min / 2 - r)) / n_jobs) * LP_SLACK


def lower_bound(specs: Sequence[SimJobSpec], gpus: int, gpus_per_node: int,
                counted: Collection[str] | None = None) -> LowerBound:
    """The bounds on the mean JCT of the ``counted`` jobs (all of ``specs`` when ``None``).

    Args:
        specs: the workload.
        gpus: the cluster's GPUs.
        gpus_per_node: GPUs per node.
        counted: ids of the jobs the mean is over (the run's finished jobs); every bound uses only them.

    Returns:
        The bounds; all ``None`` when no job is counted, or when a counted job has no configuration
        on this cluster (it cannot have finished: logged as an inconsistency).
    """
    jobs = tuple(s for s in specs if counted is None or s.job_id in counted)
    if not jobs or gpus < 1:
        return LowerBound(None, None, len(jobs))
    return _bounds(jobs, gpus, gpus_per_node)


@lru_cache(maxsize=32)
def _bounds(jobs: tuple[SimJobSpec, ...], gpus: int, gpus_per_node: int) -> LowerBound:
    """:func:`lower_bound` of exactly ``jobs``: pure, so kept for the runs of one workload whose
    policies finished the same jobs (``reproduce`` and ``simulate --policy all`` run several)."""
    best = job_bests(jobs, gpus, gpus_per_node)
    if any(not math.isfinite(best[s.job_id].time) for s in jobs):
        bad = [s.job_id for s in jobs if not math.isfinite(best[s.job_id].time)]
        log.warning("no lower bound: job(s) %s finished but have no valid configuration on %d GPUs", bad[:5], gpus)
        return LowerBound(None, None, len(jobs))
    solo = float(np.mean([best[s.job_id].time for s in jobs]))
    releases = [s.submit_time for s in jobs]
    done = srpt_completions(releases, [best[s.job_id].gpu_seconds / gpus for s in jobs])
    capacity = float(np.mean([c - r for c, r in zip(done, releases, strict=True)]))
    curves = job_curves(jobs, gpus, gpus_per_node)
    # The horizon: when every job could be done (the capacity relaxation's last completion, or a
    # job's release plus its fastest time); past it the LP lets the work go unlimited.
    horizon = max(max(done), max(r + best[s.job_id].time for r, s in zip(releases, jobs, strict=True)))
    fluid = fluid_bound(releases, [curves[s.job_id] for s in jobs], gpus, horizon)
    return LowerBound(solo, capacity, len(jobs), fluid)
