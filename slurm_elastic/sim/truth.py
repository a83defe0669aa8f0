"""Ground truth of the simulator: how fast a job really trains and how much work it really needs.

This module owns the simulator's physics, built from the measured profiles and deliberately not
from the fitted model the planners use, so a simulated planner faces real prediction error:

* **Speed** (:class:`MeasuredSpeed`): the measured step time of the exact placement shape
  (GPUs per node, e.g. ``(4, 4, 2)``) interpolated over the per-GPU batch; shapes never measured
  fall back to a measured shape with the same GPU and node counts, then to the fitted model. The
  target machine is derived as the predictor derives its V100 profile: the compute part of a step
  (``step - sync``) is divided by the compute speed-up, the exposed all-reduce part (``sync``) by
  the intra- or inter-node speed-up. Gradient accumulation repeats the compute part.
* **Work** (:class:`Convergence`): epochs needed to reach the job's target at global batch ``B``:
  the first (interpolated) epoch at which the validation curve measured at that batch reaches the
  profile's target (:data:`TARGETS`: accuracy rising to it, or WER/loss falling to it),
  interpolated between measured batches in ``log2(B)`` and held flat outside them. The curves
  come from runs with learning-rate scaling, so big batches cost only somewhat more epochs.

A site profile (``slurm-elastic profile``, a folder given as ``root``) is the site's machine as
measured: no V100 scaling, and no validation curves, so its jobs train a set number of epochs
(:attr:`~slurm_elastic.sim.workload.SimJobSpec.epochs`) and its :class:`ModelTruth` has no
convergence.

Reads the profile files once per process (cached); pure computation otherwise.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from slurm_elastic.errors import ProfileError
from slurm_elastic_predictor import portable
from slurm_elastic_predictor.profiles import (
    V100_COMPUTE_SPEEDUP,
    V100_INTER_SPEEDUP,
    V100_INTRA_SPEEDUP,
    Measurement,
    load_measurements,
    load_model,
    profile_dir,
    v100_longhorn,
)
from slurm_elastic_predictor.throughput import ThroughputModel

# Target validation metric per profile and whether the metric rises (accuracy, F1, hit rate) or
# falls (word error rate, loss) towards it; each is reached at every measured batch size.
TARGETS: dict[str, tuple[float, bool]] = {
    "cifar10": (0.93, True),      # top-1 accuracy
    "imagenet": (0.74, True),     # top-1 accuracy
    "bert": (88.0, True),         # SQuAD F1
    "ncf": (0.69, True),          # hit rate
    "deepspeech2": (25.0, False),  # word error rate, %
    "yolov3": (13.0, False),      # validation loss
}

Shape = tuple[int, ...]
PARTS_KEPT = 65536
"""Step-time parts a :class:`MeasuredSpeed` remembers (by per-GPU batch and shape) before it starts again."""


@dataclass(frozen=True, slots=True)
class _Curve:
    local: NDArray[np.float64]
    compute: NDArray[np.float64]  # step - sync, seconds
    sync: NDArray[np.float64]


def _curves(rows: list[Measurement], key: str) -> dict[object, _Curve]:
    groups: dict[object, dict[int, list[tuple[float, float]]]] = {}
    for m in rows:
        k: object = m.per_node if key == "shape" else (m.k, len(m.per_node))
        groups.setdefault(k, {}).setdefault(m.local_batch, []).append((m.step_time, m.sync_time))
    out: dict[object, _Curve] = {}
    for k, by_local in groups.items():
        locs = sorted(by_local)
        step = np.array([np.mean([s for s, _ in by_local[b]]) for b in locs])
        sync = np.array([np.mean([y for _, y in by_local[b]]) for b in locs])
        sync = np.minimum(sync, step)
        out[k] = _Curve(np.array(locs, dtype=np.float64), step - sync, sync)
    return out


class MeasuredSpeed:
    """Measured step time of one profile at any placement shape and per-GPU batch.

    Args:
        name: profile name.
        v100: derive the V100 Longhorn machine (default) instead of the measured T4 one.
        root: the site profile folder holding ``name`` (``None``: the shipped profiles).
    """

    def __init__(self, name: str, v100: bool = True, root: Path | None = None) -> None:
        rows = load_measurements(name, root)
        self.name = name
        self.by_shape = _curves(rows, "shape")
        self.by_count = _curves(rows, "count")
        t4 = load_model(name, root)
        self.fitted: ThroughputModel = t4
        self.planner_model: ThroughputModel = v100_longhorn(t4) if v100 else t4
        self.max_local_batch = t4.max_local_batch
        self.speed = (V100_COMPUTE_SPEEDUP, V100_INTRA_SPEEDUP, V100_INTER_SPEEDUP) if v100 else (1.0, 1.0, 1.0)
        self._last_proc: tuple[bytes, NDArray[np.float64]] | None = None
        self._known_parts: dict[tuple[float, Shape], tuple[float, float]] = {}

    def _parts(self, local: float, shape: Shape) -> tuple[float, float]:
        """``(compute, sync)`` seconds of one step, remembered (a simulation asks the same few
        configurations again at every resize; at most ``PARTS_KEPT`` are kept)."""
        key = (local, shape)
        parts = self._known_parts.get(key)
        if parts is None:
            if len(self._known_parts) >= PARTS_KEPT:
                self._known_parts.clear()
            parts = self._known_parts[key] = self._measured_parts(local, shape)
        return parts

    def _measured_parts(self, local: float, shape: Shape) -> tuple[float, float]:
        curve = self.by_shape.get(shape) or self.by_count.get((sum(shape), len(shape)))
        if curve is None:
            k, nodes = sum(shape), len(shape)
            total = float(self.fitted.t_iter(min(local, self.max_local_batch) * k, k, nodes))
            proc = float(self.fitted.t_proc(min(local, self.max_local_batch)))
            compute, sync = proc, max(0.0, total - proc)
        else:
            lo, hi = curve.local[0], curve.local[-1]
            x = min(max(local, lo), hi)
            compute = float(np.interp(x, curve.local, curve.compute))
            sync = float(np.interp(x, curve.local, curve.sync))
            if local > hi:  # a saturated GPU: compute grows in proportion to the batch
                compute *= local / hi
        return compute, sync

    def step_parts(self, local_batches: NDArray[np.int64],
                   shape: Shape) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Per-GPU-batch terms of :meth:`step_time` for many per-GPU batches at once (the lower bound's search).

        Returns:
            ``(compute, sync)`` seconds, one value per entry of ``local_batches`` (each >= 1), such that
            ``step_time(b, shape, a) == a * compute + sync`` (to rounding): the compute part already
            divided by the compute speed-up, the sync part by the intra- or inter-node one (0 on one GPU).
        """
        local = np.asarray(local_batches, dtype=np.float64)
        if (local.size and local.min() < 1) or not shape:
            raise ValueError(f"local batches and shape {shape} must be positive")
        shape = tuple(sorted(shape, reverse=True))
        curve = self.by_shape.get(shape) or self.by_count.get((sum(shape), len(shape)))
        if curve is None:
            k, nodes = sum(shape), len(shape)
            compute = self._fitted_proc(np.minimum(local, self.max_local_batch))
            # the fitted t_iter(l k, k, nodes): t_proc(ceil(l k / k)) = t_proc(l), plus t_comm(k, nodes)
            total = compute + np.asarray(self.fitted.t_comm(k, nodes), dtype=np.float64)
            sync = np.maximum(0.0, total - compute)
        else:
            lo, hi = curve.local[0], curve.local[-1]
            x = np.clip(local, lo, hi)
            compute = np.interp(x, curve.local, curve.compute)
            sync = np.interp(x, curve.local, curve.sync)
            compute = np.where(local > hi, compute * local / hi, compute)
        c, intra, inter = self.speed
        sync = np.zeros_like(sync) if sum(shape) == 1 else sync / (intra if len(shape) == 1 else inter)
        return compute / c, sync

    def _fitted_proc(self, local: NDArray[np.float64]) -> NDArray[np.float64]:
        """The fitted ``t_proc`` of ``local``, the last one kept: the lower bound asks the same batches for
        every shape of a job."""
        key = local.tobytes()
        if self._last_proc is None or self._last_proc[0] != key:
            proc = np.asarray(self.fitted.t_proc(local), dtype=np.float64)
            proc.flags.writeable = False
            self._last_proc = (key, proc)
        return self._last_proc[1]

    def step_time(self, local_batch: int, shape: Shape, accumulation: int = 1) -> float:
        """Seconds per optimizer step with ``local_batch`` per GPU on ``shape``, accumulation included."""
        if local_batch < 1 or not shape:
            raise ValueError(f"local batch {local_batch} and shape {shape} must be positive")
        shape = tuple(sorted(shape, reverse=True))
        compute, sync = self._parts(local_batch, shape)
        c, intra, inter = self.speed
        return accumulation * compute / c + (0.0 if sum(shape) == 1 else sync / (intra if len(shape) == 1 else inter))

    def throughput(self, global_batch: int, local_batch: int, shape: Shape, accumulation: int = 1) -> float:
        """Samples per second."""
        return global_batch / self.step_time(local_batch, shape, accumulation)


