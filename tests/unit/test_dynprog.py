"""Unit tests of the IBM dynamic program and its autoscaler."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from slurm_elastic import policies
from slurm_elastic.core.constraints import validate_plan
from slurm_elastic.core.dynprog import (
    DpMemo,
    DynamicProgramPlanner,
    fill_table,
    read_table,
    solve,
    solve_concave,
    solve_table,
)
from slurm_elastic.core.model import JobId, Node, NodeName, NodeState
from slurm_elastic.errors import ConfigError
from slurm_elastic.testing import make_job, make_nodes, make_snapshot

NEG = -np.inf


def test_solve_small_example_by_hand() -> None:
    # Job 0 scales well, job 1 does not: 4 GPUs -> 3 + 1.
    v0 = np.array([NEG, 1.0, 1.9, 2.7, 3.0])
    v1 = np.array([NEG, 1.0, 1.1, 1.15, 1.2])
    best, ks = solve([v0, v1], 4)
    assert ks == [3, 1] and best == pytest.approx(3.7)


def test_solve_reports_infeasible() -> None:
    v = np.array([NEG, 1.0])
    assert solve([v, v, v], 2) == (NEG, [])


def test_drop_mode_drops_what_does_not_fit_and_queue_mode_keeps_it() -> None:
    jobs = [make_job(i, min_gpus=2, max_gpus=4, requested_gpus=2, submit_time=i) for i in range(3)]
    snap = make_snapshot(make_nodes(1), jobs)
    drop = policies.create("dp", mode="drop").plan(snap, None, np.random.default_rng(0)).plan
    queue = policies.create("dp").plan(snap, None, np.random.default_rng(0)).plan
    validate_plan(snap, drop)
    assert [p.job_id for p in drop.jobs] == ["0", "1"]
    assert [(u.job_id, u.dropped) for u in drop.unplaced] == [("2", True)]
    assert [(u.job_id, u.dropped) for u in queue.unplaced] == [("2", False)]
    assert "needs 2 GPUs, 0 left" in queue.unplaced[0].reason


def test_admission_skips_a_big_job_and_admits_a_later_small_one() -> None:
    big = make_job("big", min_gpus=4, max_gpus=4, requested_gpus=4, submit_time=1)
    small = make_job("small", submit_time=2)
    run = make_job("run", placement=[("n000", 0)], max_gpus=4)
    snap = make_snapshot(make_nodes(1), [run, big, small])
    plan = policies.create("dp").plan(snap, None, np.random.default_rng(0)).plan
    assert sorted(p.job_id for p in plan.jobs) == ["run", "small"]


def test_uses_best_batch_and_all_gpus() -> None:
    snap = make_snapshot(make_nodes(2), [make_job("a", max_gpus=8, requested_gpus=1)])
    plan = policies.create("dp").plan(snap, None, np.random.default_rng(0)).plan
    (jp,) = plan.jobs
    assert jp.num_gpus >= 4 and jp.global_batch >= jp.num_gpus


def test_interval_keeps_allocation_between_replans() -> None:
    run = make_job("a", placement=[("n000", 0)], max_gpus=4)
    snap = make_snapshot(make_nodes(1), [run], now=100.0)
    p = DynamicProgramPlanner(interval=600)
    res = p.plan(snap, DpMemo(last_plan_time=0.0), np.random.default_rng(0))
    assert res.plan.by_job()[JobId("a")].num_gpus == 1
    assert "between re-plans" in res.plan.notes[0]


@pytest.mark.parametrize("policy", ["dp", "min-jct"])
def test_preempts_latest_started_when_running_set_no_longer_fits(policy: str) -> None:
    nodes = (Node(NodeName("n000"), (0, 1, 2), ()), Node(NodeName("n001"), (0, 1), (), NodeState.DOWN))
    a = replace(make_job("a", min_gpus=2, max_gpus=4, requested_gpus=2, placement=[("n000", 0), ("n000", 1)]),
                start_time=10.0)
    b = replace(make_job("b", min_gpus=2, max_gpus=4, requested_gpus=2, placement=[("n001", 0), ("n001", 1)]),
                start_time=50.0)
    snap = make_snapshot(nodes, [a, b])
    plan = policies.create(policy).plan(snap, None, np.random.default_rng(0)).plan
    validate_plan(snap, plan)
    assert [p.job_id for p in plan.jobs] == ["a"]
    assert f"preempted by {policy}" in plan.unplaced[0].reason


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"dp.mode = 'maybe'"):
        DynamicProgramPlanner(mode="maybe")
    with pytest.raises(ConfigError, match=r"dp\.kmax = 0"):
        DynamicProgramPlanner(kmax=0)


def _concave(rng: np.random.Generator, kmax: int) -> np.ndarray:
    """Scaling factors concave over one interval of feasible sizes (gains never rise; some may be < 0)."""
    v = np.full(kmax + 1, NEG)
    lo = int(rng.integers(1, kmax + 1))
    hi = int(rng.integers(lo, kmax + 1))
    gains = np.sort(rng.normal(0.5, 0.6, hi - lo))[::-1]
    v[lo] = rng.uniform(0.5, 1.5)
    v[lo + 1 : hi + 1] = v[lo] + np.cumsum(gains)
    return v


@pytest.mark.parametrize("seed", range(40))
def test_the_concave_path_reaches_the_tables_optimum(seed: int) -> None:
    rng = np.random.default_rng(seed)
    shared = [_concave(rng, 6) for _ in range(3)]
    values = [shared[int(rng.integers(3))] if rng.random() < 0.5 else _concave(rng, 8) for _ in range(12)]
    total = int(rng.integers(1, 40))
    table_best, _ = solve_table(values, total)
    fast = solve_concave(values, total)
    assert fast is not None
    best, ks = fast
    if not np.isfinite(table_best):
        assert (best, ks) == (NEG, [])
        return
    assert best == pytest.approx(table_best, abs=1e-9)
    assert sum(ks) <= total and all(np.isfinite(v[k]) for v, k in zip(values, ks, strict=True))
    assert sum(float(v[k]) for v, k in zip(values, ks, strict=True)) == pytest.approx(best, abs=1e-9)


def test_factors_that_are_not_concave_go_to_the_table() -> None:
    bumpy = np.array([NEG, 1.0, 1.2, 2.5])  # the third GPU gains more than the second
    gappy = np.array([NEG, 1.0, NEG, 2.0])  # feasible sizes are not one interval
    for v in (bumpy, gappy):
        assert solve_concave([v, np.array([NEG, 1.0, 1.5])], 4) is None
        assert solve([v], 3) == solve_table([v], 3)


def test_a_large_queue_of_concave_jobs_is_planned_without_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """25,000 elastic jobs on 28,000 GPUs made a 25,000 x 28,000 table (5.6 GB, 12 s): concave factors
    (the shipped profiles' shape) are solved greedily, to the same optimum."""
    import slurm_elastic.core.dynprog as dynprog

    def no_table(values: list[np.ndarray], total: int, prior: object = None) -> object:
        raise AssertionError(f"the table was built for {len(values)} jobs x {total} GPUs")

    snap = make_snapshot(make_nodes(8, 4), [make_job(f"{i}", max_gpus=4, submit_time=float(i)) for i in range(40)])
    expected = DynamicProgramPlanner().plan(snap, None, np.random.default_rng(0)).plan
    monkeypatch.setattr(dynprog, "fill_table", no_table)
    plan = DynamicProgramPlanner().plan(snap, None, np.random.default_rng(0)).plan
    assert plan.score == pytest.approx(expected.score) and sum(j.num_gpus for j in plan.jobs) == 32


def _bumpy(rng: np.random.Generator, kmax: int) -> np.ndarray:
    v = np.full(kmax + 1, NEG)
    lo = int(rng.integers(1, 3))
    v[lo : kmax + 1] = np.cumsum(rng.uniform(0.0, 1.0, kmax + 1 - lo))
    v[rng.integers(lo, kmax + 1, 2)] = NEG  # gaps: no greedy path
    return v


@pytest.mark.parametrize("seed", range(20))
def test_a_table_extended_from_the_last_one_is_the_table_made_afresh(seed: int) -> None:
    rng = np.random.default_rng(seed)
    before = [_bumpy(rng, 6) for _ in range(10)]
    keep = int(rng.integers(0, 11))
    after = [v.copy() for v in before[:keep]] + [_bumpy(rng, 6) for _ in range(int(rng.integers(0, 8)))]
    total = int(rng.integers(4, 40))
    prior = fill_table(before, total)
    fresh, extended = fill_table(after, total), fill_table(after, total, prior)
    if fresh is None:
        assert extended is None
        return
    assert extended is not None
    np.testing.assert_array_equal(extended.rows, fresh.rows)
    assert extended.bounds == fresh.bounds and read_table(extended) == read_table(fresh)
    other_k = fill_table(after, total + 1, prior)  # another K shares no row
    assert other_k is not None and read_table(other_k) == solve_table(after, total + 1)


def test_the_planner_keeps_its_table_and_plans_the_same_from_it() -> None:
    jobs = [make_job(f"{i}", max_gpus=8, submit_time=float(i)) for i in range(12)]
    snap = make_snapshot(make_nodes(8, 4), jobs)
    planner = DynamicProgramPlanner(batch="fixed")
    first = planner.plan(snap, None, np.random.default_rng(0))
    assert isinstance(first.memo, DpMemo) and first.memo.table is not None
    again = planner.plan(snap, first.memo, np.random.default_rng(0))
    cold = planner.plan(snap, None, np.random.default_rng(0))
    assert again.plan == cold.plan


def test_a_table_too_large_is_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    import slurm_elastic.core.dynprog as dynprog

    jobs = [make_job(f"{i}", max_gpus=8, submit_time=float(i)) for i in range(12)]
    snap = make_snapshot(make_nodes(8, 4), jobs)
    kept = DynamicProgramPlanner(batch="fixed").plan(snap, None, np.random.default_rng(0))
    assert isinstance(kept.memo, DpMemo) and kept.memo.table is not None
    monkeypatch.setattr(dynprog, "MEMO_TABLE_BYTES", kept.memo.table.rows.nbytes - 1)
    dropped = DynamicProgramPlanner(batch="fixed").plan(snap, None, np.random.default_rng(0))
    assert isinstance(dropped.memo, DpMemo) and dropped.memo.table is None and dropped.plan == kept.plan
