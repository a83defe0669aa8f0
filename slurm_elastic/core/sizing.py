"""How a job's batch, per-GPU batch, accumulation and learning rate follow its GPU count.

This module owns the one translation from "job j gets k GPUs (under batch limit R)" to a concrete
:class:`~slurm_elastic.core.model.JobPlan` configuration, and the throughput a planner should
expect from it. Every planner uses it, so exo/endo semantics and learning-rate scaling are
defined once. Pure: no I/O.

* Exo-elastic: the per-GPU batch stays at the job's request (``base_local_batch``) and the global
  batch is ``k * base_local_batch``, clamped into the job's batch range and under the batch limit
  ``R`` (ONES's ``R_j``); the learning rate scales linearly with the global batch (Goyal et al.,
  as ONES and the IBM optimizer do). :func:`best_exo_batch` instead searches the batch that
  maximises throughput (the IBM optimizer's ``b_opt(k)``).
* Endo-elastic: the global batch stays at ``base_batch``; the per-GPU batch is
  ``ceil(B / k)``, and when that exceeds the memory limit, gradient accumulation splits it into
  ``ceil(B / (k * max_local_batch))`` micro-steps. The learning rate is unchanged.

Throughput correction: where a running job reports a measured throughput, predictions for that
job are multiplied by ``measured / predicted`` at its current configuration (clipped to
[0.25, 4]), so a profile that is off for this job is corrected by what the job really does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from slurm_elastic.core.model import ElasticMode, Job
from slurm_elastic_predictor.throughput import ThroughputModel

CORRECTION_CLIP = (0.25, 4.0)


@dataclass(frozen=True, slots=True)
class Sizing:
    """A concrete configuration for ``k`` GPUs: batch (samples), per-GPU batch, micro-steps, LR."""

    global_batch: int
    local_batch: int
    accumulation: int
    lr: float


def kept(job: Job) -> Sizing:
    """The running job's configuration as it is now (a job kept at its size and batch)."""
    k = job.num_gpus
    return Sizing(job.global_batch, job.local_batch, max(1, -(-job.global_batch // (k * job.local_batch))),
                  job.base_lr * job.global_batch / job.base_batch)


def _endo(job: Job, fixed_batch: bool) -> bool:
    return fixed_batch or job.mode is ElasticMode.ENDO


def shape_key(job: Job, fixed_batch: bool = False) -> tuple[object, ...]:
    """Everything that decides a job's sizes and predicted throughput, except measurements.

    Jobs with the same key have the same sizing and (uncorrected) throughput tables, so planners
    cache tables by it across jobs and rounds. ``fixed_batch``: the key of the job sized
    endo-elastic whatever its mode (as :func:`size_for` with ``fixed_batch``).
    """
    mode = ElasticMode.ENDO if fixed_batch else job.mode
    return (job.model, mode, job.min_batch, job.max_batch, job.base_batch, job.requested_gpus,
            job.max_local_batch)


def max_local(job: Job, model: ThroughputModel) -> int:
    """Per-GPU batch limit: the job's own limit and the profile's, whichever is smaller."""
    return max(1, min(job.max_local_batch, model.max_local_batch))


IntArr = NDArray[np.int64]


def sizes(job: Job, model: ThroughputModel, ks: IntArr, batch_limit: int | None = None,
          fixed_batch: bool = False) -> tuple[IntArr, IntArr, IntArr, NDArray[np.bool_]]:
    """Vectorised :func:`size_for` over GPU counts ``ks``: (global, per-GPU, accumulation, valid)."""
    ks = np.asarray(ks, dtype=np.int64)
    kk = np.maximum(ks, 1)
    limit = max_local(job, model)
    if _endo(job, fixed_batch):
        b = np.full(ks.shape, job.base_batch, dtype=np.int64)
        accum = np.maximum(1, -(-b // (kk * limit)))
        local = -(-b // (kk * accum))
        return b, local, accum, (ks >= 1) & (b >= ks)
    hi = np.minimum(job.max_batch, kk * limit)
    if batch_limit is not None:
        hi = np.minimum(hi, batch_limit)
    b = np.minimum(np.maximum(kk * job.base_local_batch, job.min_batch), hi)
    valid = (ks >= 1) & (b >= job.min_batch) & (b >= ks)
    return b, -(-b // kk), np.ones(ks.shape, dtype=np.int64), valid


def size_for(job: Job, k: int, model: ThroughputModel, batch_limit: int | None = None,
             fixed_batch: bool = False) -> Sizing | None:
    """The configuration of ``job`` on ``k`` GPUs, or ``None`` when no valid one exists.

    Args:
        job: the job.
        k: GPU count (>= 1).
        model: the job's throughput model (for its memory limit).
        batch_limit: ONES's ``R_j``: the global batch may not exceed it (exo only).
        fixed_batch: size it endo-elastic whatever its mode (the user's global batch, gradient
            accumulation when it does not fit, learning rate unchanged), as the fixed-batch
            policies do.
    """
    # Scalar twin of :func:`sizes` (planners call this once per planned job; numpy would dominate).
    if k < 1:
        return None
    limit = max_local(job, model)
    if _endo(job, fixed_batch):
        b = job.base_batch
        if b < k:
            return None
        accum = max(1, -(-b // (k * limit)))
        return Sizing(b, -(-b // (k * accum)), accum, job.base_lr)
    hi = min(job.max_batch, k * limit)
    if batch_limit is not None:
        hi = min(hi, batch_limit)
    b = min(max(k * job.base_local_batch, job.min_batch), hi)
    if b < job.min_batch or b < k:
        return None
    return Sizing(b, -(-b // k), 1, job.base_lr * b / job.base_batch)


def best_exo_batches(job: Job, model: ThroughputModel, ks: NDArray[np.int64]) -> tuple[
    NDArray[np.int64], NDArray[np.float64]
]:
    """The IBM optimizer's ``b_opt(k)`` for each ``k`` in ``ks``: (global batch, samples/s).

    ``t_proc`` is piecewise linear in the per-GPU batch ``l``, and on a segment
    ``t = p + q*l`` the throughput ``k*l / (p + q*l + t_comm)`` is monotone in ``l``, so the best
    batch lies at a measured breakpoint or at an end of the job's range: those are the only
    candidates searched (exact up to the rounding of ``ceil(b/k)``). Entries are ``(0, 0.0)``
    where no batch is feasible. Throughput is uncorrected (ratios do not need it).
    """
    ks = np.asarray(ks, dtype=np.int64)
    limit = max_local(job, model)
    pts = np.asarray(model.proc_batch, dtype=np.float64)
    locals_ = np.unique(np.clip(np.concatenate([np.floor(pts), np.ceil(pts), [1, limit]]), 1, limit)).astype(np.int64)
    kk = np.maximum(ks, 1)[:, None]
    lo = np.maximum(job.min_batch, kk)
    hi = np.minimum(job.max_batch, kk * limit)
    cands = np.concatenate([np.clip(kk * locals_[None, :], lo, hi), lo, hi], axis=1)
    tp = model.throughput(cands, kk, None)
    tp = np.where((lo <= hi) & (ks[:, None] >= 1), tp, 0.0)
    best = np.argmax(tp, axis=1)
    rows = np.arange(len(ks))
    b = np.where(tp[rows, best] > 0, cands[rows, best], 0).astype(np.int64)
    return b, tp[rows, best]


def best_exo_batch(job: Job, k: int, model: ThroughputModel) -> Sizing | None:
    """:func:`best_exo_batches` for one ``k`` as a :class:`Sizing` (endo jobs: :func:`size_for`)."""
    if job.mode is ElasticMode.ENDO:
        return size_for(job, k, model)
    b, tp = best_exo_batches(job, model, np.array([k]))
    if tp[0] <= 0:
        return None
    best = int(b[0])
    return Sizing(best, math.ceil(best / k), 1, job.base_lr * best / job.base_batch)


def correction(job: Job, model: ThroughputModel, known: Mapping[tuple[object, ...], float] | None = None,
               seen: dict[tuple[object, ...], float] | None = None) -> float:
    """Measured-over-predicted throughput factor at the job's current configuration (1 if none).

    A planner may carry the predicted throughputs from call to call (a job's configuration rarely
    changes between rounds): they are looked up in ``known`` and recorded in ``seen``, by (model,
    batch, GPUs, nodes).
    """
    if job.observed_throughput is None or job.num_gpus == 0 or job.observed_throughput <= 0:
        return 1.0
    key = (model, job.global_batch or job.local_batch * job.num_gpus, job.num_gpus, job.placement.num_nodes)
    cached = None if known is None else known.get(key)
    if cached is None:
        cached = float(model.throughput(job.global_batch or job.local_batch * job.num_gpus, job.num_gpus,
                                        job.placement.num_nodes))
    if seen is not None:
        seen[key] = cached
    if cached <= 0:
        return 1.0
    lo, hi = CORRECTION_CLIP
    return min(hi, max(lo, job.observed_throughput / cached))


def feasible_span(x: NDArray[np.float64], min_gpus: int) -> tuple[int, int] | None:
    """The smallest and largest GPU count ``k >= min_gpus`` with ``x[k] > 0`` (a throughput table by
    GPU count); ``None`` when there is none."""
    feas = np.flatnonzero(x > 0)
    feas = feas[feas >= min_gpus]
    return (int(feas[0]), int(feas[-1])) if len(feas) else None


def throughput_grid(job: Job, model: ThroughputModel, kmax: int, batch_limit: int | None = None,
                    corrected: bool = True, fixed_batch: bool = False) -> NDArray[np.float64]:
    """Corrected throughput (samples/s) of ``job`` for ``k = 0..kmax`` GPUs, packed and spread.

    Returns:
        Array of shape ``(kmax + 1, 2)``: column 0 with the ``k`` GPUs on the fewest nodes
        (``ceil(k / gpus_per_node)``), column 1 on one node more (a fragmented placement).
        Entries are 0 where the configuration is infeasible (and for ``k = 0``). With
        ``corrected`` the job's measured-over-predicted factor is applied. ``fixed_batch`` as in
        :func:`size_for`.
    """
    ks = np.arange(kmax + 1, dtype=np.int64)
    b, local, accum, valid = sizes(job, model, ks, batch_limit, fixed_batch)
    kk = np.maximum(ks, 1)
    packed = -(-kk // model.gpus_per_node)
    out = np.zeros((kmax + 1, 2), dtype=np.float64)
    for col, nodes in enumerate((packed, np.minimum(packed + 1, kk))):
        t_comm = model.t_comm(kk, nodes)
        t_step = accum * model.t_proc(local) + t_comm
        with np.errstate(divide="ignore", invalid="ignore"):
            tp = np.where(np.isfinite(t_step) & (t_step > 0), b / t_step, 0.0)
        out[:, col] = np.where(valid, tp, 0.0)
    return out * correction(job, model) if corrected else out
