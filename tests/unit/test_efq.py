"""Unit tests of ``efq`` (Ares elastic fair queuing): virtual clock, order, doubling, pool."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from slurm_elastic import policies
from slurm_elastic.core.constraints import validate_plan
from slurm_elastic.core.efq import EfqMemo, EfqPlanner, advance_gps
from slurm_elastic.core.model import ClusterSnapshot, JobState, Plan
from slurm_elastic.errors import ConfigError
from slurm_elastic.testing import make_job, make_nodes, make_snapshot
from slurm_elastic_predictor.throughput import ThroughputModel

# "linear" scales perfectly at a fixed batch; "flat" pays a second per step for any all-reduce.
LINEAR = ThroughputModel("linear", (1.0, 256.0), (0.001, 0.256), 256, (0.0, 0.0), (0.0, 0.0, 0.0), 4)
FLAT = ThroughputModel("flat", (1.0, 256.0), (0.001, 0.256), 256, (1.0, 1.0), (1.0, 1.0, 1.0), 4)
PROFILES = {"linear": LINEAR, "flat": FLAT}
EPOCH = 10_000  # make_job's epoch size for unknown models; 1 GPU at batch 32 runs 1000 samples/s


def _plan(snap: ClusterSnapshot, memo: Any = None, **kw: Any) -> tuple[Plan, EfqMemo]:
    res = EfqPlanner(**kw).plan(snap, memo, np.random.default_rng(0))
    validate_plan(snap, res.plan)
    assert isinstance(res.memo, EfqMemo)
    return res.plan, res.memo


def _counts(plan: Plan) -> dict[str, int]:
    return {p.job_id: p.num_gpus for p in plan.jobs}


def test_virtual_clock_slope_is_m_over_n() -> None:
    # N=2 on M=2: slope 1 until V=10 (10 s), then N=1: slope 2 for the last 5 s.
    assert advance_gps(0.0, [10.0, 30.0], 2, 15.0) == pytest.approx(20.0)
    assert advance_gps(0.0, [10.0, 30.0], 2, 5.0) == pytest.approx(5.0)
    assert advance_gps(7.0, [], 4, 100.0) == 7.0  # empty GPS: the clock is frozen
    assert advance_gps(7.0, [5.0], 4, 100.0) == 7.0  # a job already done in GPS does not count
    assert advance_gps(0.0, [10.0], 0, 100.0) == 0.0


def test_virtual_finish_is_fixed_at_arrival() -> None:
    nodes = make_nodes(1, 4)
    a = make_job("a", "linear", target_epochs=10.0, submit_time=0.0)  # L = 1 GPU x 100 s
    snap = make_snapshot(nodes, [a], now=0.0, profiles=PROFILES)
    _, memo = _plan(snap)
    assert memo.finish["a"] == pytest.approx(100.0)
    b = make_job("b", "linear", target_epochs=2.0, submit_time=10.0)  # L = 20 GPU-s
    later = make_snapshot(nodes, [a, b], now=12.0, profiles=PROFILES)
    _, memo2 = _plan(later, memo)
    # V(10) = 10 s x 4 GPUs / 1 job = 40: F_b = 40 + 20; F_a unchanged
    assert memo2.finish["b"] == pytest.approx(60.0)
    assert memo2.finish["a"] == pytest.approx(100.0)
    # V(12) = 40 + 2 s x 4 / 2 jobs
    assert memo2.vtime == pytest.approx(44.0)


def test_earliest_virtual_finish_is_served_first_and_preempts() -> None:
    nodes = make_nodes(1, 4)
    long = make_job("long", "flat", requested_gpus=4, max_gpus=4, target_epochs=50.0,
                    placement=[("n000", g) for g in range(4)])
    short = make_job("short", "flat", requested_gpus=4, max_gpus=4, target_epochs=1.0, submit_time=5.0)
    snap = make_snapshot(nodes, [long, short], now=5.0, profiles=PROFILES)
    plan, memo = _plan(snap)
    assert _counts(plan) == {"short": 4}
    assert memo.finish["short"] < memo.finish["long"]
    assert "preempted by efq" in {u.job_id: u.reason for u in plan.unplaced}["long"]


def test_prioritised_job_doubles_while_efficiency_stays_above_alpha() -> None:
    nodes = make_nodes(2, 4)
    lin = make_job("lin", "linear", max_gpus=8, target_epochs=5.0)
    plan, _ = _plan(make_snapshot(nodes, [lin], profiles=PROFILES))
    assert _counts(plan) == {"lin": 8}  # 1 -> 2 -> 4 -> 8, efficiency 1
    flat = make_job("flat", "flat", max_gpus=8, target_epochs=5.0)
    plan, _ = _plan(make_snapshot(nodes, [flat], profiles=PROFILES))
    assert _counts(plan) == {"flat": 1}  # doubling to 2 costs far more than 25% per GPU
    plan, _ = _plan(make_snapshot(nodes, [lin], profiles=PROFILES), alpha=1.0)
    assert _counts(plan) == {"lin": 8}


def test_leftover_gpus_go_to_the_next_jobs_in_order() -> None:
    nodes = make_nodes(2, 4)
    a = make_job("a", "linear", max_gpus=4, target_epochs=1.0)
    b = make_job("b", "linear", max_gpus=8, target_epochs=5.0)
    plan, _ = _plan(make_snapshot(nodes, [a, b], profiles=PROFILES))
    assert _counts(plan) == {"a": 4, "b": 4}


def test_endo_elastic_keeps_the_global_batch() -> None:
    nodes = make_nodes(2, 4)
    job = make_job("a", "linear", requested_gpus=2, max_gpus=8, target_epochs=5.0)
    plan, _ = _plan(make_snapshot(nodes, [job], profiles=PROFILES))
    (jp,) = plan.jobs
    assert jp.num_gpus == 8 and jp.global_batch == job.base_batch
    assert jp.lr == job.base_lr


def test_unknown_work_goes_to_the_fair_share_pool() -> None:
    nodes = make_nodes(2, 4)
    known = make_job("k", "linear", max_gpus=8, target_epochs=5.0)
    unknown = make_job("u", "linear", max_gpus=8)
    plan, memo = _plan(make_snapshot(nodes, [known, unknown], profiles=PROFILES))
    assert memo.pool == frozenset({"u"})
    assert "u" not in memo.finish and "u" in memo.arrival_v
    assert _counts(plan) == {"u": 4, "k": 4}  # the pool holds 8 * 1 / 2 GPUs
    # With a prior, the same job is queued instead.
    _, memo2 = _plan(make_snapshot(nodes, [known, unknown], profiles=PROFILES), default_epochs_to_go=3.0)
    assert memo2.pool == frozenset() and "u" in memo2.finish


def test_pool_job_joins_the_queue_with_its_arrival_virtual_time() -> None:
    nodes = make_nodes(1, 4)
    unknown = make_job("u", "linear", max_gpus=4)
    snap = make_snapshot(nodes, [unknown], profiles=PROFILES)
    _, memo = _plan(snap)
    declared = replace(unknown, target_epochs=2.0)
    _, memo2 = _plan(make_snapshot(nodes, [declared], now=30.0, profiles=PROFILES), memo)
    assert memo2.finish["u"] == pytest.approx(memo.arrival_v["u"] + 20.0)


def test_gps_keeps_jobs_that_finished_early() -> None:
    nodes = make_nodes(1, 4)
    a = make_job("a", "linear", max_gpus=4, target_epochs=10.0)
    b = make_job("b", "linear", max_gpus=4, target_epochs=10.0)
    _, memo = _plan(make_snapshot(nodes, [a, b], profiles=PROFILES))
    # "a" left the cluster at t=30 (it ran on 4 GPUs); in GPS both still share: V(30) = 30 * 4 / 2
    _, memo2 = _plan(make_snapshot(nodes, [b], now=30.0, profiles=PROFILES), memo)
    assert "a" in memo2.finish and memo2.vtime == pytest.approx(60.0)


def test_deterministic_and_rng_free() -> None:
    nodes = make_nodes(2, 4)
    jobs = [make_job(i, "linear" if i % 2 else "flat", max_gpus=8, target_epochs=float(i), submit_time=float(i))
            for i in range(1, 6)]
    snap = make_snapshot(nodes, jobs, now=10.0, profiles=PROFILES)
    p = policies.create("efq")
    a = p.plan(snap, None, np.random.default_rng(0))
    b = p.plan(snap, None, np.random.default_rng(99))
    assert a.plan == b.plan and a.memo.finish == b.memo.finish


def test_rigid_and_running_jobs_keep_plans_valid() -> None:
    nodes = make_nodes(2, 4)
    rigid = make_job("r", "linear", elastic=False, requested_gpus=2, min_gpus=2, max_gpus=2,
                     placement=[("n000", 0), ("n000", 1)])
    run = make_job("x", "linear", max_gpus=8, target_epochs=3.0, placement=[("n001", 0)])
    plan, _ = _plan(make_snapshot(nodes, [rigid, run], profiles=PROFILES))
    assert _counts(plan) == {"x": 4}  # 6 schedulable GPUs: doubling stops at 4
    assert all(p.job_id != "r" for p in plan.jobs)


@pytest.mark.parametrize("kw", [{"alpha": 0.0}, {"alpha": 1.5}, {"alpha": True},
                                {"default_epochs_to_go": -1.0}, {"default_epochs_to_go": float("nan")}])
def test_bad_parameters_are_refused(kw: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="efq"):
        policies.create("efq", **kw)


def test_registered_and_unknown_parameter_refused() -> None:
    assert "efq" in policies.available()
    with pytest.raises(ConfigError, match="known parameters"):
        policies.create("efq", beta=1)
    assert isinstance(policies.create("efq", alpha=0.8), EfqPlanner)


def test_job_that_does_not_fit_its_request_starts_smaller() -> None:
    nodes = make_nodes(1, 4)
    big = make_job("big", "linear", requested_gpus=8, min_gpus=1, max_gpus=8, target_epochs=1.0)
    plan, _ = _plan(make_snapshot(nodes, [big], profiles=PROFILES))
    assert _counts(plan) == {"big": 4}
    never = make_job("never", "linear", requested_gpus=8, min_gpus=8, max_gpus=8, target_epochs=1.0)
    plan, _ = _plan(make_snapshot(nodes, [never], profiles=PROFILES))
    assert not plan.jobs and "cannot run" in plan.unplaced[0].reason
    assert plan.unplaced[0].job_id == "never" and never.state is JobState.PENDING
