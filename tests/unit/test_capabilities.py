"""What a job can do is in the snapshot, and every planner respects it (issue 14, findings 5 and 6).

A job without the launcher cannot change its batch while it runs; a launcher job without its join
script cannot grow; a launcher job's GPUs are freed only in whole blocks (a node of its own
allocation other than the batch host, a whole satellite), and the plan frees exactly those blocks,
so the GPUs it gives a waiting job are the ones Slurm frees.
"""

from __future__ import annotations

import getpass
from dataclasses import replace

import numpy as np
import pytest

from slurm_elastic import policies
from slurm_elastic.channel import COMMENT_KEY
from slurm_elastic.core.actions import ActionKind, diff
from slurm_elastic.core.constraints import plan_violations
from slurm_elastic.core.model import ClusterSnapshot, JobId, JobState, NodeName, NodeState
from slurm_elastic.core.planner import build_plan
from slurm_elastic.observe.snapshot import build_snapshot, fold
from slurm_elastic.slurm.records import GpuRequest, JobRecord, NodeRecord
from slurm_elastic.slurm.satellites import leaving
from slurm_elastic.testing import make_job, make_nodes, make_snapshot, shipped_profiles

POLICIES = policies.available()


def _kinds(snap: ClusterSnapshot, policy: str, job: str) -> set[ActionKind]:
    planner = policies.build(policy, guards=policies.DEFAULT_GUARDS)
    plan = planner.plan(snap, None, np.random.default_rng(0)).plan
    assert plan_violations(snap, plan) == ()
    return {a.kind for a in diff(snap, plan) if a.job_id == job}


def _running(**kw):  # type: ignore[no-untyped-def]
    # A running job whose per-GPU batch (7) is not what any planner would choose at 2 GPUs.
    job = make_job("r", state=JobState.RUNNING, placement=[("n000", 0), ("n000", 1)], local_batch=7,
                   max_gpus=8, epochs_done=3, epochs_since_change=3, run_time=600.0)
    return replace(job, **kw)


def test_planners_do_ask_to_rebatch_a_job_that_can() -> None:
    snap = make_snapshot(make_nodes(1, 2), [_running()], now=1000.0)
    assert any(ActionKind.REBATCH in _kinds(snap, p, "r") for p in POLICIES)  # what the next test forbids


@pytest.mark.parametrize("policy", POLICIES)
def test_no_planner_asks_to_rebatch_a_job_without_the_launcher(policy: str) -> None:
    snap = make_snapshot(make_nodes(1, 2), [_running(can_rebatch=False)], now=1000.0)
    assert ActionKind.REBATCH not in _kinds(snap, policy, "r")


def test_planners_do_grow_a_job_that_can() -> None:
    snap = make_snapshot(make_nodes(2, 2), [_running()], now=1000.0)
    assert any(ActionKind.GROW in _kinds(snap, p, "r") for p in POLICIES)


@pytest.mark.parametrize("policy", POLICIES)
def test_no_planner_grows_a_job_that_cannot(policy: str) -> None:
    waiting = make_job("w", max_gpus=1, submit_time=5.0)
    snap = make_snapshot(make_nodes(2, 2), [_running(can_grow=False), waiting], now=1000.0)
    assert ActionKind.GROW not in _kinds(snap, policy, "r")
    plan = build_plan(snap, "x", {JobId("r"): 4})
    assert plan.by_job()[JobId("r")].num_gpus == 2 and "it cannot grow" in plan.notes[-1]


USER = getpass.getuser()


def _rec(job_id: str, gpus: dict[str, int], *, batch_host: str | None = None, comment: str = "",
         admin: str = "slurm-elastic gpus=1:8", state: JobState = JobState.RUNNING) -> JobRecord:
    slots = tuple((NodeName(n), tuple(range(c))) for n, c in gpus.items())
    return JobRecord(JobId(job_id), int(job_id), "j", USER, "acct", "gpu", state, (state.value.upper(),), 0, 0,
                     None, tuple(NodeName(n) for n in gpus), len(gpus), None, slots, GpuRequest(per_node=1),
                     admin, comment, batch_host, work_dir="/home/u")


