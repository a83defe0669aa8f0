"""Philly-shaped workloads (Jeon et al., ATC'19) and Ares's setup on them (§5.1).

This module owns :func:`philly_like`, :func:`ares_philly` and the Philly draws of job sizes and
durations (:func:`philly_draw`) that ONES's and DL2's workloads sample too. Randomness comes only
from the generator or seed passed in.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from slurm_elastic.errors import TraceError
from slurm_elastic.sim.workload import MAX_SUBMIT_S, SimJobSpec, model_for_gpu_hours, scaled_to
from slurm_elastic_predictor import portable
from slurm_elastic_predictor.profiles import MODEL_DEFAULTS

# span minutes to days with a heavy tail).
PHILLY_GPUS = ((1, 0.70), (2, 0.10), (4, 0.10), (8, 0.08), (16, 0.02))
PHILLY_MEDIAN_S = 15 * 60.0
PHILLY_SIGMA = 1.6
PHILLY_MAX_S = 24 * 3600.0


def philly_sizes(rng: np.random.Generator, n: int) -> NDArray[np.int64]:
    """``n`` jobs' GPU counts drawn from Philly's mix (:data:`PHILLY_GPUS`)."""
    sizes = np.array([g for g, _ in PHILLY_GPUS])
    probs = np.array([p for _, p in PHILLY_GPUS])
    return rng.choice(sizes, size=n, p=probs / probs.sum())


def philly_draw(rng: np.random.Generator, n: int) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """``n`` jobs' GPU counts and durations (seconds) with Philly's shape."""
    k = philly_sizes(rng, n)
    dur = np.minimum(PHILLY_MAX_S, PHILLY_MEDIAN_S * portable.exp(PHILLY_SIGMA * rng.standard_normal(n)))
    return k, dur


def philly_like(n_jobs: int, gpus: int, seed: int, load: float = 0.9, window_s: float | None = None) -> list[
        SimJobSpec]:
    """A synthetic trace with Philly's shape: GPU counts from :data:`PHILLY_GPUS`, log-normal
    durations (median 15 min, sigma 1.6, capped at 24 h), Poisson arrivals at a rate that offers
    ``load`` times the cluster's GPU-time on average. Models follow the GPU-time classes (Ares's
    mapping: Small, Medium, Large and X-Large GPU times to the Table 2 models of their class).

    ``window_s``: instead, the jobs are submitted over that window, as a Poisson process with that
    many arrivals in it (uniform times, sorted): Ares samples "160 jobs submitted over 8 hours"
    (:func:`ares_philly`); ``load`` is then unused."""
    if n_jobs < 1 or gpus < 1 or load <= 0 or (window_s is not None and not 0 < window_s < MAX_SUBMIT_S):
        raise TraceError(f"philly-like: n_jobs={n_jobs}, gpus={gpus}, load={load}, window_s={window_s} must all be "
                         f"positive (a window below {MAX_SUBMIT_S:.0f} s)")
    rng = np.random.default_rng(seed)
    k, dur = philly_draw(rng, n_jobs)
    if window_s is not None:
        submit = np.sort(rng.uniform(0.0, window_s, size=n_jobs))
    else:
        submit = np.cumsum(rng.exponential(float(np.mean(k * dur)) / (load * gpus), size=n_jobs))
    jobs = []
    for i in range(n_jobs):
        req = int(k[i])
        model = model_for_gpu_hours(req * float(dur[i]) / 3600, i)
        local, epoch = MODEL_DEFAULTS[model]
        spec = SimJobSpec(str(i + 1), round(float(submit[i]), 3), model, req, 1, max(req, min(4 * req, 64)),
                          local * req, local, local * max(req, min(4 * req, 64)), epoch)
        jobs.append(scaled_to(spec, float(dur[i])))
    return jobs


ARES_JOBS, ARES_WINDOW_S, ARES_GPUS = 160, 8 * 3600.0, 64


def ares_philly(seed: int) -> list[SimJobSpec]:
    """Ares's simulation setup for its Philly traces (§5.1): a 64-GPU cluster, each trace "160 jobs
    submitted over 8 hours", every record mapped to the Table 2 model of its GPU-time class. The
    Philly records themselves are not shipped: :func:`philly_like` draws them, and each job trains
    its model for the drawn duration at its request."""
    return philly_like(ARES_JOBS, ARES_GPUS, seed, window_s=ARES_WINDOW_S)
