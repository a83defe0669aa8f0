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

from slurm_elastic.act.actor import SlurmActor
from slurm_elastic.cli import main
from slurm_elastic.core.actions import Action, ActionKind
from slurm_elastic.core.model import JobId, NodeName, Placement
from slurm_elastic.observe.view import ClusterView
from slurm_elastic.resources import EXAMPLE_TRAINER
from slurm_elastic.slurm.cli_backend import SlurmCli
from slurm_elastic.slurm.hostlist import expand_hostlist, parse_gres_detail
from slurm_elastic.slurm.runner import run_command
from slurm_elastic.store import Store
from slurm_elastic.testing import shipped_profiles

from .conftest import DevCluster, base_state

pytestmark = pytest.mark.slurm


def _wait(what: str, ok: Any, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def _actuator(cluster: DevCluster, tmp_path: Path, job: str) -> tuple[Store, ClusterView, SlurmActor]:
    """A store, a view of the dev cluster's ``gpu`` partition, and the Slurm actor over them, once
    ``job`` has sent its first progress report (the tests act by hand, no daemon rounds)."""
    def runner(argv: Sequence[str]) -> str:
        return run_command(argv, env=cluster.env)

    store = Store(tmp_path / "s.db")
    obs = ClusterView(SlurmCli(runner), shipped_profiles(), time.time, ("gpu",), store=store)
    act = SlurmActor(runner, store, time.time, client_env=cluster.env)
    _wait("the first progress report", lambda: obs.observe() is not None and bool(store.progress_of(job)))
    return store, obs, act


def _grow_onto_another_node(store: Store, obs: ClusterView, act: SlurmActor, job: str) -> tuple[Placement, str]:
    """Grow the one-GPU ``job`` by one GPU on another node through the actor (a satellite); returns
    the placement it held before and the satellite's id."""
    seen = obs.observation()
    snap = seen.seen()
    held = snap.job(JobId(job)).placement
    ((node, _),) = held.slots
    other = next(n.name for n in snap.nodes if n.name != node and n.free_gpus)
    grown = Placement.of([*((n, g) for n, gs in held.slots for g in gs), (other, 0)])
    (outcome,) = act.apply(seen, (Action(ActionKind.GROW, JobId(job), held, grown, 64, 32, 1, 0.1),))
    assert outcome.ok, outcome.message
    (sat,) = store.satellites()
    return held, sat


def _gpus(cluster: DevCluster, job: str) -> dict[str, set[str]]:
    """The GPUs Slurm allocated to ``job`` (``gres_detail``'s IDX), by node."""
    rec = cluster.job(int(job))
    nodes = [NodeName(n) for n in expand_hostlist(rec["nodes"])]
    return {str(node): {str(i) for i in idx} for node, idx in parse_gres_detail(rec["gres_detail"], nodes)}


def _bindings(events: Path, start: int = 0) -> list[list[dict[str, Any]]]:
    """Each world the job formed (its workers' ``formed`` events, in the order written, from byte
    ``start`` of the event log), a list per generation."""
    worlds: dict[str, list[dict[str, Any]]] = {}
    with events.open() as f:
        f.seek(start)
        for line in f:
            e = json.loads(line)
            if e["ev"] == "formed":
                worlds.setdefault(e["gen"], []).append(e)
    return list(worlds.values())


def _check_one_gpu_each(world: list[dict[str, Any]], owner: dict[str, str], allocated: dict[str, dict[str, set[str]]],
                        ) -> None:
    """Issue 35: no two workers of one node share a GPU, and each uses one Slurm allocated to its
    own job or satellite (``owner``: worker -> Slurm job id) on its node."""
    assert all("gpu" in e for e in world), world  # each worker reports the GPU it bound
    on_node: dict[str, list[str]] = {}
    for e in world:
        on_node.setdefault(e["node"], []).append(e["gpu"])
        assert e["gpu"] in allocated[owner[e["worker"]]].get(e["node"], set()), (e, allocated)
        assert e["local_rank"] == e["gpu_index"] == int(e["slurm_localid"]), e  # one task per GPU: index = slot
    for node, gpus in on_node.items():
        assert len(gpus) == len(set(gpus)), (node, world)


def test_launcher_job_grows_onto_a_satellite_and_shrinks_back(cluster: DevCluster, tmp_path: Path,
                                                              submit_example: Any, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    out = cluster.root / "jobs" / "grow-%j.out"
    epochs, size = 5, 32768  # long enough for a throughput at 2 workers before it ends on an idle host
    job = str(submit_example(out, "--elastic", "1:4", "--gpus-per-node", "1", "--epochs", str(epochs),
                             dataset_size=size))
    cluster.wait_state(int(job), "RUNNING", timeout=40)
    store, obs, act = _actuator(cluster, tmp_path, job)

    held, sat = _grow_onto_another_node(store, obs, act, job)
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
    seen = obs.observation()
    snap = seen.seen()
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

    (outcome,) = act.apply(seen, (Action(ActionKind.SHRINK, JobId(job), snap.job(JobId(job)).placement, held,
                                         32, 32, 1, 0.1),))
    assert outcome.ok and "w1 leave" in outcome.message and f"satellites {sat} end" in outcome.message
    _wait("the satellite to end by itself", lambda: cluster.job(int(sat))["job_state"] == "COMPLETED")
    _wait("the job to finish", lambda: cluster.job(int(job))["job_state"] == "COMPLETED", timeout=240)
    # the queue the act step reads, and the last reports, written as the job ended
    assert act.tend(obs.poll()) == [f"satellite {sat} of job {job} ended"] and store.satellites() == {}
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
                                                                      submit_example: Any,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 17 on the real dev cluster: the DDP script ported to the user-loop API
    (``examples/train_elastic.py``, one ``.npy`` file per sample read by DataLoader workers), submitted
    with ``slurm-elastic submit``, grows 1 -> 2 onto a satellite allocation whose worker joins in
    place, shrinks back to 1 (the satellite ends by itself), and is then requeued by Slurm: SIGTERM
    checkpoints it at a step boundary to the file the template names, and the requeued job resumes
    there. Every sample of every epoch is trained exactly once across all three.

    Issue 35: the job runs 2 workers on one node of 4 (fake) GPUs and grows 2 -> 4 onto a satellite of
    2 GPUs on the same node; at 2, 4, 2 workers and after the requeue, each worker reports the GPU it
    bound, no two share one, and each is one Slurm allocated to its job or satellite."""
    from slurm_elastic_launcher.examples import make_npy_data

    data = cluster.root / "npy-data"  # under the dev root: readable by the job's user
    samples, epochs = make_npy_data.write(data, 2048), 100
    script = EXAMPLE_TRAINER.with_name("train_elastic.py")
    out = cluster.root / "jobs" / "ported-grow-%j.out"
    events = cluster.root / "jobs" / f"ported-grow-events-{tmp_path.name}.jsonl"
    monkeypatch.setenv("SLURM_ELASTIC_EVENT_LOG", str(events))  # the job's and its satellite's workers'
    job = str(submit_example(out, "--elastic", "2:4", "--gpus-per-node", "2", "--epochs", str(epochs),
                             "--local-batch", "16",
                             script=[str(script), "--data", str(data), "--epochs", str(epochs), "--workers", "1"]))
    cluster.wait_state(int(job), "RUNNING", timeout=40)
    store, obs, act = _actuator(cluster, tmp_path, job)
    seen = obs.observation()
    snap = seen.seen()
    held = snap.job(JobId(job)).placement
    ((node, _),) = held.slots
    grown = Placement.of([(node, g) for g in range(4)])  # the satellite beside the job, on its node
    (outcome,) = act.apply(seen, (Action(ActionKind.GROW, JobId(job), held, grown, 64, 16, 1, 0.1),))
    assert outcome.ok, outcome.message
    (sat,) = store.satellites()
    owner = {"w0": job, "w1": job, "w2": sat, "w3": sat}
    cluster.wait_state(int(sat), "RUNNING", timeout=40)
    allocated = {job: _gpus(cluster, job), sat: _gpus(cluster, sat)}
    assert len(allocated[job][node]) == len(allocated[sat][node]) == 2, allocated

    def world(n: int) -> bool:
        obs.observe()
        return any(r.kind == "resize" and r.world == n for r in store.progress_of(job))

    _wait("the joined world of 4 workers", lambda: world(4))
    seen = obs.observation()
    snap = seen.seen()
    (outcome,) = act.apply(seen, (Action(ActionKind.SHRINK, JobId(job), snap.job(JobId(job)).placement, held,
                                         32, 16, 1, 0.1),))
    assert outcome.ok and f"satellites {sat} end" in outcome.message, outcome.message
    _wait("the shrunk world of 2 workers", lambda: world(2) and len(_bindings(events)) >= 3)
    log = Path(str(out).replace("%j", job)).read_text()
    assert "2 -> 4 workers" in log and "4 -> 2 workers" in log, log[-3000:]
    worlds = _bindings(events)
    assert [len(w) for w in worlds] == [2, 4, 2], worlds  # the shrink narrows: its world's survivors report
    for w in worlds:
        _check_one_gpu_each(w, owner, allocated)
    before_requeue = events.stat().st_size

    # Slurm requeues the job (as a preemption would): its tasks get SIGTERM and checkpoint. The
    # requeue must find the job training: the satellite's end is awaited after it, not before (on a
    # loaded machine that wait once let the job finish all its epochs first, and nothing checkpointed)
    assert not [r for r in store.progress_of(job) if r.kind == "end"], "the job finished before its requeue"
    cluster.run(["scontrol", "requeue", job], check=True)
    _wait("the satellite to end by itself", lambda: cluster.job(int(sat))["job_state"] == "COMPLETED")
    _wait("the job requeued", lambda: base_state(cluster.job(int(job))) == "PENDING", timeout=60)
    cluster.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], check=True)  # not the 2-minute BeginTime
    cluster.wait_state(int(job), "RUNNING", timeout=60)
    allocated[job] = _gpus(cluster, job)  # the requeued job's GPUs (perhaps others, on another node)
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
    assert done.samples == epochs * samples and done.world == 2, done  # nothing lost or repeated
    (requeued,) = _bindings(events, before_requeue)
    _check_one_gpu_each(requeued, owner, allocated)
    assert not list((tmp_path / ".slurm-elastic").glob("**/*.ckpt*"))  # the completed job removed its checkpoint
