"""Unit tests of the ``min-jct`` policy and its knapsack solver (issue 16, part 5)."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest

from slurm_elastic import policies
from slurm_elastic.core.constraints import plan_violations, validate_plan
from slurm_elastic.core.minjct import MinJctMemo, MinJctPlanner, Sighting, WorkHistory, solve_hulls, work_class
from slurm_elastic.core.model import JobId, JobState, NodeName
from slurm_elastic.errors import ConfigError
from slurm_elastic.testing import make_job, make_nodes, make_snapshot

NEG = -np.inf
RNG = np.random.default_rng(0)


def _brute(values: list[np.ndarray], starts: list[int], total: int) -> float:
    best = NEG
    for ks in itertools.product(*[range(s, len(v)) for v, s in zip(values, starts, strict=True)]):
        if sum(ks) <= total and all(np.isfinite(v[k]) for v, k in zip(values, ks, strict=True)):
            best = max(best, sum(v[k] for v, k in zip(values, ks, strict=True)))
    return best


def _value(values: list[np.ndarray], ks: list[int]) -> float:
    return float(sum(v[k] for v, k in zip(values, ks, strict=True)))


@pytest.mark.parametrize("seed", range(40))
def test_solve_hulls_is_optimal_when_values_are_concave(seed: int) -> None:
    rng = np.random.default_rng(seed)
    values, starts = [], []
    for _ in range(rng.integers(1, 4)):
        gains = np.sort(rng.random(int(rng.integers(1, 5))))[::-1]  # falling gains: concave
        start = int(rng.integers(0, 2))
        v = np.full(start + len(gains) + 1, NEG)
        v[start] = rng.random()
        v[start + 1:] = v[start] + np.cumsum(gains)
        values.append(v)
        starts.append(start)
    total = int(rng.integers(sum(starts), sum(len(v) for v in values)))
    ks = solve_hulls(values, starts, total)
    assert ks is not None and sum(ks) <= total
    assert _value(values, ks) == pytest.approx(_brute(values, starts, total))


@pytest.mark.parametrize("seed", range(40))
def test_solve_hulls_is_within_one_hull_segment_of_the_optimum(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    values, starts = [], []
    for _ in range(rng.integers(1, 4)):
        v = np.cumsum(rng.random(int(rng.integers(2, 6))))  # rising, not concave
        v[rng.random(len(v)) < 0.2] = NEG
        v[0] = 0.0
        values.append(v)
        starts.append(0)
    total = int(rng.integers(1, 8))
    ks = solve_hulls(values, starts, total)
    assert ks is not None and sum(ks) <= total
    assert all(np.isfinite(v[k]) for v, k in zip(values, ks, strict=True))
    best = _brute(values, starts, total)
    segment = max(float(np.max(v[np.isfinite(v)]) - v[0]) for v in values)
    assert best - segment - 1e-9 <= _value(values, ks) <= best + 1e-9


def test_solve_hulls_refuses_starts_that_do_not_fit() -> None:
    v = np.array([NEG, 1.0, 2.0])
    assert solve_hulls([v, v], [1, 1], 1) is None
    assert solve_hulls([v, v], [1, 1], 2) == [1, 1]


def test_a_waiting_job_expected_to_finish_sooner_is_admitted_first() -> None:
    run = make_job("run", max_gpus=1, placement=[("n000", 0), ("n000", 1), ("n000", 2)], target_epochs=100)
    run = replace(run, min_gpus=3, requested_gpus=3, max_gpus=3)
    long = make_job("long", max_gpus=1, submit_time=1.0, target_epochs=50)
    short = make_job("short", max_gpus=1, submit_time=2.0, target_epochs=2)
    snap = make_snapshot(make_nodes(1), [run, long, short], now=10.0)
    plan = policies.create("min-jct").plan(snap, None, RNG).plan
    validate_plan(snap, plan)
    assert sorted(p.job_id for p in plan.jobs) == ["run", "short"]  # dp would admit "long", the first to come
    (queued,) = plan.unplaced
    assert queued.job_id == "long" and "queued by min-jct" in queued.reason and "finish sooner" in queued.reason
    fifo = policies.create("dp").plan(snap, None, RNG).plan
    assert sorted(p.job_id for p in fifo.jobs) == ["long", "run"]


def test_a_job_that_is_late_for_its_fair_share_goes_before_shorter_ones() -> None:
    run = replace(make_job("run", placement=[("n000", 0), ("n000", 1), ("n000", 2)], target_epochs=100),
                  min_gpus=3, max_gpus=3, requested_gpus=3)
    old = make_job("old", max_gpus=1, submit_time=0.0, target_epochs=20)
    new = make_job("new", max_gpus=1, submit_time=99_000.0, target_epochs=2)
    snap = make_snapshot(make_nodes(1), [run, old, new], now=100_000.0)
    assert [p.job_id for p in policies.create("min-jct").plan(snap, None, RNG).plan.jobs
            if p.job_id != "run"] == ["old"]
    assert [p.job_id for p in policies.create("min-jct", ftf_bound=0).plan(snap, None, RNG).plan.jobs
            if p.job_id != "run"] == ["new"]  # without the bound: shortest first


def test_a_resize_is_made_only_when_it_pays_for_its_pause() -> None:
    # Almost done on one GPU, three GPUs free: growing would save less than the pause costs.
    job = make_job("a", max_gpus=4, placement=[("n000", 0)], epochs_done=9.99, target_epochs=10)
    snap = make_snapshot(make_nodes(1), [job], now=50.0)
    kept = policies.create("min-jct").plan(snap, None, RNG).plan.by_job()[JobId("a")]
    grown = policies.create("min-jct", grow_s=0.0).plan(snap, None, RNG).plan.by_job()[JobId("a")]
    assert kept.num_gpus == 1 and grown.num_gpus > 1
    # With its whole training ahead, the same grow pays for itself.
    fresh = make_snapshot(make_nodes(1), [replace(job, samples_processed=0)], now=50.0)
    assert policies.create("min-jct").plan(fresh, None, RNG).plan.by_job()[JobId("a")].num_gpus > 1


def test_a_job_released_in_whole_blocks_is_planned_only_at_sizes_slurm_can_free() -> None:
    a = make_job("a", max_gpus=4, placement=[("n000", 0), ("n000", 1), ("n001", 0), ("n001", 1)], target_epochs=50)
    b = make_job("b", max_gpus=4, placement=[("n002", 0), ("n002", 1)], submit_time=1, target_epochs=50)
    c = make_job("c", max_gpus=2, submit_time=2, target_epochs=1)
    blocks = make_snapshot(make_nodes(3, 2), [replace(a, release_blocks=((NodeName("n001"), 2),)), b, c], now=100.0)
    plan = policies.create("min-jct").plan(blocks, None, RNG).plan
    got = {p.job_id: p.num_gpus for p in plan.jobs}
    assert got[JobId("a")] in (2, 4) and got.get(JobId("c"), 0) >= 1, got
    assert plan_violations(blocks, plan) == ()
    stuck = make_snapshot(make_nodes(3, 2), [replace(a, release_blocks=()), b, c], now=100.0)
    assert policies.create("min-jct").plan(stuck, None, RNG).plan.by_job()[JobId("a")].num_gpus == 4


def test_a_job_that_cannot_grow_is_not_planned_above_its_size() -> None:
    job = replace(make_job("a", max_gpus=4, placement=[("n000", 0)], target_epochs=100), can_grow=False)
    snap = make_snapshot(make_nodes(1), [job])
    assert policies.create("min-jct").plan(snap, None, RNG).plan.by_job()[JobId("a")].num_gpus == 1


def test_the_work_of_ended_jobs_is_learned_by_kind_and_estimates_the_next() -> None:
    ran = make_job("1", max_gpus=1, placement=[("n000", 0)], epochs_done=2.0)
    ran = replace(ran, observed_throughput=100.0)
    first = WorkHistory().updated(make_snapshot(make_nodes(1), [ran], now=10.0), {ran.job_id: 50.0})
    assert first.seen[JobId("1")] == Sighting(work_class(ran), float(ran.samples_processed), 100.0, 10.0, 50.0)
    later = first.updated(make_snapshot(make_nodes(1), [], now=30.0), {})
    total = ran.samples_processed + 100.0 * 20.0  # its samples and its rate until now
    assert later.work == {work_class(ran): (1, pytest.approx(total))}
    assert later.alone == (1, pytest.approx(total / 50.0)) and later.seen == {}
    # A new job of the same kind is expected to do what the ended one did; another kind, the mean job's time.
    same = make_job("2", max_gpus=1, submit_time=31.0)
    other = make_job("3", "imagenet", max_gpus=1, submit_time=32.0)
    planner = MinJctPlanner()
    snap = make_snapshot(make_nodes(1), [same, other], now=40.0)
    got = planner._remaining(snap, [same, other], later, {same.job_id: 50.0, other.job_id: 25.0})
    assert got == [pytest.approx(total), pytest.approx(total / 50.0 * 25.0)]
    result = planner.plan(snap, MinJctMemo(history=later), RNG)
    assert result.memo.history.work == later.work


def test_a_waiting_job_is_never_learned_as_ended() -> None:
    waiting = make_job("1", max_gpus=1)
    history = WorkHistory().updated(make_snapshot(make_nodes(1), [waiting]), {})
    assert history.seen == {} and history.updated(make_snapshot(make_nodes(1), []), {}).work == {}


@pytest.mark.parametrize(("params", "message"), [
    ({"grow_s": -1.0}, "min-jct.grow_s = -1.0: must be"),
    ({"ftf_bound": 1.0}, "min-jct.ftf_bound = 1.0: must be 0 (off) or"),
    ({"kmax": 0}, "min-jct.kmax = 0: must be >= 1"),
])
def test_bad_parameters_are_refused_with_the_value_and_the_rule(params: dict[str, float], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        policies.create("min-jct", **params)


def test_plans_of_a_busy_cluster_are_valid() -> None:
    rng = np.random.default_rng(3)
    jobs = []
    for i in range(30):
        k = int(rng.integers(0, 3))
        placement = [(f"n{i % 4:03d}", i // 4)] if i < 16 and k else []
        jobs.append(make_job(i, ["cifar10", "imagenet", "bert"][k], max_gpus=int(rng.integers(1, 9)),
                             requested_gpus=1, submit_time=float(i), placement=placement,
                             epochs_done=float(rng.random() * 5) if placement else 0.0,
                             state=JobState.PENDING))
    snap = make_snapshot(make_nodes(4), jobs, now=1000.0)
    memo = None
    for _ in range(3):
        res = policies.create("min-jct").plan(snap, memo, rng)
        validate_plan(snap, res.plan)
        assert sum(p.num_gpus for p in res.plan.jobs) == 16
        memo = res.memo


def test_gpus_no_whole_hull_segment_fits_in_go_to_the_best_step_that_fits() -> None:
    # The hull jumps from 0 to 3 GPUs (3 are worth far more), but only 2 are free: a step to 2 still gains.
    v = np.array([0.0, 1.0, 1.1, 5.0])
    assert solve_hulls([v], [0], 2) == [2]
    assert solve_hulls([v], [0], 3) == [3]


def test_an_empty_cluster_plans_nothing_and_keeps_its_memo() -> None:
    res = policies.create("min-jct").plan(make_snapshot(make_nodes(2), []), None, RNG)
    assert res.plan.jobs == () and res.plan.unplaced == () and isinstance(res.memo, MinJctMemo)


def test_the_kinds_remembered_are_bounded_and_the_least_recent_go_first(monkeypatch: pytest.MonkeyPatch) -> None:
    import slurm_elastic.core.minjct as minjct

    monkeypatch.setattr(minjct, "MAX_KINDS", 2)
    history = WorkHistory()
    kinds = []
    for i in range(4):  # one job of a new kind (its own user) runs, then ends
        job = replace(make_job(str(i), max_gpus=1, placement=[("n000", 0)], epochs_done=1.0), user=f"u{i}")
        kinds.append(work_class(job))
        history = history.updated(make_snapshot(make_nodes(1), [job], now=float(2 * i)), {job.job_id: 1.0})
        history = history.updated(make_snapshot(make_nodes(1), [], now=float(2 * i + 1)), {})
    assert list(history.work) == kinds[2:]
