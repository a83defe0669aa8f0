"""Property tests of the baseline policies: valid plans, complete reasons, fixed sizes, determinism."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_elastic import policies
from slurm_elastic.core.constraints import plan_violations
from slurm_elastic.core.model import ClusterSnapshot, JobState, Plan
from slurm_elastic.testing import snapshot_strategy

SETTINGS = settings(max_examples=30, deadline=None)
POLICIES: list[tuple[str, dict[str, Any]]] = [
    ("fifo", {}),
    ("fifo", {"backfill": True}),
    ("tiresias", {}),
    ("tiresias", {"thresholds": (100.0, 1000.0, 5000.0), "promote_after": 30.0}),
    ("optimus", {}),
    ("optimus", {"interval": 0.0}),
    ("optimus", {"start_between_rounds": True}),
]


snapshots = snapshot_strategy


def _check(snap: ClusterSnapshot, plan: Plan) -> None:
    assert plan_violations(snap, plan) == ()
    planned = {jp.job_id for jp in plan.jobs}
    unplaced = [u.job_id for u in plan.unplaced]
    assert len(unplaced) == len(set(unplaced))
    assert planned.isdisjoint(unplaced)
    assert planned | set(unplaced) == {j.job_id for j in snap.elastic_jobs()}
    assert all(u.reason for u in plan.unplaced)


@SETTINGS
@given(snapshots(), st.sampled_from(POLICIES), st.integers(0, 1000))
def test_every_plan_is_valid_first_and_with_the_memo(snap: ClusterSnapshot, policy: tuple[str, dict[str, Any]],
                                                      seed: int) -> None:
    name, params = policy
    p = policies.create(name, **params)
    res = p.plan(snap, None, np.random.default_rng(seed))
    _check(snap, res.plan)
    res = p.plan(snap, res.memo, np.random.default_rng(seed + 1))
    _check(snap, res.plan)
    later = replace(snap, now=snap.now + 1000.0)  # past Optimus's round, long enough to promote
    res = p.plan(later, res.memo, np.random.default_rng(seed + 2))
    _check(later, res.plan)


@SETTINGS
@given(snapshots(), st.sampled_from(POLICIES), st.integers(0, 1000))
def test_same_inputs_and_seed_give_the_same_plan(snap: ClusterSnapshot, policy: tuple[str, dict[str, Any]],
                                                 seed: int) -> None:
    name, params = policy
    a = policies.create(name, **params).plan(snap, None, np.random.default_rng(seed))
    b = policies.create(name, **params).plan(snap, None, np.random.default_rng(seed))
    assert a.plan == b.plan
    assert policies.create(name, **params).plan(snap, a.memo, np.random.default_rng(seed)).plan == \
        policies.create(name, **params).plan(snap, b.memo, np.random.default_rng(seed)).plan


def _fixed(lo: int, hi: int, k: int) -> int:
    return min(hi, max(lo, k))


@SETTINGS
@given(snapshots(), st.booleans())
def test_fifo_never_resizes_and_never_preempts_a_healthy_running_job(snap: ClusterSnapshot, backfill: bool) -> None:
    plan = policies.create("fifo", backfill=backfill).plan(snap, None, np.random.default_rng(0)).plan
    got = {jp.job_id: jp.num_gpus for jp in plan.jobs}
    sched = set(snap.schedulable_gpus())
    for job in snap.elastic_jobs():
        if job.job_id not in got:
            assert job.state is not JobState.RUNNING or not job.placement.gpu_set() <= sched
        elif job.state is JobState.RUNNING:
            assert got[job.job_id] == _fixed(job.min_gpus, job.max_gpus, job.num_gpus)
        else:
            assert got[job.job_id] == _fixed(job.min_gpus, job.max_gpus, job.requested_gpus)


@SETTINGS
@given(snapshots())
def test_tiresias_runs_every_job_at_its_requested_size(snap: ClusterSnapshot) -> None:
    plan = policies.create("tiresias").plan(snap, None, np.random.default_rng(0)).plan
    for jp in plan.jobs:
        job = snap.job(jp.job_id)
        assert jp.num_gpus == _fixed(job.min_gpus, job.max_gpus, job.requested_gpus)
        assert jp.global_batch == job.base_batch or job.requested_gpus != jp.num_gpus


@SETTINGS
@given(snapshots())
def test_optimus_keeps_every_batch_fixed(snap: ClusterSnapshot) -> None:
    plan = policies.create("optimus", interval=0.0).plan(snap, None, np.random.default_rng(0)).plan
    assert sum(jp.num_gpus for jp in plan.jobs) <= len(snap.schedulable_gpus())
    for jp in plan.jobs:
        assert jp.global_batch == snap.job(jp.job_id).base_batch
