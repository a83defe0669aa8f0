"""A requeued launcher job on the real dev cluster (issue 38, item 1): its new run is its own.

A 2-node launcher job is shrunk to 1 node by releasing its other node; before the daemon gives that
node back (it was away, or the job was requeued and started again between two of its polls), Slurm
requeues the job and it starts again on 2 nodes, one of them another node. The new run's workers
train in the world they started with (the first run's shrink order named workers the requeue
ended), the release the first run was owed is dropped instead of being done to the new run (it
would have taken the new run's second node and its worker with it), and a shrink of the new run
orders out the new run's worker on the node it gives back. Every sample of every epoch is trained
exactly once across both runs."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from slurm_elastic.channel import Channel
from slurm_elastic.core.actions import Action, ActionKind
from slurm_elastic.core.model import JobId, Placement
from slurm_elastic.slurm.hostlist import expand_hostlist

from .conftest import DevCluster, base_state
from .test_grow_in_place import _actuator, _wait

pytestmark = pytest.mark.slurm


def test_a_requeued_launcher_job_is_not_shrunk_by_its_earlier_run(cluster: DevCluster, tmp_path: Path,
                                                                 submit_example: Any) -> None:
    out = cluster.root / "jobs" / "requeued-%j.out"
    epochs, size = 2, 32768
    job = str(submit_example(out, "--elastic", "2:4", "--gpus-per-node", "1", "--epochs", str(epochs),
                             dataset_size=size))
    cluster.wait_state(int(job), "RUNNING", timeout=40)
    store, obs, act = _actuator(cluster, tmp_path, job)
    seen = obs.observation()
    snap = seen.seen()
    held = snap.job(JobId(job)).placement
    assert held.num_nodes == 2
    first_host = cluster.job(int(job))["batch_host"]
    (keep,) = [s for s in held.slots if s[0] == first_host]
    (gone,) = [n for n, _ in held.slots if n != first_host]
    (outcome,) = act.apply(seen, (Action(ActionKind.SHRINK, JobId(job), held, Placement((keep,)), 32, 32, 1, 0.1),))
    assert outcome.ok and f"keeps {first_host}" in outcome.message, outcome.message
    assert [r.nodes for r in store.releases()] == [(first_host,)]

    # Slurm requeues the job before the release is done; it starts again on the batch host and a node
    # the first run never had
    cluster.run(["scontrol", "requeue", job], check=True)
    _wait("the job requeued", lambda: base_state(cluster.job(int(job))) == "PENDING", timeout=60)
    other = next(n.name for n in snap.nodes if n.name not in (first_host, gone))
    cluster.run(["scontrol", "update", f"JobId={job}", f"NodeList={first_host},{other}"], check=True)
    cluster.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], check=True)  # not the 2-minute BeginTime
    record = cluster.wait_state(int(job), "RUNNING", timeout=60)
    assert set(expand_hostlist(record["nodes"])) == {first_host, other}, record["nodes"]
    started = float(record["start_time"]["number"] if isinstance(record["start_time"], dict) else record["start_time"])

    def trains_at_2() -> bool:
        obs.observe()
        return any(r.t >= started - 1 and r.kind == "progress" and r.world == 2 for r in store.progress_of(job))

    # the new run trains in the world it started with: the first run's order to shrink is not its own
    _wait("the new run training on 2 workers", trains_at_2, timeout=120)
    deadline = time.monotonic() + 70  # past RELEASE_TIMEOUT_S after the first run's order
    said: list[str] = []
    while time.monotonic() < deadline and store.releases():
        said += act.tend(obs.observation())
        time.sleep(0.5)
    # before: "job J released its other nodes: keeps <first_host>", and the new run lost its other node
    assert store.releases() == [] and all("release of its other nodes dropped" in line for line in said), said
    assert set(expand_hostlist(cluster.job(int(job))["nodes"])) == {first_host, other}

    # a shrink of the new run orders out the new run's worker on the node it gives back
    seen = obs.observation()
    snap = seen.seen()
    held = snap.job(JobId(job)).placement
    (keep,) = [s for s in held.slots if s[0] == first_host]
    (outcome,) = act.apply(seen, (Action(ActionKind.SHRINK, JobId(job), held, Placement((keep,)), 32, 32, 1, 0.1),))
    assert outcome.ok and "w1 leave" in outcome.message and f"keeps {first_host}" in outcome.message, outcome.message
    channel = Channel.open(job, record["user_name"], record["comment"], 1)
    assert [(o.run, o.workers) for o in channel.history()] == [(0, ("w0",)), (1, ("w0",))]
    deadline = time.monotonic() + 90
    while cluster.job(int(job))["nodes"] != first_host:  # released once the new run's leaver left
        assert time.monotonic() < deadline, (cluster.job(int(job))["nodes"], store.progress_of(job)[-3:])
        act.tend(obs.observation())
        time.sleep(0.5)
    _wait("the job to finish", lambda: cluster.job(int(job))["job_state"] == "COMPLETED", timeout=300)
    obs.poll()  # the last reports
    ends = [r for r in store.progress_of(job) if r.kind == "end"]
    assert ends and ends[-1].samples == epochs * size and ends[-1].world == 1, ends  # nothing lost or repeated
