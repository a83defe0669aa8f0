"""Unit tests of the finish-time fairness guard of ``ones`` and ``dp`` (core/fairness.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from slurm_elastic import config, policies
from slurm_elastic.core.constraints import validate_plan
from slurm_elastic.core.fairness import FtfGuardedPlanner, FtfMemo, ftf_estimates
from slurm_elastic.errors import ConfigError
from slurm_elastic.testing import make_job, make_nodes, make_snapshot
from slurm_elastic_predictor.throughput import ThroughputModel

LINEAR = ThroughputModel("linear", (1.0, 256.0), (0.001, 0.256), 256, (0.0, 0.0), (0.0, 0.0, 0.0), 4)
PROFILES = {"linear": LINEAR}


def test_rho_by_hand() -> None:
    # 1 GPU at batch 32 runs 1000 samples/s; 10 epochs of 10,000 samples = 100 s alone.
    nodes = make_nodes(1, 4)
    waiting = make_job("w", "linear", target_epochs=10.0, submit_time=0.0)
    snap = make_snapshot(nodes, [waiting], now=50.0, profiles=PROFILES)
    rho = ftf_estimates(snap)
    # remaining = Yp * beta / max(alpha - 1, 1) with Yp = 1 epoch, beta = 10: 100,000 samples
    # T_fair = T_id = 100 s (1 job on 4 GPUs); T_sh = 50 s waited + 100 s
    assert rho["w"] == pytest.approx(1.5)
    crowd = [make_job(f"c{i}", "linear", target_epochs=10.0, submit_time=0.0) for i in range(7)]
    rho8 = ftf_estimates(make_snapshot(nodes, [waiting, *crowd], now=50.0, profiles=PROFILES))
    assert rho8["w"] == pytest.approx(150.0 / 200.0)  # 8 jobs on 4 GPUs: fair time doubles


def _fifo_case() -> Any:
    nodes = make_nodes(1, 4)
    hog = make_job("hog", "linear", requested_gpus=4, max_gpus=4, submit_time=100.0, target_epochs=50.0,
                   placement=[("n000", g) for g in range(4)])
    old = make_job("old", "linear", requested_gpus=2, max_gpus=4, submit_time=0.0, target_epochs=10.0)
    return make_snapshot(nodes, [hog, old], now=400.0, profiles=PROFILES)


def test_guard_reserves_gpus_for_a_job_behind_its_fair_share() -> None:
    snap = _fifo_case()
    fifo = policies.create("fifo")
    plain = fifo.plan(snap, None, np.random.default_rng(0)).plan
    assert {p.job_id for p in plain.jobs} == {"hog"}  # fifo never preempts: "old" waits
    guarded = FtfGuardedPlanner(fifo, 1.5)
    res = guarded.plan(snap, None, np.random.default_rng(0))
    validate_plan(snap, res.plan)
    counts = {p.job_id: p.num_gpus for p in res.plan.jobs}
    assert counts["old"] == 2 and counts.get("hog", 0) <= 2
    assert isinstance(res.memo, FtfMemo) and res.memo.reserved == frozenset({"old"})
    assert any("ftf guard" in n for n in res.plan.notes)
    # A bound the job does not exceed changes nothing.
    loose = FtfGuardedPlanner(fifo, 100.0).plan(snap, None, np.random.default_rng(0)).plan
    assert {p.job_id for p in loose.jobs} == {"hog"}


def test_reservation_is_sticky_until_the_job_finishes() -> None:
    snap = _fifo_case()
    guarded = FtfGuardedPlanner(policies.create("fifo"), 1.5)
    memo = guarded.plan(snap, None, np.random.default_rng(0)).memo
    # Many arrivals make its fair time long (rho below the bound), yet it stays reserved.
    crowd = [make_job(f"c{i}", "linear", submit_time=399.0, target_epochs=1.0) for i in range(30)]
    nodes = make_nodes(1, 4)
    busy = make_snapshot(nodes, [*snap.jobs, *crowd], now=401.0, profiles=PROFILES)
    assert ftf_estimates(busy)["old"] < 1.5
    res = guarded.plan(busy, memo, np.random.default_rng(0))
    assert "old" in res.memo.reserved and "old" in {p.job_id for p in res.plan.jobs}


@pytest.mark.parametrize("policy", ["ones", "dp", "dp-fixed"])
def test_optimizers_take_the_bound_and_stay_valid(policy: str) -> None:
    snap = _fifo_case()
    p = policies.create(policy, ftf_bound=1.5)
    res = p.plan(snap, None, np.random.default_rng(0))
    validate_plan(snap, res.plan)
    assert isinstance(res.memo, FtfMemo) and "old" in res.memo.reserved
    assert {pl.job_id: pl.num_gpus for pl in res.plan.jobs}["old"] >= 2


def test_off_by_default() -> None:
    snap = _fifo_case()
    a = policies.create("dp").plan(snap, None, np.random.default_rng(0))
    b = policies.create("dp", ftf_bound=0).plan(snap, None, np.random.default_rng(0))
    assert a.plan == b.plan and not isinstance(a.memo, FtfMemo)


@pytest.mark.parametrize("bound", [1.0, 0.5, -1, float("inf"), True])
def test_bad_bounds_are_refused(bound: Any) -> None:
    with pytest.raises(ConfigError, match="ftf_bound"):
        policies.create("ones", ftf_bound=bound)
    with pytest.raises(ConfigError, match="ftf_bound"):
        policies.create("dp", ftf_bound=bound)


def test_configurable_from_toml() -> None:
    cfg = config.parse('[daemon]\npolicy = "ones"\n[policy.ones]\nftf_bound = 1.5\n')
    assert cfg.policy_params == {"ftf_bound": 1.5}
    assert policies.create("ones", **cfg.policy_params).ftf_bound == 1.5  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="ftf_bound"):
        config.parse('[daemon]\npolicy = "dp"\n[policy.dp]\nftf_bound = 0.9\n')
