"""No report of one job can cost another job: a property of every registered policy (issue 37, item 1).

A job's signed report is its owner's word. Drawn here: one running launcher job J whose reports
claim any throughput, per-GPU batch, progress and epoch size (in the report bounds or far out of
them), among other jobs of other users (running with or without the launcher, or waiting). Each
policy, as the daemon builds it (:func:`slurm_elastic.policies.build` with the shipped guards),
plans the cluster twice: with J as its reports make it, and with J as it is without them. Compared:

* no other job is preempted, requeued (a resize or a move of a job without the launcher) or left
  waiting because of J's reports: each such action on another job is in the plan without them too;
* no other job is given fewer GPUs than the plan without J's reports gives it, except what it holds
  beyond its fair share, and J gains at most its fair share from its own claims.

Before the trust guard, a cifar10 job that claimed 16,384 samples a step on 4 workers got other
users' jobs requeued under dp, dp-fixed and min-jct, and optimus left a waiting job unstarted.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_elastic import policies
from slurm_elastic.core.actions import ActionKind, diff
from slurm_elastic.core.model import ClusterSnapshot, Job, JobId, JobState, Plan
from slurm_elastic.core.trust import fair_shares
from slurm_elastic.testing import make_job, make_nodes, make_snapshot

NODES = make_nodes(3, 4)
REQUEUED = (ActionKind.GROW, ActionKind.SHRINK, ActionKind.MOVE)


@st.composite
def _cluster(draw: st.DrawFn) -> tuple[Job, Job, list[Job]]:
    """J as its reports make it, J without them, and the other jobs."""
    k = draw(st.integers(1, 4))
    gpus = [("n000", g) for g in range(k)]
    prior = make_job("7", state=JobState.RUNNING, placement=gpus, requested_gpus=k, max_gpus=12, user="mallory",
                     submit_time=5.0, run_time=100.0)
    local = draw(st.sampled_from([1, 16, 128, 1024, 4096, 16384]))
    reported = make_job("7", state=JobState.RUNNING, placement=gpus, requested_gpus=k, max_gpus=12, user="mallory",
                        submit_time=5.0, run_time=100.0, local_batch=local, max_local_batch=local,
                        epochs_done=draw(st.sampled_from([0.0, 0.5, 5.0, 1e4])),
                        target_epochs=draw(st.sampled_from([None, 0.001, 1.0, 100.0])))
    reported = replace(reported, observed_throughput=draw(st.sampled_from([None, 1.0, 1e3, 1e5, 1e9])),
                       epoch_size=draw(st.sampled_from([1, 50_000, 10**9])), prior=prior)
    others: list[Job] = []
    free = [(n.name, g) for n in NODES for g in n.gpus if n.name != "n000" or g >= k]
    for i in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["running", "running-requeue", "waiting"]))
        lo = draw(st.integers(1, 2))
        submit = float(draw(st.integers(0, 10)))
        user = f"user{i}"
        if kind == "waiting" or len(free) < lo:
            others.append(make_job(10 + i, state=JobState.PENDING, min_gpus=lo, requested_gpus=lo, submit_time=submit,
                                   user=user))
            continue
        n = draw(st.integers(lo, min(4, len(free))))
        held, free = free[:n], free[n:]
        job = make_job(10 + i, state=JobState.RUNNING, placement=held, min_gpus=lo, requested_gpus=n,
                       submit_time=submit, user=user, run_time=50.0, epochs_done=1.0)
        others.append(replace(job, can_rebatch=False) if kind == "running-requeue" else job)
    return reported, prior, others


def _harmed(snapshot: ClusterSnapshot, plan: Plan, victim: JobId) -> set[tuple[str, str]]:
    """What the plan does to the jobs other than ``victim``'s reporter: preemptions, requeues and
    jobs left waiting, as (job, what)."""
    out = set()
    for a in diff(snapshot, plan):
        job = snapshot.job(a.job_id)
        if a.job_id == victim:
            continue
        if a.kind is ActionKind.PREEMPT:
            out.add((a.job_id, "preempted"))
        elif a.kind in REQUEUED and not job.can_rebatch:
            out.add((a.job_id, "requeued"))
    started = {p.job_id for p in plan.jobs}
    out |= {(j.job_id, "left waiting") for j in snapshot.elastic_jobs() if j.is_waiting and j.job_id not in started}
    return out


@pytest.mark.parametrize("policy", policies.available())
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(drawn=_cluster())
def test_no_report_of_one_job_costs_another_job(policy: str, drawn: tuple[Job, Job, list[Job]]) -> None:
    reported, prior, others = drawn
    with_reports = make_snapshot(NODES, [reported, *others], now=200.0)
    without = make_snapshot(NODES, [prior, *others], now=200.0)
    planner = policies.build(policy, guards=policies.DEFAULT_GUARDS)
    plan = planner.plan(with_reports, None, np.random.default_rng(1)).plan
    base = planner.plan(without, None, np.random.default_rng(1)).plan
    harmed, harmed_anyway = _harmed(with_reports, plan, reported.job_id), _harmed(without, base, reported.job_id)
    assert harmed <= harmed_anyway, (harmed - harmed_anyway, plan, base)
    counts = {p.job_id: p.num_gpus for p in plan.jobs}
    base_counts = {p.job_id: p.num_gpus for p in base.jobs}
    fair = fair_shares(without)
    for job in others:
        least = min(base_counts.get(job.job_id, 0), fair[job.job_id])
        assert counts.get(job.job_id, 0) >= least, (job.job_id, counts, base_counts, fair)
    most = max(base_counts.get(reported.job_id, 0), fair[reported.job_id])
    assert counts.get(reported.job_id, 0) <= most, (counts, base_counts, fair)
