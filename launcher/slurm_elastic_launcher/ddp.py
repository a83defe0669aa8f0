"""Drop-in names for a ``DistributedDataParallel`` script: the port keeps its own calls.

This module owns the torch names a DDP script already calls, made elastic: ``init_process_group``,
``destroy_process_group``, ``is_initialized``, ``get_rank``, ``get_world_size`` and
``DistributedDataParallel``, and :data:`world`, the worker's :class:`~.user_loop.ElasticWorld` once
``init_process_group`` has made it. A script ported from ``torchrun`` changes its imports::

    import slurm_elastic_launcher.ddp as dist          # was: import torch.distributed as dist
    from slurm_elastic_launcher.ddp import DistributedDataParallel as DDP, world

and keeps ``dist.init_process_group("nccl")``, ``DDP(model, device_ids=[local_rank])``,
``dist.destroy_process_group()`` and its reads of ``LOCAL_RANK``, ``RANK`` and ``WORLD_SIZE`` before
training, which importing this module sets as ``torchrun`` would have: ``LOCAL_RANK`` the worker's
GPU (:mod:`.gpu_binding`; the slot where it has none), ``RANK``/``WORLD_SIZE`` its place in the
initial world (a joiner: 0 and 1, the placeholder group's, until it joins; after every change of the
world they are the new world's). What the loop needs of the launcher stays explicit, on ``world``:
``world.register(...)``, ``world.loader(...)``, ``world.epochs(...)``, ``world.step(loss)`` and
``world.is_main`` (``docs/launcher.md``, porting guide).

Where the launcher must differ from torch, the call says so with the rule and the one-line fix:
``rank=``/``world_size=`` that are not the launcher's initial world, ``device_ids`` that are not this
worker's device, ``process_group=`` and ``broadcast_buffers=False`` are refused; any other
``torch.distributed`` name asked of this module is an ``AttributeError`` that says to call torch's
with ``group=world.group``. ``backend=``, ``init_method=``, ``store=`` and ``timeout=`` are taken and
not used: the launcher's store is the rendezvous and ``SLURM_ELASTIC_DIST_BACKEND`` the library.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from typing import Any

import torch
import torch.distributed as torch_dist
from torch import nn

import slurm_elastic_launcher

from .env import EnvError, LauncherEnv
from .gpu_binding import GpuBindingError, bind
from .user_loop import ElasticDataParallel, ElasticWorld

__all__ = ["DistributedDataParallel", "destroy_process_group", "get_rank", "get_world_size", "init_process_group",
           "is_initialized", "world"]

_current: ElasticWorld | None = None


class _World:
    """:data:`world`: the :class:`~.user_loop.ElasticWorld` that ``init_process_group`` made."""

    def __getattr__(self, name: str) -> Any:
        if _current is None:
            raise RuntimeError(f"world.{name}: the elastic world does not exist yet; call "
                               "init_process_group() first (slurm_elastic_launcher.ddp's, in place of "
                               "torch.distributed's)")
        return getattr(_current, name)

    def __repr__(self) -> str:
        return "<elastic world: not initialized>" if _current is None else f"<elastic world {_current!r}>"


world: Any = _World()
"""The worker's elastic world (``register``, ``loader``, ``epochs``, ``step``, ``is_main``, ``rank``,
``device``, ``group``, ...); using it before ``init_process_group`` raises, saying so."""


def torchrun_variables(environ: MutableMapping[str, str], cuda_count: int) -> None:
    """Set ``LOCAL_RANK``, ``RANK`` and ``WORLD_SIZE`` in ``environ`` as ``torchrun`` sets them before a
    script starts (the module does it when imported). Outside the launcher (no valid
    ``SLURM_ELASTIC_*`` variables, or a GPU binding that breaks its rules) nothing is set:
    ``init_process_group`` then raises, saying why."""
    try:
        env = LauncherEnv.from_mapping(environ)
        binding = bind(environ, cuda_count)
    except (EnvError, GpuBindingError):
        return
    environ["LOCAL_RANK"] = str(binding.local_rank)
    if env.join:
        environ.update(RANK="0", WORLD_SIZE="1")  # the placeholder group's, until the world it joins
    else:
        environ.update(RANK=str(env.workers.index(env.worker_id)), WORLD_SIZE=str(len(env.workers)))


def _initial_place(environ: Mapping[str, str]) -> tuple[int, int] | None:
    """An initial worker's rank and world size (None for a joiner)."""
    env = LauncherEnv.from_mapping(environ)
    return None if env.join else (env.workers.index(env.worker_id), len(env.workers))


