"""The end-to-end demo, README's main command: a real Slurm cluster, the acting daemon, real elastic
training jobs resized in place while they train, and the allocation report at the end.

This module owns the demo's script: bring up the dev cluster (:mod:`slurm_elastic.dev.devcluster`),
run the daemon in this process (the same :class:`~slurm_elastic.daemon.Daemon`, observer and
actuator as ``slurm-elastic daemon``), submit a few small CNN jobs (``slurm_elastic_launcher/examples/train_cnn.py``
on data it generates; no downloads) with ``sbatch --elastic`` through the pytorch template, at
staggered times, and narrate what happens: starts, the daemon's actions (START, satellites that
grow a job, workers ordered out), and each in-place resize as the job itself reports it (its new
world and the pause it cost). At the end it checks every job trained exactly ``epochs x dataset``
samples, writes the allocation report from ``sacct`` and the daemon's store, and stops the cluster.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_elastic.config import Config, DaemonConfig
from slurm_elastic.core.guards import Guards
from slurm_elastic.core.model import JobState
from slurm_elastic.dev import devcluster
from slurm_elastic.observe.view import ClusterView
from slurm_elastic.resources import EXAMPLE_TRAINER
from slurm_elastic.slurm.cli_backend import SlurmCli
from slurm_elastic.slurm.runner import run_command
from slurm_elastic.store import Store
from slurm_elastic.submit import new_secret_file, submit
from slurm_elastic.templates import JobRequest
from slurm_elastic.wiring import cluster_view, slurm_daemon

EXAMPLE = EXAMPLE_TRAINER


@dataclass(frozen=True, slots=True)
class DemoJob:
    """One job of the demo: submitted ``at`` seconds after the first, elastic ``min:max`` GPUs."""

    name: str
    min_gpus: int
    max_gpus: int
    at: float
    epochs: int = 3
    dataset_size: int = 4096


DEFAULT_JOBS = (
    DemoJob("cnn-a", 1, 4, at=0.0, epochs=6, dataset_size=65536),
    DemoJob("cnn-b", 1, 2, at=10.0, epochs=2, dataset_size=65536),
    DemoJob("cnn-c", 1, 4, at=20.0, epochs=4, dataset_size=65536),
)


def run_demo(out: Path, *, jobs: Sequence[DemoJob] = DEFAULT_JOBS, nodes: int = 3, gpus_per_node: int = 2,
             policy: str = "efq", timeout_s: float = 600.0, keep: bool = False,
             say: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the demo; returns its summary (also written to ``out/summary.json``).

    Raises:
        DevClusterError: the cluster could not come up (the message says what is missing).
    """
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    root = devcluster.DEFAULT_ROOT
    say(f"bringing up the dev cluster: {nodes} nodes x {gpus_per_node} GPUs (munge, slurmdbd, slurmctld, slurmd)")
    devcluster.down(root)
    info = devcluster.up(nodes=nodes, gpus_per_node=gpus_per_node, root=root)
    say(f"cluster up in {info['seconds']} s (SLURM_CONF={info['slurm_conf']})")
    env = devcluster.slurm_env(root)
    try:
        return _run(out, root, env, jobs, policy, timeout_s, say)
    finally:
        if not keep:
            devcluster.down(root)
            say("dev cluster stopped")


def _run(out: Path, root: Path, env: dict[str, str], jobs: Sequence[DemoJob], policy: str, timeout_s: float,
         say: Callable[[str], None]) -> dict[str, Any]:
    def runner(argv: Sequence[str]) -> str:
        return run_command(argv, env=env)

    store_path = out / "elastic.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{store_path}{suffix}").unlink(missing_ok=True)
    store = Store(store_path)
    cfg = Config(DaemonConfig(partitions=("gpu",), policy=policy, dry_run=False, store=store_path,
                              poll_interval=0.5, max_idle=5.0), guards=Guards(cooldown_s=15.0))
    observer = cluster_view(cfg, SlurmCli(runner), store)
    daemon = slurm_daemon(cfg, observer, store, sleep=lambda s: None, client_env=env)
    say(f"daemon acting with policy {policy!r} (store {store_path})")

    t0 = time.time()
    started = dt.datetime.now()
    waiting = sorted(jobs, key=lambda j: j.at)
    submitted: dict[str, DemoJob] = {}
    seen_state: dict[str, str] = {}
    seen_rows: dict[str, int] = {}
    while time.time() - t0 < timeout_s:
        while waiting and time.time() - t0 >= waiting[0].at:
            job = waiting.pop(0)
            jid = submit_job(job, out, env)
            submitted[jid] = job
            say(f"[{time.time() - t0:5.1f}s] submitted job {jid} ({job.name}): sbatch --elastic={job.min_gpus}:"
                f"{job.max_gpus}, {job.epochs} epochs of {job.dataset_size} samples")
        daemon.run(max_rounds=daemon.rounds + 1)
        _narrate(t0, observer, store, submitted, seen_state, seen_rows, say)
        if not waiting and submitted and all(seen_state.get(j) in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")
                                             for j in submitted):
            break
        time.sleep(cfg.daemon.poll_interval)
    observer.read_reports([r for r in observer.source.jobs() if r.job_id in submitted])
    total = sum(n.gpus for n in observer.nodes())
    return _finish(out, started, runner, store, submitted, seen_state, time.time() - t0, total, say)


