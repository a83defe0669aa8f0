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
:func:`~slurm_elastic.core.constraints.validate_plan`, which the simulator enforces. Alone in a
configuration a job finishes in ``T = epoch_size * epochs_needed(B) * step_time(l, shape, a) / B``
seconds and uses ``k * T`` GPU-seconds.

* :func:`job_best`: the job's least ``T`` (its fastest way to finish) and its least ``k * T`` (its
  cheapest), each minimised exactly over every configuration (see :func:`job_best`).
* The *solo* bound: the mean over the counted jobs of ``T_min``: no job finishes sooner than
  ``T_min`` after its arrival.
* The *capacity* bound: the cluster as one machine serving ``G`` GPU-seconds per second, job ``j``
  released at its arrival ``r_j`` with work ``p_j = W_min_j / G``; preemptive shortest remaining
  processing time (:func:`srpt_completions`) minimises the sum of completion times there
  (``1|r_j,pmtn|sum C_j``), so its mean ``C_j - r_j`` bounds the mean JCT from below.
* ``lower_bound_avg_jct`` = the larger of the two.

Both run over the *counted* jobs only, the ones the run's ``avg_jct`` averages (finished, not
dropped): a real run's schedule restricted to those jobs is a schedule of them alone, so SRPT over
exactly them is a valid bound on their mean (SRPT over every job, averaged over the counted ones,
would not be: it may delay a counted job behind one that the run dropped).

Every physics the simulator adds (resize and restart pauses, start-up overhead, shared host cores)
only slows a job or holds GPUs longer, so the bound holds with them too; with ``equal_start`` a
job can start outside its declared ranges, so no bound is computed for such runs
(:func:`~slurm_elastic.sim.metrics.metrics`).
"""

from __future__ import annotations

import heapq
import logging
import math
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray

from slurm_elastic.core.model import ElasticMode
from slurm_elastic.sim.cluster import DONE_EPS
from slurm_elastic.sim.truth import MeasuredSpeed, Shape
from slurm_elastic.sim.workload import SimJobSpec

log = logging.getLogger(__name__)

SLACK = 1.0 - 2 * DONE_EPS
"""Both bounds are multiplied by this: the simulator finishes a job at ``1 - DONE_EPS`` of its work,
and the vectorised search may round differently from the simulator's scalar step time."""

GRID_BUDGET = 1_000_000
"""Most (accumulation, per-GPU batch) pairs searched exactly per GPU count and shape; past it the
larger accumulations are bounded by their compute alone (see :func:`job_best`)."""


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
    """

    solo: float | None
    capacity: float | None
    jobs: int

    @property
    def value(self) -> float | None:
        """The tighter (larger) bound."""
        if self.solo is None or self.capacity is None:
            return None
        return max(self.solo, self.capacity)


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
    job with ``work_scale`` 1, and its least value over ``lo..h`` for many ``h`` at once.

    ``epochs_needed`` is constant (a set epoch count) or piecewise linear in ``log2 B`` between the
    measured batches and flat outside them. On a piece, ``(alpha + beta log2 B) / B`` has derivative
    ``(beta / ln 2 - epochs(B)) / B**2``, whose sign can change only from + to - (``epochs`` >= 0 rises
    with ``B`` when ``beta > 0``; it is negative throughout when ``beta <= 0``): ``g`` is never convex
    inside a piece, so its least value over an interval is at an end or a measured batch inside.
    """

    def __init__(self, spec: SimJobSpec, lo: int, hi: int) -> None:
        self.spec = spec
        self.lo = lo
        conv = spec.model_truth.convergence if spec.epochs is None else None
        self._log_batches = conv.batches if conv is not None else None
        self._epochs_at = conv.epochs_at if conv is not None else None
        measured = [] if conv is None else sorted({round(2.0 ** b) for b in conv.batches})
        self.points = np.array([b for b in measured if lo < b < hi], dtype=np.float64)
        at_points = self.g(self.points)
        self.prefix = np.minimum.accumulate(at_points) if at_points.size else at_points
        self.at_lo = float(self.g(np.array([float(lo)]))[0])

    def epochs(self, batch: NDArray[np.float64]) -> NDArray[np.float64]:
        """Epochs to the target at each global batch (``work_scale`` 1), as the simulator's truth."""
        if self._log_batches is None or self._epochs_at is None:
            return np.full(batch.shape, float(self.spec.epochs_needed(1.0)))
        out: NDArray[np.float64] = np.interp(np.log2(np.maximum(batch, 1.0)), self._log_batches, self._epochs_at)
        return out

    def g(self, batch: NDArray[np.float64]) -> NDArray[np.float64]:
        return self.spec.epoch_size * self.epochs(batch) / batch

    def least_up_to(self, h: NDArray[np.float64]) -> NDArray[np.float64]:
        """``min g(B)`` over ``lo <= B <= h``, each ``h >= lo``."""
        out = np.minimum(self.at_lo, self.g(h))
        if self.points.size:
            idx = np.searchsorted(self.points, h, side="right")
            inner = np.where(idx > 0, self.prefix[np.maximum(idx - 1, 0)], np.inf)
            out = np.minimum(out, inner)
        return out

    def least_epochs(self, hi: int) -> float:
        """``min epochs_needed(B)`` over ``lo <= B <= hi`` (piecewise linear in ``log2 B``: an end or a
        measured batch)."""
        cands = np.array([float(self.lo), float(hi), *self.points.tolist()])
        return float(np.min(self.epochs(cands)))