def _read_validation(name: str) -> dict[int, list[dict[str, float]]]:
    folder = profile_dir() / name
    out: dict[int, list[dict[str, float]]] = {}
    for path in sorted(folder.glob("validation-*.csv")):
        try:
            batch = int(path.stem.split("-", 1)[1])
            with path.open(newline="", encoding="utf-8") as fh:
                out[batch] = [{k: float(v) for k, v in row.items()} for row in csv.DictReader(fh)]
        except (ValueError, OSError, KeyError) as exc:
            raise ProfileError(f"{path}: unreadable validation curve: {exc}") from exc
        if not out[batch]:
            raise ProfileError(f"{path}: empty validation curve")
    if not out:
        raise ProfileError(f"{folder}: no validation-<batch>.csv files")
    return out


NEAREST_CACHE = 4096
"""Global batches a :class:`Convergence` remembers the nearest measured batch of (then it starts again)."""


class Convergence:
    """Epochs one profile's model needs to reach its target at a global batch (see module doc)."""

    def __init__(self, name: str) -> None:
        curves = _read_validation(name)
        batches = sorted(curves)
        self.name = name
        if name not in TARGETS:
            raise ProfileError(f"{name}: no convergence target defined; known: {', '.join(sorted(TARGETS))}")
        self.target, rising = TARGETS[name]
        sign = 1.0 if rising else -1.0
        epochs = [self._first_reach([sign * r["metric"] for r in curves[b]], sign * self.target, b)
                  for b in batches]
        self._rising = rising
        self._curves = {b: np.array([r["metric"] for r in curves[b]]) for b in batches}
        self._values = {b: [float(x) for x in c] for b, c in self._curves.items()}  # at epochs 1, 2, ...
        self._nearest: dict[float, int] = {}  # global batch -> the nearest measured batch (batches repeat)
        self.batches = portable.log2(np.array(batches, dtype=np.float64))
        self.epochs_at = np.array(epochs)

    def _first_reach(self, metric: list[float], target: float, batch: int) -> float:
        prev = 0.0
        for i, m in enumerate(metric):
            if m >= target:
                if i == 0:
                    return 1.0
                frac = (target - prev) / (m - prev) if m > prev else 1.0
                return i + frac
            prev = m
        raise ProfileError(f"{self.name}: target {target} never reached at batch {batch}")

    def relative_metric(self, global_batch: float, epoch: float) -> float:
        """The measured validation metric after ``epoch`` epochs at the nearest measured batch,
        relative to the target (1.0 = target reached; for falling metrics, target / metric)."""
        b = self._nearest.get(global_batch)
        if b is None:
            if len(self._nearest) >= NEAREST_CACHE:
                self._nearest.clear()
            wanted = portable.log2_float(max(global_batch, 1.0))
            b = self._nearest[global_batch] = min(self._curves, key=lambda m: abs(portable.log2_float(m) - wanted))
        m = _on_unit_grid(self._values[b], epoch)
        return m / self.target if self._rising else self.target / max(m, 1e-9)

    def epochs(self, global_batch: float) -> float:
        """Epochs to the target at this global batch (interpolated in log2 of the batch)."""
        return float(np.interp(portable.log2_float(max(global_batch, 1.0)), self.batches, self.epochs_at))