def submit_job(job: DemoJob, out: Path, env: dict[str, str], *, batch: str = "") -> str:
    """Submit one demo job (the launcher example) with `slurm-elastic submit`'s template; its job id.

    ``batch`` (``MIN:MAX``, global samples) lets the planner choose the job's batch in that range."""
    req = JobRequest(command=(sys.executable, str(EXAMPLE), "--dataset-size", str(job.dataset_size)),
                     min_gpus=job.min_gpus, max_gpus=job.max_gpus, gpus_per_node=1, epochs=job.epochs,
                     name=job.name, output=str(out / "jobs" / "%x-%j.out"), batch=batch,
                     secret_file=str(new_secret_file(out / "secrets")))
    (out / "jobs").mkdir(exist_ok=True)
    return submit("pytorch", req, env=env)


def _narrate(t0: float, observer: ClusterView, store: Store, submitted: dict[str, DemoJob],
             seen_state: dict[str, str], seen_rows: dict[str, int], say: Callable[[str], None]) -> None:
    stamp = f"[{time.time() - t0:5.1f}s]"
    for jid, rec in observer.records.items():
        state = rec.slurm_state[0] if rec.slurm_state else rec.state.value
        if jid in submitted and seen_state.get(jid) != state:
            seen_state[jid] = state
            where = f" on {','.join(f'{n}:{len(g)}' for n, g in rec.gpus)}" if rec.state is JobState.RUNNING else ""
            say(f"{stamp} job {jid} ({submitted[jid].name}) {state}{where}")
    for jid in submitted:
        if jid not in observer.records and seen_state.get(jid) not in (None, "COMPLETED"):
            seen_state[jid] = "COMPLETED"
            say(f"{stamp} job {jid} ({submitted[jid].name}) left the queue")
        rows = store.progress_of(jid)
        for r in rows[seen_rows.get(jid, 0):]:
            if r.kind == "resize":
                say(f"{stamp} job {jid} resized in place to {r.world} workers, batch {r.global_batch}: "
                    f"paused {r.pause_s or 0.0:.2f} s at sample {r.samples}")
            elif r.kind == "end":
                say(f"{stamp} job {jid} finished training: {r.samples} samples")
        seen_rows[jid] = len(rows)


def _finish(out: Path, started: dt.datetime, runner: Callable[[Sequence[str]], str], store: Store,
            submitted: dict[str, DemoJob], seen_state: dict[str, str], elapsed: float, total_gpus: int,
            say: Callable[[str], None]) -> dict[str, Any]:
    from slurm_elastic.reports import allocation
    from slurm_elastic.whatif import read_accounting

    per_job: list[dict[str, Any]] = []
    for jid, job in submitted.items():
        rows = store.progress_of(jid)
        end = [r for r in rows if r.kind == "end"]
        pauses = [r.pause_s for r in rows if r.kind == "resize" and r.pause_s is not None]
        actions = store.actions_of(jid)
        expected = job.epochs * job.dataset_size
        per_job.append({
            "job_id": jid, "name": job.name, "state": seen_state.get(jid, "?"),
            "samples": end[-1].samples if end else None, "expected_samples": expected,
            "exact": bool(end) and end[-1].samples == expected,
            "actions": [f"{e.action.kind.value}:{e.state}" for e in actions],
            "in_place_resizes": len(pauses), "pause_s_mean": sum(pauses) / len(pauses) if pauses else None,
            "pause_s_max": max(pauses) if pauses else None,
            "satellites": sorted(sat for sat, p in store.satellites(include_ended=True).items() if p == jid),
        })
    time.sleep(2.0)  # let slurmctld hand the last job ends to slurmdbd
    records = read_accounting(started - dt.timedelta(minutes=1), dt.datetime.now() + dt.timedelta(minutes=1),
                              runner=runner)
    inputs = store.report_inputs(str(r.job_id) for r in records)
    tables = allocation.allocation_tables(records, total_gpus=total_gpus, journal=inputs.journal,
                                          progress=inputs.progress, satellites=inputs.satellites)
    paths = allocation.write_html(tables, out / "report")
    html = next((p for p in paths if p.suffix == ".html"), paths[0])
    summary = {"seconds": round(elapsed, 1), "jobs": per_job, "report": str(html),
               "allocation": tables["summary"]}
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    say("")
    say(f"{'job':>5} {'name':<7} {'state':<10} {'samples':>14} {'resizes':>7} {'pause(mean)':>11}  actions")
    for j in per_job:
        mean = "-" if j["pause_s_mean"] is None else f"{j['pause_s_mean']:.2f} s"
        say(f"{j['job_id']:>5} {j['name']:<7} {j['state']:<10} {j['samples']!s:>6}/{j['expected_samples']:<7} "
            f"{j['in_place_resizes']:>7} {mean:>11}  {' '.join(j['actions'])}")
    say(f"allocation report: {html}")
    return summary