def _nodes(*names: str) -> list[NodeRecord]:
    return [NodeRecord(NodeName(n), NodeState.UP, ("MIXED",), 1, (), (), ("gpu",)) for n in names]


def test_the_snapshot_says_what_each_job_can_do() -> None:
    launcher = _rec("7", {"s01": 1, "s02": 1}, batch_host="s01", comment=f"{COMMENT_KEY}/h/j.orders")
    plain = _rec("8", {"s03": 1, "s04": 1}, batch_host="s03")
    snap = build_snapshot(_nodes("s01", "s02", "s03", "s04"), fold([launcher, plain], {}), now=10.0,
                          profiles=shipped_profiles())
    assert snap.job(JobId("7")).can_rebatch and snap.job(JobId("7")).release_blocks == (("s02", 1),)
    assert not snap.job(JobId("8")).can_rebatch and snap.job(JobId("8")).release_blocks is None


def test_a_planned_shrink_frees_the_blocks_slurm_frees() -> None:
    """The issue's case: the job's own nodes s03 (batch host) and s04, satellites on s01 and s02.

    Shrinking 4 -> 2 by "fewest GPUs first, last node first" planned s03 and s04 free, but the
    batch host never is: the actuator ended two satellites instead and the waiting job, pinned to
    s03 and s04, could not start. The plan now frees whole blocks, and the actuator follows it.
    """
    parent = _rec("7", {"s03": 1, "s04": 1}, batch_host="s03", comment=f"{COMMENT_KEY}/h/j.orders")
    sats = [_rec("9", {"s01": 1}, admin="slurm-elastic satellite-of=7"),
            _rec("10", {"s02": 1}, admin="slurm-elastic satellite-of=7")]
    waiting = _rec("11", {}, state=JobState.PENDING)
    waiting = replace(waiting, gpu_request=GpuRequest(per_node=1))
    snap = build_snapshot(_nodes("s01", "s02", "s03", "s04"), fold([parent, *sats, waiting], {"9": "7", "10": "7"}),
                          now=10.0, profiles=shipped_profiles())
    job = snap.job(JobId("7"))
    assert job.num_gpus == 4 and job.shrink_sizes == (1, 2, 3)
    plan = build_plan(snap, "x", {JobId("7"): 2, JobId("11"): 2})
    kept = plan.by_job()[JobId("7")].placement
    given = plan.by_job()[JobId("11")].placement
    assert ("s03", 0) in kept.gpu_set()  # the batch host stays
    layout = {"w0": ("s03", "7"), "w1": ("s04", "7"), "w2": ("s01", "9"), "w3": ("s02", "10")}
    out = leaving(parent, list(layout), layout, job.placement, kept)
    freed = {layout[w][0] for w in out.workers}
    assert freed == {n for n, _ in given.slots}  # what the plan gives the waiting job is what is freed


def test_a_launcher_job_without_its_join_script_cannot_grow(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from slurm_elastic.observe.job_reports import join_checked

    secret = tmp_path / "job-1"
    for suffix, mode in (("", 0o600), (".orders", 0o600)):
        path = tmp_path / f"job-1{suffix}"
        path.write_bytes(b"s" * 32 if not suffix else b"")
        path.chmod(mode)
    job = _rec("7", {"s01": 1, "s02": 1}, batch_host="s01", comment=f"{COMMENT_KEY}{secret}.orders")
    plain = _rec("8", {"s03": 1}, batch_host="s03")
    got = join_checked({}, [job, plain])
    assert not got["7"].can_grow and "8" not in got
    join = tmp_path / "job-1.join"
    join.write_bytes(b"#!/bin/bash\n")
    join.chmod(0o700)
    assert join_checked({}, [job, plain]) == {}
    join.chmod(0o777)  # writable by others: refused, so it cannot grow
    assert not join_checked({}, [job])["7"].can_grow
