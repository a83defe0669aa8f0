"""Which GPU a worker uses: one GPU per worker on multi-GPU nodes.

This module owns the choice of a worker's device among the GPUs its process sees, from the environment
Slurm (or torchrun, or the step bench) gave it, and nothing else: it imports no torch (the caller
passes ``torch.cuda.device_count()``), opens no device and reads no ``os.environ`` of its own.
:class:`~slurm_elastic_launcher.torch_backend.TorchBackend` calls :func:`bind` once, when the worker
starts, and the launcher exports the result as ``LOCAL_RANK`` before the world forms.

The rules, in order (docs/launcher.md, "Which GPU a worker uses"):

1. **The task's slot on its node.** Inside a Slurm step (``SLURM_LOCALID`` is set: srun sets it for
   each task, 0 .. tasks on the node - 1) the slot is ``SLURM_LOCALID``; a ``LOCAL_RANK`` in the
   environment is ignored there, because one exported at submit time would reach every task alike
   (and a satellite gets the job's submit environment). A worker that replaces a lost one, started
   as a one-task step of the allocation that holds the lost worker's GPU, is told that worker's slot
   (``SLURM_ELASTIC_SLOT``, which the join script sets only for it and unsets for every other task),
   and takes it instead of its ``SLURM_LOCALID`` (0): the step sees the node's GPUs of the allocation
   in the order its first step did, so the slot names the idle GPU. Outside Slurm the slot is
   ``LOCAL_RANK`` (torchrun, the step bench), else 0.
2. **The devices it sees.** ``CUDA_VISIBLE_DEVICES`` as Slurm set it for the step on this node
   (the templates run one task per GPU with ``--gres=gpu:N``, so each of the N tasks sees the node's
   N GPUs of the job, or of the satellite, and never another job's). Entries are indices or UUIDs
   (``GPU-…``, ``MIG-…``), kept as strings; a negative index ends the list, as it does for CUDA;
   ``NoDevFiles`` (Slurm's value for a GRES without device files) is none. Unset: the devices torch
   counts. ``SLURM_JOB_GPUS`` is never read: on a node other than the batch node it shows the batch
   node's GPUs (``../shared/SLURM-FACTS.md``).
3. **The index.** If Slurm bound GPUs to each task (``--gpus-per-task``, ``--gpu-bind``: the task's
   ``SLURM_GPUS_PER_TASK`` or ``SLURM_GPU_BIND``, or ``CUDA_VISIBLE_DEVICES`` listing fewer devices than
   the step's ``SLURM_STEP_GPUS`` on this node), the task's devices are its own: index 0. Otherwise
   the slot indexes the visible devices, so the tasks of one node take distinct GPUs.
4. **More tasks than GPUs.** Outside Slurm the slot wraps (``slot % GPUs``: the step bench's workers
   share one GPU over gloo, as before). Inside Slurm it is an error naming the values (two workers
   on one GPU would be NCCL's "duplicate GPU" error, or several models in one GPU's memory), unless
   the job asked for gloo explicitly (``SLURM_ELASTIC_DIST_BACKEND=gloo``, the one backend under which
   workers can share a GPU), or the worker uses no GPU at all (torch counts none: the dev cluster's
   fake GPUs), where it is reported with no GPU.

The device "Slurm gave the task" is the ``SLURM_STEP_GPUS`` entry at the index when that list has as
many entries as ``CUDA_VISIBLE_DEVICES`` (Slurm's own GPU index, which ``scontrol show job -d`` prints as
``IDX``, even where cgroups renumber ``CUDA_VISIBLE_DEVICES`` from 0), else the
``CUDA_VISIBLE_DEVICES`` entry.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .env import EnvError

MAX_DEVICES = 1024
"""Most entries a device list may have (a longer one is refused, not parsed)."""

_INDEX = re.compile(r"-?[0-9]{1,6}")
_UUID = re.compile(r"(?:GPU|MIG)-[A-Za-z0-9][A-Za-z0-9/_.:-]{0,126}")
_SLOT = re.compile(r"[0-9]{1,6}")


class GpuBindingError(EnvError):
    """The environment does not give this worker a GPU of its own (the message names the values and the rule)."""


@dataclass(frozen=True, slots=True)
class GpuBinding:
    """The GPU a worker uses.

    Attributes:
        slot: the task's slot on its node (``SLURM_LOCALID``, ``LOCAL_RANK`` or 0).
        source: where the slot came from: ``"SLURM_LOCALID"``, ``"SLURM_ELASTIC_SLOT"`` (a replacement
            worker), ``"LOCAL_RANK"`` or ``"default"``.
        visible: the devices the process sees (``CUDA_VISIBLE_DEVICES`` entries, or torch's count).
        index: the index of the worker's device within ``visible`` (``cuda:index``); None: no GPU.
        device: the device Slurm gave the task (``SLURM_STEP_GPUS`` or ``CUDA_VISIBLE_DEVICES`` entry at
            ``index``); None without one.
        shared: the index wrapped around fewer devices than slots (workers share a GPU, as asked).
        slurm_localid: ``SLURM_LOCALID`` as set (None outside a Slurm step).
        node: ``SLURMD_NODENAME`` (the node as Slurm names it), or None.
    """

    slot: int
    source: str
    visible: tuple[str, ...]
    index: int | None
    device: str | None
    shared: bool = False
    slurm_localid: str | None = None
    node: str | None = None

    @property
    def local_rank(self) -> int:
        """What ``LOCAL_RANK`` says to the script: the CUDA index it should use, else the slot."""
        return self.slot if self.index is None else self.index

    def report(self, host: str) -> dict[str, Any]:
        """The fields of the event log and of the log line that say which GPU this worker bound."""
        return {"gpu_index": self.index, "gpu": self.device, "gpu_shared": self.shared,
                "slurm_localid": self.slurm_localid, "local_rank": self.local_rank,
                "node": self.node, "host": host}


def _slot(environ: Mapping[str, str], name: str) -> int:
    raw = environ[name]
    if not _SLOT.fullmatch(raw.strip()):
        raise GpuBindingError(f"{name}={raw[:80]!r}: must be a non-negative integer (the task's slot on its node)")
    return int(raw)


def parse_devices(text: str, name: str = "CUDA_VISIBLE_DEVICES") -> tuple[str, ...]:
    """The devices a comma list names (``CUDA_VISIBLE_DEVICES``, ``SLURM_STEP_GPUS``).

    Entries are indices (``3``) or UUIDs (``GPU-…``, ``MIG-…``), kept as strings without their
    spaces. A negative index ends the list (CUDA's rule: ``-1`` hides every device after it).
    ``""`` and ``NoDevFiles`` are none.

    Raises:
        GpuBindingError: an entry is neither an index nor a UUID, an entry repeats, or the list has
            more than :data:`MAX_DEVICES` entries.
    """
    t = text.strip()
    if t in ("", "NoDevFiles"):
        return ()
    parts = t.split(",")
    if len(parts) > MAX_DEVICES:
        raise GpuBindingError(f"{name} has {len(parts)} entries: at most {MAX_DEVICES}")
    out: list[str] = []
    for part in parts:
        entry = part.strip()
        if _INDEX.fullmatch(entry):
            if entry.startswith("-"):
                break
            entry = str(int(entry))
        elif not _UUID.fullmatch(entry):
            raise GpuBindingError(f"{name}={text[:200]!r}: entry {entry[:80]!r} is neither a GPU index nor a "
                                  "GPU-/MIG- UUID (rule: a comma list of indices or UUIDs)")
        if entry in out:
            raise GpuBindingError(f"{name}={text[:200]!r}: device {entry!r} is listed twice (two slots would "
                                  "share one GPU)")
        out.append(entry)
    return tuple(out)


def _task_bound(environ: Mapping[str, str], visible: tuple[str, ...], step_gpus: tuple[str, ...] | None) -> bool:
    """Slurm bound GPUs to each task, so the task's visible devices are its own."""
    if environ.get("SLURM_GPUS_PER_TASK", "").strip():
        return True
    bind = [b.strip() for b in environ.get("SLURM_GPU_BIND", "").split(",") if b.strip() not in ("", "verbose")]
    if bind and not bind[0].startswith("none"):
        return True
    return step_gpus is not None and 0 < len(visible) < len(step_gpus)


def bind(environ: Mapping[str, str], cuda_count: int | None) -> GpuBinding:
    """This worker's GPU, by the module's rules.

    Args:
        environ: the process environment (``SLURM_LOCALID``, ``SLURM_ELASTIC_SLOT``, ``LOCAL_RANK``,
            ``CUDA_VISIBLE_DEVICES``, ``SLURM_STEP_GPUS``, ``SLURM_GPUS_PER_TASK``, ``SLURM_GPU_BIND``,
            ``SLURMD_NODENAME``, ``SLURM_ELASTIC_DIST_BACKEND``).
        cuda_count: the devices torch counts (``torch.cuda.device_count()``, 0 without CUDA), or None
            if unknown; it bounds the visible list and decides whether a GPU is used at all.

    Raises:
        GpuBindingError: a malformed value, or, inside Slurm, more tasks on the node than GPUs while the
            worker would use one and sharing was not asked for.
    """
    if cuda_count is not None and cuda_count < 0:
        raise ValueError(f"cuda_count={cuda_count}: must be ≥ 0 or None")
    in_slurm = "SLURM_LOCALID" in environ
    if in_slurm and environ.get("SLURM_ELASTIC_SLOT", "") != "":
        _slot(environ, "SLURM_LOCALID")  # checked all the same
        slot, source = _slot(environ, "SLURM_ELASTIC_SLOT"), "SLURM_ELASTIC_SLOT"
    elif in_slurm:
        slot, source = _slot(environ, "SLURM_LOCALID"), "SLURM_LOCALID"
    elif "LOCAL_RANK" in environ:
        slot, source = _slot(environ, "LOCAL_RANK"), "LOCAL_RANK"
    else:
        slot, source = 0, "default"
    cvd = environ.get("CUDA_VISIBLE_DEVICES")
    step_gpus: tuple[str, ...] | None = None
    if cvd is None:
        listed = tuple(str(i) for i in range(cuda_count or 0))
    else:
        listed = parse_devices(cvd)
        step_raw = environ.get("SLURM_STEP_GPUS")
        if step_raw is not None:
            step_gpus = parse_devices(step_raw, "SLURM_STEP_GPUS")
    bound = _task_bound(environ, listed, step_gpus)
    visible = listed[:cuda_count] if cuda_count else listed  # CUDA opens no more devices than it counts
    fields: dict[str, Any] = {"slot": slot, "source": source, "visible": visible,
                              "slurm_localid": environ.get("SLURM_LOCALID"), "node": environ.get("SLURMD_NODENAME")}
    n = len(visible)
    if n == 0:
        return GpuBinding(index=None, device=None, **fields)
    shared = False
    if bound:
        index = 0
    elif slot < n:
        index = slot
    elif not in_slurm or environ.get("SLURM_ELASTIC_DIST_BACKEND", "").strip() == "gloo":
        index, shared = slot % n, True
    elif cuda_count == 0:
        return GpuBinding(index=None, device=None, **fields)  # no GPU used: reported with none
    else:
        raise GpuBindingError(
            f"{source}={slot} but this task sees {n} GPU(s) (CUDA_VISIBLE_DEVICES={cvd!r}): slot "
            f"{slot} has no GPU of its own (rule: inside a Slurm step, task SLURM_LOCALID uses visible GPU "
            "SLURM_LOCALID; run at most one task per GPU on a node, e.g. --ntasks-per-node equal to "
            "--gres=gpu:N, or bind one GPU per task with --gpus-per-task=1; workers may share a GPU only "
            "with SLURM_ELASTIC_DIST_BACKEND=gloo)")
    # Slurm's own index where the two lists pair up (cgroups may renumber CUDA_VISIBLE_DEVICES from 0)
    paired = step_gpus is not None and len(step_gpus) == len(listed)
    device = step_gpus[index] if step_gpus is not None and paired else visible[index]
    return GpuBinding(index=index, device=device, shared=shared, **fields)
