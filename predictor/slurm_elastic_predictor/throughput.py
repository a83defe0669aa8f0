"""The IBM job-scalability model: per-iteration time and throughput of a job on ``k`` GPUs.

This module owns :class:`ThroughputModel` and its fit (:func:`fit_profile`, :func:`fit_error`).
It is the Job Scalability Analyzer of Saxena et al. ("Effective elastic scaling of deep learning
workloads", section III-B)::

    t_iter(b, k) = t_proc(ceil(b / k)) + t_comm(k, nodes)        (seconds per iteration)
    T(b, k)      = b / t_iter(b, k)                               (samples per second)

where ``b`` is the global batch (samples), ``k`` the GPU count and ``nodes`` the number of nodes
the ``k`` GPUs span. Pure numpy/scipy: no file I/O (see :mod:`slurm_elastic_predictor.profiles`),
no clock, no subprocess, no torch, and no import of ``slurm_elastic``. Every predict method is
vectorised over numpy broadcasting and loops over no element in Python.

Fitting choices (also in ``docs/throughput-model.md``):

* **t_proc** (seconds per iteration on one GPU) is piecewise-linear interpolation over the
  single-GPU measurements ``(local batch, step time)``, duplicates averaged. Below the first
  measured batch ``b0`` it follows the first segment's line, clipped into
  ``[t0 * x / b0, t0]`` (never faster per sample than at ``b0``, never slower than at ``b0``, and
  always > 0). Between the last measured batch and ``max_local_batch`` it follows the last
  segment's line, but at least ``t_last * x / b_last`` (a saturated GPU). It is ``+inf`` above
  ``max_local_batch`` (the batch does not fit in memory) and for ``x <= 0``.
* **t_comm** (seconds per iteration spent in the gradient all-reduce, beyond what overlaps with
  compute) is the ring all-reduce (alpha-beta) cost model, fitted separately inside one node and
  across nodes, with non-negative coefficients::

      intra (nodes == 1, 2 <= k <= gpus_per_node):  a0 + a1 * 2 (k - 1) / k
      inter (nodes >= 2):                          c0 + c1 * 2 (k - 1) / k + c2 * (k - 1)

  ``2 (k - 1) / k`` is the bandwidth term of a ring all-reduce (each GPU sends and receives
  ``2 (k - 1) / k`` times the gradient bytes); ``k - 1`` is the ring's latency term, which also
  absorbs the straggler and contention growth the measurements show from 4 to 64 GPUs. It is 0 for
  ``k == 1``. Beyond the measured 64 GPUs the inter-node term grows linearly in ``k``: a
  pessimistic extrapolation, so a planner is not lured into scaling a job further than the data
  supports.
* The coefficients are fitted by non-negative least squares
  (:func:`~slurm_elastic_predictor.portable.nnls`, the same bits on every CPU) on the *relative*
  residual ``(t_proc(local) + t_comm(k, nodes) - step_time) / step_time`` over the multi-GPU
  measurements, i.e. each row is weighted by ``1 / step_time`` so that fast and slow
  configurations count alike (the error is reported as a relative error too).
* Known limit of the additive form: the measured all-reduce overlaps with the backward pass, so
  the exposed communication time shrinks as the per-GPU batch grows; a ``t_comm`` independent of
  the batch over-predicts at large per-GPU batches and under-predicts at small ones. The fit error
  (:func:`fit_error`) is reported per profile in the docs; median absolute percentage errors of the
  step time are 5-10 %, 90th percentiles 14-23 %.

Infeasible configurations (``ceil(b / k) > max_local_batch``, ``b < k``, ``k < 1``, a node count
that cannot host ``k`` GPUs, non-integer ``k`` or ``nodes``, NaN) have ``t_iter = +inf`` and
throughput ``0.0``, so an optimizer never chooses them (the paper's "large negative number").
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
    "INTER_TERMS",
    "INTRA_TERMS",
    "MultiGpuPoint",
    "ThroughputModel",
    "fit_error",
    "fit_profile",
]

FloatArray = npt.NDArray[np.float64]

INTRA_TERMS: tuple[str, ...] = ("latency", "ring_bandwidth")
"""Names of ``ThroughputModel.comm_intra`` entries: ``a0`` (s) and ``a1`` (s) of
``a0 + a1 * 2 (k - 1) / k``."""

INTER_TERMS: tuple[str, ...] = ("latency", "ring_bandwidth", "per_gpu")
"""Names of ``ThroughputModel.comm_inter`` entries: ``c0`` (s), ``c1`` (s) and ``c2``
(s per GPU) of ``c0 + c1 * 2 (k - 1) / k + c2 * (k - 1)``."""


def _finite_positive(value: float) -> bool:
    return math.isfinite(value) and value > 0


@dataclass(frozen=True, slots=True)
class MultiGpuPoint:
    """One measured multi-GPU configuration.

    Attributes:
        k: number of GPUs (replicas), >= 1.
        nodes: number of nodes the GPUs span, ``1 <= nodes <= k``.
        local_batch: per-GPU batch (samples), >= 1.
        step_time: measured seconds per iteration (compute plus exposed all-reduce), > 0.
    """

    k: int
    nodes: int
    local_batch: int
    step_time: float

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ProfileError(f"k = {self.k} must be >= 1")
        if not 1 <= self.nodes <= self.k:
            raise ProfileError(f"nodes = {self.nodes} must be in [1, k = {self.k}]")
        if self.local_batch < 1:
            raise ProfileError(f"local_batch = {self.local_batch} must be >= 1")
        if not _finite_positive(self.step_time):
            raise ProfileError(f"step_time = {self.step_time} must be a finite number > 0")


@dataclass(frozen=True, slots=True)
class ThroughputModel:
    """Predicted iteration time and throughput of one workload (the IBM JSA model).

    Attributes:
        name: profile name, e.g. ``"imagenet"`` or ``"imagenet-v100"``.
        proc_batch: per-GPU batch sizes measured on one GPU, strictly ascending (samples).
        proc_time: seconds per iteration on one GPU at those batches (> 0).
        max_local_batch: largest per-GPU batch that fits in one GPU's memory (samples).
        comm_intra: ``(a0, a1)`` seconds: exposed all-reduce time inside one node is
            ``a0 + a1 * 2 (k - 1) / k`` (see :data:`INTRA_TERMS`).
        comm_inter: ``(c0, c1, c2)``: exposed all-reduce time across nodes is
            ``c0 + c1 * 2 (k - 1) / k + c2 * (k - 1)`` seconds (see :data:`INTER_TERMS`).
        gpus_per_node: GPUs per node of the profiled machine (bounds the intra-node case and the
            default node count ``ceil(k / gpus_per_node)``).
    """

    name: str
    proc_batch: tuple[float, ...]
    proc_time: tuple[float, ...]
    max_local_batch: int
    comm_intra: tuple[float, ...]
    comm_inter: tuple[float, ...]
    gpus_per_node: int = 4

    def __post_init__(self) -> None:
        where = f"throughput model {self.name!r}"
        if not self.proc_batch or len(self.proc_batch) != len(self.proc_time):
            raise ProfileError(
                f"{where}: proc_batch and proc_time must be non-empty and of equal length, got "
                f"{len(self.proc_batch)} and {len(self.proc_time)}"
            )
        if not all(_finite_positive(b) for b in self.proc_batch):
            raise ProfileError(f"{where}: proc_batch {self.proc_batch} must be finite and > 0")
        if any(b1 <= b0 for b0, b1 in zip(self.proc_batch, self.proc_batch[1:], strict=False)):
            raise ProfileError(f"{where}: proc_batch {self.proc_batch} must be strictly ascending")
        if not all(_finite_positive(t) for t in self.proc_time):
            raise ProfileError(f"{where}: proc_time {self.proc_time} must be finite and > 0")
        if self.max_local_batch < 1:
            raise ProfileError(f"{where}: max_local_batch {self.max_local_batch} must be >= 1")
        if self.gpus_per_node < 1:
            raise ProfileError(f"{where}: gpus_per_node {self.gpus_per_node} must be >= 1")
        for label, coef, terms in (
            ("comm_intra", self.comm_intra, INTRA_TERMS),
            ("comm_inter", self.comm_inter, INTER_TERMS),
        ):
            if len(coef) != len(terms):
                raise ProfileError(
                    f"{where}: {label} needs {len(terms)} coefficients {terms}, got {coef}"
                )
            if not all(math.isfinite(c) and c >= 0 for c in coef):
                raise ProfileError(f"{where}: {label} {coef} must be finite and >= 0")

    def t_proc(self, local_batch: npt.ArrayLike) -> FloatArray:
        """Seconds per iteration of one GPU processing ``local_batch`` samples.

        Args:
            local_batch: per-GPU batch (samples); any shape.

        Returns:
            float64 array of the input's shape: interpolated time (> 0), ``+inf`` where the batch
            exceeds ``max_local_batch`` or is not > 0 (or is NaN).
        """
        x = np.asarray(local_batch, dtype=np.float64)
        bp = np.asarray(self.proc_batch, dtype=np.float64)
        tp = np.asarray(self.proc_time, dtype=np.float64)
        b0, t0, bl, tl = bp[0], tp[0], bp[-1], tp[-1]
        if bp.size >= 2:
            s0 = (tp[1] - tp[0]) / (bp[1] - bp[0])
            sl = (tp[-1] - tp[-2]) / (bp[-1] - bp[-2])
        else:
            s0 = sl = t0 / b0
        with np.errstate(invalid="ignore"):
            mid = np.interp(x, bp, tp)
            low = np.clip(t0 + s0 * (x - b0), t0 * x / b0, t0)
            high = np.maximum(tl + sl * (x - bl), tl * x / bl)
            out = np.where(x < b0, low, np.where(x > bl, high, mid))
            bad = ~((x > 0) & (x <= self.max_local_batch))
        return np.asarray(np.where(bad, np.inf, out), dtype=np.float64)

    def t_comm(self, k: npt.ArrayLike, nodes: npt.ArrayLike) -> FloatArray:
        """Seconds per iteration of exposed all-reduce for ``k`` GPUs on ``nodes`` nodes.

        Args:
            k: GPU count(s); integer-valued.
            nodes: node count(s) the GPUs span; broadcast against ``k``.

        Returns:
            float64 array of the broadcast shape: 0 for ``k == 1`` on one node, the intra-node
            form for ``nodes == 1``, the inter-node form for ``nodes >= 2``; ``+inf`` where the
            pair is impossible (``k < 1``, ``nodes < 1``, ``nodes > k``,
            ``k > nodes * gpus_per_node``, a non-integer or NaN value).
        """
        kk = np.asarray(k, dtype=np.float64)
        nn = np.asarray(nodes, dtype=np.float64)
        with np.errstate(invalid="ignore"):
            valid = (
                (kk >= 1)
                & (nn >= 1)
                & (nn <= kk)
                & (kk <= nn * self.gpus_per_node)
                & (np.floor(kk) == kk)
                & (np.floor(nn) == nn)
            )
            ks = np.where(valid, kk, 1.0)
            ring = 2.0 * (ks - 1.0) / ks
            a0, a1 = self.comm_intra
            c0, c1, c2 = self.comm_inter
            intra = a0 + a1 * ring
            inter = c0 + c1 * ring + c2 * (ks - 1.0)
            out = np.where(nn >= 2, inter, np.where(ks >= 2, intra, 0.0))
        return np.asarray(np.where(valid, out, np.inf), dtype=np.float64)

    def t_iter(
        self,
        global_batch: npt.ArrayLike,
        k: npt.ArrayLike,
        nodes: npt.ArrayLike | None = None,
    ) -> FloatArray:
        """Seconds per iteration: ``t_proc(ceil(b / k)) + t_comm(k, nodes)``.

        Args:
            global_batch: global batch ``b`` (samples).
            k: GPU count(s).
            nodes: node count(s); ``None`` means the fewest nodes that can host ``k`` GPUs,
                ``ceil(k / gpus_per_node)``.

        Returns:
            float64 array of the broadcast shape; ``+inf`` where infeasible
            (``ceil(b / k) > max_local_batch``, ``b < k``, ``k < 1``, impossible ``nodes``).
        """
        b = np.asarray(global_batch, dtype=np.float64)
        kk = np.asarray(k, dtype=np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            nn = (
                np.ceil(kk / self.gpus_per_node)
                if nodes is None
                else np.asarray(nodes, dtype=np.float64)
            )
            ks = np.where(kk >= 1, kk, 1.0)
            local = np.ceil(b / ks)
            t = self.t_proc(local) + self.t_comm(kk, nn)
            ok = (kk >= 1) & (b >= kk) & ~np.isnan(t)
        return np.asarray(np.where(ok, t, np.inf), dtype=np.float64)

    def throughput(
        self,
        global_batch: npt.ArrayLike,
        k: npt.ArrayLike,
        nodes: npt.ArrayLike | None = None,
    ) -> FloatArray:
        """Samples per second ``b / t_iter(b, k, nodes)``; 0.0 where infeasible.

        Args:
            global_batch: global batch ``b`` (samples).
            k: GPU count(s).
            nodes: node count(s), or ``None`` for ``ceil(k / gpus_per_node)``.

        Returns:
            float64 array of the broadcast shape, >= 0.
        """
        b = np.asarray(global_batch, dtype=np.float64)
        t = self.t_iter(b, k, nodes)
        with np.errstate(invalid="ignore", divide="ignore"):
            tp = np.where(np.isfinite(t) & (t > 0), b / t, 0.0)
        return np.asarray(tp, dtype=np.float64)

    def scaled(
        self,
        *,
        compute: float = 1.0,
        intra: float = 1.0,
        inter: float = 1.0,
        name: str | None = None,
    ) -> ThroughputModel:
        """A derived model for faster (or slower) hardware.

        Args:
            compute: speed-up of computation; ``t_proc`` is divided by it.
            intra: speed-up of intra-node communication; the intra-node term is divided by it.
            inter: speed-up of inter-node communication; the inter-node term is divided by it.
            name: name of the derived model (default ``f"{self.name}-scaled"``).

        Returns:
            A new model with the same batches, memory limit and node size.

        Raises:
            ProfileError: If a factor is not a finite number > 0.
        """
        for label, factor in (("compute", compute), ("intra", intra), ("inter", inter)):
            if not _finite_positive(factor):
                raise ProfileError(f"scaled(): {label} = {factor} must be a finite number > 0")
        return ThroughputModel(
            name=f"{self.name}-scaled" if name is None else name,
            proc_batch=self.proc_batch,
            proc_time=tuple(t / compute for t in self.proc_time),
            max_local_batch=self.max_local_batch,
            comm_intra=tuple(c / intra for c in self.comm_intra),
            comm_inter=tuple(c / inter for c in self.comm_inter),
            gpus_per_node=self.gpus_per_node,
        )


def _design(k: FloatArray, inter: bool) -> FloatArray:
    """Columns of the intra- (``1, ring``) or inter-node (``1, ring, k - 1``) comm model."""
    ring = 2.0 * (k - 1.0) / k
    cols = [np.ones_like(k), ring] + ([k - 1.0] if inter else [])
    return np.stack(cols, axis=1)


def _fit_terms(
    k: FloatArray, residual: FloatArray, weight: FloatArray, inter: bool
) -> tuple[float, ...]:
    a = _design(k, inter) * weight[:, None]
    coef, _ = portable.nnls(a, residual * weight)
    return tuple(float(c) for c in coef)


def fit_profile(
    name: str,
    single_gpu: Sequence[tuple[int, float]],
    multi: Sequence[MultiGpuPoint],
    gpus_per_node: int = 4,
) -> ThroughputModel:
    """Fit a :class:`ThroughputModel` from measured rows (pure; no I/O).

    ``t_proc`` interpolates ``single_gpu`` (duplicate batches averaged). The intra- and inter-node
    all-reduce coefficients are fitted by non-negative least squares on the residual
    ``step_time - t_proc(local_batch)`` of the multi-GPU points, each row weighted by
    ``1 / step_time`` (i.e. minimising the squared relative error of the step time). Points with
    ``k == 1`` carry no communication and are ignored.

    Args:
        name: profile name.
        single_gpu: ``(local batch, seconds per iteration)`` measured on one GPU.
        multi: multi-GPU measurements; at least one within one node (``nodes == 1``, ``k >= 2``)
            and one across nodes (``nodes >= 2``).
        gpus_per_node: GPUs per node of the profiled machine.

    Returns:
        The fitted model; ``max_local_batch`` is the largest measured per-GPU batch.

    Raises:
        ProfileError: On an empty name, no single-GPU rows, a non-positive batch or time, a point
            whose ``k`` does not fit on its ``nodes``, or no intra- or inter-node points.
    """
    if not name:
        raise ProfileError("profile name must be non-empty")
    if gpus_per_node < 1:
        raise ProfileError(f"profile {name!r}: gpus_per_node {gpus_per_node} must be >= 1")
    if not single_gpu:
        raise ProfileError(f"profile {name!r}: no single-GPU measurements")
    sums: dict[int, list[float]] = {}
    for batch, seconds in single_gpu:
        if batch < 1 or not _finite_positive(seconds):
            raise ProfileError(
                f"profile {name!r}: single-GPU row ({batch}, {seconds}) needs batch >= 1 and a "
                "finite time > 0"
            )
        sums.setdefault(int(batch), []).append(float(seconds))
    batches = sorted(sums)
    times = [sum(sums[b]) / len(sums[b]) for b in batches]
    for p in multi:
        if p.k > p.nodes * gpus_per_node:
            raise ProfileError(
                f"profile {name!r}: point {p} puts {p.k} GPUs on {p.nodes} node(s) of "
                f"{gpus_per_node} GPUs"
            )
    max_local = max([*batches, *(p.local_batch for p in multi)])
    base = ThroughputModel(
        name=name,
        proc_batch=tuple(float(b) for b in batches),
        proc_time=tuple(times),
        max_local_batch=max_local,
        comm_intra=(0.0,) * len(INTRA_TERMS),
        comm_inter=(0.0,) * len(INTER_TERMS),
        gpus_per_node=gpus_per_node,
    )
    pts = [p for p in multi if p.k >= 2]
    k = np.array([p.k for p in pts], dtype=np.float64)
    nodes = np.array([p.nodes for p in pts], dtype=np.float64)
    step = np.array([p.step_time for p in pts], dtype=np.float64)
    local = np.array([p.local_batch for p in pts], dtype=np.float64)
    residual = step - base.t_proc(local)
    weight = 1.0 / step
    coefs: list[tuple[float, ...]] = []
    groups = ((False, nodes == 1, "within one node"), (True, nodes >= 2, "across nodes"))
    for inter, sel, what in groups:
        if not sel.any():
            raise ProfileError(
                f"profile {name!r}: no multi-GPU measurement {what}; cannot fit its all-reduce term"
            )
        coefs.append(_fit_terms(k[sel], residual[sel], weight[sel], inter))
    return ThroughputModel(
        name=name,
        proc_batch=base.proc_batch,
        proc_time=base.proc_time,
        max_local_batch=max_local,
        comm_intra=coefs[0],
        comm_inter=coefs[1],
        gpus_per_node=gpus_per_node,
    )


def fit_error(model: ThroughputModel, rows: Sequence[MultiGpuPoint]) -> dict[str, float]:
    """Absolute percentage error of the predicted step time over measured rows.

    The prediction for a row is ``model.t_proc(local_batch) + model.t_comm(k, nodes)``, i.e.
    ``t_iter(k * local_batch, k, nodes)``.

    Args:
        model: the fitted model.
        rows: measurements to compare with (usually the multi-GPU rows the model was fitted on).

    Returns:
        ``{"mape", "median_ape", "p90_ape", "max_ape"}`` as fractions (0.1 means 10 %) and
        ``"n"``, the number of rows. A row the model deems infeasible counts as an infinite error.

    Raises:
        ProfileError: If ``rows`` is empty.
    """
    if not rows:
        raise ProfileError(f"fit_error({model.name!r}): no rows to compare with")
    k = np.array([r.k for r in rows], dtype=np.float64)
    nodes = np.array([r.nodes for r in rows], dtype=np.float64)
    local = np.array([r.local_batch for r in rows], dtype=np.float64)
    step = np.array([r.step_time for r in rows], dtype=np.float64)
    pred = model.t_proc(local) + model.t_comm(k, nodes)
    ape = np.abs(pred - step) / step
    return {
        "mape": float(np.mean(ape)),
        "median_ape": float(np.median(ape)),
        "p90_ape": float(np.percentile(ape, 90)),
        "max_ape": float(np.max(ape)),
        "n": float(len(rows)),
    }
