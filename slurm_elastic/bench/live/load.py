"""``slurm-elastic bench load``: the acting daemon under a queue of many elastic jobs on a real dev cluster.

This module owns the load benchmark: ``--jobs`` jobs ``sbatch --elastic=1:4 --gres=gpu:1
--wrap 'sleep S'`` submitted at once on a small cluster (3 nodes x 2 GPUs: 6 GPUs),
the daemon (policy ``efq``, the site guards' defaults) run in this process until the queue drains
(until slurmctld is done with every job), and what it cost: how many jobs completed (slurmctld's
final state; accounting's for a job it no longer lists), how many times Slurm requeued each job (the
largest ``restart_count`` seen, whoever requeued it), how long the queue took to drain against the
ideal (every job at one GPU, the GPUs never idle: ``ceil(jobs / gpus) * S``), how long the
daemon's rounds took, and what it did (its journal: actions by kind, and the refused ones by reason).

It brings up its own dev cluster under ``root`` and takes it down when done (``bring_up=False``
uses one that is already running there: the tests' cluster).
"""

from __future__ import annotations

import math
import re
import statistics
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from slurm_elastic.config import SITE_GUARD_DEFAULTS, Config, DaemonConfig
from slurm_elastic.core.guards import Guards
from slurm_elastic.dev import devcluster
from slurm_elastic.errors import ConfigError
from slurm_elastic.slurm.cli_backend import SlurmCli
from slurm_elastic.slurm.dialects import has_settled
from slurm_elastic.slurm.records import JobRecord
from slurm_elastic.slurm.runner import run_command
from slurm_elastic.store import JournalEntry, Store
from slurm_elastic.testing import shipped_profiles
from slurm_elastic.wiring import cluster_view, slurm_daemon

NODES, GPUS_PER_NODE = 3, 2


def bench_load(*, root: Path, jobs: int = 200, sleep_s: int = 20, policy: str = "efq", bring_up: bool = True,
               timeout_s: float = 3600.0) -> dict[str, Any]:
    """Submit ``jobs`` elastic sleep jobs at once, run the acting daemon until Slurm is done with
    every one (terminal and no longer completing: a job being requeued completes first), and print
    what the queue cost (see the module docstring).

    Raises:
        ConfigError: no dev cluster at ``root`` (with ``bring_up=False``), or the queue did not
            drain within ``timeout_s``.
    """
    if not bring_up:
        if not devcluster.status(root).get("up"):
            raise ConfigError(f"bench load: no dev cluster is up at {root}")
        return _run(root, jobs, sleep_s, policy, timeout_s)
    with devcluster.running(NODES, GPUS_PER_NODE, root):
        return _run(root, jobs, sleep_s, policy, timeout_s)


