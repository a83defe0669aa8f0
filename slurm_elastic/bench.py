"""Benchmarks behind ``slurm-elastic bench``: figures as JSON, never asserted in tests.

This module owns the measurement loops (wall clock via ``time.perf_counter``); what they measure
is the pure core, fed with synthetic snapshots from :mod:`slurm_elastic.testing`.
"""

from __future__ import annotations

import dataclasses
import math
import platform
import resource
import statistics
import time
from typing import Any

import numpy as np

from slurm_elastic import policies
from slurm_elastic.core.constraints import plan_violations
from slurm_elastic.core.trust import ReportGuard
from slurm_elastic.errors import ConfigError
from slurm_elastic.testing import random_snapshot


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def bench_planner(*, gpus: int, gpus_per_node: int, jobs: int, policy: str, repeat: int = 20,
                  seed: int = 0, params: dict[str, Any] | None = None, reported: bool = False) -> dict[str, Any]:
    """Planning latency of ``policy`` on a synthetic cluster.

    The first call has no memo (cold); the ``repeat`` calls after it each get the previous memo
    and a fresh seed, as the daemon's rounds do. Every plan is validated (outside the timing).
    With ``reported``, every running job carries a report (a measured throughput of 1,000
    samples/s and its prior, as the daemon's observer gives a job that reported) and the policy
    runs in the trust guard (:class:`~slurm_elastic.core.trust.ReportGuard`), as the daemon runs
    it; the bare policy is timed on the same snapshot too, alternating plan by plan
    (``bare_median_ms``, and ``guard_ratio``: what the guard costs).

    Returns:
        A JSON-ready dict: latencies in milliseconds (cold, median, p95, min, max), the
        cluster shape, the planner parameters, and the process's peak RSS in MiB.
    """
    if gpus < 1 or gpus_per_node < 1 or jobs < 0 or repeat < 1:
        raise ConfigError(
            f"bench planner: gpus={gpus}, gpus_per_node={gpus_per_node}, jobs={jobs}, repeat={repeat}: "
            "need gpus >= 1, gpus_per_node >= 1, jobs >= 0, repeat >= 1"
        )
    params = dict(params or {})
    snap = random_snapshot(np.random.default_rng(seed), math.ceil(gpus / gpus_per_node), gpus_per_node, jobs)
    planner = policies.create(policy, **params)
    if reported:
        snap = dataclasses.replace(snap, jobs=tuple(
            dataclasses.replace(j, observed_throughput=1000.0, prior=j) if j.elastic and j.num_gpus else j
            for j in snap.jobs))
        planner = ReportGuard(planner)
    t0 = time.perf_counter()
    res = planner.plan(snap, None, np.random.default_rng(seed))
    cold = time.perf_counter() - t0
    bad = plan_violations(snap, res.plan)
    times: list[float] = []
    bare = policies.create(policy, **params) if reported else None
    bare_memo = bare.plan(snap, None, np.random.default_rng(seed)).memo if bare is not None else None
    bare_times: list[float] = []
    for i in range(repeat):
        t0 = time.perf_counter()
        res = planner.plan(snap, res.memo, np.random.default_rng(seed + 1 + i))
        times.append(time.perf_counter() - t0)
        bad += plan_violations(snap, res.plan)
        if bare is not None:
            t0 = time.perf_counter()
            bare_memo = bare.plan(snap, bare_memo, np.random.default_rng(seed + 1 + i)).memo
            bare_times.append(time.perf_counter() - t0)
    ms = [t * 1000 for t in times]
    compared = {}
    if bare_times:
        bare_ms = statistics.median(bare_times) * 1000
        compared = {"bare_median_ms": round(bare_ms, 2), "guard_ratio": round(statistics.median(ms) / bare_ms, 2)}
    return {
        "benchmark": "planner",
        "policy": policy,
        "reported": reported,
        "params": params,
        "gpus": len(snap.schedulable_gpus()),
        "nodes": len(snap.nodes),
        "gpus_per_node": gpus_per_node,
        "jobs": jobs,
        "elastic_jobs": len(snap.elastic_jobs()),
        "running_after": len(res.plan.jobs),
        "repeat": repeat,
        "cold_ms": round(cold * 1000, 2),
        "median_ms": round(statistics.median(ms), 2),
        "p95_ms": round(_pct(ms, 0.95), 2),
        "min_ms": round(min(ms), 2),
        "max_ms": round(max(ms), 2),
        **compared,
        "invalid_plans": len(bad),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "python": platform.python_version(),
        "numpy": np.__version__,
    }


SCALING_GPUS = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
"""Cluster sizes of ``bench planner --scaling``."""


