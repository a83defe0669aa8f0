"""torch.distributed backend of the agent (with :mod:`.signed_store`, :mod:`.grad_reducer` and
:mod:`.user_loop`, the only launcher modules importing torch).

It owns process groups (gloo on CPU, NCCL when CUDA is available) on the job's long-lived TCPStore
(behind :class:`~.signed_store.SignedStore`, which signs every value) and the per-generation
``PrefixStore``, the per-step collectives (the gradients reduced in buckets while backward runs,
:mod:`.grad_reducer`; then rank 0's BatchNorm buffers and the agent's control words), the tensor
operations of the state sync, checkpoints and RNG. Group timeouts are short
(``SLURM_ELASTIC_GROUP_TIMEOUT_S``) so a dead or hung peer surfaces as
:class:`~slurm_elastic_launcher.agent_types.PeerLostError` within seconds. It decides nothing about resizes:
the agent does.

Nothing read from the store is believed unsigned (:mod:`.signed_store`). The skeleton of the state
sent to a peer is signed the same way (key ``<generation>/state/<src>[/<dst>]``) and decoded only
once its MAC matches; a checkpoint carries its MAC in ``<path>.mac`` and is unpickled only once that
matches.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import inspect
import io
import logging
import os
import random
import socket
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch._C._distributed_c10d import HashStore, PrefixStore
from torch.utils.data import default_collate

from .agent_types import CONTROL_WORDS, PeerLostError
from .env import LauncherEnv
from .gpu_binding import bind
from .grad_reducer import GradReducer
from .orders import VALUE_MAC_LEN, ValueRejectedError, check_value_mac, open_value, sign_value, value_hmac
from .signed_store import SignedStore, make_store
from .state import SkeletonError, TensorOps, TensorSpec, decode_skeleton, encode_skeleton

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

    def pack(self, tensors: Sequence[Any]) -> dict[str, Any]:
        """One contiguous flat buffer per dtype, tensors in order."""
        groups: dict[str, list[torch.Tensor]] = {}
        for t in tensors:
            groups.setdefault(self.spec(t).dtype, []).append(t.detach().reshape(-1).to(self.device))
        return {k: torch.cat(v) if len(v) > 1 else v[0].clone() for k, v in groups.items()}

    def empty_buffers(self, sizes: Mapping[str, int]) -> dict[str, Any]:
        """Uninitialised flat buffers.

        Raises:
            ValueError: a key that names no torch dtype.
        """
        out = {}
        for k, n in sizes.items():
            dtype = getattr(torch, k, None)
            if not isinstance(dtype, torch.dtype):
                raise ValueError(f"{k!r} is not a torch dtype")
            out[k] = torch.empty(n, dtype=dtype, device=self.device)
        return out

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
        """torch, numpy and random states (copies)."""
        return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "random": random.getstate()}

    def set_rng_state(self, state: Any) -> None:
        """Restore states from :meth:`get_rng_state`."""
        torch.set_rng_state(state["torch"])
        np.random.set_state(state["numpy"])
        random.setstate(state["random"])


def job_backend(env: LauncherEnv) -> TorchBackend:
    """A worker's backend: the job's TCPStore (hosted by this process if ``SLURM_ELASTIC_STORE_SERVE``),
    signed with the job's secret, and its collectives as the environment chooses them."""
    store = make_store(env.store_host, env.store_port, env.store_serve, timeout_s=max(60.0, env.group_timeout_s))
    backend = TorchBackend(SignedStore(store, env.job_id, env.secret), env.group_timeout_s, env.socket_ifname,
                           env.dist_backend)
    # before the world forms: a script that reads LOCAL_RANK sees the GPU the worker bound
    os.environ["LOCAL_RANK"] = str(backend.gpu_binding.local_rank)
    log.info("%s: GPU binding %s", env.worker_id, backend.gpu_report)
    return backend


_NEW_GROUP_SORT_RANKS = "sort_ranks" in inspect.signature(dist.new_group).parameters
"""Whether this torch's ``new_group`` can keep a given rank order (``sort_ranks=False``, torch ≥ 2.12)."""

OBJECT_MAX_BYTES = 64 << 20
"""Largest encoded skeleton a worker accepts from a peer."""

