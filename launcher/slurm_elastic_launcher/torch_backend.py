"""torch.distributed backend of the agent: the only launcher module importing torch.

It owns process groups (gloo on CPU, NCCL when CUDA is available), the job's long-lived TCPStore and
the per-generation ``PrefixStore``, the per-step gradient all-reduce (one flat buffer per dtype, with the
BatchNorm buffers of rank 0 and the agent's control words folded in), the tensor operations of the state
sync, checkpoints and RNG. Group timeouts are short (``SLURM_ELASTIC_GROUP_TIMEOUT_S``) so a dead or hung
peer surfaces as :class:`~slurm_elastic_launcher.agent.PeerLostError` within seconds. It decides nothing
about resizes: the agent does.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import os
import random
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch._C._distributed_c10d import PrefixStore, Store, TCPStore

from .agent import PeerLostError
from .state import TensorOps, TensorSpec

log = logging.getLogger(__name__)


class TorchOps:
    """:class:`~slurm_elastic_launcher.state.TensorOps` for torch tensors on one device.

    Args:
        device: device of the flat buffers (CPU for gloo, the GPU for NCCL).
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def is_tensor(self, value: object) -> bool:
        """True for a torch tensor."""
        return isinstance(value, torch.Tensor)

    def spec(self, tensor: Any) -> TensorSpec:
        """Dtype key (e.g. ``"float32"``) and shape."""
        return TensorSpec(str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape))

    def clone(self, tensor: Any) -> Any:
        """A detached copy."""
        return tensor.detach().clone()

    def pack(self, tensors: Sequence[Any]) -> dict[str, Any]:
        """One contiguous flat buffer per dtype, tensors in order."""
        groups: dict[str, list[torch.Tensor]] = {}
        for t in tensors:
            groups.setdefault(self.spec(t).dtype, []).append(t.detach().reshape(-1).to(self.device))
        return {k: torch.cat(v) if len(v) > 1 else v[0].clone() for k, v in groups.items()}

    def empty_buffers(self, sizes: Mapping[str, int]) -> dict[str, Any]:
        """Uninitialised flat buffers."""
        return {k: torch.empty(n, dtype=getattr(torch, k), device=self.device) for k, n in sizes.items()}

    def flat(self, tensor: Any) -> Any:
        """A flat contiguous view of ``tensor`` on the device (a copy only if it is not contiguous)."""
        return tensor.detach().reshape(-1).to(self.device)

    def unpack(self, buffers: Mapping[str, Any], specs: Sequence[TensorSpec]) -> list[Any]:
        """Views of the buffers shaped as ``specs``."""
        offsets = dict.fromkeys(buffers, 0)
        out: list[Any] = []
        for s in specs:
            n = int(np.prod(s.shape, dtype=np.int64))
            start = offsets[s.dtype]
            out.append(buffers[s.dtype][start : start + n].view(s.shape))
            offsets[s.dtype] = start + n
        return out

    def get_rng_state(self) -> Any:
        """torch, numpy and random states."""
        return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "random": random.getstate()}

    def set_rng_state(self, state: Any) -> None:
        """Restore states from :meth:`get_rng_state`."""
        torch.set_rng_state(state["torch"])
        np.random.set_state(state["numpy"])
        random.setstate(state["random"])


def make_store(host: str, port: int, serve: bool, timeout_s: float = 60.0) -> TCPStore:
    """Open (or host, if ``serve``) the job's long-lived TCPStore.

    Args:
        host: store host.
        port: store port.
        serve: host the store in this process.
        timeout_s: timeout of blocking store calls, seconds.

    Returns:
        The store client.
    """
    return TCPStore(
        host, port, is_master=serve, timeout=dt.timedelta(seconds=timeout_s), wait_for_workers=False
    )


