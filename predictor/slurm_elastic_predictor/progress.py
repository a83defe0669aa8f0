"""The ONES Beta progress model: how far along is a job, and how much work is left.

This module owns the online progress predictor of ONES (Bian et al., SC'21, section 3.2.1). A
job's training progress ``rho`` (fraction of its total work done) is modelled as::

    rho ~ Beta(alpha, beta),  alpha = max(Y_processed / ||D||, 1),  beta = max(A . s(x) + b, 1)

so ``alpha`` is the number of epochs done and ``beta`` approximates the epochs still to go. The
remaining work in samples is ``Y = Y_processed * (1 / rho - 1)``. ``A`` and ``b`` are fitted by
maximum likelihood over (feature, observed progress) points of completed jobs, sampled uniformly
from their training logs into a bounded training set (:func:`bounded_uniform_sample`).

Features (:data:`FEATURES`), as in the paper's footnote: epoch size ``||D||``, initial loss
``L_initial``, processed samples ``Y_processed``, loss ratio ``r_L = 1 - loss / L_initial`` and
the validation metric ``A``.

Choices made where the paper is vague:

* **Feature transform and scaling.** ``A`` is applied to ``s(x) = t(x) / scale`` where ``t``
  maps raw features to ``(log1p(epoch_size), initial_loss, processed / epoch_size, loss_ratio,
  val_metric)``. Epoch sizes span orders of magnitude across workloads, so they enter as
  ``log1p``; processed samples enter as *epochs done* (``processed / epoch_size``, the same
  quantity as ``alpha`` before its threshold) because "epochs to go" is then linear in it
  (coefficient ``-1`` for a job with a fixed epoch budget), where raw samples would need a
  per-workload slope. ``scale`` is a per-feature divisor fixed at fit time: the root mean square
  of ``t`` over the training points (``1.0`` where that is zero or not finite), so every scaled
  feature is O(1) and the L2 penalty treats all weights alike. No centring: ``b`` absorbs
  offsets. Non-positive epoch sizes give ``log1p(0)`` and 0 epochs done.
* **The final point.** A completed job's last logged point has ``rho = 1``, which a Beta density
  with ``beta >= 1`` gives zero (or, clipped, an arbitrarily large negative log) likelihood, and
  which the model cannot express anyway (``beta >= 1`` means at least about one epoch to go).
  Points with ``rho >= 1`` are therefore **dropped** by :func:`fit_progress_model` and
  :func:`log_likelihood`; other ``rho`` are clipped into ``[EPS, 1 - EPS]``.
* **Expected remaining work.** ``E[1/rho] = (alpha + beta - 1) / (alpha - 1)``, so
  ``E[Y] = Y_processed * beta / (alpha - 1)``, which is infinite at ``alpha = 1`` and dominated
  by the heavy tail of ``1/rho`` for ``alpha < 2`` (its variance is infinite there).
  :meth:`BetaProgressModel.expected_remaining` uses ``Y_processed * beta / max(alpha - 1, 1)``:
  exact for ``alpha >= 2``; for ``alpha < 2`` it is the exact mean of a job with two epochs done.
  At ``alpha = 1`` this equals the mean-progress plug-in ``Y_processed * beta / alpha``; it is
  finite, continuous and, for fixed ``Y_processed``, non-increasing in ``alpha`` (a hard switch
  at ``alpha = 1`` would jump by orders of magnitude between nearly identical jobs and
  destabilise a scheduler's ranking).
* **Shape bounds.** ``alpha`` and ``beta`` are clipped into ``[1, SHAPE_MAX]`` so that any finite
  features give valid, finite Beta shapes.
* **Objective.** :func:`fit_progress_model` maximises ``sum_i log Beta(rho_i; alpha_i, beta_i) -
  l2 * |A|^2`` (``b`` unpenalised) with BFGS (:func:`~slurm_elastic_predictor.portable.minimize`)
  and an analytic gradient, every float of it from :mod:`~slurm_elastic_predictor.portable`: a
  fitted model, and every decision taken with it, is the same on every CPU (scipy's L-BFGS-B and
  special functions were not: they run through BLAS and the C library's per-CPU code). The gradient of the
  threshold ``max(z, 1)`` is taken as 1 for ``z > 1`` and 0 otherwise. Internally the objective
  is divided by the number of points (same maximiser, better conditioned). The optimiser starts from
  ``A = 0`` (or the given ``prior``'s weights re-expressed in the new scale) and never returns a
  point with a worse penalised objective than its start.

Pure numpy/scipy: no I/O, no clock; randomness only through the ``numpy.random.Generator`` the
caller passes. Callers must pass finite features (e.g. ``val_metric = 0`` before the first
validation); non-finite features raise :class:`~slurm_elastic_predictor.errors.ProfileError`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from slurm_elastic_predictor import portable
from slurm_elastic_predictor.errors import ProfileError

__all__ = [
    "EPS",
    "FEATURES",
    "MIN_HISTORIES",
    "REFIT_GROWTH",
    "SHAPE_MAX",
    "TRAINING_POINTS",
    "BetaProgressModel",
    "JobHistory",
    "ProgressPoint",
    "bounded_uniform_sample",
    "fit_progress_model",
    "learn",
    "log_likelihood",
    "mean_abs_progress_error",
    "refit_due",
]

FloatArray = npt.NDArray[np.float64]

FEATURES: tuple[str, ...] = ("epoch_size", "initial_loss", "processed", "loss_ratio", "val_metric")
"""Raw feature names, in the order of :meth:`ProgressPoint.vector` and of the model weights."""

EPS = 1e-9
"""Progress values are clipped into ``[EPS, 1 - EPS]`` (samples and fitting targets)."""

SHAPE_MAX = 1e8
"""Upper clip of both Beta shapes, so any finite features give finite shapes."""

_N_FEATURES = len(FEATURES)
_I_EPOCH_SIZE, _I_INITIAL_LOSS, _I_PROCESSED = 0, 1, 2


@dataclass(frozen=True, slots=True)
class ProgressPoint:
    """One logged point of a job's training history, as raw features.

    Attributes:
        epoch_size: Samples per epoch ``||D||``.
        initial_loss: Loss before training ``L_initial``.
        processed: Samples processed so far ``Y_processed``.
        loss_ratio: ``1 - current_loss / initial_loss``.
        val_metric: Latest validation metric (e.g. accuracy).
    """

    epoch_size: float
    initial_loss: float
    processed: float
    loss_ratio: float
    val_metric: float

    def vector(self) -> FloatArray:
        """Return the raw features as a float64 vector in the order of :data:`FEATURES`."""
        return np.array(
            [self.epoch_size, self.initial_loss, self.processed, self.loss_ratio, self.val_metric],
            dtype=np.float64,
        )


def _as_features(x: npt.ArrayLike) -> FloatArray:
    """Return ``x`` as a float64 array of shape ``(..., 5)``; raise on bad shape or non-finite."""
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim == 0 or arr.shape[-1] != _N_FEATURES:
        raise ProfileError(
            f"features must have shape (..., {_N_FEATURES}) in the order {FEATURES}, "
            f"got shape {arr.shape}"
        )
    bad = ~np.isfinite(arr)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ProfileError(
            f"features at index {where[:-1]} have non-finite {FEATURES[where[-1]]!r} = "
            f"{arr[where]}; features must be finite"
        )
    return arr


def _epochs_done(arr: FloatArray) -> FloatArray:
    """``processed / epoch_size`` clipped into ``[0, SHAPE_MAX]`` (0 where epoch_size <= 0)."""
    size = arr[..., _I_EPOCH_SIZE]
    positive = size > 0
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        done = np.where(positive, arr[..., _I_PROCESSED] / np.where(positive, size, 1.0), 0.0)
    done = np.nan_to_num(done, nan=0.0, posinf=SHAPE_MAX, neginf=0.0)
    return np.clip(done, 0.0, SHAPE_MAX)


def _transform(arr: FloatArray, done: FloatArray) -> FloatArray:
    """Map raw features ``(..., 5)`` to the unscaled model features ``t(x)`` (see module doc);
    ``done`` is ``_epochs_done(arr)``, which the callers need for ``alpha`` too."""
    t = arr.copy()
    t[..., _I_EPOCH_SIZE] = portable.log1p(np.maximum(arr[..., _I_EPOCH_SIZE], 0.0))
    t[..., _I_PROCESSED] = done
    return t


def _alpha(done: FloatArray) -> FloatArray:
    """``alpha`` from the epochs done (``_epochs_done``)."""
    return np.maximum(done, 1.0)


def _beta_from_z(z: FloatArray) -> FloatArray:
    z = np.nan_to_num(z, nan=1.0, posinf=SHAPE_MAX, neginf=1.0)
    return np.clip(z, 1.0, SHAPE_MAX)


@dataclass(frozen=True, slots=True)
class BetaProgressModel:
    """A fitted (or prior) ONES progress model ``rho ~ Beta(alpha, beta)``.

    ``beta = max(A . s(x) + b, 1)`` with ``s(x) = t(x) / scale`` (``t`` is described in the module
    docstring: ``log1p`` epoch size, epochs done instead of processed samples, the rest raw).

    Attributes:
        weights: ``A``, one per feature of :data:`FEATURES`, applied to scaled features.
        bias: ``b``.
        scale: Per-feature divisor of ``t(x)`` (fit-time root mean square; all 1 for a prior).
        n_train: Number of points the model was fitted on (0 for a prior).
    """

    weights: tuple[float, ...]
    bias: float
    scale: tuple[float, ...]
    n_train: int = 0

    def __post_init__(self) -> None:
        """Check lengths and finiteness of the parameters.

        Raises:
            ValueError: On a wrong number of weights or scales, non-finite values or a scale <= 0.
        """
        if len(self.weights) != _N_FEATURES or len(self.scale) != _N_FEATURES:
            raise ValueError(
                f"weights and scale need {_N_FEATURES} entries ({FEATURES}), got "
                f"{len(self.weights)} and {len(self.scale)}"
            )
        if not all(math.isfinite(w) for w in (*self.weights, self.bias)):
            raise ValueError(f"weights and bias must be finite, got {self.weights}, {self.bias}")
        if not all(math.isfinite(s) and s > 0 for s in self.scale):
            raise ValueError(f"scale entries must be finite and > 0, got {self.scale}")
        if self.n_train < 0:
            raise ValueError(f"n_train must be >= 0, got {self.n_train}")

    @classmethod
    def prior(cls, epochs_to_go: float) -> BetaProgressModel:
        """Cold-start model used before any job completed: ``A = 0``, ``b = epochs_to_go``.

        Args:
            epochs_to_go: Assumed epochs still to go for every job (``beta``, at least 1).

        Returns:
            A model with unit scale and ``n_train = 0``.

        Raises:
            ValueError: If ``epochs_to_go`` is not finite.
        """
        if not math.isfinite(epochs_to_go):
            raise ValueError(f"epochs_to_go must be finite, got {epochs_to_go}")
        return cls(
            weights=(0.0,) * _N_FEATURES,
            bias=float(epochs_to_go),
            scale=(1.0,) * _N_FEATURES,
            n_train=0,
        )

    def _z(self, t: FloatArray) -> FloatArray:
        with np.errstate(over="ignore", invalid="ignore"):
            s = t / np.asarray(self.scale, dtype=np.float64)
            z: FloatArray = portable.matvec(s, self.weights) + self.bias
        return z

    def alpha_beta(self, x: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
        """Beta shapes for raw features ``x`` of shape ``(..., 5)``.

        Args:
            x: Raw features in the order of :data:`FEATURES`; finite.

        Returns:
            ``(alpha, beta)``, each of shape ``x.shape[:-1]``, both in ``[1, SHAPE_MAX]``:
            ``alpha = max(processed / epoch_size, 1)``, ``beta = max(A . s(x) + b, 1)``.

        Raises:
            ProfileError: On a wrong shape or a non-finite feature.
        """
        return self._shapes(_as_features(x))

    def _shapes(self, arr: FloatArray) -> tuple[FloatArray, FloatArray]:
        """:meth:`alpha_beta` of checked features, the epochs done computed once for both."""
        done = _epochs_done(arr)
        return _alpha(done), _beta_from_z(self._z(_transform(arr, done)))

    def sample_progress(
        self,
        rng: np.random.Generator,
        x: npt.ArrayLike,
        size: int | tuple[int, ...] | None = None,
    ) -> FloatArray:
        """Draw progress samples ``rho`` for every job of ``x``.

        Args:
            rng: Source of randomness.
            x: Raw features of shape ``batch + (5,)`` (e.g. ``(J, 5)`` for J jobs).
            size: Number (or shape) of draws per job; ``None`` draws one.

        Returns:
            Samples of shape ``size + batch`` (``batch`` for ``size=None``); e.g. ``(K, J)`` for
            ``size=K`` and ``x`` of shape ``(J, 5)``. Values are clipped into ``[EPS, 1 - EPS]``.

        Raises:
            ProfileError: On a wrong shape or a non-finite feature.
        """
        alpha, beta = self.alpha_beta(x)
        if size is None:
            shape: tuple[int, ...] = alpha.shape
        elif isinstance(size, (int, np.integer)):
            shape = (int(size), *alpha.shape)
        else:
            shape = (*(int(k) for k in size), *alpha.shape)
        rho = rng.beta(alpha, beta, size=shape)
        return np.clip(np.asarray(rho, dtype=np.float64), EPS, 1.0 - EPS)

    def mean_progress(self, x: npt.ArrayLike) -> FloatArray:
        """Mean progress ``alpha / (alpha + beta)`` for raw features ``x`` of shape ``(..., 5)``."""
        alpha, beta = self.alpha_beta(x)
        result: FloatArray = alpha / (alpha + beta)
        return result

    @staticmethod
    def remaining_samples(processed: npt.ArrayLike, rho: npt.ArrayLike) -> FloatArray:
        """Remaining work ``Y_processed * (1 / rho - 1)`` (ONES eq. 7), broadcast elementwise.

        Args:
            processed: Samples processed so far.
            rho: Progress in ``(0, 1]``.

        Returns:
            Remaining samples, same broadcast shape.
        """
        y = np.asarray(processed, dtype=np.float64)
        r = np.asarray(rho, dtype=np.float64)
        result: FloatArray = y * (1.0 / r - 1.0)
        return result

    def expected_remaining(self, x: npt.ArrayLike) -> FloatArray:
        """Expected remaining samples ``Y_processed * beta / max(alpha - 1, 1)``.

        Exact ``E[Y_processed (1/rho - 1)]`` for ``alpha >= 2``; for ``alpha < 2`` (heavy tail,
        infinite mean at ``alpha = 1``) the finite, continuous fallback described in the module
        docstring, equal to the mean-progress plug-in ``Y_processed * beta / alpha`` at
        ``alpha = 1``.

        Args:
            x: Raw features of shape ``(..., 5)``.

        Returns:
            Expected remaining samples of shape ``x.shape[:-1]``, >= 0 (``inf`` only where the
            product overflows float64, i.e. for absurd feature values).
        """
        arr = _as_features(x)
        alpha, beta = self._shapes(arr)
        processed = np.maximum(arr[..., _I_PROCESSED], 0.0)
        with np.errstate(over="ignore"):
            result: FloatArray = processed * (beta / np.maximum(alpha - 1.0, 1.0))
        return result


@dataclass(frozen=True, slots=True)
class JobHistory:
    """The training log of one completed job.

    Attributes:
        epoch_size: Samples per epoch (> 0).
        initial_loss: Loss before training (> 0, so that the loss ratio is meaningful).
        total_samples: Samples the job processed until it completed (> 0).
        points: ``(processed_samples, current_loss, val_metric)`` per logged epoch, with
            ``0 < processed_samples <= total_samples``.
    """

    epoch_size: float
    initial_loss: float
    total_samples: float
    points: tuple[tuple[float, float, float], ...]

    def progress_points(self) -> list[tuple[ProgressPoint, float]]:
        """Return ``(features, true progress)`` per logged point, ``rho = processed / total``.

        Returns:
            One pair per entry of :attr:`points`, in order; ``rho`` in ``(0, 1]``.

        Raises:
            ProfileError: If a value is non-finite, ``epoch_size``, ``initial_loss`` or
                ``total_samples`` is not positive, or a point's processed samples are not in
                ``(0, total_samples]``.
        """
        for name in ("epoch_size", "initial_loss", "total_samples"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ProfileError(f"job history: {name} = {value} must be finite and > 0")
        out: list[tuple[ProgressPoint, float]] = []
        for i, point in enumerate(self.points):
            if len(point) != 3:
                raise ProfileError(
                    f"job history point {i}: expected (processed, loss, val_metric), got {point}"
                )
            # Written out, not as generators: a simulation converts every epoch of every job it ends.
            processed, loss, metric = float(point[0]), float(point[1]), float(point[2])
            if not (math.isfinite(processed) and math.isfinite(loss) and math.isfinite(metric)):
                raise ProfileError(f"job history point {i}: non-finite value in {point}")
            if not 0 < processed <= self.total_samples:
                raise ProfileError(
                    f"job history point {i}: processed = {processed} must be in "
                    f"(0, total_samples = {self.total_samples}]"
                )
            features = ProgressPoint(
                epoch_size=float(self.epoch_size),
                initial_loss=float(self.initial_loss),
                processed=processed,
                loss_ratio=1.0 - loss / self.initial_loss,
                val_metric=metric,
            )
            out.append((features, processed / self.total_samples))
        return out


def bounded_uniform_sample(
    histories: Sequence[JobHistory], max_points: int, rng: np.random.Generator,
    pooled: Sequence[tuple[ProgressPoint, float]] | None = None,
) -> list[tuple[ProgressPoint, float]]:
    """Pool all points of all histories and subsample them uniformly to at most ``max_points``.

    Args:
        histories: Training logs of completed jobs.
        max_points: Bound on the training set size (>= 1).
        rng: Source of randomness (used only when subsampling is needed).
        pooled: the histories' points already pooled (what this function would pool from
            ``histories``, in order), kept by a caller that adds histories one by one.

    Returns:
        All points (in history order) when there are at most ``max_points``; otherwise
        ``max_points`` of them drawn uniformly without replacement, kept in history order.
        Deterministic for a fixed ``rng`` state.

    Raises:
        ValueError: If ``max_points < 1``.
        ProfileError: If a history is malformed (see :meth:`JobHistory.progress_points`).
    """
    if max_points < 1:
        raise ValueError(f"max_points must be >= 1, got {max_points}")
    pool = list(pooled) if pooled is not None else [pair for history in histories
                                                    for pair in history.progress_points()]
    if len(pool) <= max_points:
        return pool
    chosen = np.sort(rng.choice(len(pool), size=max_points, replace=False))
    return [pool[int(i)] for i in chosen]


def _prepare(
    data: Sequence[tuple[ProgressPoint, float]],
) -> tuple[FloatArray, FloatArray]:
    """Validate ``data`` and return (raw features ``(n, 5)``, rho ``(n,)``) without final points.

    Raises:
        ProfileError: If ``data`` is empty or an entry breaks a rule (index and rule named).
    """
    if len(data) == 0:
        raise ProfileError("progress data is empty: need at least one (ProgressPoint, rho) pair")
    rows = np.empty((len(data), _N_FEATURES), dtype=np.float64)
    rhos = np.empty(len(data), dtype=np.float64)
    for i, (point, rho) in enumerate(data):
        rows[i] = point.vector()
        rhos[i] = float(rho)
        for name, value in zip(FEATURES, rows[i], strict=True):
            if not math.isfinite(value):
                raise ProfileError(f"data[{i}]: feature {name!r} = {value} must be finite")
        if not math.isfinite(rhos[i]):
            raise ProfileError(f"data[{i}]: progress rho = {rhos[i]} must be finite")
        if not 0.0 < rhos[i] <= 1.0:
            raise ProfileError(f"data[{i}]: progress rho = {rhos[i]} must be in (0, 1]")
        if rows[i, _I_EPOCH_SIZE] <= 0:
            raise ProfileError(f"data[{i}]: epoch_size = {rows[i, _I_EPOCH_SIZE]} must be > 0")
        if rows[i, _I_PROCESSED] < 0:
            raise ProfileError(f"data[{i}]: processed = {rows[i, _I_PROCESSED]} must be >= 0")
    keep = rhos < 1.0
    return rows[keep], np.clip(rhos[keep], EPS, 1.0 - EPS)


def _log_pdf(rho: FloatArray, alpha: FloatArray, beta: FloatArray) -> FloatArray:
    result: FloatArray = (
        (alpha - 1.0) * portable.log(rho) + (beta - 1.0) * portable.log1p(-rho) - portable.betaln(alpha, beta)
    )
    return result


def log_likelihood(model: BetaProgressModel, data: Sequence[tuple[ProgressPoint, float]]) -> float:
    """Sum of ``log Beta(rho_i; alpha_i, beta_i)`` over ``data`` (final points dropped).

    Args:
        model: The progress model.
        data: ``(features, observed progress)`` pairs, ``rho`` in ``(0, 1]``.

    Returns:
        The log-likelihood (0.0 if every point has ``rho = 1``).

    Raises:
        ProfileError: If ``data`` is empty or an entry is invalid.
    """
    rows, rho = _prepare(data)
    if rho.size == 0:
        return 0.0
    alpha, beta = model.alpha_beta(rows)
    return float(np.sum(_log_pdf(rho, alpha, beta)))


def _fit_scale(t: FloatArray) -> FloatArray:
    rms = np.sqrt(np.mean(t * t, axis=0))
    ok = np.isfinite(rms) & (rms > 1e-12)
    result: FloatArray = np.where(ok, rms, 1.0)
    return result


def fit_progress_model(
    data: Sequence[tuple[ProgressPoint, float]],
    *,
    l2: float = 1e-3,
    prior: BetaProgressModel | None = None,
) -> BetaProgressModel:
    """Fit ``A`` and ``b`` by maximising ``sum_i log Beta(rho_i; alpha_i, beta_i) - l2 |A|^2``.

    Points with ``rho = 1`` (a job's final point) are dropped; the rest are clipped into
    ``[EPS, 1 - EPS]``. ``scale`` is the root mean square of each transformed feature over the
    kept points. The optimiser (BFGS, analytic gradient using digamma) starts from the
    ``prior``'s weights re-expressed in the new scale and its bias, or, without a prior, from
    ``A = 0`` and ``b`` = the median plug-in epochs to go ``alpha (1/rho - 1)`` (at least 1).
    The returned model's penalised objective is never worse than that of the start.

    Args:
        data: ``(features, observed progress)`` pairs, e.g. from :func:`bounded_uniform_sample`.
        l2: Weight of the L2 penalty on ``A`` (``b`` is not penalised); >= 0.
        prior: Optional warm start (e.g. the previous model or :meth:`BetaProgressModel.prior`).

    Returns:
        The fitted model with ``n_train`` = number of points used.

    Raises:
        ProfileError: If ``data`` is empty, contains non-finite values or invalid entries
            (naming index and rule), or only final points (``rho = 1``).
        ValueError: If ``l2`` is negative or not finite.
    """
    if not (math.isfinite(l2) and l2 >= 0):
        raise ValueError(f"l2 must be finite and >= 0, got {l2}")
    rows, rho = _prepare(data)
    n = rho.size
    if n == 0:
        raise ProfileError(
            "progress data has only final points (rho = 1); need at least one point with rho < 1"
        )
    done = _epochs_done(rows)
    t = _transform(rows, done)
    scale = _fit_scale(t)
    s = t / scale
    alpha = _alpha(done)
    log_rho, log_1m_rho = portable.log(rho), portable.log1p(-rho)

    if prior is None:
        a0 = np.zeros(_N_FEATURES)
        b0 = max(float(np.median(alpha * (1.0 / rho - 1.0))), 1.0)
    else:
        a0 = np.asarray(prior.weights, dtype=np.float64) * scale / np.asarray(prior.scale)
        b0 = float(prior.bias)
    theta0 = np.append(a0, b0)
    if not np.all(np.isfinite(theta0)):
        theta0 = np.append(np.zeros(_N_FEATURES), b0 if math.isfinite(b0) else 1.0)

    def objective(theta: FloatArray) -> tuple[float, FloatArray]:
        weights, bias = theta[:-1], theta[-1]
        with np.errstate(over="ignore", invalid="ignore"):
            z = portable.matvec(s, weights) + bias
        beta = _beta_from_z(z)
        active = (z > 1.0) & (z < SHAPE_MAX)
        ll = (alpha - 1.0) * log_rho + (beta - 1.0) * log_1m_rho - portable.betaln(alpha, beta)
        dz = np.where(active, log_1m_rho - portable.digamma(beta) + portable.digamma(alpha + beta), 0.0)
        value = -(float(np.sum(ll)) - l2 * portable.dot(weights, weights)) / n
        grad = -np.append(portable.vecmat(dz, s) - 2.0 * l2 * weights, np.sum(dz)) / n
        return value, grad

    f0, _ = objective(theta0)
    theta = portable.minimize(objective, theta0, max_iter=1000)
    f_fit = objective(theta)[0] if np.all(np.isfinite(theta)) else math.inf
    if not (np.all(np.isfinite(theta)) and math.isfinite(f_fit) and f_fit <= f0):
        theta = theta0
    return BetaProgressModel(
        weights=tuple(float(w) for w in theta[:-1]),
        bias=float(theta[-1]),
        scale=tuple(float(v) for v in scale),
        n_train=int(n),
    )


TRAINING_POINTS = 2000
"""Bound on the training set of one fit (:func:`bounded_uniform_sample` over all histories)."""
MIN_HISTORIES = 3
"""Completed jobs needed before the first fit (the prior is used until then)."""
REFIT_GROWTH = 1.1
"""The model is refitted once the history has grown by this factor since the last fit (ONES
refits online as jobs complete; refitting at every completion would cost a fit per job)."""


def refit_due(histories: int, fitted_at: int) -> bool:
    """Whether to (re)fit: at least :data:`MIN_HISTORIES` completed jobs, and :data:`REFIT_GROWTH`
    times as many as at the last fit (``fitted_at``: 0 before the first)."""
    return histories >= MIN_HISTORIES and histories >= fitted_at * REFIT_GROWTH


def mean_abs_progress_error(model: BetaProgressModel, data: Sequence[tuple[ProgressPoint, float]]) -> float:
    """Mean ``|E[rho] - rho|`` over the points that are not a job's final one (``rho < 1``): how
    far the model's mean progress is from the true progress, as a fraction of the job.

    Raises:
        ProfileError: no point with ``rho < 1``.
    """
    kept = [(x, rho) for x, rho in data if rho < 1.0]
    if not kept:
        raise ProfileError("progress fit error: no point before a job's end")
    x = np.stack([p.vector() for p, _ in kept])
    rho = np.array([r for _, r in kept], dtype=np.float64)
    return float(np.mean(np.abs(model.mean_progress(x) - rho)))


def learn(histories: Sequence[JobHistory], previous: BetaProgressModel | None,
          rng: np.random.Generator,
          pooled: Sequence[tuple[ProgressPoint, float]] | None = None) -> tuple[BetaProgressModel, float]:
    """The model fitted on (a bounded uniform sample of) ``histories``, warm-started at
    ``previous``, and its :func:`mean_abs_progress_error` on that training set (``pooled``: as
    :func:`bounded_uniform_sample`).

    Raises:
        ProfileError: a malformed history, or no usable point.
    """
    data = bounded_uniform_sample(histories, TRAINING_POINTS, rng, pooled)
    model = fit_progress_model(data, prior=previous)
    return model, mean_abs_progress_error(model, data)
