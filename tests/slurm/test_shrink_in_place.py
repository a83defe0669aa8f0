"""The acting path end to end on the real dev cluster: a launcher job on 2 nodes is shrunk to 1 by
the Slurm actuator; its worker on the leaving node is ordered out at a step boundary, Slurm frees
the node once the leaver reported it left (at the daemon's next poll, with no planning round), and
the remaining worker finishes the training."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from slurm_elastic.act.shrink import EXIT_GRACE_S
from slurm_elastic.config import Config, DaemonConfig
from slurm_elastic.core.actions import Action, ActionKind
from slurm_elastic.core.model import JobId, Placement
from slurm_elastic.daemon import Daemon
from slurm_elastic.dev.processes import worker_processes
from slurm_elastic.observe.view import ClusterView
from slurm_elastic.resources import EXAMPLE_TRAINER
from slurm_elastic.slurm.cli_backend import SlurmCli
from slurm_elastic.slurm.runner import run_command
from slurm_elastic.store import Store
from slurm_elastic.testing import shipped_profiles
from slurm_elastic.wiring import slurm_daemon

from .conftest import DevCluster

pytestmark = pytest.mark.slurm
EXAMPLE = EXAMPLE_TRAINER


def acting_daemon(cluster: DevCluster, tmp_path: Path) -> tuple[Store, ClusterView, Daemon]:
    """A store, a view of the dev cluster's ``gpu`` partition through the CLI, and an acting ``dp``
    daemon over them (the tests call its ``due`` to poll, and its actuator to act)."""
    def runner(argv: Sequence[str]) -> str:
        return run_command(argv, env=cluster.env)

    store = Store(tmp_path / "s.db")
    obs = ClusterView(SlurmCli(runner), shipped_profiles(), time.time, ("gpu",), store=store)
    cfg = Config(DaemonConfig(partitions=("gpu",), policy="dp", dry_run=False, store=store.path,
                              poll_interval=0.5, max_idle=3600.0))
    return store, obs, slurm_daemon(cfg, obs, store, client_env=cluster.env)


def test_launcher_job_shrinks_in_place(cluster: DevCluster, tmp_path: Path, submit_example: Any) -> None:
    out = cluster.root / "jobs" / "shrink-%j.out"
    job = str(submit_example(out, "--elastic", "2:4", "--gpus-per-node", "1", "--epochs", "3", dataset_size=65536))
    cluster.wait_state(int(job), "RUNNING", timeout=40)
    time.sleep(8)  # let both workers import torch, form and train (2 busy cores)

    store, obs, daemon = acting_daemon(cluster, tmp_path)
    seen = obs.observation()
    snap = seen.seen()
    held = snap.job(JobId(job)).placement
    assert held.num_nodes == 2
    assert snap.job(JobId(job)).shrink_sizes == (1,)  # the batch host stays; the other node can go
    keep = held.slots[0]
    shrink = Action(ActionKind.SHRINK, JobId(job), held, Placement((keep,)), 32, 32, 1, 0.1)
    act = daemon.act
    (outcome,) = act.apply(seen, (shrink,))
    assert outcome.ok, outcome.message
    deadline = time.monotonic() + 60
    while cluster.job(int(job))["nodes"] != keep[0]:  # released once the leaver said it left
        assert time.monotonic() < deadline, "the node was not released"
        daemon.due()  # a poll: the queue, the reports, and the act step's owed work; no round is run
        time.sleep(0.5)
    released = time.time()
    left = [r.t for r in store.progress_of(job) if r.kind == "left"]
    assert left and daemon.rounds == 0
    # the act step runs at every poll: the node goes EXIT_GRACE_S after the farewell, give or take polls
    # and the squeue round trips (it waited for the next round, up to max_idle, when tending was
    # part of observing)
    print(f"node released {released - max(left):.2f} s after the leaver's farewell")
    assert released - max(left) < EXIT_GRACE_S + 5.0, released - max(left)
    deadline = time.monotonic() + 120
    while cluster.job(int(job))["job_state"] in ("RUNNING", "COMPLETING"):
        assert time.monotonic() < deadline, "job did not finish"
        time.sleep(1)
    assert cluster.job(int(job))["job_state"] == "COMPLETED"
    log = Path(str(out).replace("%j", job)).read_text()
    assert log.count('"state": "done"') == 1 and log.count('"state": "left"') == 1, log[-3000:]
    # issue 38, bug 8: the leaver was ordered out, not lost (srun may say 137 for its task all the same)
    assert "worker was lost" not in log and "workers lost" not in log, log[-3000:]
    assert "srun returned" not in log or "(w1; Slurm ends a task" in log, log[-3000:]


def test_a_lost_worker_gives_its_node_back_and_the_job_completes(cluster: DevCluster, tmp_path: Path,
                                                                 submit_example: Any) -> None:
    """Issue 14, finding 3, on the real cluster: SIGKILL the worker on the job's second node. The
    survivor re-forms and finishes; the daemon learns of the lost worker from the recovery report and
    releases that node at its next polls; Slurm records the job COMPLETED, not FAILED."""
    import os
    import signal

    out = cluster.root / "jobs" / "lost-%j.out"
    job = str(submit_example(out, "--elastic", "2:4", "--gpus-per-node", "1", "--epochs", "3", dataset_size=65536))
    cluster.wait_state(int(job), "RUNNING", timeout=40)

    store, obs, daemon = acting_daemon(cluster, tmp_path)
    deadline = time.monotonic() + 90
    while not store.progress_of(job) or not worker_processes(job).get("w1", []):  # both trained and reported
        assert time.monotonic() < deadline, "the job did not report"
        daemon.due()
        time.sleep(0.5)
    batch_host = cluster.job(int(job))["batch_host"]
    for pid in worker_processes(job).get("w1", []):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 90
    while cluster.job(int(job))["nodes"] != batch_host:  # the lost worker's node is given back
        assert time.monotonic() < deadline, (cluster.job(int(job))["nodes"], store.progress_of(job)[-3:])
        daemon.due()  # polls only: no planning round
        time.sleep(0.5)
    assert store.lost_workers(job) == {"w1"} and daemon.rounds == 0
    deadline = time.monotonic() + 180
    while cluster.job(int(job))["job_state"] in ("RUNNING", "COMPLETING"):
        assert time.monotonic() < deadline, "job did not finish"
        time.sleep(1)
    assert cluster.job(int(job))["job_state"] == "COMPLETED"
    obs.poll()  # the last reports
    end = [r for r in store.progress_of(job) if r.kind == "end"]
    assert end and end[-1].samples == 3 * 65536, end  # every sample trained once, across the loss
    log = Path(str(out).replace("%j", job)).read_text()
    assert log.count('"state": "done"') == 1, log[-3000:]
    assert "(workers lost: w1), but the training completed" in log, log[-3000:]  # its task was SIGKILLed


def test_ported_ddp_script_shrinks_in_place_with_exact_accounting(cluster: DevCluster, tmp_path: Path,
                                                                  submit_example: Any) -> None:
    """Issue 17 on the real dev cluster: the DDP script ported to the user-loop API
    (``examples/train_elastic.py``), reading one ``.npy`` file per sample through DataLoader workers,
    submitted with ``slurm-elastic submit``, is shrunk 2 -> 1 by the Slurm actuator at a step
    boundary; the survivor finishes, and the job trained every sample of every epoch exactly once."""
    from slurm_elastic_launcher.examples import make_npy_data

    data = cluster.root / "npy-data"  # under the dev root: readable by the job's user
    samples, epochs = make_npy_data.write(data, 2048), 12
    script = EXAMPLE.with_name("train_elastic.py")
    out = cluster.root / "jobs" / "ported-%j.out"
    job = str(submit_example(out, "--elastic", "2:4", "--gpus-per-node", "1", "--epochs", str(epochs),
                             "--local-batch", "16",
                             script=[str(script), "--data", str(data), "--epochs", str(epochs), "--workers", "1"]))
    cluster.wait_state(int(job), "RUNNING", timeout=40)

    store, obs, daemon = acting_daemon(cluster, tmp_path)
    deadline = time.monotonic() + 90
    while not [r for r in store.progress_of(job) if r.world == 2]:  # both workers formed and trained
        assert time.monotonic() < deadline, "the ported job did not report at 2 workers"
        daemon.due()
        time.sleep(0.5)
    seen = obs.observation()
    snap = seen.seen()
    held = snap.job(JobId(job)).placement
    keep = held.slots[0]
    act = daemon.act
    (outcome,) = act.apply(seen, (Action(ActionKind.SHRINK, JobId(job), held, Placement((keep,)), 16, 16, 1, 0.1),))
    assert outcome.ok, outcome.message
    deadline = time.monotonic() + 60
    while cluster.job(int(job))["nodes"] != keep[0]:  # released once the leaver said it left
        assert time.monotonic() < deadline, "the node was not released"
        daemon.due()
        time.sleep(0.5)
    deadline = time.monotonic() + 240
    while cluster.job(int(job))["job_state"] in ("RUNNING", "COMPLETING"):
        assert time.monotonic() < deadline, "job did not finish"
        time.sleep(1)
    log = Path(str(out).replace("%j", job)).read_text()
    assert cluster.job(int(job))["job_state"] == "COMPLETED", log[-3000:]
    obs.poll()  # the last reports
    end = [r for r in store.progress_of(job) if r.kind == "end"]
    assert end and end[-1].samples == epochs * samples and end[-1].world == 1, (end, log[-3000:])
    assert [r for r in store.progress_of(job) if r.kind == "left"]
    assert "2 -> 1 workers" in log and "loss" in log, log[-3000:]  # the resize line and the script's own logging