class TorchBackend:
    """Process groups, collectives and store access for the agent.

    Args:
        store: the job's TCPStore.
        group_timeout_s: collective timeout, seconds.
        socket_ifname: interface for gloo/NCCL, or empty to keep the environment's choice.
    """

    CONTROL_WORDS = 3

    def __init__(self, store: Store, group_timeout_s: float, socket_ifname: str = "") -> None:
        self.store = store
        self.group_timeout_s = group_timeout_s
        if socket_ifname:
            os.environ["GLOO_SOCKET_IFNAME"] = socket_ifname
            os.environ["NCCL_SOCKET_IFNAME"] = socket_ifname
        self.cuda = torch.cuda.is_available()
        self.device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if self.cuda else torch.device("cpu")
        self.ops: TensorOps = TorchOps(self.device)
        self.group: Any = None  # the current group: None is the whole world, else a group narrowed from it

    # -- groups ---------------------------------------------------------------------------------
    def form(self, generation: str, rank: int, world_size: int) -> None:
        """Join generation ``generation``'s group (fresh ``PrefixStore`` per generation).

        Raises:
            PeerLostError: if the group cannot be formed within the group timeout.
        """
        if world_size > (os.cpu_count() or 1):
            torch.set_num_threads(1)
        prefix = PrefixStore(f"{generation}/", self.store)
        kwargs: dict[str, Any] = {}
        if self.cuda:
            torch.cuda.set_device(self.device)
            kwargs["device_id"] = self.device
        try:
            dist.init_process_group(
                "nccl" if self.cuda else "gloo",
                store=prefix,
                rank=rank,
                world_size=world_size,
                timeout=dt.timedelta(seconds=self.group_timeout_s),
                **kwargs,
            )
        except (RuntimeError, dist.DistError) as exc:
            self.leave()
            raise PeerLostError(f"forming {generation} as rank {rank}/{world_size} failed: {exc}") from exc

    def narrow(self, ranks: Sequence[int]) -> None:
        """Make the group of these ranks of the current group, in this order, the current group.

        A shrink needs no new world: the staying ranks carve their group out of the one they are in
        (only they take part, ``use_local_synchronization``), and the old world stays open until the
        next :meth:`leave`. Ranks not in ``ranks`` must not call this.

        Raises:
            PeerLostError: if the group cannot be formed within the group timeout.
        """
        glob = [r if self.group is None else dist.get_global_rank(self.group, r) for r in ranks]
        try:
            group = dist.new_group(glob, timeout=dt.timedelta(seconds=self.group_timeout_s),
                                   use_local_synchronization=True, sort_ranks=False)
        except (RuntimeError, dist.DistError) as exc:
            self.leave()
            raise PeerLostError(f"narrowing to ranks {list(ranks)} failed: {exc}") from exc
        self.group = group

    def leave(self) -> None:
        """Destroy the current world and every group narrowed from it, if any."""
        self.group = None
        if dist.is_initialized():
            dist.destroy_process_group()

    # -- collectives ----------------------------------------------------------------------------
    def broadcast(self, buffer: Any, src: int) -> None:
        """In-place broadcast of a flat buffer."""
        try:
            dist.broadcast(buffer, group=self.group, group_src=src)
        except (RuntimeError, dist.DistError) as exc:
            raise PeerLostError(f"broadcast failed: {exc}") from exc

    def broadcast_object(self, obj: Any, src: int) -> Any:
        """Broadcast of a small picklable object."""
        box = [obj]
        try:
            dist.broadcast_object_list(box, group=self.group, group_src=src)
        except (RuntimeError, dist.DistError) as exc:
            raise PeerLostError(f"broadcast_object failed: {exc}") from exc
        return box[0]

    def send(self, buffer: Any, dsts: Sequence[int]) -> None:
        """Send a flat buffer to each rank of ``dsts`` (all sends in flight at once)."""
        try:
            for req in [dist.isend(buffer, group=self.group, group_dst=dst) for dst in dsts]:
                if req is not None:  # None only on a rank outside the group
                    req.wait()
        except (RuntimeError, dist.DistError) as exc:
            raise PeerLostError(f"send to {list(dsts)} failed: {exc}") from exc

    def recv(self, buffer: Any, src: int) -> None:
        """Fill a flat buffer with what rank ``src`` sends."""
        try:
            dist.recv(buffer, group=self.group, group_src=src)
        except (RuntimeError, dist.DistError) as exc:
            raise PeerLostError(f"recv from {src} failed: {exc}") from exc

    def send_object(self, obj: Any, dsts: Sequence[int]) -> None:
        """Send a small picklable object to each rank of ``dsts``."""
        try:
            for dst in dsts:
                dist.send_object_list([obj], group=self.group, group_dst=dst)
        except (RuntimeError, dist.DistError) as exc:
            raise PeerLostError(f"send_object to {list(dsts)} failed: {exc}") from exc

    def recv_object(self, src: int) -> Any:
        """The small picklable object rank ``src`` sends."""
        box: list[Any] = [None]
        try:
            dist.recv_object_list(box, group=self.group, group_src=src)
        except (RuntimeError, dist.DistError) as exc:
            raise PeerLostError(f"recv_object from {src} failed: {exc}") from exc
        return box[0]

    def reduce_step(self, model: torch.nn.Module, n_global: int, control: Sequence[int], rank: int) -> list[int]:
        """Sum gradients over ranks and divide by the global sample count; share rank 0's buffers.

        Ranks without samples contribute zero gradients. ``control`` words are summed (rank 0 writes
        them, others pass zeros), so every rank leaves the step with the same decision.

        Args:
            model: the model, after ``backward`` of the summed loss.
            n_global: samples of the step over all ranks (≥ 1).
            control: the agent's control words for this step.
            rank: this rank.

        Returns:
            The summed control words.

        Raises:
            PeerLostError: if a peer died or hung past the group timeout.
        """
        params = [p for p in model.parameters() if p.requires_grad]
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        bufs = list(model.buffers())
        contrib = bufs if rank == 0 else [torch.zeros_like(b) for b in bufs]
        ctrl = torch.tensor(list(control), dtype=torch.int64, device=self.device)
        tensors = [*grads, *contrib, ctrl]
        specs = [self.ops.spec(t) for t in tensors]
        packed = self.ops.pack(tensors)
        try:
            for key in sorted(packed):
                dist.all_reduce(packed[key], group=self.group)
        except (RuntimeError, dist.DistError) as exc:
            raise PeerLostError(f"all_reduce failed: {exc}") from exc
        out = self.ops.unpack(packed, specs)
        for p, g in zip(params, out[: len(params)], strict=True):
            p.grad = g.div_(n_global)
        with torch.no_grad():
            for b, nb in zip(bufs, out[len(params) : -1], strict=True):
                b.copy_(nb)
        return [int(v) for v in out[-1].tolist()]

    # -- store ----------------------------------------------------------------------------------
    def store_set(self, key: str, value: str) -> None:
        """Set a store key."""
        self.store.set(key, value)

    def store_get(self, key: str) -> str | None:
        """Value of a key, or None if it does not exist (never blocks)."""
        if not self.store.check([key]):
            return None
        return bytes(self.store.get(key)).decode()

    def store_add(self, key: str, amount: int) -> int:
        """Atomic add; returns the new value."""
        return int(self.store.add(key, amount))

    def store_wait(self, key: str, timeout_s: float, poll_s: float = 0.02) -> str | None:
        """Poll for a key up to ``timeout_s`` seconds; its value or None."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = self.store_get(key)
            if value is not None or time.monotonic() >= deadline:
                return value
            time.sleep(poll_s)

    # -- checkpoints and digests -----------------------------------------------------------------
    def save(self, tree: Any, path: str) -> None:
        """Write a state tree to ``path`` atomically (checkpoint-restart path)."""
        tmp = f"{path}.tmp{os.getpid()}"
        torch.save(tree, tmp)
        os.replace(tmp, path)

    def load(self, path: str) -> Any:
        """Read a state tree written by :meth:`save`."""
        return torch.load(path, weights_only=False)

    def digest(self, model: torch.nn.Module) -> str:
        """SHA-256 of the model's parameters and buffers (equality check across ranks)."""
        h = hashlib.sha256()
        for name, t in model.state_dict().items():
            h.update(name.encode())
            h.update(t.detach().cpu().contiguous().numpy().tobytes())
        return h.hexdigest()


class TensorBatchDataset:
    """In-memory dataset of input and target tensors, batched by sample ids.

    Args:
        inputs: tensor whose first dimension is the sample.
        targets: tensor with the same first dimension.
    """

    def __init__(self, inputs: torch.Tensor, targets: torch.Tensor) -> None:
        if inputs.shape[0] != targets.shape[0]:
            raise ValueError(f"inputs has {inputs.shape[0]} samples, targets {targets.shape[0]}")
        self.inputs = inputs
        self.targets = targets

    def __len__(self) -> int:
        """Number of samples."""
        return int(self.inputs.shape[0])

    def batch(self, indices: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(inputs[indices], targets[indices])``."""
        idx = torch.as_tensor(list(indices), dtype=torch.long)
        return self.inputs[idx], self.targets[idx]