def _run(root: Path, jobs: int, sleep_s: int, policy: str, timeout_s: float) -> dict[str, Any]:
    env = devcluster.slurm_env(root)

    def runner(argv: Any) -> str:
        return run_command(argv, env=env)

    with tempfile.TemporaryDirectory() as tmp:
        cfg = Config(DaemonConfig(partitions=("gpu",), policy=policy, store=Path(tmp) / "s.db", dry_run=False,
                                  poll_interval=0.5, max_idle=5.0), guards=Guards(**SITE_GUARD_DEFAULTS))
        store = Store(cfg.daemon.store)
        view = cluster_view(cfg, SlurmCli(runner), store, profiles=shipped_profiles())
        daemon = slurm_daemon(cfg, view, store, client_env=env)
        gpus = sum(n.gpus for n in view.nodes())
        t0 = time.monotonic()
        ids = [_submit(env, tmp, sleep_s) for _ in range(jobs)]
        restarts: dict[str, int] = dict.fromkeys(ids, 0)
        seen: set[str] = set()  # a job seen once and no longer listed has ended
        rounds: list[float] = []
        while True:
            if daemon.due():
                t = time.perf_counter()
                daemon.round()
                rounds.append(time.perf_counter() - t)
            live: dict[str, JobRecord] = {r.job_id: r for r in view.records.values() if r.job_id in restarts}
            for jid, rec in live.items():
                restarts[jid] = max(restarts[jid], rec.restart_count)
                seen.add(jid)
            queued = [j for j in ids if j not in seen or (j in live and not has_settled(live[j].slurm_state))]
            if not queued:
                break
            if time.monotonic() - t0 > timeout_s:
                raise ConfigError(f"bench load: {len(queued)} of {jobs} jobs still queued after {timeout_s:.0f} s")
            time.sleep(cfg.daemon.poll_interval)
        drain = time.monotonic() - t0
        journal = store.actions_between(0.0, math.inf)
        store.close()
    ended = {j: live[j].slurm_state[0] for j in ids if j in live}
    states = {**_accounted_states(env, [j for j in ids if j not in ended]), **ended}
    completed = sum(1 for s in states.values() if s.startswith("COMPLETED"))
    preemptions = sum(restarts.values())
    ideal = math.ceil(jobs / gpus) * sleep_s
    return {"benchmark": "load", "jobs": jobs, "gpus": gpus, "sleep_s": sleep_s, "policy": policy,
            "completed": completed,
            "not_completed": {j: s or "absent from Slurm and its accounting"
                              for j, s in states.items() if not s.startswith("COMPLETED")},
            "preemptions": preemptions,
            "preemptions_per_job": round(preemptions / jobs, 3), "most_preemptions_of_one_job": max(restarts.values()),
            "drain_s": round(drain, 1), "ideal_drain_s": ideal, "drain_over_ideal": round(drain / ideal, 3),
            "rounds": len(rounds), "round_p50_s": round(statistics.median(rounds), 4),
            "round_p99_s": round(_percentile(rounds, 0.99), 4), **_journal_counts(journal)}


def _journal_counts(journal: list[JournalEntry]) -> dict[str, Any]:
    """What the daemon did, from its journal: its actions by kind, how many Slurm or the actor
    refused, and each refusal's reason with its count (the job id taken out, so one reason met by
    many jobs is one line): a refused action is otherwise seen only as a log line on stderr."""
    kinds = Counter(e.action.kind.value for e in journal)
    refused = [e for e in journal if e.state == "failed"]
    reasons = Counter(re.sub(r"\b(?:job|JobId=?)\s*\d+", "job J", e.message) for e in refused)
    return {"actions": dict(sorted(kinds.items())), "actions_refused": len(refused),
            "refusals": dict(reasons.most_common())}


def _submit(env: dict[str, str], cwd: str, sleep_s: int) -> str:
    out = subprocess.run(["sbatch", "--parsable", "--elastic=1:4", "--gres=gpu:1", "--output=/dev/null",
                          "--wrap", f"sleep {sleep_s}"], env=env, capture_output=True, text=True, check=True, cwd=cwd)
    return out.stdout.strip().split(";")[0]


def _accounted_states(env: dict[str, str], ids: list[str]) -> dict[str, str]:
    """Each job's state in Slurm's accounting ("" where it has none), waiting a little for slurmdbd
    to record every job COMPLETED: for the jobs slurmctld no longer lists. slurmctld's own final
    state comes first: a job requeued twice within seconds can be left PENDING in accounting
    while slurmctld says COMPLETED (22.05 kept a RESIZING, a COMPLETED and a PENDING row for one
    such job, none of them its last run)."""
    if not ids:
        return {}
    deadline = time.monotonic() + 30
    while True:
        out = run_command(["sacct", "-n", "-P", "-X", "-o", "JobID,State", "-j", ",".join(ids)], env=env)
        found = dict(line.split("|", 1) for line in out.splitlines() if "|" in line)
        states = {j: found.get(j, "") for j in ids}
        if all(s.startswith("COMPLETED") for s in states.values()) or time.monotonic() > deadline:
            return states
        time.sleep(1.0)


def _percentile(xs: list[float], q: float) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0