CHECKPOINT_KEY = "checkpoint"
"""Key a checkpoint's MAC is computed under (with the job id), kept in ``<path>.mac``."""


class TorchBackend:
    """Process groups, collectives and store access for the agent.

    Args:
        store: the job's TCPStore, signed with the job's secret.
        group_timeout_s: collective timeout, seconds.
        socket_ifname: interface for gloo/NCCL, or empty to keep the environment's choice.
        dist_backend: ``auto`` (NCCL with CUDA, else gloo), ``gloo`` or ``nccl``.
    """

    def __init__(self, store: SignedStore, group_timeout_s: float, socket_ifname: str = "",
                 dist_backend: str = "auto") -> None:
        self.store = store
        # a rendezvous value that never verifies then fails as fast as a dead peer does
        store.set_timeout(dt.timedelta(seconds=group_timeout_s))
        self.group_timeout_s = group_timeout_s
        self.generation = ""  # of the current world: part of the key the state sent in it is signed under
        if socket_ifname:
            os.environ["GLOO_SOCKET_IFNAME"] = socket_ifname
            os.environ["NCCL_SOCKET_IFNAME"] = socket_ifname
        self.cuda = torch.cuda.is_available()
        # one GPU per worker: the task's slot on its node picks among the GPUs Slurm gave it (gpu_binding.py)
        self.gpu_binding = bind(os.environ, torch.cuda.device_count() if self.cuda else 0)
        self.gpu_report = self.gpu_binding.report(socket.gethostname())  # in the "formed" events
        index = self.gpu_binding.index
        self.device = torch.device("cuda", index) if self.cuda and index is not None else torch.device("cpu")
        self.ops: TensorOps = TorchOps(self.device)
        self.dist_backend = ("nccl" if self.cuda else "gloo") if dist_backend == "auto" else dist_backend
        # gloo sends and receives host tensors only: point-to-point traffic of CUDA tensors goes through the host
        self.p2p_device = torch.device("cpu") if self.dist_backend == "gloo" else self.device
        self.group: Any = None  # the current group: None is the whole world, else a group narrowed from it
        # NCCL: the control words go through a gloo group of the same ranks, so reading them never
        # waits for the GPU to finish the step (a device-to-host copy would)
        self.control_group: Any = None
        self._reducer: GradReducer | None = None
        self._reduced_model: Any = None
        self._placeholder = False  # the default group is this process alone (no world formed, or closed)

    def placeholder(self) -> None:
        """Make the default group this process alone (gloo on a private ``HashStore``), if there is none.

        What a DDP script does outside the training, before the world forms (``DistributedSampler``
        reads the group's size and rank) and after it closed (``destroy_process_group()``), then finds a
        group; :meth:`form` replaces it. A failure leaves no group (the script's call then says why).
        """
        if dist.is_initialized():
            return
        try:
            dist.init_process_group("gloo", store=HashStore(), rank=0, world_size=1,
                                    timeout=dt.timedelta(seconds=self.group_timeout_s))
        except (RuntimeError, ValueError, dist.DistError) as exc:
            log.debug("no default group of one process: %s", exc)
            return
        self._placeholder = True

    # -- groups ---------------------------------------------------------------------------------
    def form(self, generation: str, rank: int, world_size: int) -> None:
        """Join generation ``generation``'s group (fresh ``PrefixStore`` per generation).

        Raises:
            PeerLostError: if the group cannot be formed within the group timeout.
        """
        if world_size > (os.cpu_count() or 1):
            torch.set_num_threads(1)
        self.generation = generation
        if self._placeholder and dist.is_initialized():
            dist.destroy_process_group()
        self._placeholder = False
        prefix = PrefixStore(f"{generation}/", self.store)
        kwargs: dict[str, Any] = {}
        if self.cuda:
            torch.cuda.set_device(self.device)
        if self.dist_backend == "nccl":
            kwargs["device_id"] = self.device
        try:
            dist.init_process_group(
                self.dist_backend,
                store=prefix,
                rank=rank,
                world_size=world_size,
                timeout=dt.timedelta(seconds=self.group_timeout_s),
                **kwargs,
            )
            if self.dist_backend != "gloo":
                self.control_group = dist.new_group(backend="gloo", timeout=dt.timedelta(seconds=self.group_timeout_s))
        except (RuntimeError, dist.DistError) as exc:
            self.leave()
            raise PeerLostError(f"forming {generation} as rank {rank}/{world_size} failed: {exc}") from exc

    def can_narrow(self, ranks: Sequence[int]) -> bool:
        """Whether :meth:`narrow` can carve these ranks out of the current group in this order: always
        in rank order; in another order only where ``new_group`` takes ``sort_ranks`` (torch ≥ 2.12)."""
        glob = [r if self.group is None else dist.get_global_rank(self.group, r) for r in ranks]
        return glob == sorted(glob) or _NEW_GROUP_SORT_RANKS

    def narrow(self, ranks: Sequence[int]) -> None:
        """Make the group of these ranks of the current group, in this order, the current group.

        A shrink needs no new world: the staying ranks carve their group out of the one they are in
        (only they take part, ``use_local_synchronization``), and the old world stays open until the
        next :meth:`leave`. Ranks not in ``ranks`` must not call this.

        Raises:
            PeerLostError: if the group cannot be formed within the group timeout.
        """
        glob = [r if self.group is None else dist.get_global_rank(self.group, r) for r in ranks]
        # keep the given order (torch < 2.12 has no sort_ranks, and can narrow only in rank order)
        kwargs: dict[str, Any] = {} if glob == sorted(glob) else {"sort_ranks": False}
        kwargs.update(timeout=dt.timedelta(seconds=self.group_timeout_s), use_local_synchronization=True)
        try:
            group = dist.new_group(glob, **kwargs)
            control = None if self.dist_backend == "gloo" else dist.new_group(glob, backend="gloo", **kwargs)
        except (RuntimeError, dist.DistError) as exc:
            self.leave()
            raise PeerLostError(f"narrowing to ranks {list(ranks)} failed: {exc}") from exc
        self.group, self.control_group = group, control

    def leave(self) -> None:
        """Destroy the current world and every group narrowed from it, if any."""
        self.group = self.control_group = None
        self._placeholder = False
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
        """Broadcast of a small object (a skeleton, :func:`.state.encode_skeleton`), signed by ``src``.

        Raises:
            PeerLostError: a peer died or hung, or what ``src`` sent is refused (size, MAC, encoding).
        """
        me = dist.get_rank(self.group)
        key = f"{self.generation}/state/{src}"
        try:
            if me == src:
                buf = self._seal(key, obj)
                dist.broadcast(torch.tensor([buf.numel()], dtype=torch.int64, device=self.device),
                               group=self.group, group_src=src)
                dist.broadcast(buf, group=self.group, group_src=src)
                return obj
            size = torch.zeros(1, dtype=torch.int64, device=self.device)
            dist.broadcast(size, group=self.group, group_src=src)
            buf = self._buffer_for(key, int(size.item()))
            dist.broadcast(buf, group=self.group, group_src=src)
        except (RuntimeError, dist.DistError) as exc:
            raise PeerLostError(f"broadcast_object failed: {exc}") from exc
        return self._unseal(key, buf)

    def send(self, buffer: Any, dsts: Sequence[int]) -> None:
        """Send a flat buffer to each rank of ``dsts`` (all sends in flight at once)."""
        buffer = buffer.to(self.p2p_device)
        try:
            for req in [dist.isend(buffer, group=self.group, group_dst=dst) for dst in dsts]:
                if req is not None:  # None only on a rank outside the group
                    req.wait()
        except (RuntimeError, dist.DistError) as exc:
            raise PeerLostError(f"send to {list(dsts)} failed: {exc}") from exc

    def recv(self, buffer: Any, src: int) -> None:
        """Fill a flat buffer with what rank ``src`` sends."""
        landing = buffer if buffer.device == self.p2p_device else torch.empty_like(buffer, device=self.p2p_device)
        try:
            dist.recv(landing, group=self.group, group_src=src)
        except (RuntimeError, dist.DistError) as exc:
            raise PeerLostError(f"recv from {src} failed: {exc}") from exc
        if landing is not buffer:
            buffer.copy_(landing)

    def send_object(self, obj: Any, dsts: Sequence[int]) -> None:
        """Send a small object (a skeleton) to each rank of ``dsts``, signed for each."""
        me = dist.get_rank(self.group)
        try:
            for dst in dsts:
                buf = self._seal(f"{self.generation}/state/{me}/{dst}", obj, self.p2p_device)
                dist.send(torch.tensor([buf.numel()], dtype=torch.int64, device=self.p2p_device),
                          group=self.group, group_dst=dst)
                dist.send(buf, group=self.group, group_dst=dst)
        except (RuntimeError, dist.DistError) as exc:
            raise PeerLostError(f"send_object to {list(dsts)} failed: {exc}") from exc

    def recv_object(self, src: int) -> Any:
        """The small object rank ``src`` sends, once its MAC matches.

        Raises:
            PeerLostError: ``src`` died or hung, or what it sent is refused (size, MAC, encoding).
        """
        key = f"{self.generation}/state/{src}/{dist.get_rank(self.group)}"
        try:
            size = torch.zeros(1, dtype=torch.int64, device=self.p2p_device)
            dist.recv(size, group=self.group, group_src=src)
            buf = self._buffer_for(key, int(size.item()), self.p2p_device)
            dist.recv(buf, group=self.group, group_src=src)
        except (RuntimeError, dist.DistError) as exc:
            raise PeerLostError(f"recv_object from {src} failed: {exc}") from exc
        return self._unseal(key, buf)

    def _seal(self, key: str, obj: Any, device: torch.device | None = None) -> torch.Tensor:
        data = sign_value(key, self.store.job_id, encode_skeleton(obj), self.store.secret)
        return torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device or self.device)

    def _buffer_for(self, key: str, size: int, device: torch.device | None = None) -> torch.Tensor:
        if not VALUE_MAC_LEN <= size <= VALUE_MAC_LEN + OBJECT_MAX_BYTES:
            raise PeerLostError(f"{key}: refused a state of {size} bytes (must be {VALUE_MAC_LEN}.."
                                f"{VALUE_MAC_LEN + OBJECT_MAX_BYTES})")
        return torch.empty(size, dtype=torch.uint8, device=device or self.device)

    def _unseal(self, key: str, buf: torch.Tensor) -> Any:
        raw = buf.cpu().numpy().tobytes()
        try:
            return decode_skeleton(open_value(raw, key, self.store.job_id, self.store.secret, OBJECT_MAX_BYTES))
        except (ValueRejectedError, SkeletonError) as exc:
            log.warning("refused state %r: %s", key, exc)
            raise PeerLostError(f"refused state {key!r}: {exc}") from None

    def arm(self, model: torch.nn.Module, weight: float, control: Sequence[int]) -> None:
        """Start a step of ``model``: its next backward pass's gradients are averaged over the current
        group, overlapped with it (:class:`.grad_reducer.GradReducer`, made for the model on first
        use), each multiplied by ``weight`` before the sum; rank 0's buffers and the sum of the
        ``control`` words come with them."""
        self.reducer(model).arm(weight, control)

    def pause(self, model: torch.nn.Module, paused: bool) -> None:
        """While paused, ``model``'s backward passes accumulate gradients locally (earlier micro-batches)."""
        self.reducer(model).paused = paused

    def reducer(self, model: torch.nn.Module) -> GradReducer:
        """The reducer hooked on ``model`` (one model at a time; it holds the model's buffers flat)."""
        if self._reducer is None or self._reduced_model is not model:
            if self._reducer is not None:
                self._reducer.remove()
            self._reducer = GradReducer(model, lambda: self.group, self._control_group,
                                        control_words=CONTROL_WORDS)
            self._reduced_model = model
        return self._reducer

    def _control_group(self) -> Any:
        """The group the control words are summed on: the gloo group beside NCCL, else the current group."""
        return self.control_group if self.control_group is not None else self.group

    def reduce_step(self, model: torch.nn.Module) -> list[int]:
        """Finish the step's collectives (:meth:`arm`): the gradients, rank 0's buffers (as DDP's
        broadcast does) and the control words, summed (rank 0 writes the decision, every rank its stop
        request), so every rank leaves the step with the same decision.

        They were launched while backward ran and finished at its end; a rank that ran no backward
        this step takes part here, with zero gradients. Nothing here copies or launches per tensor.

        Returns:
            The summed control words.

        Raises:
            PeerLostError: if a peer died or hung past the group timeout (the parameters, the
                optimizer and the buffers then still hold the last step boundary's state).
        """
        reducer = self.reducer(model)
        reducer.complete()
        if reducer.failure is not None:
            raise PeerLostError(reducer.failure)
        return reducer.decided

    # -- store ----------------------------------------------------------------------------------
    def store_set(self, key: str, value: str) -> None:
        """Set a store key, signed.

        Raises:
            PeerLostError: the store cannot be reached.
        """
        try:
            self.store.set(key, value.encode())
        except (RuntimeError, dist.DistError) as exc:
            raise PeerLostError(f"store: setting {key!r} failed: {exc}") from exc

    def store_get(self, key: str) -> str | None:
        """Verified value of a key, or None if it is absent, refused or the store fails (never blocks)."""
        try:
            payload = self.store.read(key)
        except (RuntimeError, dist.DistError) as exc:
            log.warning("store: reading %r failed: %s", key, exc)
            return None
        return None if payload is None else self._text(key, payload)

    def store_claim(self, key: str, value: str, accept: Callable[[str], bool] | None = None) -> str | None:
        """Set a key unless it holds a verified value ``accept`` takes (:meth:`SignedStore.claim`: one
        that does not verify counts as absent); the value it holds then (``value`` if this claim took
        it), or None if the claim failed."""

        def take(payload: bytes) -> bool:
            text = self._text(key, payload)
            return text is not None and (accept is None or accept(text))

        try:
            payload = self.store.claim(key, value.encode(), take)
        except (RuntimeError, dist.DistError) as exc:
            log.warning("store: claiming %r failed: %s", key, exc)
            return None
        return None if payload is None else self._text(key, payload)

    @staticmethod
    def _text(key: str, payload: bytes) -> str | None:
        try:
            return payload.decode()
        except UnicodeDecodeError as exc:
            log.warning("refused store key %r: a signed payload that is not UTF-8: %s", key, exc)
            return None

    # -- checkpoints and digests -----------------------------------------------------------------
    def save(self, tree: Any, path: str) -> None:
        """Write a state tree to ``path`` atomically, its MAC to ``<path>.mac`` (checkpoint-restart path)."""
        tmp, mac_tmp = f"{path}.tmp{os.getpid()}", f"{path}.mac.tmp{os.getpid()}"
        torch.save(tree, tmp)
        h = value_hmac(CHECKPOINT_KEY, self.store.job_id, self.store.secret)
        with open(tmp, "rb") as f:
            while chunk := f.read(1 << 24):
                h.update(chunk)
        with open(mac_tmp, "w") as f:
            f.write(h.hexdigest() + "\n")
        os.replace(tmp, path)
        os.replace(mac_tmp, f"{path}.mac")

    def load(self, path: str) -> Any:
        """Read a state tree written by :meth:`save`, unpickled only once its MAC matches.

        Raises:
            ValueRejectedError: ``<path>.mac`` does not match the file (missing MAC: ``FileNotFoundError``).
        """
        with open(f"{path}.mac", "rb") as f:
            mac = f.read(VALUE_MAC_LEN + 2).rstrip(b"\n")
        with open(path, "rb") as f:
            data = f.read()
        try:
            check_value_mac(mac, CHECKPOINT_KEY, self.store.job_id, data, self.store.secret)
        except ValueRejectedError as exc:
            raise ValueRejectedError(f"checkpoint {path}: {exc}") from None
        return torch.load(io.BytesIO(data), weights_only=False)

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


class MapBatchDataset:
    """A standard map-style dataset (``torch.utils.data.Dataset``: ``len`` and ``dataset[i]``) as
    the agent's dataset: a batch is ``collate_fn([dataset[i] for i in indices])``.

    Args:
        dataset: the user's dataset; every worker must build the same one.
        collate_fn: merges samples into a batch (default ``torch.utils.data.default_collate``, what a
            ``DataLoader`` uses).
    """

    def __init__(self, dataset: Any, collate_fn: Callable[[list[Any]], Any] | None = None) -> None:
        self.dataset = dataset
        self.collate_fn = collate_fn or default_collate

    def __len__(self) -> int:
        """Number of samples."""
        return len(self.dataset)

    def batch(self, indices: Sequence[int]) -> Any:
        """The collated samples ``indices``."""
        return self.collate_fn([self.dataset[i] for i in indices])
