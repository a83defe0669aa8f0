"""``slurm-elastic bench simulate``: the simulator's wall time and memory on a long Philly-like trace.

This module owns that one measurement; it runs the simulator in this process (no Slurm, no files).
"""

from __future__ import annotations

import resource
import time
from typing import Any

from slurm_elastic import policies


def bench_simulate(*, jobs: int, gpus: int, policy: str, seed: int = 1, round_gap: float = 30.0) -> dict[str, Any]:
    """Wall time and peak memory of simulating a Philly-like trace of ``jobs`` jobs on ``gpus`` GPUs.

    The run has no horizon: every job arrives and it ends when the last job does, however long the
    trace's span (a million jobs on 1,024 GPUs arrive over about three months). ``simulate_s`` covers
    the whole of :func:`~slurm_elastic.sim.engine.simulate`, its metrics and lower bound included, in
    wall time, and ``simulate_cpu_s`` the same in this process's CPU time (on a shared machine, the
    figure to compare);
    ``peak_rss_mib`` is the process's (the trace, the run and its result together).
    """
    from slurm_elastic.sim.engine import simulate
    from slurm_elastic.workloads.philly import philly_like

    t0 = time.perf_counter()
    trace = philly_like(jobs, gpus, seed)
    t1, c1 = time.perf_counter(), time.process_time()
    res = simulate(trace, policies.create(policy), gpus=gpus, seed=seed, round_gap=round_gap, workload="philly-like")
    t2, c2 = time.perf_counter(), time.process_time()
    m = res["metrics"]
    return {
        "benchmark": "simulate", "workload": "philly-like", "jobs": jobs, "gpus": gpus, "policy": policy,
        "round_gap_s": round_gap, "generate_s": round(t1 - t0, 2), "simulate_s": round(t2 - t1, 2),
        "simulate_cpu_s": round(c2 - c1, 2),
        "simulate_us_per_job": round(1e6 * (t2 - t1) / jobs, 1),
        "rounds": res["rounds"], "jobs_completed": m["jobs_completed"], "jobs_unfinished": len(res["unfinished"]),
        "avg_jct_s": m["avg_jct"], "last_submit_day": round(max(j.submit_time for j in trace) / 86_400, 1),
        "virtual_span_h": round(m["makespan"] / 3600, 1),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
