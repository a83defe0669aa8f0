"""DL2 model files (numpy ``.npz``) and the factory of the ``drl`` policy.

This module owns the model file format (:func:`save`, :func:`load`), the shipped default model
(:data:`DEFAULT_MODEL`) and the ``drl`` factory (:func:`drl`), which loads a file and hands the
weights to the pure :class:`~slurm_elastic.core.drl.DrlPlanner`. :mod:`slurm_elastic.policies`
lists it as ``drl`` so that ``policies.create("drl", model=PATH)`` works from the daemon config
(``[policy.drl] model = "/path/model.npz"``), the simulator and the CLI (``--param
drl.model=...``), while no file is read inside the core. It must stay torch-free
(the daemon loads models without torch) and never pickles: files are read with
``allow_pickle=False``.

Format (version :data:`~slurm_elastic.core.drl.FORMAT_VERSION`), one ``.npz`` archive with:
``format_version`` (int), ``slots`` (int), ``gpu_scale`` (float), ``models`` (str array),
``n_layers`` (int), ``W0, b0, ..., W{n-1}, b{n-1}`` (float32; ``W`` as ``(inputs, outputs)``)
and ``meta`` (a JSON object of strings: provenance).
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from slurm_elastic.core.drl import FORMAT_VERSION, DrlPlanner, FeatureSpec, PolicyWeights
from slurm_elastic.errors import ConfigError

T = TypeVar("T")

#: The model shipped with the package, trained by ``slurm-elastic train-drl`` (docs/drl.md).
DEFAULT_MODEL = Path(__file__).resolve().parent / "data" / "longhorn.npz"

#: A second shipped model, trained on DL2's own setup (``dl2-simulation`` at 80 GPUs) for ``reproduce``'s
#: DL2 table: DL2 learns from the jobs of the cluster it schedules (docs/drl.md).
DL2_MODEL = Path(__file__).resolve().parent / "data" / "dl2.npz"


def save(weights: PolicyWeights, path: Path) -> None:
    """Write ``weights`` to ``path`` (compressed ``.npz``, float32 weights).

    Raises:
        ConfigError: the file cannot be written (names the file and the cause).
    """
    arrays: dict[str, np.ndarray] = {
        "format_version": np.array(FORMAT_VERSION, dtype=np.int64),
        "slots": np.array(weights.spec.slots, dtype=np.int64),
        "gpu_scale": np.array(weights.spec.gpu_scale, dtype=np.float64),
        "models": np.array(weights.spec.models, dtype=np.str_),
        "n_layers": np.array(len(weights.layers), dtype=np.int64),
        "meta": np.array(json.dumps(dict(weights.meta), sort_keys=True), dtype=np.str_),
    }
    for i, (w, b) in enumerate(weights.layers):
        arrays[f"W{i}"] = np.asarray(w, dtype=np.float32)
        arrays[f"b{i}"] = np.asarray(b, dtype=np.float32)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as fh:
            np.savez_compressed(fh, **arrays)  # type: ignore[arg-type]
    except OSError as exc:
        raise ConfigError(f"drl model {path}: cannot write: {exc}") from exc


def _scalar(path: Path, data: Mapping[str, np.ndarray], key: str, kind: Callable[[Any], T]) -> T:
    if key not in data:
        raise ConfigError(f"drl model {path}: missing array {key!r}; not a slurm-elastic DL2 model file?")
    arr = data[key]
    if arr.shape != ():
        raise ConfigError(f"drl model {path}: {key!r} must be a scalar, has shape {arr.shape}")
    try:
        return kind(arr.item())
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"drl model {path}: {key!r} = {arr.item()!r} is not of the right type") from exc


def load(path: Path | str) -> PolicyWeights:
    """Read a model file written by :func:`save`.

    Raises:
        ConfigError: the file is missing, not an ``.npz`` archive, of another format version, or
            its arrays do not form a policy network (the message names the file and the problem).
    """
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as npz:
            data = {k: npz[k] for k in npz.files}
    except FileNotFoundError:
        raise ConfigError(f"drl model {path}: no such file") from None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise ConfigError(f"drl model {path}: not a readable .npz model file ({exc})") from exc
    version = _scalar(path, data, "format_version", int)
    if version != FORMAT_VERSION:
        raise ConfigError(f"drl model {path}: format version {version}; this slurm-elastic reads version "
                          f"{FORMAT_VERSION} (retrain with slurm-elastic train-drl)")
    slots = _scalar(path, data, "slots", int)
    gpu_scale = _scalar(path, data, "gpu_scale", float)
    n_layers = _scalar(path, data, "n_layers", int)
    meta_text = _scalar(path, data, "meta", str)
    if "models" not in data or data["models"].ndim != 1 or data["models"].dtype.kind != "U":
        raise ConfigError(f"drl model {path}: 'models' must be a 1-d array of model names")
    try:
        meta = json.loads(meta_text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"drl model {path}: 'meta' is not JSON ({exc})") from exc
    if not isinstance(meta, dict):
        raise ConfigError(f"drl model {path}: 'meta' must be a JSON object")
    layers = []
    for i in range(n_layers):
        for key in (f"W{i}", f"b{i}"):
            if key not in data:
                raise ConfigError(f"drl model {path}: missing array {key!r} of layer {i} (n_layers = {n_layers})")
            if data[key].dtype.kind != "f":
                raise ConfigError(f"drl model {path}: {key!r} must hold floats, holds {data[key].dtype}")
        layers.append((data[f"W{i}"].astype(np.float64), data[f"b{i}"].astype(np.float64)))
    try:
        spec = FeatureSpec(slots, tuple(str(m) for m in data["models"]), gpu_scale)
        return PolicyWeights(spec, tuple(layers), {str(k): str(v) for k, v in meta.items()})
    except ConfigError as exc:
        raise ConfigError(f"drl model {path}: {exc}") from exc


def drl(model: str | None = None, sample: bool = False, default_epochs_to_go: float = 10.0) -> DrlPlanner:
    """The ``drl`` planner with the policy network read from a model file.

    Args:
        model: path of a model file written by ``slurm-elastic train-drl``; default
            :data:`DEFAULT_MODEL`, the shipped model trained on ``ones-longhorn`` (400 jobs, 64 GPUs).
        sample: draw actions from the policy (with the planner's rng) instead of the most probable.
        default_epochs_to_go: progress prior for jobs that declared no epoch count.

    Raises:
        ConfigError: the model file cannot be used, or a parameter breaks its rule.
    """
    if model is not None and not isinstance(model, str | Path):
        raise ConfigError(f"drl.model = {model!r}: must be the path of a model file")
    return DrlPlanner(load(DEFAULT_MODEL if model is None else Path(model)), sample=sample,
                      default_epochs_to_go=default_epochs_to_go)
