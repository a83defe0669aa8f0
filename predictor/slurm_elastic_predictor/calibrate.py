"""Per-job calibration: a job's own throughput model, fitted from its measured step times.

This module owns :class:`StepPoint` (one measured configuration of a job), :class:`Calibrated` (the
result) and :func:`calibrate`, which turns a prior :class:`~slurm_elastic_predictor.throughput.ThroughputModel`
(the closest shipped or site profile) and the job's own measurements into the job's model. Pure
numpy/scipy: no file I/O, no clock, no import of ``slurm_elastic``.

The job's model is the prior with its three time components multiplied by factors fitted to the
job's measurements::

    t_iter(b, k, nodes) = θc · t_proc(ceil(b / k)) + θa · t_intra(k) + θe · t_inter(k, nodes)

where ``t_proc``, ``t_intra`` (one node, ``k >= 2``) and ``t_inter`` (``nodes >= 2``) are the prior's
terms; the result is ``prior.scaled(compute=1/θc, intra=1/θa, inter=1/θe)``. The fit is a MAP fit
with a Gaussian prior on the multipliers, solved in closed form (a ridge regression). Every choice
(also in ``docs/throughput-model.md``, "Per-job calibration"):

* **Duplicates averaged.** Points with the same ``(k, nodes, local_batch)`` are one configuration;
  their step times are averaged (the arithmetic mean of times, i.e. the harmonic mean of the
  throughputs, which is what a run over those windows delivers). ``Calibrated.points`` counts the
  configurations used.
* **Relative residuals.** Configuration ``i`` with measured step ``s_i`` has regressors
  ``tp_i = prior.t_proc(local_batch)``, ``ta_i`` = the prior's intra-node term at ``k`` when
  ``nodes == 1`` (0 for ``k == 1``), ``te_i`` = the prior's inter-node term at ``(k, nodes)`` when
  ``nodes >= 2``; the residual is ``(θc tp_i + θa ta_i + θe te_i - s_i) / s_i``, so that fast and
  slow configurations count alike (as in :func:`~slurm_elastic_predictor.throughput.fit_profile`).
* **Prior mean: the job's overall speed ratio, not 1** (an empirical-Bayes prior mean). First the
  single ratio ``g`` that best scales the whole prior onto the measurements is found in closed form
  (``g = Σ r_i / Σ r_i²`` with ``r_i = (tp_i + ta_i + te_i) / s_i``); then the multipliers are
  fitted as ``θ = g · u`` with a Gaussian prior on ``u`` of mean 1::

      minimise  Σ_i (G_i · u - 1)²  +  strength · Σ_j m_j² (u_j - 1)²       G_i = g [tp_i, ta_i, te_i] / s_i
      closed form:  (GᵀG + strength · M²) u = Gᵀ1 + strength · M² 1,          M = diag(m_j)

  which is the ridge ``Σ_i (X_i θ - 1)² + strength Σ_j (m_j / g)² (θ_j - g)²`` in ``θ``: the
  plain ridge of mean 1 when the job runs as fast as the prior (``g = 1``, ``m_j = 1``). Why not
  mean 1: the prior of an unknown job is another workload, whose step time differs from the job's
  by up to two orders of magnitude (NCF vs BERT at the same per-GPU batch: 126x). A Gaussian of
  mean 1 on the multiplier itself either pins such a job near the prior's speed (with one
  observation and a prior worth one observation, a job 10x slower than its prior would be
  predicted 1.1x slower) or is no prior at all. What a prior is trusted with is the *split* of
  the step into computation, intra-node and inter-node all-reduce -- how the job scales -- and
  that is what ``strength`` weighs; the overall speed is taken from the data without shrinkage
  (it is what one measurement determines best).
* **The prior is worth ``strength`` observations per component.** ``m_j`` is the root mean square
  of ``G_ij`` over the configurations where component ``j`` is present (its typical share of the
  measured step; 1 where it is absent, which keeps ``u_j = 1`` there). Moving component ``j``'s
  multiplier by 10 % then costs as much as one such configuration predicted 10 % of its share off,
  whatever that share is. Without ``m_j`` (a plain ridge) a component that is a small part of the
  step (the intra-node all-reduce: 1-6 % of ImageNet's step, 1-27 % of CIFAR-10's) could hardly
  be learnt: from 352 exact synthetic configurations of a truth made with
  ``cifar10.scaled(compute=1/1.7, intra=1/3, inter=1/0.6)`` the plain ridge fits an intra-node
  factor of 1.42 (worst prediction error 13 %), the scaled one 2.98 (0.4 %).
* **PRIOR_STRENGTH = 1.0**: one observation's worth per component ("one observation at
  10 % error"). Measured with ``bench_learn`` (``slurm_elastic.bench.learning``: median APE of the step
  time over every measured row of the six shipped profiles; "same" = each job's own profile as
  prior, "cross" = CIFAR-10 as every job's prior) for first sizes 1-2 / 1-2-4-8 / 1-2-4-8-16:

  ========  ==================  ==================
  strength  same                cross
  ========  ==================  ==================
  0.3       7.5 / 24.8 / 12.5   23.1 / 24.5 / 12.3
  1         7.5 / 18.2 / 11.2   22.8 / 20.8 / 14.4
  3         7.5 / 12.6 / 9.8    22.7 / 21.7 / 17.4
  10        7.6 / 9.6 / 9.0     22.6 / 22.9 / 19.1
  ========  ==================  ==================

  (uncalibrated: same 7.3 %, in-sample; cross 90 %). Single-node sizes leave it irrelevant. Once the
  job runs on two nodes the profiles' two-node placements, 20-37 % slower than the additive model
  (see the docs), pull the inter-node factor up, and a stronger prior resists that; but a stronger
  prior also holds a wrong split longer (cross) and needs more data to give way to a job that truly
  scales differently (the same synthetic truth from ImageNet, 40 configurations: worst prediction
  error 2.4 % at strength 1, 6 % at 3, 13 % at 10). 1.0 keeps the stated meaning and lets data win quickly.
* **Bounds.** θ lies in ``[FACTOR_MIN, FACTOR_MAX] = [0.01, 100]``: two orders of magnitude either
  way covers every pair of shipped profiles (see above) and stops a degenerate fit (a term the data
  cannot see, or noise that makes the two-GPU step faster than the one-GPU step, driving a
  communication multiplier to 0 or below). When the unconstrained solution leaves the box, the same
  objective is minimised over the box (:func:`~slurm_elastic_predictor.portable.box_lstsq`, exact
  by active sets), the exact version of clipping. Every product and solve here is
  :mod:`~slurm_elastic_predictor.portable`'s: a job's model is the same on every CPU.
* **Memory limit.** ``max_local_batch`` is raised to at least the largest per-GPU batch the job ran
  at (it fitted, so it fits); this is done *before* the regressors are computed, so a configuration
  beyond the prior's limit is used. A configuration still infinite for the prior (e.g. ``k`` GPUs on
  one node of a prior with fewer GPUs per node) is skipped, not an error.
* **Communication floor.** A multiplier cannot create a term the prior does not have: a prior whose
  intra-node (or inter-node) all-reduce term is ~0 would leave the job's real communication
  unlearnable. Such a term (at its smallest configuration, ``k = 2``, below
  ``COMM_FLOOR = 1 %`` of the prior's first measured single-GPU step) is raised to that floor
  through its ring-bandwidth coefficient before the fit, and as the prior said nothing about its
  size, its prior weight is ``FLOORED_WEIGHT = 1e-6`` times ``strength``: the job's data alone
  size it (it stays at the floor times ``g`` until the job runs where the term is present). With
  ``FACTOR_MAX = 100`` the job's all-reduce at ``k = 2`` can reach the prior's first single-GPU step
  (twice that at many GPUs, the ring term's growth). The shipped profiles are all far above the
  floor (the smallest: ImageNet's intra-node term, 4 % of its first step) and are unchanged.
* **Batch stretch (optional, ``prior_batch``).** The prior's ``t_proc`` is a function of the per-GPU
  batch in *its* workload's samples; a sample of another workload costs another amount (a BERT
  sequence vs a CIFAR image), so at per-GPU batch 12 the CIFAR-10 profile is in its flat,
  overhead-bound region while BERT's step still grows with the batch. When the caller passes
  ``prior_batch`` (the per-GPU batch the prior's workload typically runs at, e.g. its
  ``MODEL_DEFAULTS`` entry) the prior's batch axis is stretched so that ``prior_batch`` maps onto
  the job's reference batch (the geometric mean of its configurations' per-GPU batches): "the job
  runs at its usual batch as the prior runs at its usual batch". Its ``max_local_batch`` is
  stretched alike (rounded down). Pass it only when the prior stands in for another workload;
  with the job's own profile as prior the batch axis is already right. Measured with
  ``bench_learn``, CIFAR-10 as every job's prior, first sizes 1 and 2: median error 61 % without
  the stretch, 23 % with it.
* **Fit error.** ``Calibrated.error`` is the median absolute percentage error of the calibrated
  model's step time over the configurations used (``None`` without any).

Known limit: a job's inter-node all-reduce cost cannot be learnt from single-node sizes; until the
job runs across nodes its inter-node factor is its overall speed ratio ``g`` (the prior's split).
Across the shipped profiles the ratio of inter- to intra-node all-reduce time differs by a factor of
7 (4x to 31x, 8 GPUs on 2 nodes vs 2 GPUs on 1 node), so with another workload's profile as prior
the predictions after sizes 1 and 2 stay 23 % off in the median (10-54 % per profile; see the docs
for the figures), against 7.5 % with the job's own profile as prior.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from slurm_elastic_predictor import portable
from slurm_elastic_predictor.errors import ProfileError
from slurm_elastic_predictor.throughput import ThroughputModel

__all__ = [
    "COMM_FLOOR",
    "FACTOR_MAX",
    "FACTOR_MIN",
    "FLOORED_WEIGHT",
    "PRIOR_STRENGTH",
    "Calibrated",
    "StepPoint",
    "calibrate",
]

FloatArray = npt.NDArray[np.float64]

PRIOR_STRENGTH = 1.0
"""Weight of the prior's split of the step (compute / intra-node / inter-node): one observation's
worth per multiplier (a multiplier 10 % off costs as much as one configuration predicted 10 % off).
See the module docstring for the measurements behind it."""

FACTOR_MIN = 0.01
"""Smallest time multiplier (the job 100x faster than its prior in a component)."""

FACTOR_MAX = 100.0
"""Largest time multiplier (the job 100x slower than its prior in a component)."""

COMM_FLOOR = 0.01
"""Smallest all-reduce term at ``k = 2`` a prior brings into the fit, as a fraction of its first
measured single-GPU step; a smaller (~0) term is raised to it so that a multiplier can scale it."""

FLOORED_WEIGHT = 1e-6
"""Prior weight of a floored all-reduce term relative to ``strength``: the prior said nothing about
its size, so the job's data alone size it (the tiny weight keeps it at the floor, times the job's
overall speed ratio, until the job runs where the term is present)."""


def _is_int(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class StepPoint:
    """One measured configuration of a job.

    Attributes:
        k: GPUs (replicas), an integer >= 1.
        nodes: nodes the GPUs span, an integer in ``[1, k]``.
        local_batch: per-GPU batch (samples), an integer >= 1.
        step_time: measured seconds per iteration at that configuration (compute plus exposed
            all-reduce), a finite number > 0.
    """

    k: int
    nodes: int
    local_batch: int
    step_time: float

    def __post_init__(self) -> None:
        if not _is_int(self.k) or self.k < 1:
            raise ProfileError(f"StepPoint: k = {self.k!r} must be an integer >= 1")
        if not _is_int(self.nodes) or not 1 <= self.nodes <= self.k:
            raise ProfileError(f"StepPoint: nodes = {self.nodes!r} must be an integer in [1, k = {self.k}]")
        if not _is_int(self.local_batch) or self.local_batch < 1:
            raise ProfileError(f"StepPoint: local_batch = {self.local_batch!r} must be an integer >= 1")
        step = self.step_time
        if isinstance(step, bool) or not isinstance(step, int | float | np.integer | np.floating) \
                or not (math.isfinite(step) and step > 0):
            raise ProfileError(f"StepPoint: step_time = {step!r} must be a finite number > 0 (seconds)")


@dataclass(frozen=True, slots=True)
class Calibrated:
    """A job's calibrated throughput model.

    Attributes:
        model: the job's model, ``prior.scaled(compute=1/θc, intra=1/θa, inter=1/θe)`` (after the
            optional batch stretch and the communication floor), with ``max_local_batch`` at least
            the largest per-GPU batch the job ran at.
        points: distinct ``(k, nodes, local_batch)`` configurations the fit used.
        factors: ``(θc, θa, θe)``, the time multipliers of ``t_proc``, the intra-node and the
            inter-node all-reduce term; ``(1, 1, 1)`` without points.
        error: median absolute percentage error (a fraction) of ``model``'s step time over the
            configurations used; ``None`` without any.
    """

    model: ThroughputModel
    points: int
    factors: tuple[float, float, float]
    error: float | None


def _average(points: Sequence[StepPoint]) -> list[tuple[int, int, int, float]]:
    """Configurations ``(k, nodes, local_batch, mean step time)``, sorted."""
    times: dict[tuple[int, int, int], list[float]] = {}
    for p in points:
        if not isinstance(p, StepPoint):
            raise ProfileError(f"calibrate(): point {p!r} must be a StepPoint")
        times.setdefault((int(p.k), int(p.nodes), int(p.local_batch)), []).append(float(p.step_time))
    return [(k, n, b, sum(ts) / len(ts)) for (k, n, b), ts in sorted(times.items())]


def _stretched(prior: ThroughputModel, prior_batch: float, job_batch: float) -> ThroughputModel:
    """The prior with its batch axis scaled so that ``prior_batch`` maps onto ``job_batch``."""
    ratio = job_batch / prior_batch
    return replace(
        prior,
        proc_batch=tuple(b * ratio for b in prior.proc_batch),
        max_local_batch=max(1, math.floor(prior.max_local_batch * ratio)),
    )


def _floored(prior: ThroughputModel) -> tuple[ThroughputModel, tuple[bool, bool]]:
    """The prior with an intra- or inter-node term below :data:`COMM_FLOOR` (at ``k = 2``) raised to
    it, and which of the two terms were raised."""
    floor = COMM_FLOOR * prior.proc_time[0]
    a0, a1 = prior.comm_intra
    c0, c1, c2 = prior.comm_inter
    # At k = 2 the ring-bandwidth factor 2 (k - 1) / k and the latency factor k - 1 are both 1.
    low = (a0 + a1 < floor, c0 + c1 + c2 < floor)
    if not any(low):
        return prior, low
    intra = (a0, floor - a0) if low[0] else prior.comm_intra
    inter = (c0, floor - c0 - c2, c2) if low[1] else prior.comm_inter
    return replace(prior, comm_intra=intra, comm_inter=inter), low


def _regressors(model: ThroughputModel, conf: Sequence[tuple[int, int, int, float]]) -> FloatArray:
    """Rows ``[tp, ta, te]`` (seconds) of each configuration under ``model``; ``inf`` where infeasible."""
    k = np.array([c[0] for c in conf], dtype=np.float64)
    nodes = np.array([c[1] for c in conf], dtype=np.float64)
    local = np.array([c[2] for c in conf], dtype=np.float64)
    tp = model.t_proc(local)
    comm = model.t_comm(k, nodes)
    single = (nodes == 1) & (k == 1)
    ta = np.where(nodes == 1, np.where(single, 0.0, comm), 0.0)
    te = np.where(nodes >= 2, comm, 0.0)
    # An infeasible pair (inf from t_comm) must stay inf whichever column it would have gone to.
    bad = ~np.isfinite(comm)
    ta = np.where(bad, np.inf, ta)
    return np.stack([tp, ta, te], axis=1)


def _solve(x: FloatArray, strength: float, floored: tuple[bool, bool]) -> FloatArray:
    """``θ = g u`` minimising ``Σ (g X u - 1)² + strength Σ m_j² (u_j - 1)²`` over the box; a floored
    component's weight is :data:`FLOORED_WEIGHT` times that."""
    ones = np.ones(x.shape[0])
    r = x.sum(axis=1)
    g = float(r.sum()) / portable.dot(r, r)
    gx = g * x
    present = gx > 0
    counts = present.sum(axis=0)
    share = np.where(counts > 0, np.sqrt((gx**2).sum(axis=0) / np.maximum(counts, 1)), 1.0)
    prec = strength * share**2 * np.array([1.0, *(FLOORED_WEIGHT if f else 1.0 for f in floored)])
    u = portable.lstsq(portable.matmul(gx.T, gx) + np.diag(prec), portable.vecmat(ones, gx) + prec)
    theta = np.asarray(g * u, dtype=np.float64)
    if np.all((theta >= FACTOR_MIN) & (theta <= FACTOR_MAX)):
        return theta
    # Same objective in θ: rows X_i θ = 1 and sqrt(prec_j) / g (θ_j - g) = 0, over the box.
    w = np.sqrt(prec) / g
    a = np.vstack([x, np.diag(w)])
    b = np.concatenate([ones, w * g])
    fit, _ = portable.box_lstsq(a, b, FACTOR_MIN, FACTOR_MAX)
    return np.clip(fit, FACTOR_MIN, FACTOR_MAX)