def init_process_group(backend: str | None = None, init_method: str | None = None, timeout: Any = None,
                       world_size: int = -1, rank: int = -1, store: Any = None, **kwargs: Any) -> None:
    """Make this worker's elastic world (:data:`world`), in place of ``torch.distributed``'s.

    The launcher's store is the rendezvous and its ranks change with each resize: ``init_method``,
    ``store``, ``timeout`` and ``backend`` (the library is ``SLURM_ELASTIC_DIST_BACKEND``'s: NCCL on
    GPUs, else gloo) are taken and not used.

    Raises:
        ValueError: ``rank``/``world_size`` given and not this worker's place in the launcher's initial
            world (a joiner's are not checked: it learns its place when it joins).
        RuntimeError: called twice.
        EnvError: a ``SLURM_ELASTIC_*`` variable is missing or invalid (outside the launcher:
            ``slurm-elastic rehearse`` runs the script locally).
    """
    global _current
    if _current is not None:
        raise RuntimeError("init_process_group() was called before: the elastic world exists (use world)")
    place = _initial_place(os.environ)
    if place is not None and ((rank >= 0 and rank != place[0]) or (world_size > 0 and world_size != place[1])):
        raise ValueError(f"init_process_group(rank={rank}, world_size={world_size}): this worker is rank {place[0]} "
                         f"of {place[1]} in the launcher's initial world (SLURM_ELASTIC_WORKERS), and its rank "
                         "changes at each resize; drop rank= and world_size= (read world.rank and world.size)")
    _current = slurm_elastic_launcher.init()  # looked up at the call: a rehearsal's probe wraps it


def destroy_process_group(group: Any = None) -> None:
    """Leave the elastic world (if the loop did not) and end the default process group."""
    if group is not None:
        raise ValueError("destroy_process_group(group): the launcher owns its groups; call it with no argument")
    if _current is not None:
        _current.close()
    if torch_dist.is_initialized():
        torch_dist.destroy_process_group()


def is_initialized() -> bool:
    """True once ``init_process_group`` made the elastic world."""
    return _current is not None


def get_rank(group: Any = None) -> int:
    """This worker's rank in the current world (an initial worker's before it forms; a joiner: 0 until
    it joins). Read it where it is used: it changes at each resize."""
    w = _need("get_rank()")
    return int(w.rank) if _started() else int(os.environ.get("RANK", "0"))


def get_world_size(group: Any = None) -> int:
    """Workers in the current world (before it forms: the initial world's)."""
    return int(_need("get_world_size()").size)


def _started() -> bool:
    return _current is not None and _current.agent is not None and _current.joining is None


def _need(call: str) -> ElasticWorld:
    if _current is None:
        raise RuntimeError(f"{call} before init_process_group(): call slurm_elastic_launcher.ddp's first")
    return _current


class DistributedDataParallel(ElasticDataParallel):
    """``torch.nn.parallel.DistributedDataParallel``'s call, made elastic: ``world.wrap(module)``.

    The gradients are averaged over the current world in buckets while backward runs, and the model
    starts from rank 0's weights when the world forms, as DDP broadcasts them. ``device_ids`` and
    ``output_device`` may name this worker's device (``LOCAL_RANK``, ``world.device``);
    ``bucket_cap_mb``, ``find_unused_parameters`` (a parameter with no gradient is handled),
    ``gradient_as_bucket_view`` and ``static_graph`` are taken and not used.

    Raises:
        ValueError: ``device_ids`` naming another device, ``process_group=`` (the launcher's group
            changes with each resize) or ``broadcast_buffers=False`` (rank 0's buffers are shared at
            every step boundary).
        RuntimeError: before ``init_process_group``.
    """

    def __init__(self, module: nn.Module, device_ids: list[Any] | None = None, output_device: Any = None,
                 dim: int = 0, broadcast_buffers: bool = True, process_group: Any = None, **kwargs: Any) -> None:
        w = _need("DistributedDataParallel(model)")
        for name, value in (("device_ids", device_ids), ("output_device", output_device)):
            if value is None:
                continue
            for d in value if isinstance(value, (list, tuple)) else [value]:
                if _as_device(d) != w.device:
                    raise ValueError(f"DistributedDataParallel({name}={value!r}): this worker's device is "
                                     f"{w.device} (LOCAL_RANK={os.environ.get('LOCAL_RANK')}, set by the launcher); "
                                     "pass device_ids=[int(os.environ['LOCAL_RANK'])] or [world.device], or none")
        if process_group is not None:
            raise ValueError("DistributedDataParallel(process_group=...): the launcher's group changes with each "
                             "resize; drop process_group=")
        if not broadcast_buffers:
            raise ValueError("DistributedDataParallel(broadcast_buffers=False): the launcher shares rank 0's "
                             "buffers at every step boundary; drop broadcast_buffers=False")
        if dim != 0:
            raise ValueError(f"DistributedDataParallel(dim={dim}): one device per worker, nothing is scattered; "
                             "drop dim=")
        w.backend.reducer(module)
        super().__init__(module, w)


def _as_device(d: Any) -> torch.device:
    """A ``device_ids`` entry as a device: an integer is a CUDA index, as DDP reads it."""
    return torch.device("cuda", d) if isinstance(d, int) else torch.device(d)


def __getattr__(name: str) -> Any:
    """A ``torch.distributed`` name this module does not replace: say which to call instead."""
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(f"slurm_elastic_launcher.ddp has no {name!r}: it replaces torch.distributed's "
                         f"process-group calls only; call torch.distributed.{name}(..., group=world.group) "
                         "(after a shrink the default group still holds the dropped workers)")


torchrun_variables(os.environ, torch.cuda.device_count())
