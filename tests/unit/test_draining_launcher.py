"""A launcher job on a draining node is never given a MOVE (issue 38, item 3).

A draining node's GPUs are not schedulable, so a plan gives a job holding some of them GPUs
elsewhere: for a job without the launcher a MOVE (a requeue), but a launcher job is resized only in
place and its MOVE was refused, every round. Now the diff gives such a job what can be done: the
shrink off the draining node when the node is a block Slurm can free (a node of its own allocation
but the batch host, a whole satellite), the grow next round; nothing when it cannot leave (its
batch host drains): it stays until it ends, as a rigid job does.
"""

from __future__ import annotations

import getpass
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from slurm_elastic import policies
from slurm_elastic.channel import Channel
from slurm_elastic.core.actions import Action, ActionKind, diff
from slurm_elastic.core.constraints import plan_violations
from slurm_elastic.core.model import ClusterSnapshot, InFlightResize, JobId, JobState, NodeName, NodeState
from slurm_elastic.observe.snapshot import build_snapshot, fold
from slurm_elastic.slurm.actuator import SlurmActuator
from slurm_elastic.slurm.records import GpuRequest, JobRecord, NodeRecord
from slurm_elastic.store import ProgressRow, Store
from slurm_elastic.testing import shipped_profiles

POLICIES = policies.available()
USER = getpass.getuser()


def _rec(job_id: str, gpus: dict[str, int], *, batch_host: str, comment: str = "") -> JobRecord:
    slots = tuple((NodeName(n), tuple(range(c))) for n, c in gpus.items())
    return JobRecord(JobId(job_id), int(job_id), "j", USER, "acct", "gpu", JobState.RUNNING, ("RUNNING",), 0, 0,
                     None, tuple(NodeName(n) for n in gpus), len(gpus), None, slots, GpuRequest(per_node=2),
                     "slurm-elastic gpus=1:4", comment or f"slurm-elastic-orders=/nonexistent/{job_id}.orders",
                     batch_host, work_dir="/home/u")


def _snapshot(jobs: Sequence[JobRecord], draining: str = "s02", sats: dict[str, str] | None = None,
              now: float = 1000.0) -> ClusterSnapshot:
    used: dict[str, set[int]] = {}
    for j in jobs:
        for n, gs in j.gpus:
            used.setdefault(n, set()).update(gs)
    nodes = [NodeRecord(NodeName(n), NodeState.DRAINING if n == draining else NodeState.UP,
                        ("MIXED", "DRAIN") if n == draining else ("MIXED",), 2, (), tuple(sorted(used.get(n, ()))),
                        ("gpu",)) for n in ("s01", "s02", "s03")]
    return build_snapshot(nodes, fold(list(jobs), sats or {}), now=now, profiles=shipped_profiles())


def _actions(snap: ClusterSnapshot, policy: str) -> tuple[Action, ...]:
    plan = policies.build(policy, guards=None).plan(snap, None, np.random.default_rng(0)).plan
    assert plan_violations(snap, plan) == ()
    return diff(snap, plan)


@pytest.mark.parametrize("policy", POLICIES)
def test_a_launcher_job_is_shrunk_off_a_draining_node_it_can_free_never_moved(policy: str) -> None:
    # job 7 trains on s01 (its batch host) and s02 (a node of its own allocation), and s02 drains
    snap = _snapshot([_rec("7", {"s01": 2, "s02": 2}, batch_host="s01")])
    assert snap.job(JobId("7")).release_blocks == (("s02", 2),)
    mine = [a for a in _actions(snap, policy) if a.job_id == "7"]
    assert ActionKind.MOVE not in {a.kind for a in mine}  # refused by the actuator, every round, before
    for a in mine:  # a planner that keeps it at 4 GPUs (2 of them elsewhere) gets the shrink part now
        assert a.kind is ActionKind.SHRINK and a.after.gpu_set() <= {("s01", 0), ("s01", 1)}, a


