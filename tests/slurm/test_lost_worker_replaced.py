"""Issue 38, bug 2, on the real dev cluster: a worker lost on a node that keeps others (here the
batch host, with the job's other worker) is started again in place. The daemon, at its polls
alone (no planning round), orders the survivor on, then starts a new worker (a new id) as a
one-task ``srun --overlap`` step of the job's own allocation on that node, bound to the lost
worker's GPU; it joins at a step boundary, the world is back to its size, each worker uses a
distinct GPU the job holds, and the training completes with every sample trained exactly once.

Before the fix the lost worker's GPU stayed idle until the job ended: the world never returned to 2.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from slurm_elastic.core.model import NodeName
from slurm_elastic.dev.processes import worker_processes
from slurm_elastic.slurm.hostlist import expand_hostlist, parse_gres_detail

from .conftest import DevCluster
from .test_shrink_in_place import acting_daemon

pytestmark = pytest.mark.slurm


def _formed(events: Path) -> list[list[dict[str, Any]]]:
    """Each world the job formed (its workers' ``formed`` events), a list per generation, in order."""
    worlds: dict[str, list[dict[str, Any]]] = {}
    for line in events.read_text().splitlines():
        e = json.loads(line)
        if e["ev"] == "formed":
            worlds.setdefault(e["gen"], []).append(e)
    return list(worlds.values())


def _run_to_the_end(cluster: DevCluster, job: str, daemon: Any, out: Path, timeout: float) -> str:
    """Drive the daemon's polls until Slurm is done with ``job``; the job's log, once it COMPLETED."""
    deadline = time.monotonic() + timeout
    while cluster.job(int(job))["job_state"] in ("RUNNING", "COMPLETING"):
        assert time.monotonic() < deadline, "job did not finish"
        daemon.due()
        time.sleep(1)
    log = Path(str(out).replace("%j", job)).read_text()
    assert cluster.job(int(job))["job_state"] == "COMPLETED", log[-3000:]
    return log


def test_a_worker_lost_on_a_shared_node_is_started_again_on_its_gpu(cluster: DevCluster, tmp_path: Path,
                                                                   submit_example: Any,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    out = cluster.root / "jobs" / "replaced-%j.out"
    events = cluster.root / "jobs" / f"replaced-events-{tmp_path.name}.jsonl"
    monkeypatch.setenv("SLURM_ELASTIC_EVENT_LOG", str(events))  # the job's workers' and the new one's
    epochs, size = 6, 65536
    job = str(submit_example(out, "--elastic", "2:4", "--gpus-per-node", "2", "--epochs", str(epochs),
                             dataset_size=size))
    cluster.wait_state(int(job), "RUNNING", timeout=40)
    rec = cluster.job(int(job))
    (node,) = expand_hostlist(rec["nodes"])
    held = {str(i) for _, idx in parse_gres_detail(rec["gres_detail"], [NodeName(node)]) for i in idx}
    assert len(held) == 2 and rec["batch_host"] == node, rec  # one node, the batch host: never released

    store, obs, daemon = acting_daemon(cluster, tmp_path)
    deadline = time.monotonic() + 90
    while not [r for r in store.progress_of(job) if r.world == 2] or not worker_processes(job).get("w1"):
        assert time.monotonic() < deadline, "the job did not report at 2 workers"
        daemon.due()
        time.sleep(0.5)
    (first,) = _formed(events)[:1]
    lost_gpu = next(e["gpu"] for e in first if e["worker"] == "w1")
    killed = time.time()
    for pid in worker_processes(job).get("w1", []):
        os.kill(pid, signal.SIGKILL)

    def back_to_two() -> bool:
        return any(r.t > killed and r.kind == "resize" and r.world == 2 for r in store.progress_of(job))

    deadline = time.monotonic() + 150
    while not back_to_two():  # recovery at 1, then the new worker joins: polls only, no round
        assert time.monotonic() < deadline, ("the world never returned to 2 workers (the lost worker's GPU stays "
                                             "idle)", [(r.kind, r.world, r.lost) for r in store.progress_of(job)],
                                             [e.message for e in store.actions_of(job)])
        assert not [r for r in store.progress_of(job) if r.kind == "end"], "the job ended before it was back at 2"
        daemon.due()
        time.sleep(0.5)
    assert store.lost_workers(job) == {"w1"} and daemon.rounds == 0
    assert cluster.job(int(job))["nodes"] == node  # nothing given back: the GPU was used again
    replaced = [e for e in store.actions_of(job) if "started again" in e.action.reason]
    assert len(replaced) == 1 and replaced[0].state == "done", [(e.action.reason, e.message)
                                                                for e in store.actions_of(job)]
    assert "w2 for w1 on" in replaced[0].message and "slot 1" in replaced[0].message, replaced[0].message
    assert [n for n, _, _ in store.steps_of(replaced[0].id)] == ["order", "srun", "started"]

    log = _run_to_the_end(cluster, job, daemon, out, 240)
    obs.poll()  # the last reports
    rows = store.progress_of(job)
    end = [r for r in rows if r.kind == "end"]
    assert end and end[-1].samples == epochs * size and end[-1].world == 2, (end, log[-3000:])
    sizes = [r.world for r in rows if r.kind == "resize"]
    # the recovery without w1 (then, if rank 0 read it before the next, the order naming the survivor
    # alone, a resize to the same world), then w2 joined
    assert sizes[0] == 1 and sizes[-1] == 2 and sizes.count(2) == 1 and set(sizes) == {1, 2}, rows
    worlds = _formed(events)
    last = worlds[-1]
    assert sorted(e["worker"] for e in last) == ["w0", "w2"], worlds
    gpus = {e["worker"]: e["gpu"] for e in last}
    assert gpus["w2"] == lost_gpu and gpus["w0"] != gpus["w2"], worlds  # the idle GPU, not the live worker's
    assert set(gpus.values()) <= held, (gpus, held)
    w2 = next(e for e in last if e["worker"] == "w2")
    assert (w2["node"], w2["local_rank"], w2["gpu_index"]) == (node, 1, 1), w2  # the lost worker's slot
    assert "(workers lost: w1), but the training completed" in log, log[-3000:]
    assert log.count('"state": "done"') >= 1, log[-3000:]


JOIN = (b'#!/bin/bash\n# can start a worker in place of a lost one (SLURM_ELASTIC_SLOT)\n'
        b'echo "uid=$(id -u) cwd=$PWD mark=${JOB_MARK:-} overlap=${SLURM_OVERLAP:-unset} job=$SLURM_JOB_ID '
        b'step=$SLURM_STEP_ID gpus=$CUDA_VISIBLE_DEVICES args=$*" > "$PWD/replaced-$SLURM_JOB_ID.txt"\n')


def test_another_users_worker_is_started_again_as_that_user_in_its_environment(
        cluster: DevCluster, test_user: Any, tmp_path: Path) -> None:
    """The same replacement for a job of a user who is not the daemon's: its srun runs through
    ``setpriv`` as that user, in the job's working directory, with the job's saved environment (not
    the Slurm options in it), as a new step of the job on its 2 GPUs, with ``--replace SLOT JOB W``."""
    from slurm_elastic.act.actor import SlurmActor
    from slurm_elastic.observe.view import ClusterView
    from slurm_elastic.slurm.cli_backend import SlurmCli
    from slurm_elastic.slurm.runner import run_command
    from slurm_elastic.store import ProgressRow, Store
    from slurm_elastic.testing import shipped_profiles

    from .test_satellite_inputs import SECRET, _own

    cluster.cancel_all()
    work = Path(test_user.pw_dir) / f"replace-{os.getpid()}-{int(time.time())}"
    work.mkdir()
    _own(work, test_user, None, 0o700)
    base = work / "job-r"
    env = b"JOB_MARK=saved\0SLURM_OVERLAP=0\0PATH=/usr/bin:/bin\0HOME=" + test_user.pw_dir.encode() + b"\0"
    for suffix, data, mode in (("", SECRET, 0o600), (".orders", b"", 0o600), (".reports", b"", 0o600),
                               (".join", JOIN, 0o700), (".env", env, 0o600)):
        _own(Path(f"{base}{suffix}"), test_user, data, mode)
    submit = ["setpriv", f"--reuid={test_user.pw_uid}", f"--regid={test_user.pw_gid}", "--init-groups", "--",
              "env", "-i", f"SLURM_CONF={cluster.env['SLURM_CONF']}", f"PATH={cluster.env['PATH']}",
              "sbatch", "--parsable", "--elastic=1:8", "--gres=gpu:2", "-N1", "--ntasks-per-node=2",
              f"--chdir={work}", f"--comment=slurm-elastic-orders={base}.orders", "--wrap",
              "srun --gres=gpu:2 sleep 300"]
    job = run_command(submit, env=cluster.env).strip().split(";")[0]
    cluster.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], check=True)
    assert cluster.wait_state(int(job), "RUNNING", timeout=40)["user_name"] == test_user.pw_name

    def runner(argv: Any) -> str:
        return run_command(argv, env=cluster.env)

    store = Store(tmp_path / "s.db")
    obs = ClusterView(SlurmCli(runner), shipped_profiles(), time.time, ("gpu",), store=store)
    act = SlurmActor(runner, store, time.time, client_env=cluster.env)
    records = obs.observation().records
    store.add_reports(job, [ProgressRow(time.time(), "resize", 64, 1, 32, pause_s=0.1, lost=("w1",))], 10)
    lines = act.owed(records, frozenset(), time.time())
    assert len(lines) == 2 and "w2 for w1 on" in lines[1] and "slot 1" in lines[1], lines
    out = work / f"replaced-{job}.txt"
    deadline = time.monotonic() + 30
    while not out.exists() or not out.read_text().endswith("\n"):
        assert time.monotonic() < deadline, (lines, cluster.log_of(int(job)))
        time.sleep(0.3)
    said = dict(kv.split("=", 1) for kv in out.read_text().split(" args=")[0].split())
    assert said["uid"] == str(test_user.pw_uid) and said["cwd"] == str(work), said
    assert said["mark"] == "saved" and said["overlap"] == "unset", said  # the job's environment, no Slurm option
    assert said["job"] == job and said["step"] not in ("", "0", "batch") and said["gpus"] == "0,1", said
    assert out.read_text().split(" args=")[1] == f"--replace 1 {job} w2\n"
    cluster.cancel_all()


