"""Growing a running launcher job on the real dev cluster: the actuator submits a satellite allocation
(the job's own join script) on another node, its worker joins the running job in place, the job's
reports show the new world, then a shrink orders that worker out and the satellite ends by itself.
Every sample of every epoch is trained exactly once (the job's own count, reported and signed)."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from slurm_elastic.cli import main
from slurm_elastic.core.actions import Action, ActionKind
from slurm_elastic.core.model import JobId, Placement
from slurm_elastic.observe.view import ClusterView
from slurm_elastic.resources import EXAMPLE_TRAINER
from slurm_elastic.slurm.actions import SlurmActuator
from slurm_elastic.slurm.cli_backend import SlurmCli
from slurm_elastic.slurm.commands import run_command
from slurm_elastic.store import Store
from slurm_elastic.testing import shipped_profiles

from .conftest import DevCluster, base_state

pytestmark = pytest.mark.slurm


def _wait(what: str, ok: Any, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def _actuator(cluster: DevCluster, tmp_path: Path, job: str) -> tuple[Store, ClusterView, SlurmActuator]:
    """A store, a view of the dev cluster's ``gpu`` partition, and the Slurm actuator over them, once
    ``job`` has sent its first progress report (the tests act by hand, no daemon rounds)."""
    def runner(argv: Sequence[str]) -> str:
        return run_command(argv, env=cluster.env)

    store = Store(tmp_path / "s.db")
    obs = ClusterView(SlurmCli(runner), shipped_profiles(), time.time, ("gpu",), store=store)
    act = SlurmActuator(runner, store, time.time, records=lambda: obs.records, client_env=cluster.env)
    _wait("the first progress report", lambda: obs.observe() is not None and bool(store.progress_of(job)))
    return store, obs, act


def test_launcher_job_grows_onto_a_satellite_and_shrinks_back(cluster: DevCluster, tmp_path: Path,
                                                              submit_example: Any, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    out = cluster.root / "jobs" / "grow-%j.out"
    epochs, size = 3, 32768
    job = str(submit_example(out, "--elastic", "1:4", "--gpus-per-node", "1", "--epochs", str(epochs),
                             dataset_size=size))
    cluster.wait_state(int(job), "RUNNING", timeout=40)
    store, obs, act = _actuator(cluster, tmp_path, job)

    snap = obs.observe()
    held = snap.job(JobId(job)).placement
    ((node, _),) = held.slots
    other = next(n.name for n in snap.nodes if n.name != node and n.free_gpus)
    grown = Placement.of([*((n, g) for n, gs in held.slots for g in gs), (other, 0)])
    (outcome,) = act.apply(snap, (Action(ActionKind.GROW, JobId(job), held, grown, 64, 32, 1, 0.1),))
    assert outcome.ok, outcome.message
    (sat,) = store.satellites()
    assert cluster.job(int(sat))["admin_comment"] == f"slurm-elastic satellite-of={job}"

    def world(n: int) -> bool:
        obs.observe()
        rows = store.progress_of(job)
        return any(r.kind == "resize" and r.world == n for r in rows)

    _wait("the joined world of 2 workers", lambda: world(2))
    _wait("a throughput measured at 2 workers", lambda: obs.observe().job(JobId(job)).observed_throughput is not None)
    # the job's own throughput model (issue 15): its reports name their members, the daemon knows
    # the satellite's worker is on another node, and the windows at 2 workers on 2 nodes are fitted
    _wait("the job's own throughput model", lambda: obs.observe().job(JobId(job)).model_points >= 1)
    snap = obs.observe()
    assert snap.job(JobId(job)).num_gpus == 2  # the satellite's GPU counts as the job's
    assert snap.job(JobId(job)).model == f"cifar10~job{job}" and snap.job(JobId(job)).model in snap.profiles
    assert {r.nodes for r in store.progress_of(job) if r.kind == "progress" and r.world == 2} == {2}
    # `status` (another process beside the daemon) says what the job says: the satellite's GPU
    # is the job's, and the batch is the one the job reported, not the priors' (issue 14, finding 7).
    for key, value in cluster.env.items():
        monkeypatch.setenv(key, value)
    conf = tmp_path / "elastic.toml"
    conf.write_text(f'[daemon]\npartitions = ["gpu"]\nstore = "{tmp_path / "s.db"}"\n')
    capsys.readouterr()
    assert main(["status", "--config", str(conf), "--json"]) == 0
    row = {r["job_id"]: r for r in json.loads(capsys.readouterr().out)}[job]
    reported = [r for r in store.progress_of(job) if r.world == 2][-1]
    assert (row["gpus"], row["batch"]) == (2, reported.global_batch), (row, reported)
    assert row["model_points"] >= 1 and row["measured_throughput"] and row["predicted_throughput"], row

    (outcome,) = act.apply(snap, (Action(ActionKind.SHRINK, JobId(job), snap.job(JobId(job)).placement, held,
                                         32, 32, 1, 0.1),))
    assert outcome.ok and "w1 leave" in outcome.message and f"satellites {sat} end" in outcome.message
    _wait("the satellite to end by itself", lambda: cluster.job(int(sat))["job_state"] == "COMPLETED")
    _wait("the job to finish", lambda: cluster.job(int(job))["job_state"] == "COMPLETED", timeout=240)
    obs.poll()  # the queue the act step reads, and the last reports, written as the job ended
    assert act.tend() == [f"satellite {sat} of job {job} ended"] and store.satellites() == {}
    rows = store.progress_of(job)
    end = [r for r in rows if r.kind == "end"]
    sizes = [r.world for r in rows if r.kind == "resize"]
    assert sizes == [2, 1], rows
    assert end and end[-1].samples == epochs * size, end  # no sample lost or repeated across both resizes
    pauses = [r.pause_s for r in rows if r.kind == "resize"]
    assert all(p is not None and p < 10 for p in pauses), pauses
    log = Path(str(out).replace("%j", job)).read_text()
    sat_log = Path(str(out).replace("%j", sat)).read_text()
    assert log.count('"state": "done"') == 1 and sat_log.count('"state": "left"') == 1, (log[-2000:], sat_log[-2000:])


def test_ported_ddp_script_grows_shrinks_and_resumes_after_a_requeue(cluster: DevCluster, tmp_path: Path,
                                                                      submit_example: Any) -> None:
    """Issue 17 on the real dev cluster: the DDP script ported to the user-loop API
    (``examples/train_elastic.py``, one ``.npy`` file per sample read by DataLoader workers), submitted
    with ``slurm-elastic submit``, grows 1 -> 2 onto a satellite allocation whose worker joins in
    place, shrinks back to 1 (the satellite ends by itself), and is then requeued by Slurm: SIGTERM
    checkpoints it at a step boundary to the file the template names, and the requeued job resumes
    there. Every sample of every epoch is trained exactly once across all three."""
    from slurm_elastic_launcher.examples import make_npy_data

    data = cluster.root / "npy-data"  # under the dev root: readable by the job's user
    samples, epochs = make_npy_data.write(data, 2048), 60
    script = EXAMPLE_TRAINER.with_name("train_elastic.py")
    out = cluster.root / "jobs" / "ported-grow-%j.out"
    job = str(submit_example(out, "--elastic", "1:4", "--gpus-per-node", "1", "--epochs", str(epochs),
                             "--local-batch", "16",
                             script=[str(script), "--data", str(data), "--epochs", str(epochs), "--workers", "1"]))
    cluster.wait_state(int(job), "RUNNING", timeout=40)
    store, obs, act = _actuator(cluster, tmp_path, job)
    snap = obs.observe()
    held = snap.job(JobId(job)).placement
    ((node, _),) = held.slots
    other = next(n.name for n in snap.nodes if n.name != node and n.free_gpus)
    grown = Placement.of([(node, 0), (other, 0)])
    (outcome,) = act.apply(snap, (Action(ActionKind.GROW, JobId(job), held, grown, 32, 16, 1, 0.1),))
    assert outcome.ok, outcome.message
    (sat,) = store.satellites()

    def world(n: int) -> bool:
        obs.observe()
        return any(r.kind == "resize" and r.world == n for r in store.progress_of(job))

    _wait("the joined world of 2 workers", lambda: world(2))
    snap = obs.observe()
    (outcome,) = act.apply(snap, (Action(ActionKind.SHRINK, JobId(job), snap.job(JobId(job)).placement, held,
                                         16, 16, 1, 0.1),))
    assert outcome.ok and f"satellites {sat} end" in outcome.message, outcome.message
    _wait("the satellite to end by itself", lambda: cluster.job(int(sat))["job_state"] == "COMPLETED")
    _wait("the shrunk world of 1 worker", lambda: world(1))
    log = Path(str(out).replace("%j", job)).read_text()
    assert "1 -> 2 workers" in log and "2 -> 1 workers" in log, log[-3000:]

    # Slurm requeues the job (as a preemption would): its tasks get SIGTERM and checkpoint
    cluster.run(["scontrol", "requeue", job], check=True)
    _wait("the job requeued", lambda: base_state(cluster.job(int(job))) == "PENDING", timeout=60)
    cluster.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], check=True)  # not the 2-minute BeginTime
    _wait("the job to finish", lambda: cluster.job(int(job))["job_state"] == "COMPLETED", timeout=300)
    obs.poll()  # the last reports
    log = Path(str(out).replace("%j", job)).read_text()  # both runs' output (the template appends)
    said = "\n".join(line for line in log.splitlines() if not line.startswith("epoch "))  # not the script's own
    assert "checkpoint written to" in log and "resumed from" in log and ".ckpt at step" in log, said[-6000:]
    rows = store.progress_of(job)
    ends = [r for r in rows if r.kind == "end"]
    assert len(ends) == 2, (rows, said[-6000:])  # the stop before the requeue, and the end
    stopped, done = ends
    assert 0 < stopped.samples < epochs * samples, stopped  # stopped mid-way, not from the start or at the end
    assert done.samples == epochs * samples and done.world == 1, done  # nothing lost or repeated
    assert not list((tmp_path / ".slurm-elastic").glob("**/*.ckpt*"))  # the completed job removed its checkpoint
