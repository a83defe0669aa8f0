"""Metrics of one simulated run, from per-job records and the timeline.

This module owns the definitions (pure functions, no simulation):

* JCT = end - submit; queueing = first start - submit; execution = end - first start;
  averages, p50 and p99 over finished jobs; makespan = last end - first submit.
* Warm-up jobs (``SimJobSpec.measured`` false: ONES leaves its first 5% out) are scheduled like
  any other but counted in no metric but ``jobs_warmup``: "finished jobs" below are the measured ones.
* GPU-hours = sum of GPU-seconds held / 3600; average utilization = time-average busy GPUs / GPUs
  from first submit to last end.
* Drop ratio = dropped / jobs (IBM).
* Scheduled-job-scaling efficiency (IBM): sum of each finished job's optimal single-GPU time over
  the GPU-time it really used.
* Finish-time fairness (Themis): ``FTF = JCT / JCT_fair`` where ``JCT_fair`` is the job's time
  alone at its requested size, stretched by ``N_avg * requested / G`` when the cluster's fair share
  ``G / N_avg`` is below its request (``N_avg`` = time-average number of jobs in the system during
  the job's lifetime; linear slow-down below the request, as Themis assumes). Unfair fraction =
  share of finished jobs with FTF > 1; worst FTF = max.
* Resizes per job = resizes of finished jobs / finished jobs.
* Lower bound on avg JCT (:mod:`slurm_elastic.sim.lower_bound`), over the same finished jobs as
  ``avg_jct``: ``lower_bound_avg_jct`` = max(``lower_bound_solo_avg_jct``, each job alone at its
  fastest configuration; ``lower_bound_capacity_avg_jct``, preemptive SRPT of each job's least
  GPU-seconds on the cluster as one machine; ``lower_bound_fluid_avg_jct``, the fluid relaxation
  of the cluster's GPU-seconds and each job's rate, ``None`` for traces too large for its linear
  program), and ``avg_jct_over_lower_bound`` = avg JCT / that
  (>= 1; how far the policy is from a clairvoyant one at most). ``None`` when no job finished or
  when the run's physics let a job leave its declared ranges (``equal_start``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from slurm_elastic.sim.lower_bound import lower_bound
from slurm_elastic.sim.workload import SimJobSpec, requested_time, single_gpu_time


def _avg(xs: Sequence[float]) -> float | None:
    return float(np.mean(xs)) if xs else None


def _pct(xs: Sequence[float], q: float) -> float | None:
    return float(np.percentile(xs, q)) if xs else None


def metrics(records: list[dict[str, Any]], specs: Sequence[SimJobSpec], timeline: Mapping[str, Sequence[float]],
            gpus: int, *, gpus_per_node: int = 4, bound: bool = True) -> dict[str, Any]:
    """Compute every metric of the module docstring; fills each record's ``ftf`` in place.

    Args:
        gpus_per_node: GPUs per node (the shapes the lower bound searches).
        bound: compute the lower bound (``False``: its keys are ``None``).
    """
    by_id = {s.job_id: s for s in specs}
    t = np.asarray(timeline["t"], dtype=np.float64)
    busy = np.asarray(timeline["busy_gpus"], dtype=np.float64)
    active = np.asarray(timeline.get("active", [0] * len(t)), dtype=np.float64)
    # Step functions: value i holds on [t[i], t[i+1]).
    dt = np.diff(t)
    cum_active = np.concatenate([[0.0], np.cumsum(active[:-1] * dt)])

    def integral(a: float, b: float) -> float:
        va, vb = (float(np.interp(x, t, cum_active)) for x in (a, b))
        return vb - va

    fin = [r for r in records if r["finished"] and by_id[r["job_id"]].measured]
    warmup = sum(1 for s in specs if not s.measured)
    for r in fin:
        span = r["end"] - r["submit"]
        n_avg = max(1.0, integral(r["submit"], r["end"]) / span) if span > 0 else 1.0
        spec = by_id[r["job_id"]]
        alone = requested_time(spec)
        fair = alone * max(1.0, n_avg * spec.requested_gpus / gpus)
        r["ftf"] = r["jct"] / fair if fair > 0 else None
    jct = [r["jct"] for r in fin]
    ftf = [r["ftf"] for r in fin if r["ftf"] is not None]
    start = min((s.submit_time for s in specs), default=0.0)
    end = max((r["end"] for r in fin), default=start)
    span = end - start
    util = None
    if span > 0 and len(t) > 1:
        mask_t = np.clip(t, start, end)
        util = float(np.sum(busy[:-1] * np.diff(mask_t)) / (gpus * span))
    opt = sum(single_gpu_time(by_id[r["job_id"]]) for r in fin)
    used = sum(r["gpu_seconds"] for r in fin)
    dropped = sum(1 for r in records if r["dropped"])
    lb = lower_bound(specs, gpus, gpus_per_node, {r["job_id"] for r in fin}) if bound and fin else None
    avg_jct = _avg(jct)
    bound_jct = lb.value if lb is not None else None
    return {
        "jobs": len(records),
        "jobs_completed": len(fin),
        "jobs_dropped": dropped,
        "jobs_unfinished": sum(1 for r in records if not r["finished"] and not r["dropped"]),
        "jobs_warmup": warmup,
        "drop_ratio": dropped / len(records) if records else 0.0,
        "avg_jct": avg_jct,
        "p50_jct": _pct(jct, 50),
        "p99_jct": _pct(jct, 99),
        "avg_queue": _avg([r["queue"] for r in fin]),
        "avg_exec": _avg([r["exec"] for r in fin]),
        "makespan": span,
        "gpu_hours": sum(r["gpu_seconds"] for r in records) / 3600,
        "avg_utilization": util,
        "scaling_efficiency": opt / used if used > 0 else None,
        "unfair_fraction": (sum(1 for f in ftf if f > 1.0) / len(ftf)) if ftf else None,
        "worst_ftf": max(ftf) if ftf else None,
        "resizes_per_job": (sum(r["resizes"] for r in fin) / len(fin)) if fin else None,
        "lower_bound_avg_jct": bound_jct,
        "lower_bound_solo_avg_jct": lb.solo if lb is not None else None,
        "lower_bound_capacity_avg_jct": lb.capacity if lb is not None else None,
        "lower_bound_fluid_avg_jct": lb.fluid if lb is not None else None,
        "avg_jct_over_lower_bound": (avg_jct / bound_jct) if avg_jct is not None and bound_jct else None,
    }