def bench_planner_scaling(*, policy: str, gpus_per_node: int = 4, jobs_per_gpu: float = 0.25,
                          repeat: int = 3, seed: int = 0, params: dict[str, Any] | None = None,
                          sizes: tuple[int, ...] = SCALING_GPUS) -> list[dict[str, Any]]:
    """:func:`bench_planner` at each cluster size of ``sizes`` (one process), with where the time goes.

    Each size gets ``jobs_per_gpu`` jobs per GPU (1,024 jobs on 4,096 GPUs by default) and, beside
    the latencies, ``profile``: the planner's own functions with the largest share of one more plan
    (under cProfile, with the memo: cumulative, so nested functions overlap; entry points left out).
    """
    import cProfile
    import pstats

    rows = []
    for gpus in sizes:
        jobs = max(1, round(gpus * jobs_per_gpu))
        row = bench_planner(gpus=gpus, gpus_per_node=gpus_per_node, jobs=jobs, policy=policy, repeat=repeat,
                            seed=seed, params=params)
        snap = random_snapshot(np.random.default_rng(seed), math.ceil(gpus / gpus_per_node), gpus_per_node, jobs)
        planner = policies.create(policy, **dict(params or {}))
        res = planner.plan(snap, None, np.random.default_rng(seed))
        prof = cProfile.Profile()
        prof.enable()
        planner.plan(snap, res.memo, np.random.default_rng(seed + 1))
        prof.disable()
        stats: dict[Any, Any] = pstats.Stats(prof).stats  # type: ignore[attr-defined]
        total = max(sum(tt for _, _, tt, _, _ in stats.values()), 1e-12)
        own = [(ct, f"{file.rsplit('/', 1)[-1]}:{name}") for (file, _, name), (_, _, _, ct, _) in stats.items()
               if "slurm_elastic" in file and ct < 0.95 * total]
        own.sort(reverse=True)
        row["profile"] = [{"function": name, "share": round(ct / total, 3)} for ct, name in own[:8]]
        rows.append(row)
    return rows


def bench_simulate(*, jobs: int, gpus: int, policy: str, seed: int = 1, round_gap: float = 30.0) -> dict[str, Any]:
    """Wall time and peak memory of simulating a Philly-like trace of ``jobs`` jobs on ``gpus`` GPUs.

    The run has no horizon: every job arrives and it ends when the last job does, however long the
    trace's span (a million jobs on 1,024 GPUs arrive over about three months). ``simulate_s`` covers
    the whole of :func:`~slurm_elastic.sim.engine.simulate`, its metrics and lower bound included;
    ``peak_rss_mib`` is the process's (the trace, the run and its result together).
    """
    from slurm_elastic.sim.engine import simulate
    from slurm_elastic.sim.workload import philly_like

    t0 = time.perf_counter()
    trace = philly_like(jobs, gpus, seed)
    t1 = time.perf_counter()
    res = simulate(trace, policies.create(policy), gpus=gpus, seed=seed, round_gap=round_gap, workload="philly-like")
    t2 = time.perf_counter()
    m = res["metrics"]
    return {
        "benchmark": "simulate", "workload": "philly-like", "jobs": jobs, "gpus": gpus, "policy": policy,
        "round_gap_s": round_gap, "generate_s": round(t1 - t0, 2), "simulate_s": round(t2 - t1, 2),
        "simulate_us_per_job": round(1e6 * (t2 - t1) / jobs, 1),
        "rounds": res["rounds"], "jobs_completed": m["jobs_completed"], "jobs_unfinished": len(res["unfinished"]),
        "avg_jct_s": m["avg_jct"], "last_submit_day": round(max(j.submit_time for j in trace) / 86_400, 1),
        "virtual_span_h": round(m["makespan"] / 3600, 1),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def bench_reaction(*, root: Any, repeat: int = 5, poll_interval: float = 0.2) -> dict[str, Any]:
    """Submit -> planned and submit -> running latency of the acting daemon on a running dev cluster.

    For each repetition: submit ``sbatch --elastic=1:4 --gres=gpu:1 --wrap 'sleep 30'`` (held by
    ``job_submit.lua`` for the daemon) and run the daemon's loop (change check every
    ``poll_interval`` seconds) until a recorded round's plan contains the job (*planned*: the
    daemon's own observe + plan + record) and then until ``squeue`` shows it RUNNING at the
    planned GPU count (*running*: the START's ``scontrol`` updates and slurmctld's scheduling).
    """
    import subprocess
    import tempfile
    from pathlib import Path

    from slurm_elastic.config import Config, DaemonConfig
    from slurm_elastic.core.model import JobId, JobState
    from slurm_elastic.dev import devcluster
    from slurm_elastic.slurm.cli_backend import SlurmCli
    from slurm_elastic.slurm.commands import run_command
    from slurm_elastic.store import Store
    from slurm_elastic.testing import shipped_profiles
    from slurm_elastic.wiring import cluster_view, slurm_daemon

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
