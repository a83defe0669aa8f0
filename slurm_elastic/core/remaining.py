"""Remaining work of jobs: the ONES Beta progress estimate shared by every planner that needs it.

This module owns the translation from a job's reported progress to the Beta shapes ``(alpha,
beta)`` of its progress and the remaining samples ``Y = Yp (1/rho - 1)`` (ONES §3.2.1, Eq. 6-7):
from the snapshot's fitted progress model when there is one, else from a prior. ONES samples from
it; Optimus and the expected-score bookkeeping use its expectation. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from slurm_elastic.core.model import ClusterSnapshot, Job

FloatArr = NDArray[np.float64]


def loss_ratio(job: Job) -> float:
    """``1 - current_loss / initial_loss`` (0 until both losses are known)."""
    p = job.progress
    if p.initial_loss and p.current_loss is not None and p.initial_loss > 0:
        return 1.0 - p.current_loss / p.initial_loss
    return 0.0


def progress_features(jobs: Sequence[Job]) -> FloatArr:
    """Raw features of the ONES progress model, shape ``(J, 5)``, in the order of
    :data:`slurm_elastic_predictor.progress.FEATURES` (unknown values as 0)."""
    return np.array([
        [j.epoch_size, j.progress.initial_loss or 0.0, j.samples_processed, loss_ratio(j),
         j.progress.val_metric or 0.0]
        for j in jobs
    ], dtype=np.float64).reshape(len(jobs), 5)


def progress_shapes(snapshot: ClusterSnapshot, jobs: Sequence[Job],
                    default_epochs_to_go: float) -> tuple[FloatArr, FloatArr, FloatArr]:
    """Beta progress shapes and processed work of ``jobs``: ``(alpha, beta, Yp)``.

    From ``snapshot.progress_model`` (the fitted ONES regression) when present; before that,
    ``alpha = max(epochs done, 1)`` and ``beta = max(target epochs - epochs done, 1)`` for jobs
    that declared their epochs, else ``max(default_epochs_to_go, 1)``. ``Yp`` is the samples
    processed, floored at one epoch (as ONES floors ``alpha``), so a job that has not finished an
    epoch still has remaining work.

    Args:
        snapshot: the cluster now (for its progress model).
        jobs: the jobs, in the order of the returned arrays.
        default_epochs_to_go: prior epochs to go of jobs that declared no epoch count.

    Returns:
        Three float arrays of length ``len(jobs)``: ``alpha`` and ``beta`` (>= 1) and ``Yp``
        (samples).
    """
    epochs = np.array([j.epochs_done for j in jobs], dtype=np.float64)
    size = np.array([j.epoch_size for j in jobs], dtype=np.float64)
    yp = np.maximum(epochs, 1.0) * size
    pm = snapshot.progress_model
    if pm is not None and jobs:
        a, b = pm.alpha_beta(progress_features(jobs))
        return np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64), yp
    togo = np.array([
        (j.target_epochs - j.epochs_done) if j.target_epochs is not None else default_epochs_to_go
        for j in jobs
    ], dtype=np.float64)
    return np.maximum(epochs, 1.0), np.maximum(togo, 1.0), yp


def expected_remaining(alpha: FloatArr, beta: FloatArr, yp: FloatArr) -> FloatArr:
    """Expected remaining samples ``Yp * beta / max(alpha - 1, 1)``.

    The estimate of :meth:`BetaProgressModel.expected_remaining`: exact ``E[Yp (1/rho - 1)]``
    for ``alpha >= 2``, the mean-progress plug-in at ``alpha = 1``, continuous in between.
    """
    out: FloatArr = yp * beta / np.maximum(alpha - 1.0, 1.0)
    return out



def outlook(snapshot: ClusterSnapshot, job: Job) -> dict[str, float | int | str | None]:
    """What the daemon predicts of a job, to show beside what it measured (``status``, ``/metrics``).

    ``model`` and ``model_points`` (its throughput model: 0 points is the prior as is),
    ``predicted_throughput`` (samples/s its model gives at its current configuration; ``None``
    unless it runs), ``measured_throughput`` (the launcher's, else ``None``), ``progress_model``
    (``"fitted"`` or ``"prior"``) and ``remaining_s``: its remaining samples (to its declared epoch
    count, else the fitted progress model's expectation) over its throughput now (measured, else
    predicted), or ``None`` when nothing supports a guess (neither, or no throughput).
    """
    predicted = None
    if job.num_gpus and job.model in snapshot.profiles:
        predicted = float(snapshot.profiles[job.model].throughput(
            job.global_batch or job.local_batch * job.num_gpus, job.num_gpus, job.placement.num_nodes)) or None
    remaining_s = None
    rate = job.observed_throughput or predicted
    if rate and job.target_epochs is not None:
        remaining_s = max(0.0, job.target_epochs * job.epoch_size - job.samples_processed) / rate
    elif rate and snapshot.progress_model is not None:
        alpha, beta, yp = progress_shapes(snapshot, [job], 1.0)
        remaining_s = float(expected_remaining(alpha, beta, yp)[0]) / rate
    return {"model": job.model, "model_points": job.model_points, "predicted_throughput": predicted,
            "measured_throughput": job.observed_throughput,
            "progress_model": "fitted" if snapshot.progress_model is not None else "prior",
            "remaining_s": remaining_s}
