"""``slurm-elastic bench reaction``: how fast the acting daemon plans and starts a new job on a dev cluster.

This module owns the reaction benchmark: submit -> planned and submit -> running, measured against a
dev cluster that is already up (``slurm-elastic devcluster up``); it changes that cluster's queue.
"""

from __future__ import annotations

import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from slurm_elastic.config import Config, DaemonConfig
from slurm_elastic.core.model import JobId, JobState
from slurm_elastic.dev import devcluster
from slurm_elastic.errors import ConfigError
from slurm_elastic.slurm.cli_backend import SlurmCli
from slurm_elastic.slurm.runner import run_command
from slurm_elastic.store import Store
from slurm_elastic.testing import shipped_profiles
from slurm_elastic.wiring import cluster_view, slurm_daemon


def bench_reaction(*, root: Any, repeat: int = 5, poll_interval: float = 0.2) -> dict[str, Any]:
    """Submit -> planned and submit -> running latency of the acting daemon on a running dev cluster.

    For each repetition: submit ``sbatch --elastic=1:4 --gres=gpu:1 --wrap 'sleep 30'`` (held by
    ``job_submit.lua`` for the daemon) and run the daemon's loop (change check every
    ``poll_interval`` seconds) until a recorded round's plan contains the job (*planned*: the
    daemon's own observe + plan + record) and then until ``squeue`` shows it RUNNING at the
    planned GPU count (*running*: the START's ``scontrol`` updates and slurmctld's scheduling).
    """
    env = devcluster.slurm_env(Path(root))
    if not devcluster.status(Path(root)).get("up"):
        raise ConfigError(f"bench reaction: no dev cluster is up at {root}; run `slurm-elastic devcluster up` first")

    def runner(argv: Any) -> str:
        return run_command(argv, env=env)

    with tempfile.TemporaryDirectory() as tmp:
        cfg = Config(DaemonConfig(partitions=("gpu",), policy="dp", store=Path(tmp) / "s.db", dry_run=False,
                                  poll_interval=poll_interval, max_idle=3600.0))
        store = Store(cfg.daemon.store)
        view = cluster_view(cfg, SlurmCli(runner), store, profiles=shipped_profiles())
        daemon = slurm_daemon(cfg, view, store, client_env=env)
        daemon.run(max_rounds=1)
        planned: list[float] = []
        running: list[float] = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            out = subprocess.run(["sbatch", "--parsable", "--elastic=1:4", "--gres=gpu:1", "--wrap", "sleep 30"],
                                 env=env, capture_output=True, text=True, check=True, cwd=tmp)
            job = JobId(out.stdout.strip().split(";")[0])
            target = 0
            while True:
                if daemon.due():
                    rec = daemon.round()
                    mine = [jp for jp in rec.plan.jobs if jp.job_id == job]
                    if mine and not target:
                        target = mine[0].num_gpus
                        planned.append(time.perf_counter() - t0)
                    now = [j for j in rec.snapshot.jobs if j.job_id == job]
                    if target and now and now[0].state is JobState.RUNNING and now[0].num_gpus == target:
                        running.append(time.perf_counter() - t0)
                        break
                if time.perf_counter() - t0 > 60:
                    raise ConfigError(f"bench reaction: job {job} not running at its planned size within 60 s")
                time.sleep(poll_interval)
            subprocess.run(["scancel", job], env=env, check=False, capture_output=True)
            while any(r.job_id == job and r.state is not JobState.FINISHED for r in view.source.jobs()):
                time.sleep(poll_interval)
        store.close()

    def stats(xs: list[float]) -> dict[str, float]:
        ms = [x * 1000 for x in xs]
        return {"median_ms": round(statistics.median(ms), 1), "min_ms": round(min(ms), 1),
                "max_ms": round(max(ms), 1)}

    return {"benchmark": "reaction", "repeat": repeat, "poll_interval_s": poll_interval,
            "planned": {"measured": "sbatch --elastic submit -> job in a recorded plan", **stats(planned)},
            "running": {"measured": "sbatch --elastic submit -> squeue shows it RUNNING at the planned GPUs "
                                    "(acting daemon)", **stats(running)}}
