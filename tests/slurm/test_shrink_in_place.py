"""The acting path end to end on the real dev cluster: a launcher job on 2 nodes is shrunk to 1 by
the Slurm actuator; its worker on the leaving node is ordered out at a step boundary, Slurm frees
the node once the job reports training without it, and the remaining worker finishes the training."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from slurm_elastic.core.actions import Action, ActionKind
from slurm_elastic.core.model import JobId, Placement
from slurm_elastic.observe.view import ClusterView
from slurm_elastic.slurm.actions import SlurmActuator
from slurm_elastic.slurm.cli_backend import SlurmCli
from slurm_elastic.slurm.commands import run_command
from slurm_elastic.store import Store
from slurm_elastic.testing import shipped_profiles

from .conftest import DevCluster

pytestmark = pytest.mark.slurm
EXAMPLE = Path(__file__).resolve().parents[2] / "launcher" / "examples" / "train_cnn.py"


def test_launcher_job_shrinks_in_place(cluster: DevCluster, tmp_path: Path, submit_example: Any) -> None:
    out = cluster.root / "jobs" / "shrink-%j.out"
    job = str(submit_example(out, "--elastic", "2:4", "--gpus-per-node", "1", "--epochs", "3", dataset_size=65536))
    cluster.wait_state(int(job), "RUNNING", timeout=40)
    time.sleep(8)  # let both workers import torch, form and train (2 busy cores)

    def runner(argv: Sequence[str]) -> str:
        return run_command(argv, env=cluster.env)

    store = Store(tmp_path / "s.db")
    obs = ClusterView(SlurmCli(runner), shipped_profiles(), time.time, ("gpu",), store=store)
    snap = obs.observe()
    held = snap.job(JobId(job)).placement
    assert held.num_nodes == 2
    assert snap.job(JobId(job)).shrink_sizes == (1,)  # the batch host stays; the other node can go
    keep = held.slots[0]
    shrink = Action(ActionKind.SHRINK, JobId(job), held, Placement((keep,)), 32, 32, 1, 0.1)
    act = SlurmActuator(runner, store, time.time, records=lambda: obs.records)
    (outcome,) = act.apply(snap, (shrink,))
    assert outcome.ok, outcome.message
    deadline = time.monotonic() + 60
    while cluster.job(int(job))["nodes"] != keep[0]:  # released once the job trains without the leaver
        assert time.monotonic() < deadline, "the node was not released"
        obs.observe()
        act.tend()
        time.sleep(0.5)
    deadline = time.monotonic() + 120
    while cluster.job(int(job))["job_state"] in ("RUNNING", "COMPLETING"):
        assert time.monotonic() < deadline, "job did not finish"
        time.sleep(1)
    assert cluster.job(int(job))["job_state"] == "COMPLETED"
    log = Path(str(out).replace("%j", job)).read_text()
    assert log.count('"state": "done"') == 1 and log.count('"state": "left"') == 1, log[-3000:]
