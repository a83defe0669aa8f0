"""Site guards around planners: each limit alone, and validity on random clusters."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_elastic import policies
from slurm_elastic.core.constraints import plan_violations
from slurm_elastic.core.guards import GuardedPlanner, GuardMemo, Guards
from slurm_elastic.core.model import JobId
from slurm_elastic.errors import ConfigError
from slurm_elastic.testing import make_job, make_nodes, make_snapshot, snapshot_strategy


def _plan(snap, guards: Guards, memo=None, policy: str = "dp"):  # type: ignore[no-untyped-def]
    return GuardedPlanner(policies.create(policy), guards).plan(snap, memo, np.random.default_rng(0))


def test_rigid_protection_keeps_gpus_for_a_queued_rigid_job() -> None:
    jobs = [make_job("e", max_gpus=8), make_job("r", elastic=False, min_gpus=4, max_gpus=4, requested_gpus=4)]
    snap = make_snapshot(make_nodes(2), jobs)
    free = _plan(snap, Guards(protect_rigid=False)).plan.by_job()[JobId("e")].num_gpus
    kept = _plan(snap, Guards(protect_rigid=True)).plan.by_job()[JobId("e")].num_gpus
    assert free == 8 and kept == 4


def test_per_job_and_per_user_caps() -> None:
    jobs = [make_job("a", max_gpus=8, user="u"), make_job("b", max_gpus=8, user="u", submit_time=5)]
    snap = make_snapshot(make_nodes(4), jobs)
    res = _plan(snap, Guards(max_gpus_per_job=3, max_gpus_per_user=4, protect_rigid=False)).plan
    got = {p.job_id: p.num_gpus for p in res.jobs}
    assert all(k <= 3 for k in got.values()) and sum(got.values()) <= 4
    assert plan_violations(snap, res) == ()


def test_account_cap_makes_the_newest_job_wait() -> None:
    jobs = [make_job("a", min_gpus=2, max_gpus=2, requested_gpus=2, account="x"),
            make_job("b", min_gpus=2, max_gpus=2, requested_gpus=2, account="x", submit_time=9)]
    res = _plan(make_snapshot(make_nodes(1), jobs), Guards(max_gpus_per_account=2, protect_rigid=False)).plan
    assert [p.job_id for p in res.jobs] == ["a"]
    assert "account x is at its limit of 2 GPUs" in res.unplaced[0].reason


def test_cooldown_and_rate_keep_a_recently_resized_job() -> None:
    run = make_job("a", max_gpus=8, placement=[("n000", 0)], epochs_done=5, epochs_since_change=2)
    snap = make_snapshot(make_nodes(2), [run], now=100.0)
    grown = _plan(snap, Guards(protect_rigid=False)).plan.by_job()[JobId("a")].num_gpus
    assert grown > 1
    held = _plan(snap, Guards(cooldown_s=600, protect_rigid=False)).plan
    assert held.by_job()[JobId("a")].num_gpus == 1 and "cooldown 600 s" in held.notes[-1]
    memo = GuardMemo(changes={JobId("a"): (10.0, 20.0, 30.0)})
    rated = _plan(snap, Guards(max_resizes_per_hour=2, protect_rigid=False), memo).plan
    assert rated.by_job()[JobId("a")].num_gpus == 1 and "limit 2" in rated.notes[-1]


def test_bad_guard_values_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"guards\.cooldown_s = -1: must be a number >= 0"):
        Guards(cooldown_s=-1)


@settings(max_examples=40, deadline=None)
@given(snapshot_strategy(), st.sampled_from(["dp", "ones", "optimus", "tiresias"]), st.integers(0, 8),
       st.integers(0, 12), st.booleans(), st.floats(0, 1000))
def test_guarded_plans_are_valid(snap, policy: str, per_job: int, per_user: int, rigid: bool,  # type: ignore[no-untyped-def]
                                 cooldown: float) -> None:
    guards = Guards(cooldown_s=cooldown, max_gpus_per_job=per_job, max_gpus_per_user=per_user, protect_rigid=rigid)
    res = _plan(snap, guards, policy=policy)
    assert plan_violations(snap, res.plan) == ()
    if per_user:
        users: dict[str, int] = {}
        for p in res.plan.jobs:
            job = snap.job(p.job_id)
            if job.num_gpus != p.num_gpus or not cooldown:  # jobs frozen by the cooldown keep their size
                users[job.user] = users.get(job.user, 0) + p.num_gpus
        assert all(v <= per_user for v in users.values()) or cooldown


def test_a_job_released_in_whole_blocks_is_never_planned_in_between() -> None:
    from dataclasses import replace

    from slurm_elastic.core.model import JobState, NodeName

    a = make_job("a", state=JobState.RUNNING, max_gpus=4,
                 placement=[("n000", 0), ("n000", 1), ("n001", 0), ("n001", 1)])
    b = make_job("b", state=JobState.RUNNING, max_gpus=4, placement=[("n002", 0), ("n002", 1)], submit_time=1)
    c = make_job("c", max_gpus=2, submit_time=2)
    free_any = make_snapshot(make_nodes(3, 2), [a, b, c], now=100.0)
    assert _plan(free_any, Guards(protect_rigid=False)).plan.by_job()[JobId("a")].num_gpus == 3  # dp's choice
    blocks = make_snapshot(make_nodes(3, 2), [replace(a, release_blocks=((NodeName("n001"), 2),)), b, c], now=100.0)
    assert blocks.job(JobId("a")).unreachable_sizes == (1, 3)
    res = _plan(blocks, Guards(protect_rigid=False)).plan
    got = {p.job_id: p.num_gpus for p in res.jobs}
    # issue 16: dp plans in the sizes Slurm can free. 3 is not reachable, so it shrinks a to 2 and c
    # starts (it planned 3, the guards rounded a back up to 4, and c waited for the whole run)
    assert got[JobId("a")] == 2 and got.get(JobId("c"), 0) >= 1 and sum(got.values()) == 6, got
    assert not any("released only in whole blocks" in n for n in res.notes), res.notes  # nothing to round
    assert plan_violations(blocks, res) == ()
    # the other planners may still plan a size in between: the guards round it up to one the job reaches
    for policy in ("ones", "optimus", "tiresias", "efq"):
        other = _plan(blocks, Guards(protect_rigid=False), policy=policy).plan.by_job()
        assert other[JobId("a")].num_gpus not in (1, 3), (policy, other[JobId("a")])
    stuck = make_snapshot(make_nodes(3, 2), [replace(a, release_blocks=()), b, c], now=100.0)
    assert _plan(stuck, Guards(protect_rigid=False)).plan.by_job()[JobId("a")].num_gpus == 4  # cannot shrink


def test_a_job_is_not_preempted_again_before_its_minimum_run_nor_too_often() -> None:
    """Issue 14, finding 2: jobs requeued 12-14 times each under ``efq``. It preempts the
    later-submitted running job for an earlier waiting one; the guards keep it running until it
    has run ``min_run_s``, and once it has been preempted ``max_preemptions`` times."""
    from dataclasses import replace

    from slurm_elastic.core.model import JobState

    run = make_job("a", state=JobState.RUNNING, min_gpus=2, max_gpus=2, requested_gpus=2, submit_time=10.0,
                   placement=[("n000", 0), ("n000", 1)], epochs_done=1, run_time=900)
    early = make_job("b", min_gpus=2, max_gpus=2, requested_gpus=2, submit_time=0.0)

    def plan(job, guards: Guards):  # type: ignore[no-untyped-def]
        snap = make_snapshot(make_nodes(1, 2), [job, early], now=1000.0)
        res = _plan(snap, guards, policy="efq").plan
        assert plan_violations(snap, res) == ()
        return {p.job_id for p in res.jobs}, res.notes

    fresh = replace(run, start_time=900.0, last_change_time=900.0)
    assert plan(fresh, Guards(protect_rigid=False))[0] == {"b"}  # preempted without the guard
    kept, notes = plan(fresh, Guards(protect_rigid=False, min_run_s=300))
    assert kept == {"a"} and "its run started 100 s ago, preempted only after 300 s" in notes[-1]
    assert plan(replace(run, start_time=600.0, last_change_time=600.0),
                Guards(protect_rigid=False, min_run_s=300))[0] == {"b"}
    often = replace(run, last_change_time=0.0, preemptions=3)
    kept, notes = plan(often, Guards(protect_rigid=False, max_preemptions=3))
    assert kept == {"a"} and "preempted 3 times, limit 3" in notes[-1]
    assert plan(replace(often, preemptions=2), Guards(protect_rigid=False, max_preemptions=3))[0] == {"b"}


def test_min_run_counts_from_the_start_of_the_run_not_from_a_resize_in_place() -> None:
    """Issue 38, item 4: ``min_run_s`` counted from the last change, so a launcher job that started
    2 h ago and was resized in place 1 min ago was kept from preemption as if it had just started.
    It counts from the start of the job's current run (a requeue restarts it; a resize in place
    does not): that job may be preempted, one whose run started 1 min ago may not."""
    from dataclasses import replace

    from slurm_elastic.core.model import JobState

    now = 7200.0
    run = make_job("a", state=JobState.RUNNING, min_gpus=2, max_gpus=2, requested_gpus=2, submit_time=10.0,
                   placement=[("n000", 0), ("n000", 1)], epochs_done=1, run_time=7200)
    early = make_job("b", min_gpus=2, max_gpus=2, requested_gpus=2, submit_time=0.0)
    guards = Guards(protect_rigid=False, min_run_s=600)

    def kept(job) -> set[str]:  # type: ignore[no-untyped-def]
        snap = make_snapshot(make_nodes(1, 2), [job, early], now=now)
        res = _plan(snap, guards, policy="efq").plan
        assert plan_violations(snap, res) == ()
        return {p.job_id for p in res.jobs}

    resized = replace(run, start_time=0.0, last_change_time=now - 60)  # started 2 h ago, resized 1 min ago
    assert kept(resized) == {"b"}
    restarted = replace(run, start_time=now - 60, last_change_time=now - 60, preemptions=1)  # requeued, restarted
    assert kept(restarted) == {"a"}
    # without the launcher, a resize is a requeue: its run started at its last change
    requeued = replace(resized, can_rebatch=False)
    assert kept(requeued) == {"a"}


@pytest.mark.parametrize("policy", ["efq", "dp"])  # min-jct already charges a requeue its restart
def test_a_job_without_the_launcher_is_not_requeued_to_resize_before_its_minimum_run(policy: str) -> None:
    """``bench load`` (CI flake): 5 s sleep jobs were grown 1 -> 2 -> 3 -> 4 GPUs by requeue within
    seconds, each requeue a restart. Without the launcher a resize is a requeue: the churn guards
    apply, the job keeps its size, and the GPUs it would have had go to the waiting job."""
    from dataclasses import replace

    from slurm_elastic.core.model import JobState

    sleeper = make_job("a", state=JobState.RUNNING, min_gpus=1, max_gpus=4, requested_gpus=1, submit_time=0.0,
                       placement=[("n000", 0)], run_time=10)
    sleeper = replace(sleeper, can_rebatch=False)
    waiting = make_job("b", min_gpus=1, max_gpus=4, requested_gpus=1, submit_time=5.0)

    def sizes(job, guards: Guards) -> dict[str, int]:  # type: ignore[no-untyped-def]
        snap = make_snapshot(make_nodes(1, 4), [job, waiting], now=1000.0)
        res = _plan(snap, guards, policy=policy).plan
        assert plan_violations(snap, res) == ()
        return {p.job_id: p.num_gpus for p in res.jobs}

    fresh = replace(sleeper, last_change_time=990.0)
    unguarded = sizes(fresh, Guards(protect_rigid=False))
    assert unguarded.get(JobId("a")) != 1, unguarded  # the policy would resize it
    guarded = sizes(fresh, Guards(protect_rigid=False, min_run_s=120))
    assert guarded == {"a": 1, "b": 3}, guarded
    often = replace(sleeper, last_change_time=0.0, preemptions=3)
    assert sizes(often, Guards(protect_rigid=False, max_preemptions=3)) == {"a": 1, "b": 3}
    assert sizes(replace(fresh, can_rebatch=True), Guards(protect_rigid=False, min_run_s=120)).get(
        JobId("a")) != 1  # a launcher job resizes in place: no requeue, no guard