def test_the_move_that_dp_plans_becomes_its_shrink_part_and_the_grow_comes_once_it_shows() -> None:
    snap = _snapshot([_rec("7", {"s01": 2, "s02": 2}, batch_host="s01")])
    (shrink,) = _actions(snap, "dp")
    assert shrink.kind is ActionKind.SHRINK and sorted(shrink.after.gpu_set()) == [("s01", 0), ("s01", 1)]
    assert shrink.local_batch * shrink.after.num_gpus == shrink.global_batch
    # while the shrink is on its way (the daemon's in-flight target: 2 GPUs), nothing more is asked
    flying = replace(snap, in_flight=(InFlightResize(JobId("7"), 2, snap.now),))
    assert [a for a in _actions(flying, "dp") if a.job_id == "7"] == []
    # once Slurm shows the job on s01 alone, it grows onto s03 (in place, a satellite)
    after = _snapshot([_rec("7", {"s01": 2}, batch_host="s01")], now=1010.0)
    (grow,) = _actions(after, "dp")
    assert grow.kind is ActionKind.GROW and {n for n, _ in grow.after.gpu_set()} == {"s01", "s03"}


@pytest.mark.parametrize("policy", POLICIES)
def test_a_launcher_job_whose_batch_host_drains_is_left_where_it_is(policy: str) -> None:
    # job 7's batch host is s02, which drains: Slurm frees it only with the whole job
    snap = _snapshot([_rec("7", {"s02": 2, "s01": 2}, batch_host="s02")])
    assert snap.job(JobId("7")).release_blocks == (("s01", 2),)
    assert [a for a in _actions(snap, policy) if a.job_id == "7"] == []  # a MOVE or a SHRINK before
    # alone on its draining batch host, it is not moved either
    alone = _snapshot([_rec("7", {"s02": 2}, batch_host="s02")])
    assert [a for a in _actions(alone, policy) if a.job_id == "7"] == []


def test_a_satellite_on_a_draining_node_ends_and_the_job_keeps_its_own_nodes() -> None:
    # job 7 on s01 grown by satellite 9 on s02; s02 drains: the satellite's workers leave
    parent = _rec("7", {"s01": 2}, batch_host="s01")
    sat = replace(_rec("9", {"s02": 2}, batch_host="s02"), admin_comment="slurm-elastic satellite-of=7", comment="")
    snap = _snapshot([parent, sat], sats={"9": "7"})
    assert snap.job(JobId("7")).release_blocks == (("s02", 2),)
    (shrink,) = _actions(snap, "dp")
    assert shrink.kind is ActionKind.SHRINK and {n for n, _ in shrink.after.gpu_set()} == {"s01"}


def _job_files(tmp_path: Path) -> str:
    base = tmp_path / "job-1"
    for suffix, data, mode in (("", b"s" * 32, 0o600), (".orders", b"", 0o600), (".reports", b"", 0o600),
                               (".join", b"#!/bin/bash\n", 0o700), (".env", b"A=1\0", 0o600)):
        path = Path(f"{base}{suffix}")
        path.write_bytes(data)
        path.chmod(mode)
    return f"slurm-elastic-orders={base}.orders"


def test_the_actuator_orders_the_draining_nodes_workers_out_and_gives_the_node_back(tmp_path: Path) -> None:
    comment = _job_files(tmp_path)
    records = {"7": _rec("7", {"s01": 2, "s02": 2}, batch_host="s01", comment=comment)}
    ran: list[list[str]] = []

    def runner(argv: Sequence[str]) -> str:
        ran.append(list(argv))
        return ""

    clock = [1000.0]
    act = SlurmActuator(runner, Store(tmp_path / "s.db"), clock=lambda: clock[0], records=lambda: records)
    snap = _snapshot(list(records.values()))
    (out,) = act.apply(snap, _actions(snap, "dp"))
    assert out.ok and "w2,w3 leave" in out.message and "keeps s01 once they have left" in out.message, out.message
    assert ran == []
    channel = Channel.open("7", USER, comment, 0)
    assert channel.workers(["w0", "w1", "w2", "w3"]) == ["w0", "w1"]
    for t in (1001.0, 1001.2):
        act.store.add_progress("7", ProgressRow(t=t, samples=640, world=4, global_batch=128, kind="left"))
    clock[0] = 1005.0
    assert act.tend() == ["job 7 released its other nodes: keeps s01"]
    assert ran == [["scontrol", "update", "JobId=7", "NodeList=s01"]]
