"""Property tests of the planners: validity, DP optimality, ONES monotonicity, determinism."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_elastic import policies
from slurm_elastic.core.constraints import plan_violations
from slurm_elastic.core.dynprog import DynamicProgramPlanner, scaling_values, solve
from slurm_elastic.core.evolutionary import OnesPlanner
from slurm_elastic.testing import make_job, make_nodes, make_snapshot, snapshot_strategy

NEG = -np.inf
SETTINGS = settings(max_examples=40, deadline=None)


snapshots = snapshot_strategy


@SETTINGS
@given(snapshots(), st.sampled_from(["dp", "ones"]), st.integers(0, 1000))
def test_every_plan_is_valid(snap, policy: str, seed: int) -> None:  # type: ignore[no-untyped-def]
    kwargs = {"generations": 3} if policy == "ones" else {}
    p = policies.create(policy, **kwargs)
    res = p.plan(snap, None, np.random.default_rng(seed))
    assert plan_violations(snap, res.plan) == ()
    res2 = p.plan(snap, res.memo, np.random.default_rng(seed + 1))
    assert plan_violations(snap, res2.plan) == ()
    planned = {jp.job_id for jp in res2.plan.jobs}
    unplaced = {u.job_id for u in res2.plan.unplaced}
    assert planned.isdisjoint(unplaced)
    assert planned | unplaced == {j.job_id for j in snap.elastic_jobs()}


def _brute(values: list[np.ndarray], total: int) -> float:
    best = NEG
    for ks in itertools.product(*[range(1, len(v)) for v in values]):
        if sum(ks) <= total:
            val = sum(v[k] for v, k in zip(values, ks, strict=True))
            best = max(best, val)
    return best


@SETTINGS
@given(st.lists(st.lists(st.one_of(st.just(NEG), st.floats(0.1, 5.0)), min_size=1, max_size=5),
                min_size=1, max_size=4),
       st.integers(1, 10))
def test_dp_equals_brute_force_on_tiny_problems(rows: list[list[float]], total: int) -> None:
    values = [np.array([NEG, *r]) for r in rows]
    best, ks = solve(values, total)
    brute = _brute(values, total)
    if brute == NEG:
        assert best == NEG and ks == []
    else:
        assert np.isclose(best, brute)
        assert sum(ks) <= total
        assert np.isclose(sum(v[k] for v, k in zip(values, ks, strict=True)), best)


@SETTINGS
@given(st.integers(0, 2**32 - 1), st.integers(1, 3), st.integers(1, 8))
def test_dp_admission_by_sum_equals_running_the_dp_per_trial(seed: int, nodes: int, n_jobs: int) -> None:
    rng = np.random.default_rng(seed)
    jobs = []
    for i in range(n_jobs):
        lo = int(rng.integers(1, 4))
        hi = int(rng.integers(lo, 9))
        jobs.append(make_job(i, model=str(rng.choice(["cifar10", "bert", "imagenet"])), min_gpus=lo,
                             max_gpus=hi, requested_gpus=lo, submit_time=i))
    snap = make_snapshot(make_nodes(nodes), jobs)
    total = len(snap.schedulable_gpus())
    plan = DynamicProgramPlanner().plan(snap, None, rng).plan
    # The paper's autoscaler: try each arrival, keep it when the DP stays feasible.
    admitted: list[np.ndarray] = []
    names: list[str] = []
    for job in snap.elastic_jobs():
        v = scaling_values(job, snap, min(job.max_gpus, total))
        v[: job.min_gpus] = NEG
        trial = [*admitted, v]
        if solve(trial, total)[0] > NEG:
            admitted, names = trial, [*names, job.job_id]
    assert sorted(jp.job_id for jp in plan.jobs) == sorted(names)
    if names:
        assert np.isclose(plan.score, solve(admitted, total)[0])


@SETTINGS
@given(snapshots(), st.integers(0, 1000))
def test_ones_never_worse_than_its_warm_start(snap, seed: int) -> None:  # type: ignore[no-untyped-def]
    p = OnesPlanner(generations=3, gate=False)
    memo = None
    for r in range(2):
        res = p.plan(snap, memo, np.random.default_rng(seed + r))
        assert res.memo.best_score <= res.memo.warm_score * (1 + 1e-9) + 1e-9
        memo = res.memo


@SETTINGS
@given(snapshots(), st.integers(0, 1000), st.sampled_from(["dp", "ones"]))
def test_same_inputs_and_seed_give_the_same_plan(snap, seed: int, policy: str) -> None:  # type: ignore[no-untyped-def]
    a = policies.create(policy).plan(snap, None, np.random.default_rng(seed)).plan
    b = policies.create(policy).plan(snap, None, np.random.default_rng(seed)).plan
    assert a == b


@SETTINGS
@given(snapshots(), st.integers(1, 70), st.one_of(st.none(), st.integers(1, 5000)))
def test_scalar_and_vector_sizing_agree(snap, k: int, limit: int | None) -> None:  # type: ignore[no-untyped-def]
    from slurm_elastic.core import sizing

    for job in snap.elastic_jobs()[:5]:
        model = snap.profiles[job.model]
        b, local, accum, valid = sizing.sizes(job, model, np.array([k]), limit)
        s = sizing.size_for(job, k, model, limit)
        if not valid[0]:
            assert s is None
        else:
            assert s is not None and (s.global_batch, s.local_batch, s.accumulation) == (b[0], local[0], accum[0])
