"""The shipped throughput profiles: CSV loading, fitting, and the derived V100 Longhorn profiles.

This module owns reading ``data/profiles/<model>/{placements,scalability}.csv`` (measured on 16
AWS g4dn.12xlarge nodes, 4 NVIDIA T4 GPUs each; see ``data/profiles/README.md``), turning the rows
into :func:`~slurm_elastic_predictor.throughput.fit_profile` input, and the documented scaling of
a T4 profile to the target machine, TACC Longhorn (4 x V100 per node, NVLink, EDR InfiniBand).
It reads files only; it must not import ``slurm_elastic``, run commands, read the clock or import
torch. Every rule broken by a file raises :class:`~slurm_elastic_predictor.errors.ProfileError`
naming the file, the line and the rule.

Row rules:

* ``placements.csv``: columns ``placement, local_bsz, step_time, sync_time``. ``placement`` is one
  digit per node, each the node's GPU count (1..4); ``k`` is the digit sum and ``nodes`` the digit
  count. Rows with placement ``"1"`` are the single-GPU measurements (``t_proc``); duplicate batch
  sizes are averaged.
* ``scalability.csv``: columns ``num_nodes, num_replicas, local_bsz, step_time, sync_time``;
  ``k = num_replicas``, ``nodes = num_nodes``, ``num_nodes <= num_replicas <= 4 * num_nodes``.
* ``local_bsz`` is an integer >= 1, ``step_time`` a finite number > 0 (seconds; the whole
  iteration, including the exposed ``sync_time``), ``sync_time`` a finite number >= 0.
  Extra columns are ignored.

V100 Longhorn derivation (:func:`v100_longhorn`), factors are speed-ups over the T4 profile:

* :data:`V100_COMPUTE_SPEEDUP` = 15.7 / 8.1 = 1.94: peak FP32 of a V100 SXM2 (15.7 TFLOPS) over a
  T4 (8.1 TFLOPS); the tensor-core FP16 ratio (125 / 65 = 1.92) is the same to 1 %.
* :data:`V100_INTRA_SPEEDUP` = 3.0: inside a T4 node the all-reduce runs over PCIe 3.0 x16
  (15.75 GB/s per direction); inside a Longhorn node (IBM AC922) over NVLink 2.0, whose ring is
  bounded by the slowest hop (the inter-socket X-bus, about 64 GB/s), a bandwidth ratio of about
  4.1. It is discounted to 3.0 because the fitted intra-node term also holds per-step latency and
  launch overheads that a faster link does not remove.
* :data:`V100_INTER_SPEEDUP` = 2.0: EDR InfiniBand (100 Gb/s) over the g4dn.12xlarge network
  (50 Gb/s). RDMA's lower latency is not credited (conservative).
* ``max_local_batch`` is unchanged: both GPUs have 16 GB of memory.
"""

from __future__ import annotations

import csv
import errno
import json
import math
import os
import re
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import TypeVar

from slurm_elastic_predictor.errors import ProfileError
from slurm_elastic_predictor.throughput import MultiGpuPoint, ThroughputModel, fit_profile

__all__ = [
    "MACHINE_FILE",
    "MODEL_DEFAULTS",
    "PROFILE_GPUS_PER_NODE",
    "PROFILE_NAMES",
    "V100_COMPUTE_SPEEDUP",
    "V100_INTER_SPEEDUP",
    "V100_INTRA_SPEEDUP",
    "Measurement",
    "gpus_per_node_of",
    "load_measurements",
    "load_model",
    "load_models",
    "load_profile_rows",
    "machine_gpus_per_node",
    "profile_dir",
    "v100_longhorn",
]

PROFILE_NAMES: tuple[str, ...] = ("cifar10", "imagenet", "bert", "deepspeech2", "yolov3", "ncf")

MODEL_DEFAULTS: dict[str, tuple[int, int]] = {
    "cifar10": (128, 50_000),
    "imagenet": (64, 1_281_167),
    "bert": (12, 88_641),
    "deepspeech2": (20, 132_553),
    "yolov3": (8, 117_264),
    "ncf": (1024, 994_169),
}
"""Per profile: the per-GPU batch a user typically asks for and the full data set's epoch size
(samples: CIFAR-10, ImageNet-1k, SQuAD v1.1 features, LibriSpeech-clean subset, COCO train2017,
MovieLens-1M ratings), as in the Pollux artifact's workloads."""
"""The shipped profiles: ResNet-18 on CIFAR-10, ResNet-50 on ImageNet, BERT (SQuAD fine-tune),
DeepSpeech2, YOLOv3 and NCF."""

