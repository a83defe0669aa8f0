"""The clairvoyant lower bound on avg JCT (slurm_elastic.sim.lower_bound): SRPT by hand, the per-job
search against brute force, the bound over the counted jobs only, the fluid relaxation by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from slurm_elastic.core.model import ElasticMode
from slurm_elastic.sim.job import launcher_batch
from slurm_elastic.sim.lower_bound import (
    SLACK,
    _curves,
    _shapes,
    fluid_bound,
    gpu_envelope,
    job_best,
    job_bests,
    job_curves,
    lower_bound,
    srpt_completions,
)
from slurm_elastic.sim.truth import truth
from slurm_elastic.sim.workload import SimJobSpec, requested_time
from slurm_elastic.workloads.ones import ones_longhorn


def test_srpt_two_jobs_arriving_together_shortest_first() -> None:
    assert srpt_completions([0.0, 0.0], [2.0, 1.0]) == [3.0, 1.0]


def test_srpt_a_shorter_arrival_preempts() -> None:
    # A (4 s) runs from 0; B (1 s) arrives at 1 with less left than A's 3 s: B ends at 2, A at 5.
    assert srpt_completions([0.0, 1.0], [4.0, 1.0]) == [5.0, 2.0]


def test_srpt_no_preemption_when_the_running_job_has_less_left_and_idle_gaps() -> None:
    assert srpt_completions([0.0, 1.0], [2.0, 3.0]) == [2.0, 5.0]
    assert srpt_completions([5.0, 0.0], [2.0, 1.0]) == [7.0, 1.0]
    assert srpt_completions([], []) == []
    with pytest.raises(ValueError, match="finite and >= 0"):
        srpt_completions([0.0], [-1.0])


def test_srpt_minimises_the_sum_over_every_nonpreemptive_order() -> None:
    rng = np.random.default_rng(3)
    import itertools

    for _ in range(20):
        r = [float(x) for x in rng.integers(0, 6, 4)]
        p = [float(x) for x in rng.integers(1, 5, 4)]
        srpt = sum(srpt_completions(r, p))
        for order in itertools.permutations(range(4)):
            t, total = 0.0, 0.0
            for i in order:
                t = max(t, r[i]) + p[i]
                total += t
            assert srpt <= total + 1e-9


def test_shapes_of_a_gpu_count() -> None:
    assert list(_shapes(5, 4, 2)) == [(4, 1), (3, 2)]
    assert list(_shapes(3, 4, 3)) == [(3,), (2, 1), (1, 1, 1)]
    assert list(_shapes(9, 4, 2)) == []


def test_one_configuration_job_by_hand() -> None:
    # One GPU, batch 1, per-GPU limit 1, 2 epochs of 500 samples: the only configuration.
    spec = SimJobSpec("a", 0.0, "cifar10", 1, 1, 1, 1, 1, 1, 500, max_local_batch=1, epochs=2.0)
    step = truth("cifar10").speed.step_time(1, (1,), 1)
    best = job_best(spec, 8, 4)
    assert best.time == pytest.approx(500 * 2 * step * SLACK, rel=1e-12)
    assert best.gpu_seconds == pytest.approx(best.time, rel=1e-12)
    assert job_best(spec, 8, 4).time <= 500 * 2 * step


def _time(spec: SimJobSpec, k: int, shape: tuple[int, ...], b: int, local: int, a: int) -> float:
    """Seconds alone in a plan's configuration, at the batch the launcher trains of it (the simulator's)."""
    run, run_local, steps = launcher_batch(spec.mode, k, b, local, a, spec.local_limit)
    return spec.epoch_size * spec.epochs_needed(run) * spec.model_truth.speed.step_time(run_local, shape, steps) / run


def _brute(spec: SimJobSpec, gpus: int, per_node: int) -> tuple[float, float, float]:
    """By brute force, the least time and GPU-seconds over the plans whose per-worker batch is at most
    ``max(ceil(max_batch / k), limit)`` (each such batch: one plan, ``l = 1``; and every ``(B, a, l)``
    with ``a <= ceil(B / k)``), with the larger per-worker batches of an exo job bounded by their
    compute alone; and the least time over every plan tried (larger batches included), each exactly."""
    speed = spec.model_truth.speed
    best_t = best_w = every = math.inf
    limit = spec.local_limit
    for k in range(spec.min_gpus, min(spec.max_gpus, gpus) + 1):
        exo = spec.mode is ElasticMode.EXO
        batches = range(max(spec.min_batch, k), spec.max_batch + 1) if exo else [spec.base_batch]
        cut = max(-(-spec.max_batch // k), limit)
        for shape in _shapes(k, per_node, gpus // per_node):
            for b in batches:
                if b < k:
                    continue
                plans = [(local, a) for a in range(1, math.ceil(b / k) + 1)
                         for local in range(math.ceil(b / (k * a)), limit + 1)]
                if exo:
                    plans += [(1, per) for per in range(-(-b // k), cut + 1)]  # one plan per per-worker batch
                    plans += [(1, per) for per in (2 * cut, 10 * cut, 100 * cut)]
                for local, a in plans:
                    t = _time(spec, k, shape, b, local, a)
                    every = min(every, t)
                    if not exo or local * a <= cut:
                        best_t, best_w = min(best_t, t), min(best_w, k * t)
            if exo:  # per-worker batches past the cut: compute alone, the least epochs from there on
                compute, _ = speed.step_parts(np.arange(1, limit + 1), shape)
                per_sample = min(float(c) / (i + 1) for i, c in enumerate(compute))
                conv = spec.model_truth.convergence if spec.epochs is None else None
                measured = [] if conv is None else [round(2.0 ** x) for x in conv.batches]
                least = min(spec.epochs_needed(x) for x in [k * (cut + 1), *[m for m in measured if m > k * (cut + 1)]])
                tail = spec.epoch_size * least * per_sample / k
                best_t, best_w = min(best_t, tail), min(best_w, k * tail)
    return best_t, best_w, every


@pytest.mark.parametrize("spec", [
    SimJobSpec("x", 0.0, "bert", 1, 1, 3, 12, 4, 20, 1000),
    SimJobSpec("y", 0.0, "yolov3", 2, 1, 3, 16, 8, 24, 500, mode=ElasticMode.ENDO),
    SimJobSpec("z", 0.0, "imagenet", 1, 1, 2, 64, 30, 50, 2000, max_local_batch=24),
    SimJobSpec("w", 0.0, "cifar10", 1, 2, 3, 64, 40, 70, 2000, max_local_batch=20, epochs=3.0),
], ids=["bert-exo", "yolov3-endo", "imagenet-accumulation", "cifar10-set-epochs"])
def test_job_best_equals_brute_force_over_every_valid_configuration(spec: SimJobSpec) -> None:
    best = job_best(spec, 8, 4)
    t, w, every = _brute(spec, 8, 4)
    assert best.time == pytest.approx(t * SLACK, rel=1e-9) and best.time <= t <= every
    assert best.gpu_seconds == pytest.approx(w * SLACK, rel=1e-9) and best.gpu_seconds <= w


def test_job_best_is_at_most_the_requested_configuration() -> None:
    for spec in ones_longhorn(1)[:10]:
        assert job_best(spec, 64, 4).time <= requested_time(spec)


def test_step_parts_agree_with_step_time() -> None:
    speed = truth("imagenet").speed
    locals_ = np.arange(1, 260)
    for shape in [(1,), (4, 4), (2, 1), (1, 1, 1, 1, 1)]:  # measured, by count, fitted fallback
        compute, sync = speed.step_parts(locals_, shape)
        for a in (1, 3):
            want = [speed.step_time(int(b), shape, a) for b in locals_]
            assert a * compute + sync == pytest.approx(want, rel=1e-12)


def _one_config_job(job_id: str, submit: float) -> SimJobSpec:
    return SimJobSpec(job_id, submit, "cifar10", 1, 1, 1, 1, 1, 1, 500, max_local_batch=1, epochs=2.0)


def test_bound_by_hand_two_jobs_on_one_gpu_and_counted_subset() -> None:
    jobs = [_one_config_job("a", 0.0), _one_config_job("b", 0.0), _one_config_job("c", 10_000.0)]
    t = job_best(jobs[0], 1, 1).time
    both = lower_bound(jobs[:2], 1, 1)
    assert both.solo == pytest.approx(t)
    assert both.capacity == pytest.approx(1.5 * t)  # SRPT: one ends at t, the other at 2t
    assert both.value == both.capacity and both.jobs == 2
    one = lower_bound(jobs, 1, 1, counted={"b"})  # SRPT over the counted job alone
    assert one.capacity == pytest.approx(t) and one.jobs == 1
    assert lower_bound(jobs, 1, 1, counted=set()).value is None


class _Measured:
    """A speed with measured shapes only (what :func:`_curves` reads)."""

    def __init__(self, shapes: tuple[tuple[int, ...], ...]) -> None:
        self.by_shape = dict.fromkeys(shapes)


@pytest.mark.parametrize("measured", [(), ((4, 4), (2, 2), (1,), (4, 2, 1), (2, 1, 1, 1)), ((2, 1, 1),),
                                      ((1, 1, 1, 1), (3, 1))])
def test_curves_are_those_of_every_shape_listed(measured: tuple[tuple[int, ...], ...]) -> None:
    # One shape per distinct curve, as listing every shape and keeping the first of each curve gives.
    speed = _Measured(measured)
    for per_node in (1, 2, 4, 8):
        for nodes in (1, 2, 3, 5, 16):
            for k in range(1, min(24, per_node * nodes) + 1):
                seen: dict[object, tuple[int, ...]] = {}
                for shape in _shapes(k, per_node, nodes):
                    key = ("shape", shape) if shape in speed.by_shape else ("count", len(shape))
                    seen.setdefault(key, shape)
                assert sorted(_curves(speed, k, per_node, nodes)) == sorted(seen.values())  # type: ignore[arg-type]


def test_the_gpu_envelope_is_the_lower_convex_hull_from_the_origin() -> None:
    # (rate, GPUs): (0.5, 1) and (0.833, 2): two segments, W_min = 2 GPU-s per job, then 3.
    (w1, s1), (w2, s2) = gpu_envelope([(1, 2.0), (2, 1.2)])
    assert (w1, s1) == pytest.approx((0.5, 2.0)) and (w2, s2) == pytest.approx((1 / 1.2 - 0.5, 3.0))
    # 2 GPUs slower than 1 lies above the hull; 1 and 4 GPUs on one line from the origin: one segment.
    assert gpu_envelope([(1, 2.0), (2, 2.5), (4, 0.5)]) == pytest.approx([(2.0, 2.0)])
    assert gpu_envelope([]) == []


def test_fluid_bound_by_hand_two_jobs_that_share_two_gpus() -> None:
    # Two jobs at 0 on 2 GPUs, each 2 s on 1 GPU or 1.2 s on 2. Solo 1.2, capacity (SRPT of 2 GPU-s
    # each) 1.5; the best schedules: both on 1 GPU (2.0), one after the other on 2 (1.8). The fluid
    # optimum runs both at their cheapest rate (mean work time 1) and adds T_min/2: 1.6.
    curves = [[(1, 2.0), (2, 1.2)]] * 2
    fluid = fluid_bound([0.0, 0.0], curves, 2, horizon=2.0)
    assert fluid is not None and 1.5 < fluid <= 1.6 and fluid == pytest.approx(1.6, abs=0.01)
    # A horizon too short for the work only moves work past it (counted done there): still a bound.
    short = fluid_bound([0.0, 0.0], curves, 2, horizon=0.5)
    assert short is not None and short < fluid
    # A job released later cannot work before its release.
    late = fluid_bound([0.0, 10.0], curves, 2, horizon=12.0)
    assert late is not None and late == pytest.approx(1.2, abs=0.02)  # alone each: T_min


def test_fluid_bound_gives_up_past_its_budget_or_its_resolution() -> None:
    curves = [[(k, k ** -0.5) for k in range(1, 11)]] * 6000  # ten hull segments each
    assert len(gpu_envelope(curves[0])) == 10
    assert fluid_bound([0.0] * 6000, curves, 64, horizon=100.0) is None
    # Intervals far longer than the jobs (two 1.2 s jobs a day apart): no bound, not a weak one.
    assert fluid_bound([0.0, 86_400.0], [[(1, 2.0), (2, 1.2)]] * 2, 2, horizon=86_402.0) is None


def test_the_fluid_part_is_tighter_than_the_others_on_a_shared_cluster() -> None:
    jobs = ones_longhorn(1, 30)
    bound = lower_bound(jobs, 8, 4)
    assert bound.fluid is not None and bound.value == bound.fluid > max(bound.solo or 0, bound.capacity or 0)
    curves, bests = job_curves(jobs, 8, 4), job_bests(jobs, 8, 4)
    for s in jobs:  # the per-count times give the other bounds' minima
        best = bests[s.job_id]
        assert min(t for _, t in curves[s.job_id]) == pytest.approx(best.time, rel=1e-12)
        assert min(k * t for k, t in curves[s.job_id]) == pytest.approx(best.gpu_seconds, rel=1e-12)