def calibrate(
    prior: ThroughputModel,
    points: Sequence[StepPoint],
    *,
    name: str,
    strength: float = PRIOR_STRENGTH,
    prior_batch: float | None = None,
) -> Calibrated:
    """Fit a job's throughput model from its measured step times, with ``prior`` as the prior.

    See the module docstring for the method and its choices.

    Args:
        prior: the closest shipped or site profile.
        points: the job's measurements, in any order; duplicate configurations are averaged.
        name: name of the returned model (non-empty).
        strength: weight of the prior's split of the step time, in observations per multiplier
            (:data:`PRIOR_STRENGTH`); a finite number > 0.
        prior_batch: the per-GPU batch the prior's workload typically runs at; when given (and there
            are points) the prior's batch axis is stretched onto the job's (module docstring, "Batch
            stretch"). Leave ``None`` when the prior is the job's own workload.

    Returns:
        The calibrated model, the number of configurations used, the factors ``(θc, θa, θe)`` and
        the fit error. Without points: the prior renamed, factors ``(1, 1, 1)`` and error ``None``;
        the same when no point is usable (all infeasible for the prior), except that the prior is
        stretched (with ``prior_batch``) and its memory limit raised to the job's largest batch.

    Raises:
        ProfileError: On an empty name, a strength or ``prior_batch`` that is not a finite number
            > 0, or a point that is not a :class:`StepPoint`.
    """
    if not isinstance(name, str) or not name:
        raise ProfileError(f"calibrate(): name = {name!r} must be a non-empty string")
    if isinstance(strength, bool) or not (math.isfinite(strength) and strength > 0):
        raise ProfileError(f"calibrate(): strength = {strength!r} must be a finite number > 0")
    if prior_batch is not None and (isinstance(prior_batch, bool)
                                    or not (math.isfinite(prior_batch) and prior_batch > 0)):
        raise ProfileError(f"calibrate(): prior_batch = {prior_batch!r} must be a finite number > 0 or None")
    conf = _average(points)
    base = replace(prior, name=name)
    if not conf:
        return Calibrated(base, 0, (1.0, 1.0, 1.0), None)
    if prior_batch is not None:
        job_batch = float(portable.exp(sum(portable.log_float(c[2]) for c in conf) / len(conf)))
        base = _stretched(base, float(prior_batch), job_batch)
    largest = max(c[2] for c in conf)
    if base.max_local_batch < largest:
        base = replace(base, max_local_batch=largest)
    unfloored = base
    base, floored = _floored(base)
    rows = _regressors(base, conf)
    usable = np.all(np.isfinite(rows), axis=1)
    if not usable.any():
        return Calibrated(unfloored, 0, (1.0, 1.0, 1.0), None)
    step = np.array([c[3] for c in conf], dtype=np.float64)[usable]
    x = rows[usable] / step[:, None]
    theta = _solve(x, float(strength), floored)
    tc, ta, te = (float(t) for t in theta)
    model = base.scaled(compute=1.0 / tc, intra=1.0 / ta, inter=1.0 / te, name=name)
    pred = portable.matvec(rows[usable], theta)
    error = float(np.median(np.abs(pred - step) / step))
    return Calibrated(model, int(usable.sum()), (tc, ta, te), error)