PROFILE_GPUS_PER_NODE = 4
"""GPUs per node of the profiled machine (AWS g4dn.12xlarge: 4 x NVIDIA T4)."""

V100_COMPUTE_SPEEDUP = 15.7 / 8.1
"""Compute speed-up of a V100 SXM2 over a T4: peak FP32, 15.7 / 8.1 TFLOPS (about 1.94)."""

V100_INTRA_SPEEDUP = 3.0
"""Intra-node all-reduce speed-up: NVLink 2.0 (AC922, ~64 GB/s bottleneck hop) over PCIe 3.0 x16
(15.75 GB/s), ratio ~4.1, discounted to 3.0 for the latency part of the fitted term."""

V100_INTER_SPEEDUP = 100.0 / 50.0
"""Inter-node all-reduce speed-up: EDR InfiniBand (100 Gb/s) over the g4dn.12xlarge network
(50 Gb/s)."""

MACHINE_FILE = "machine.json"
"""A site profile folder's description of the machine it was measured on (``slurm-elastic
profile`` writes it): ``gpus_per_node`` (an integer 1..9, one placement digit per node) is the
only key read; the others (nodes, partition, when, GPUs present) are for the admin."""

_MACHINE_MAX_BYTES = 65536

_T = TypeVar("_T")

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_PLACEMENT_RE = re.compile(r"[1-9]+")
_PLACEMENTS = "placements.csv"
_SCALABILITY = "scalability.csv"


def profile_dir() -> Path:
    """The folder of the shipped profiles, ``slurm_elastic_predictor/data/profiles``.

    Returns:
        Its path on disk (the package is installed unzipped).

    Raises:
        ProfileError: If the package data is not a plain folder on disk.
    """
    folder = files("slurm_elastic_predictor").joinpath("data", "profiles")
    if not isinstance(folder, Path) or not folder.is_dir():
        raise ProfileError(f"shipped profile folder {folder} is not a folder on disk")
    return folder


