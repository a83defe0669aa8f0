"""The cluster that runs a workload at a load: the GPUs a workload keeps busy on average.

This module owns :func:`offered_gpus` and :func:`gpus_for_load` (``simulate --load``). It reads the
jobs' times at their requests from the simulator's physics (:func:`~slurm_elastic.sim.workload.requested_time`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from slurm_elastic.errors import TraceError
from slurm_elastic.sim.workload import SimJobSpec, requested_time


def offered_gpus(jobs: Sequence[SimJobSpec]) -> float:
    """The GPUs a workload keeps busy on average: the GPU-time it brings, each job at its request
    (``requested_gpus`` x :func:`requested_time`), over the time it takes to arrive plus one mean
    job length (``last submit - first submit + mean requested_time``: the second term keeps a
    workload that arrives at once finite and is small against a long trace's span).

    A cluster of ``offered_gpus(jobs) / load`` GPUs runs the workload at that ``load`` (1: as many
    GPUs as it asks for on average; above 1 the queue grows while jobs arrive).

    Raises:
        TraceError: no jobs.
    """
    if not jobs:
        raise TraceError("the workload has no jobs: its offered load is undefined")
    times = [requested_time(j) for j in jobs]
    work = sum(j.requested_gpus * t for j, t in zip(jobs, times, strict=True))
    submits = [j.submit_time for j in jobs]
    return work / (max(submits) - min(submits) + sum(times) / len(times))


def gpus_for_load(jobs: Sequence[SimJobSpec], load: float, gpus_per_node: int) -> int:
    """The cluster (whole nodes of ``gpus_per_node``) that runs ``jobs`` at ``load``
    (:func:`offered_gpus` / load, rounded up), never smaller than the largest job's minimum.

    Raises:
        TraceError: no jobs, or a load that is not a finite number > 0.
    """
    if not (math.isfinite(load) and load > 0):
        raise TraceError(f"load {load!r}: must be a finite number > 0")
    need = max(offered_gpus(jobs) / load, max(j.min_gpus for j in jobs))
    return max(1, math.ceil(need / gpus_per_node)) * gpus_per_node