def _on_unit_grid(values: list[float], x: float) -> float:
    """``np.interp(x, [1, 2, ..., n], values)``, the same arithmetic without numpy's per-call cost (a
    simulated job reports its metric at every round)."""
    if x <= 1.0:
        return values[0]
    if x >= len(values):
        return values[-1]
    i = int(x)
    lo = values[i - 1]
    return (values[i] - lo) * (x - i) + lo


@dataclass(frozen=True)
class ModelTruth:
    """Everything the simulator knows about one model profile."""

    name: str
    speed: MeasuredSpeed
    convergence: Convergence | None
    """``None`` for a site profile: it has no validation curves."""

    def epochs(self, global_batch: float) -> float:
        """Epochs to the model's target at ``global_batch`` (:meth:`Convergence.epochs`).

        Raises:
            ProfileError: a site profile, whose jobs train a set number of epochs instead.
        """
        if self.convergence is None:
            raise ProfileError(f"{self.name}: a site profile has no validation curves; its jobs train a set "
                               "number of epochs, which each job must give")
        return self.convergence.epochs(global_batch)


@cache
def truth(name: str, v100: bool = True, root: Path | None = None) -> ModelTruth:
    """The (cached) ground truth of one shipped profile, or of the site profile ``name`` in ``root``
    (as measured: never V100-scaled)."""
    if root is not None:
        return ModelTruth(name, MeasuredSpeed(name, False, root), None)
    return ModelTruth(name, MeasuredSpeed(name, v100), Convergence(name))