def test_a_worker_lost_in_a_satellite_that_keeps_another_is_started_again_in_the_satellite(
        cluster: DevCluster, tmp_path: Path, submit_example: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The job (1 GPU) grown by a 2-GPU satellite on another node; the satellite's first worker is
    SIGKILLed. The new worker starts as a step of the satellite (which holds the idle GPU), on the
    lost worker's slot, and the world is back at 3."""
    from slurm_elastic.core.actions import Action, ActionKind
    from slurm_elastic.core.model import JobId, Placement

    out = cluster.root / "jobs" / "replaced-sat-%j.out"
    events = cluster.root / "jobs" / f"replaced-sat-events-{tmp_path.name}.jsonl"
    monkeypatch.setenv("SLURM_ELASTIC_EVENT_LOG", str(events))
    epochs, size = 12, 65536
    job = str(submit_example(out, "--elastic", "1:4", "--gpus-per-node", "1", "--epochs", str(epochs),
                             dataset_size=size))
    cluster.wait_state(int(job), "RUNNING", timeout=40)
    store, obs, daemon = acting_daemon(cluster, tmp_path)
    deadline = time.monotonic() + 90
    while not store.progress_of(job):
        assert time.monotonic() < deadline, "the job did not report"
        daemon.due()
        time.sleep(0.5)
    seen = obs.observation()
    snap = seen.seen()
    held = snap.job(JobId(job)).placement
    ((node, _),) = held.slots
    other = next(n.name for n in snap.nodes if n.name != node and len(n.free_gpus) >= 2)
    grown = Placement.of([*((n, g) for n, gs in held.slots for g in gs), (other, 0), (other, 1)])
    (outcome,) = daemon.act.apply(seen, (Action(ActionKind.GROW, JobId(job), held, grown, 96, 32, 1, 0.1),))
    assert outcome.ok, outcome.message
    (sat,) = store.satellites()
    deadline = time.monotonic() + 150
    while not any(r.kind == "resize" and r.world == 3 for r in store.progress_of(job)) \
            or not worker_processes(job).get("w1"):
        assert time.monotonic() < deadline, "the satellite's workers did not join"
        daemon.due()
        time.sleep(0.5)
    killed = time.time()
    for pid in worker_processes(job).get("w1", []):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 150
    while not any(r.t > killed and r.kind == "resize" and r.world == 3 for r in store.progress_of(job)):
        assert time.monotonic() < deadline, ([(r.kind, r.world, r.lost) for r in store.progress_of(job)],
                                             [e.message for e in store.actions_of(job)])
        assert not [r for r in store.progress_of(job) if r.kind == "end"], "the job ended before it was back at 3"
        daemon.due()
        time.sleep(0.5)
    replaced = [e for e in store.actions_of(job) if "started again" in e.action.reason]
    assert len(replaced) == 1 and f"w3 for w1 on {other} slot 0 of {sat}" in replaced[0].message, replaced
    _run_to_the_end(cluster, job, daemon, out, 300)
    obs.poll()
    end = [r for r in store.progress_of(job) if r.kind == "end"]
    assert end and end[-1].samples == epochs * size and end[-1].world == 3, end
    last = _formed(events)[-1]
    assert sorted(e["worker"] for e in last) == ["w0", "w2", "w3"], last
    on_sat = {e["worker"]: e["gpu"] for e in last if e["node"] == other}
    sat_gpus = {str(i) for _, idx in parse_gres_detail(cluster.job(int(sat))["gres_detail"], [NodeName(other)])
                for i in idx} if cluster.job(int(sat))["job_state"] == "RUNNING" else set(on_sat.values())
    assert len(set(on_sat.values())) == 2 and set(on_sat.values()) <= sat_gpus, (on_sat, sat_gpus)
