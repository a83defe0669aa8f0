"""``slurm-elastic bench planner``: the planner's latency on a synthetic cluster, and how it scales.

This module owns the planner's measurement loops (wall clock via ``time.perf_counter``); what they
measure is the pure core, fed with synthetic snapshots from :mod:`slurm_elastic.testing`.
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