def _rows(path: Path, columns: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """Yield ``(line number, row)`` of a CSV file after checking its header; skip blank lines."""
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            header = [h.strip() for h in next(reader, [])]
            missing = [c for c in columns if c not in header]
            if missing:
                raise ProfileError(
                    f"{path}:1: header lacks column(s) {', '.join(missing)}; "
                    f"expected {','.join(columns)}"
                )
            for fields in reader:
                if not fields or all(not f.strip() for f in fields):
                    continue
                if len(fields) != len(header):
                    raise ProfileError(
                        f"{path}:{reader.line_num}: row has {len(fields)} fields, "
                        f"the header has {len(header)}"
                    )
                yield reader.line_num, dict(zip(header, fields, strict=True))
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read profile file: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise ProfileError(f"{path}: not UTF-8 text: {exc}") from exc
    except csv.Error as exc:
        raise ProfileError(f"{path}: malformed CSV: {exc}") from exc


def _field(
    path: Path, line: int, row: dict[str, str], col: str, parse: Callable[[str], _T], rule: str
) -> _T:
    raw = row[col]
    try:
        return parse(raw.strip())
    except ValueError as exc:
        raise ProfileError(f"{path}:{line}: {col} {rule}, got {raw!r}") from exc


def _pos_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def _pos_float(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(text)
    return value


def _nonneg_float(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(text)
    return value


def _placement_upto(gpus_per_node: int) -> Callable[[str], str]:
    def placement(text: str) -> str:
        if not _PLACEMENT_RE.fullmatch(text) or max(int(d) for d in text) > gpus_per_node:
            raise ValueError(text)
        return text

    return placement


def machine_gpus_per_node(folder: Path) -> int:
    """GPUs per node of the machine the profile in ``folder`` was measured on: its
    :data:`MACHINE_FILE`'s ``gpus_per_node``, or :data:`PROFILE_GPUS_PER_NODE` without that file.

    Raises:
        ProfileError: the file is a link or not a regular file, larger than 64 KiB, not a JSON
            object, or its ``gpus_per_node`` is not an integer 1..9.
    """
    path = folder / MACHINE_FILE
    try:  # never follows a link, never blocks on a FIFO
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return PROFILE_GPUS_PER_NODE
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ProfileError(f"{path}: must be a regular file, not a link") from None
        raise ProfileError(f"{path}: cannot read: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise ProfileError(f"{path}: must be a regular file (not a FIFO, device or folder)")
        data = fh.read(_MACHINE_MAX_BYTES + 1)
    if len(data) > _MACHINE_MAX_BYTES:
        raise ProfileError(f"{path}: larger than {_MACHINE_MAX_BYTES} bytes")
    try:
        raw = json.loads(data)
    except ValueError as exc:
        raise ProfileError(f"{path}: not JSON: {exc}") from exc
    value = raw.get("gpus_per_node") if isinstance(raw, dict) else None
    if type(value) is not int or not 1 <= value <= 9:
        raise ProfileError(f"{path}: gpus_per_node must be an integer 1..9 (one placement digit per node), "
                           f"got {str(value)[:40]!r}")
    return value


def _common(path: Path, line: int, row: dict[str, str]) -> tuple[int, float, float]:
    local = _field(path, line, row, "local_bsz", _pos_int, "must be an integer >= 1")
    step = _field(path, line, row, "step_time", _pos_float, "must be a finite number > 0")
    sync = _field(path, line, row, "sync_time", _nonneg_float, "must be a finite number >= 0")
    return local, step, sync


def _folder(name: str, root: Path | None) -> Path:
    if root is None:
        if name not in PROFILE_NAMES:
            raise ProfileError(
                f"unknown profile {name!r}; shipped profiles are {', '.join(PROFILE_NAMES)}"
            )
        return profile_dir() / name
    if not _NAME_RE.fullmatch(name):
        raise ProfileError(
            f"profile name {name!r} must match {_NAME_RE.pattern} (letters, digits, _ . -)"
        )
    folder = root / name
    if not folder.is_dir():
        raise ProfileError(f"{folder}: no such profile folder")
    return folder


def gpus_per_node_of(name: str, root: Path | None) -> int:
    """GPUs per node of profile ``name``'s machine (:func:`machine_gpus_per_node` of its folder)."""
    return PROFILE_GPUS_PER_NODE if root is None else machine_gpus_per_node(_folder(name, root))


@dataclass(frozen=True, slots=True)
class Measurement:
    """One measured multi- or single-GPU step.

    Attributes:
        per_node: GPUs on each node used, largest first (``(4, 4, 2)``). ``scalability.csv`` rows
            give only node and GPU counts; their GPUs are taken as spread as evenly as possible.
        local_batch: per-GPU batch (samples).
        step_time: seconds per iteration, exposed all-reduce included.
        sync_time: the exposed all-reduce part of ``step_time`` (seconds).
    """

    per_node: tuple[int, ...]
    local_batch: int
    step_time: float
    sync_time: float

    @property
    def k(self) -> int:
        """GPUs used."""
        return sum(self.per_node)


def _even(nodes: int, k: int) -> tuple[int, ...]:
    base, extra = divmod(k, nodes)
    return tuple(sorted((base + (i < extra) for i in range(nodes)), reverse=True))


def load_measurements(name: str, root: Path | None = None) -> list[Measurement]:
    """Every measured row of one profile, placements first, then scalability rows, in file order.

    Args:
        name: profile name, one of :data:`PROFILE_NAMES` when ``root`` is ``None``.
        root: folder holding ``<name>/placements.csv`` and ``<name>/scalability.csv``; ``None``
            for the shipped profiles (:func:`profile_dir`).

    Raises:
        ProfileError: On an unknown name, a missing or unreadable file, a bad header, or a
            malformed row (message ``"<file>:<line>: <column> <rule>, got <value>"``).
    """
    folder = _folder(name, root)
    gpn = gpus_per_node_of(name, root)
    out: list[Measurement] = []
    path = folder / _PLACEMENTS
    for line, row in _rows(path, ("placement", "local_bsz", "step_time", "sync_time")):
        placement = _field(
            path,
            line,
            row,
            "placement",
            _placement_upto(gpn),
            f"must be one digit 1..{gpn} per node",
        )
        local, step, sync = _common(path, line, row)
        shape = tuple(sorted((int(d) for d in placement), reverse=True))
        out.append(Measurement(shape, local, step, sync))

    path = folder / _SCALABILITY
    columns = ("num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time")
    for line, row in _rows(path, columns):
        nodes = _field(path, line, row, "num_nodes", _pos_int, "must be an integer >= 1")
        k = _field(path, line, row, "num_replicas", _pos_int, "must be an integer >= 1")
        if not nodes <= k <= nodes * gpn:
            raise ProfileError(
                f"{path}:{line}: num_replicas must lie in [num_nodes, "
                f"{gpn} * num_nodes], got {k} on {nodes} node(s)"
            )
        local, step, sync = _common(path, line, row)
        out.append(Measurement(_even(nodes, k), local, step, sync))
    return out


def load_profile_rows(
    name: str, root: Path | None = None
) -> tuple[list[tuple[int, float]], list[MultiGpuPoint]]:
    """Read one profile's measured rows in the form :func:`fit_profile` takes.

    Args:
        name: profile name, one of :data:`PROFILE_NAMES` when ``root`` is ``None``.
        root: folder holding ``<name>/placements.csv`` and ``<name>/scalability.csv``; ``None``
            for the shipped profiles (:func:`profile_dir`).

    Returns:
        ``(single_gpu, multi)``: single-GPU ``(local_bsz, mean step_time)`` from the placement
        ``"1"`` rows, ascending by batch; multi-GPU points from every other placement row and every
        ``scalability.csv`` row, in file order.

    Raises:
        ProfileError: As :func:`load_measurements`, or when there is no single-GPU row.
    """
    single: dict[int, list[float]] = {}
    multi: list[MultiGpuPoint] = []
    for m in load_measurements(name, root):
        if m.per_node == (1,):
            single.setdefault(m.local_batch, []).append(m.step_time)
        else:
            multi.append(MultiGpuPoint(k=m.k, nodes=len(m.per_node), local_batch=m.local_batch,
                                       step_time=m.step_time))
    if not single:
        path = _folder(name, root) / _PLACEMENTS
        raise ProfileError(f"{path}: no single-GPU row (placement '1'); t_proc needs at least one")
    single_rows = [(b, sum(ts) / len(ts)) for b, ts in sorted(single.items())]
    return single_rows, multi


def load_model(name: str, root: Path | None = None) -> ThroughputModel:
    """Fit the T4 throughput model of one profile from its measured rows.

    Args:
        name: profile name (see :func:`load_profile_rows`).
        root: profile folder root, ``None`` for the shipped profiles.

    Returns:
        The fitted model, named ``name``, with the GPUs per node of its machine
        (:func:`gpus_per_node_of`: 4 for the shipped profiles).

    Raises:
        ProfileError: On any bad input (see :func:`load_profile_rows` and
            :func:`~slurm_elastic_predictor.throughput.fit_profile`).
    """
    single, multi = load_profile_rows(name, root)
    try:
        return fit_profile(name, single, multi, gpus_per_node=gpus_per_node_of(name, root))
    except ProfileError as exc:
        raise ProfileError(f"{_folder(name, root)}: {exc}") from exc


def load_models(root: Path | None = None) -> dict[str, ThroughputModel]:
    """Fit every profile under ``root``.

    Args:
        root: profile folder root; ``None`` loads the shipped :data:`PROFILE_NAMES`, otherwise
            every sub-folder holding a ``placements.csv`` (sorted by name).

    Returns:
        T4 models by profile name.

    Raises:
        ProfileError: On any bad profile.
    """
    if root is None:
        names: list[str] = list(PROFILE_NAMES)
    else:
        if not root.is_dir():
            raise ProfileError(f"{root}: no such profile folder")
        names = sorted(p.name for p in root.iterdir() if (p / _PLACEMENTS).is_file())
    return {name: load_model(name, root) for name in names}


def v100_longhorn(model: ThroughputModel) -> ThroughputModel:
    """The V100 Longhorn profile derived from a T4 profile.

    Divides compute time by :data:`V100_COMPUTE_SPEEDUP`, intra-node all-reduce time by
    :data:`V100_INTRA_SPEEDUP` and inter-node all-reduce time by :data:`V100_INTER_SPEEDUP`;
    keeps the per-GPU memory limit (16 GB on both GPUs) and 4 GPUs per node.

    Args:
        model: a T4 model, e.g. from :func:`load_model`.

    Returns:
        The derived model, named ``f"{model.name}-v100"``.
    """
    return model.scaled(
        compute=V100_COMPUTE_SPEEDUP,
        intra=V100_INTRA_SPEEDUP,
        inter=V100_INTER_SPEEDUP,
        name=f"{model.name}-v100",
    )
