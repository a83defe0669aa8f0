"""ONES batch-size limits ``R_j``: how far each job may grow, round after round (ONES §3.3.2).

This module owns the four rules that move a job's batch-size limit ``R`` (global batch, samples):

* **Start**: a new job is limited to one GPU's worth, ``R = b_local`` (or ``min_gpus`` GPUs' worth
  when the job cannot run on fewer; also never below its ``min_batch``). A job first seen while
  already running keeps the limit of its current size.
* **Scale-up / scale-down**, applied once per training epoch a running job completes::

      scale-up (no job queued):   R' = 2R
      scale-down (jobs queued):   R' = ceil(2R / m),   m = floor(sigma * T_processed) + 1

  ``T_processed`` is the job's executed time (s) and ``sigma`` the arrival rate (jobs/s). The
  paper prints ``m = ceil(sigma * T + 1)``, which is 2 for every ``T > 0`` and so would stop every
  job from ever growing, contradicting its own scale-up rule and its stated intent ("penalize
  jobs that are longer than the average arrival interval 1/lambda"). With ``floor`` the one
  formula does what the text says: a job younger than ``1/sigma`` doubles each epoch, one between
  ``1/sigma`` and ``2/sigma`` keeps its limit, and older jobs shrink. With ``sigma = 0`` (no
  arrivals observed) jobs simply double.

  The scale-down exists "to prevent the Convoy Effect", i.e. jobs queueing behind long ones, so it
  applies only while some job is queued (``contended``: a job that the previous schedule left
  waiting is still waiting). Without a queue a penalty frees GPUs nobody waits for: since
  ``T_processed`` only grows, every job older than ``2/sigma`` would otherwise shrink to its start
  size epoch after epoch and leave the cluster idle (on ``ones-longhorn-50``, 1/lambda = 60 s, every
  job ran on one GPU at about 30 % utilization).
* **Resume**: a waiting job that ran before may ask for up to the limit it had when it was
  preempted; each schedule update that leaves it waiting halves ``R`` (never below the start
  size), to cut its queueing time and prevent starvation.

Limits are clamped to ``[start size, max_gpus * b_local]`` and never above ``max_batch`` unless the
start size itself is. Pure: no I/O, no clock (``now`` comes from the snapshot).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from slurm_elastic.core.model import Job, JobState


@dataclass(frozen=True, slots=True)
class LimitState:
    """A job's ONES limit and the bookkeeping its rules need.

    Attributes:
        limit: ``R_j``, the largest global batch the job may use (samples).
        epochs_seen: whole epochs completed when the limit was last updated.
        limit_at_preemption: ``R_j`` when the job last stopped running (Resume cap).
    """

    limit: int
    epochs_seen: int
    limit_at_preemption: int


def start_limit(job: Job) -> int:
    """The Start rule's limit: one GPU's batch (or ``min_gpus`` GPUs', or ``min_batch``)."""
    return max(job.min_batch, job.min_gpus * job.base_local_batch)


def max_limit(job: Job) -> int:
    """The largest limit a job can use: all its GPUs at its per-GPU batch, within ``max_batch``."""
    return max(start_limit(job), min(job.max_batch, job.max_gpus * job.base_local_batch))


def clamp(job: Job, limit: int) -> int:
    """Clamp a limit into ``[start_limit, max_limit]``."""
    return min(max_limit(job), max(start_limit(job), limit))


def gpu_cap(job: Job, limit: int) -> int:
    """GPUs a job may hold under limit ``R``: ``floor(R / b_local)`` within ``min_gpus..max_gpus``."""
    return min(job.max_gpus, max(job.min_gpus, limit // job.base_local_batch))


def epoch_update(limit: int, run_time: float, sigma: float, contended: bool = True) -> int:
    """One epoch's step: ``2R`` (scale-up), or ``ceil(2R / (floor(sigma * T) + 1))`` while
    ``contended`` (scale-down against the convoy effect)."""
    if sigma < 0 or run_time < 0:
        raise ValueError(f"sigma {sigma} and run time {run_time} must be >= 0")
    if not contended:
        return 2 * limit
    return math.ceil(2 * limit / (math.floor(sigma * run_time) + 1))


def advance(state: LimitState | None, job: Job, sigma: float, rejected: bool,
            contended: bool = True) -> LimitState:
    """Apply the rules to one job for this round.

    Args:
        state: the job's state from the previous round (``None`` for a job seen first now).
        job: the job now.
        sigma: ONES sigma (jobs/s).
        rejected: the job waited through the previous schedule update (Resume halving).
        contended: some job is queued, so the scale-down applies (else a running job doubles).

    Returns:
        The job's new limit state.
    """
    epochs = int(job.epochs_done)
    if state is None:
        # First sight: a new job gets the Start limit; a job already running (the planner was
        # restarted, or the job predates it) keeps what it runs now.
        limit = start_limit(job)
        if job.state is JobState.RUNNING:
            limit = clamp(job, max(limit, job.num_gpus * job.base_local_batch))
        return LimitState(limit, epochs, limit)
    limit = state.limit
    if job.state is JobState.RUNNING:
        for _ in range(max(0, epochs - state.epochs_seen)):
            limit = clamp(job, epoch_update(limit, job.run_time, sigma, contended))
        return LimitState(limit, epochs, limit)
    if rejected:
        limit = clamp(job, min(limit, state.limit_at_preemption) // 2)
    else:
        limit = clamp(job, min(limit, state.limit_at_preemption))
    return replace(state, limit=limit, epochs_seen=epochs)