def _pairs(a_from: int, a_to: int, k: int, hi: int, l_max: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """The (accumulation, per-GPU batch) pairs searched for ``a`` in ``a_from..a_to``: ``l`` in
    ``1..l_max``, and for ``a >= 2`` only while ``l * k * (a - 1) < hi`` (a larger ``l`` fits the batch
    with one accumulation step less, which is never slower: see :func:`job_best`)."""
    accs = np.arange(a_from, a_to + 1, dtype=np.int64)
    if accs.size == 0:
        return accs, accs
    tops = np.where(accs == 1, l_max, np.minimum(l_max, -(-hi // np.maximum(k * (accs - 1), 1))))
    a = np.repeat(accs, tops)
    starts = np.cumsum(tops) - tops
    ls = np.arange(a.size, dtype=np.int64) - np.repeat(starts, tops) + 1
    return a, ls


def _pair_count(a: int, k: int, hi: int, l_max: int) -> int:
    return l_max if a == 1 else min(l_max, -(-hi // (k * (a - 1))))


def job_best(spec: SimJobSpec, gpus: int, gpus_per_node: int) -> JobBest:
    """The job's least time and least GPU-seconds alone on a cluster of ``gpus`` GPUs, over every
    configuration the module docstring defines, exactly (then times ``SLACK``).

    The search, for each GPU count ``k`` and each distinct step-time curve of its shapes: for an
    accumulation ``a`` and a per-GPU batch ``l``, the least ``g(B)`` over the batches that fit
    (``B <= min(max_batch, l k a)``) is at an end of that range or a measured batch
    (:class:`_Epochs`), and the step time does not depend on ``B``; so every integer ``l`` in
    ``1..local_limit`` and every useful ``a`` is tried with its best ``B``. An ``a`` with
    ``l k (a - 1) >= B`` is never needed (``a - 1`` holds the batch and its step is shorter by one
    compute pass), so ``a <= ceil(max_batch / k)`` and, for ``a >= 2``, ``l < max_batch / (k (a - 1))``.
    Past :data:`GRID_BUDGET` pairs, the remaining accumulations are bounded by compute alone:
    ``T >= epoch_size * epochs(B) * a compute(l) / B >= epoch_size * min epochs * compute(l) / (l k)``,
    valid but looser (only traces with huge batch ranges get there).
    """
    speed = spec.model_truth.speed
    nodes = max(1, gpus // gpus_per_node)
    l_max = spec.local_limit
    locals_ = np.arange(1, l_max + 1, dtype=np.int64)
    best_t = best_w = math.inf
    for k in range(max(1, spec.min_gpus), min(spec.max_gpus, gpus) + 1):
        if spec.mode is ElasticMode.ENDO:
            lo = hi = spec.base_batch
            if not (spec.min_batch <= lo <= spec.max_batch and lo >= k):
                continue
        else:
            lo, hi = max(spec.min_batch, k), spec.max_batch
        if lo > hi:
            continue
        epochs = _Epochs(spec, lo, hi)
        a_top = max(1, -(-hi // k))
        a_cut, total = 0, 0
        while a_cut < a_top and total + _pair_count(a_cut + 1, k, hi, l_max) <= GRID_BUDGET:
            a_cut += 1
            total += _pair_count(a_cut, k, hi, l_max)
        a_idx, l_idx = _pairs(1, a_cut, k, hi, l_max)
        # the batches a pair holds, and their least g, do not depend on the shape
        h = np.minimum(hi, (l_idx * k * a_idx)).astype(np.float64)
        ok = h >= lo
        a_ok, l_ok = a_idx[ok], l_idx[ok] - 1
        least = epochs.least_up_to(h[ok])
        for shape in _curves(speed, k, gpus_per_node, nodes):
            compute, sync = _step_parts(speed, l_max, shape)
            if a_ok.size:
                t = least * (a_ok * compute[l_ok] + sync[l_ok])
                t_min = float(np.min(t))
                best_t = min(best_t, t_min)
                best_w = min(best_w, k * t_min)
            if a_cut < a_top:  # larger accumulations: compute alone
                per_sample = float(np.min(compute / locals_))
                t_low = spec.epoch_size * epochs.least_epochs(hi) * per_sample / k
                best_t = min(best_t, t_low)
                best_w = min(best_w, k * t_low)
    return JobBest(best_t * SLACK, best_w * SLACK)


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
def _unit_best(key: SimJobSpec, gpus: int, gpus_per_node: int) -> JobBest:
    return job_best(key, gpus, gpus_per_node)


def job_bests(specs: Sequence[SimJobSpec], gpus: int, gpus_per_node: int) -> dict[str, JobBest]:
    """:func:`job_best` of every job, each job shape searched once per process (``T`` and ``W`` scale
    with ``work_scale``; the search is pure, so its results are cached)."""
    out: dict[str, JobBest] = {}
    for spec in specs:
        unit = _unit_best(_shape_key(spec), gpus, gpus_per_node)
        out[spec.job_id] = JobBest(unit.time * spec.work_scale, unit.gpu_seconds * spec.work_scale)
    return out


def lower_bound(specs: Sequence[SimJobSpec], gpus: int, gpus_per_node: int,
                counted: Collection[str] | None = None) -> LowerBound:
    """Both bounds on the mean JCT of the ``counted`` jobs (all of ``specs`` when ``None``).

    Args:
        specs: the workload.
        gpus: the cluster's GPUs.
        gpus_per_node: GPUs per node.
        counted: ids of the jobs the mean is over (the run's finished jobs); both bounds use only them.

    Returns:
        The bounds; both ``None`` when no job is counted, or when a counted job has no configuration
        on this cluster (it cannot have finished: logged as an inconsistency).
    """
    jobs = [s for s in specs if counted is None or s.job_id in counted]
    if not jobs or gpus < 1:
        return LowerBound(None, None, len(jobs))
    best = job_bests(jobs, gpus, gpus_per_node)
    if any(not math.isfinite(best[s.job_id].time) for s in jobs):
        bad = [s.job_id for s in jobs if not math.isfinite(best[s.job_id].time)]
        log.warning("no lower bound: job(s) %s finished but have no valid configuration on %d GPUs", bad[:5], gpus)
        return LowerBound(None, None, len(jobs))
    solo = float(np.mean([best[s.job_id].time for s in jobs]))
    releases = [s.submit_time for s in jobs]
    done = srpt_completions(releases, [best[s.job_id].gpu_seconds / gpus for s in jobs])
    capacity = float(np.mean([c - r for c, r in zip(done, releases, strict=True)]))
    return LowerBound(solo, capacity, len(jobs))
