"""Training state: rollback, sync and checkpoint of model, optimizer, LR scheduler, RNG and sampler position.

This module owns what "the state of a training job" is and how it moves: the rollback point after a lost
worker (the live state of the last step boundary: nothing of the model or optimizer is copied per step,
see :meth:`TrainingState.step_started`), and a sync that broadcasts the state from
one rank to the others as one flat buffer per dtype plus a small skeleton (faster than pickled state
dicts), either as a broadcast to the whole group (recovery) or point-to-point to the ranks that need it
(a grow's joiners). It also owns the skeleton's encoding (:func:`encode_skeleton`,
:func:`decode_skeleton`): tagged JSON, with pickle only for a leaf JSON cannot carry; the backend signs
the encoded bytes and checks their MAC before :func:`decode_skeleton` sees them. It must not import
torch or any communication library: tensor operations come through a :class:`TensorOps` and the
collectives are arguments, so it runs single-process in unit tests.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import pickle
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .sampler import ElasticSampler, SamplerState

Broadcast = Callable[[Any, int], None]
"""In-place broadcast of one flat buffer from ``src`` (the buffer is filled on the other ranks)."""

BroadcastObject = Callable[[Any, int], Any]
"""Broadcast of a small object (a skeleton, see :func:`encode_skeleton`) from ``src``; the object on every rank."""

Send = Callable[[Any, Sequence[int]], None]
"""Send one flat buffer to each of the ranks ``dsts``."""

SendObject = Callable[[Any, Sequence[int]], None]
"""Send a small object (a skeleton, see :func:`encode_skeleton`) to each of the ranks ``dsts``."""

Recv = Callable[[Any, int], None]
"""Fill one flat buffer with what rank ``src`` sends."""

RecvObject = Callable[[int], Any]
"""The small object rank ``src`` sends."""


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """Dtype key and shape of a tensor leaf, enough to rebuild it from a flat buffer."""

    dtype: str
    shape: tuple[int, ...]


class TensorOps(Protocol):
    """The tensor operations the state sync needs (implemented in ``torch_backend``)."""

    def is_tensor(self, value: object) -> bool:
        """True if ``value`` is a tensor leaf."""

    def spec(self, tensor: Any) -> TensorSpec:
        """Dtype key and shape of ``tensor``."""

    def pack(self, tensors: Sequence[Any]) -> dict[str, Any]:
        """One flat buffer per dtype key, tensors concatenated in order."""

    def empty_buffers(self, sizes: Mapping[str, int]) -> dict[str, Any]:
        """Flat buffers of the given number of elements per dtype key."""

    def flat(self, tensor: Any) -> Any:
        """``tensor`` as a flat contiguous buffer on the communication device (a view when it can be)."""

    def unpack(self, buffers: Mapping[str, Any], specs: Sequence[TensorSpec]) -> list[Any]:
        """Tensors of ``specs``, in order, cut from the per-dtype buffers."""

    def get_rng_state(self) -> Any:
        """This process's RNG states (framework, numpy, random)."""

    def set_rng_state(self, state: Any) -> None:
        """Restore RNG states taken by :meth:`get_rng_state`."""


class Stateful(Protocol):
    """Anything with ``state_dict``/``load_state_dict`` (model, optimizer, LR scheduler)."""

    def state_dict(self) -> Any:
        """The object's state."""

    def load_state_dict(self, state_dict: Any, /) -> Any:
        """Load a state from :meth:`state_dict`."""


@dataclass(frozen=True, slots=True)
class _Slot:
    index: int
    spec: TensorSpec


def split_tree(tree: Any, ops: TensorOps) -> tuple[Any, list[Any]]:
    """Replace tensor leaves of a nested dict/list/tuple by slots.

    Args:
        tree: nested containers with tensor and plain leaves.
        ops: tensor operations.

    Returns:
        The skeleton (tensors replaced by slots; dicts, lists and tuples rebuilt as such) and the tensors
        in slot order.
    """
    tensors: list[Any] = []

    def walk(node: Any) -> Any:
        if ops.is_tensor(node):
            tensors.append(node)
            return _Slot(len(tensors) - 1, ops.spec(node))
        if isinstance(node, dict):
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        if isinstance(node, tuple):
            return tuple(walk(v) for v in node)
        return node

    return walk(tree), tensors


def join_tree(skeleton: Any, tensors: Sequence[Any]) -> Any:
    """Inverse of :func:`split_tree`: put tensors back into the skeleton's slots."""
    if isinstance(skeleton, _Slot):
        return tensors[skeleton.index]
    if isinstance(skeleton, dict):
        return {k: join_tree(v, tensors) for k, v in skeleton.items()}
    if isinstance(skeleton, list):
        return [join_tree(v, tensors) for v in skeleton]
    if isinstance(skeleton, tuple):
        return tuple(join_tree(v, tensors) for v in skeleton)
    return skeleton


class TrainingState:
    """The state a resize or a lost worker must preserve, with rollback and sync.

    Args:
        model: the model (its state dict includes BatchNorm buffers).
        optimizer: the optimizer.
        scheduler: the LR scheduler, or None.
        sampler: the elastic sampler.
        ops: tensor operations of the framework.
        extra: small counters owned by the caller (global step, applied order, LR scale);
            synced with the rest, kept by reference.

    Attributes:
        carried: more of the user's state, by name: objects with ``state_dict``/``load_state_dict``
            (an AMP ``GradScaler``, the user's trainer) or plain dicts (their counters, kept by
            reference and refilled in place); synced with the rest.
    """

    def __init__(
        self,
        model: Stateful,
        optimizer: Stateful,
        scheduler: Stateful | None,
        sampler: ElasticSampler,
        ops: TensorOps,
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.sampler = sampler
        self.ops = ops
        self.extra: dict[str, Any] = extra if extra is not None else {}
        self.carried: dict[str, Any] = {}
        self.holds_state = False  # this rank holds a whole state of a step boundary (a joiner: once received)
        self._open_step: dict[str, Any] | None = None

    def capture(self, *, rng: bool = True) -> dict[str, Any]:
        """The current state as a nested tree (tensors are live references, not copies)."""
        s = self.sampler.state
        tree: dict[str, Any] = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "sampler": (s.seed, s.epoch, s.consumed),
            "extra": dict(self.extra),
        }
        if self.carried:
            tree["carried"] = {k: dict(v) if isinstance(v, dict) else v.state_dict() for k, v in self.carried.items()}
        if rng:
            tree["rng"] = self.ops.get_rng_state()
        return tree

    def apply(self, tree: Mapping[str, Any]) -> None:
        """Load a tree from :meth:`capture` (or a checkpoint) into the live objects."""
        self.model.load_state_dict(tree["model"])
        self.optimizer.load_state_dict(tree["optimizer"])
        if self.scheduler is not None and tree["scheduler"] is not None:
            self.scheduler.load_state_dict(tree["scheduler"])
        seed, epoch, consumed = tree["sampler"]
        self.sampler.state = SamplerState(int(seed), int(epoch), int(consumed))
        self.extra.clear()
        self.extra.update(tree["extra"])
        for name, value in (tree.get("carried") or {}).items():
            target = self.carried.get(name)
            if isinstance(target, dict):
                target.clear()
                target.update(value)
            elif target is not None:
                target.load_state_dict(value)
        if "rng" in tree:
            self.ops.set_rng_state(tree["rng"])

    def step_started(self) -> None:
        """A step begins: keep what the step may change before its collectives end and that is cheap
        to keep (the LR scheduler's state and the user's counter dicts, host objects only).

        The parameters and the optimizer need no copy: every collective of a step ends before the
        optimizer may step (:mod:`.grad_reducer`), so a lost peer finds them at the last boundary. The
        buffers a forward pass changes are kept by the gradient reducer (one copy per dtype), the
        sampler and the counters advance only once the step's collectives succeeded. What the user's
        loop does after ``backward()`` to its scheduler and counters is undone by :meth:`rollback`.
        Carried objects with ``state_dict`` (an AMP ``GradScaler``) are not kept per step: reading
        one may wait for the GPU; after a lost worker they keep what the failed step did to them.
        """
        self._open_step = {
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "carried": {k: dict(v) for k, v in self.carried.items() if isinstance(v, dict)},
        }

    def step_ended(self) -> None:
        """The step's collectives succeeded: its live state is the new step boundary."""
        self._open_step = None

    def rollback(self) -> None:
        """After a lost peer: undo what the open step (if any) did to the scheduler and counter dicts."""
        kept, self._open_step = self._open_step, None
        if kept is None:
            return
        if self.scheduler is not None and kept["scheduler"] is not None:
            self.scheduler.load_state_dict(kept["scheduler"])
        for name, value in kept["carried"].items():
            self.carried[name].clear()
            self.carried[name].update(value)

    def sync(self, broadcast: Broadcast, broadcast_object: BroadcastObject, src: int, rank: int) -> int:
        """Make every rank's state equal to ``src``'s (model, optimizer, scheduler, sampler, extra).

        RNG states stay per rank. Every rank of the group must call this with the same ``src``. This is
        the recovery path, where survivors may be a step apart; a grow sends the state only to
        the joiners (:meth:`send` / :meth:`receive`).

        Args:
            broadcast: in-place broadcast of a flat buffer.
            broadcast_object: broadcast of a small object (the skeleton).
            src: the rank whose state wins.
            rank: this rank.

        Returns:
            Bytes of tensor data moved (as the buffers' element counts times item sizes, per ops).
        """
        if rank == src:
            skeleton, sizes, buffers = self._packed()
            broadcast_object((skeleton, sizes), src)
            for key in sorted(buffers):
                broadcast(buffers[key], src)
            return sum(_nbytes(b) for b in buffers.values())
        skeleton, sizes = broadcast_object(None, src)
        buffers = self.ops.empty_buffers(sizes)
        for key in sorted(buffers):
            broadcast(buffers[key], src)
        return self._apply_packed(skeleton, buffers)

    LARGE = 1 << 18
    """Tensors of at least this many elements are sent from where they live, not packed first."""

    def send(self, send: Send, send_object: SendObject, dsts: Sequence[int]) -> int:
        """Send this rank's state to the ranks ``dsts`` (each calls :meth:`receive` with this rank).

        Small tensors go packed in one flat buffer per dtype; large ones (≥ :attr:`LARGE` elements)
        are sent from the live tensors, so the sender copies almost nothing.

        Args:
            send: sends one flat buffer to several ranks.
            send_object: sends a small object (the skeleton) to several ranks.
            dsts: receiving ranks; nothing is sent when empty.

        Returns:
            Bytes of tensor data sent to each receiver.
        """
        if not dsts:
            return 0
        skeleton, tensors = split_tree(self.capture(rng=False), self.ops)
        large = [i for i, t in enumerate(tensors) if _numel(t) >= self.LARGE]
        skip = set(large)
        small = self.ops.pack([t for i, t in enumerate(tensors) if i not in skip])
        send_object((skeleton, {k: _numel(b) for k, b in small.items()}, large), dsts)
        flats = [*(small[k] for k in sorted(small)), *(self.ops.flat(tensors[i]) for i in large)]
        for buffer in flats:
            send(buffer, dsts)
        return sum(_nbytes(b) for b in flats)

    def receive(self, recv: Recv, recv_object: RecvObject, src: int) -> int:
        """Replace this rank's state by the one rank ``src`` sends with :meth:`send`.

        Returns:
            Bytes of tensor data received.
        """
        skeleton, sizes, large = recv_object(src)
        specs: list[TensorSpec] = []
        _collect_specs(skeleton, specs)
        skip = set(large)
        small = self.ops.empty_buffers(sizes)
        for key in sorted(small):
            recv(small[key], src)
        received = sum(_nbytes(b) for b in small.values())
        tensors: list[Any] = [None] * len(specs)
        small_slots = [i for i in range(len(specs)) if i not in skip]
        for i, t in zip(small_slots, self.ops.unpack(small, [specs[i] for i in small_slots]), strict=True):
            tensors[i] = t
        for i in large:
            spec = specs[i]
            buffer = self.ops.empty_buffers({spec.dtype: _spec_numel(spec)})
            recv(buffer[spec.dtype], src)
            received += _nbytes(buffer[spec.dtype])
            tensors[i] = self.ops.unpack(buffer, [spec])[0]
        self.apply(join_tree(skeleton, tensors))
        return received

    def _packed(self) -> tuple[Any, dict[str, int], dict[str, Any]]:
        """Skeleton, per-dtype sizes and flat buffers (copies) of the current state without RNG."""
        skeleton, tensors = split_tree(self.capture(rng=False), self.ops)
        buffers = self.ops.pack(tensors)
        return skeleton, {k: _numel(b) for k, b in buffers.items()}, buffers

    def _apply_packed(self, skeleton: Any, buffers: Mapping[str, Any]) -> int:
        """Apply a state received as one flat buffer per dtype; its bytes."""
        specs: list[TensorSpec] = []
        _collect_specs(skeleton, specs)
        self.apply(join_tree(skeleton, self.ops.unpack(buffers, specs)))
        return sum(_nbytes(b) for b in buffers.values())


def _collect_specs(skeleton: Any, out: list[TensorSpec]) -> None:
    slots: list[_Slot] = []

    def walk(node: Any) -> None:
        if isinstance(node, _Slot):
            slots.append(node)
        elif isinstance(node, dict):
            for v in node.values():
                walk(v)
        elif isinstance(node, list | tuple):
            for v in node:
                walk(v)

    walk(skeleton)
    out.extend(s.spec for s in sorted(slots, key=lambda s: s.index))


def _spec_numel(spec: TensorSpec) -> int:
    n = 1
    for d in spec.shape:
        n *= d
    return n


def _numel(buffer: Any) -> int:
    return int(buffer.numel()) if hasattr(buffer, "numel") else len(buffer)


def _nbytes(buffer: Any) -> int:
    if hasattr(buffer, "element_size"):
        return int(buffer.numel() * buffer.element_size())
    return len(buffer)


# -- the skeleton's encoding ---------------------------------------------------------------------


class SkeletonError(ValueError):
    """Bytes that are not an encoded skeleton."""


def encode_skeleton(obj: Any) -> bytes:
    """``obj`` (a skeleton, or a tuple holding one) as compact ASCII JSON, every type kept.

    ``None``, bools, ints, finite floats and strings are themselves; a container is a tagged array:
    ``["l", [...]]`` a list, ``["t", [...]]`` a tuple, ``["d", [[key, value], ...]]`` a dict (keys
    encoded the same way), ``["s", index, dtype, [shape]]`` a tensor's slot, ``["f", "inf"|"-inf"|"nan"]``
    a float JSON cannot hold. Any other leaf (a subclass of those types too) is ``["p", base64]`` of its
    pickle: the receiver unpickles it only inside bytes whose MAC it checked.
    """
    return json.dumps(_encode(obj), separators=(",", ":"), allow_nan=False).encode("ascii")


def decode_skeleton(data: bytes) -> Any:
    """Inverse of :func:`encode_skeleton`. Call it only on bytes whose MAC was checked.

    Raises:
        SkeletonError: not an encoded skeleton.
    """
    try:
        return _decode(json.loads(data, parse_constant=_no_constant))
    except SkeletonError:
        raise
    except (ValueError, TypeError, RecursionError, pickle.UnpicklingError, EOFError, AttributeError,
            ImportError, IndexError, KeyError) as exc:
        raise SkeletonError(f"not an encoded skeleton: {type(exc).__name__}: {exc}") from None


def _no_constant(name: str) -> Any:
    raise SkeletonError(f"JSON constant {name} is not in the encoding")


def _encode(node: Any) -> Any:
    kind = type(node)
    if node is None or kind in (bool, int, str):
        return node
    if kind is float:
        return node if math.isfinite(node) else ["f", repr(node)]
    if kind is _Slot:
        return ["s", node.index, node.spec.dtype, list(node.spec.shape)]
    if kind is list:
        return ["l", [_encode(v) for v in node]]
    if kind is tuple:
        return ["t", [_encode(v) for v in node]]
    if kind is dict:
        return ["d", [[_encode(k), _encode(v)] for k, v in node.items()]]
    return ["p", base64.b64encode(pickle.dumps(node)).decode("ascii")]


def _is_count(value: object) -> bool:
    return type(value) is int and value >= 0


def _decode(node: Any) -> Any:
    if node is None or isinstance(node, bool | int | float | str):
        return node
    if not (isinstance(node, list) and node and isinstance(node[0], str)):
        raise SkeletonError(f"untagged {type(node).__name__}")
    tag, args = node[0], node[1:]
    if tag == "f" and len(args) == 1 and args[0] in ("inf", "-inf", "nan"):
        return float(args[0])
    if tag == "s" and len(args) == 3:
        index, dtype, shape = args
        if _is_count(index) and isinstance(dtype, str) and isinstance(shape, list) and all(map(_is_count, shape)):
            return _Slot(index, TensorSpec(dtype, tuple(shape)))
    elif tag in ("l", "t") and len(args) == 1 and isinstance(args[0], list):
        items = [_decode(v) for v in args[0]]
        return items if tag == "l" else tuple(items)
    elif tag == "d" and len(args) == 1 and isinstance(args[0], list):
        out: dict[Any, Any] = {}
        for pair in args[0]:
            if not (isinstance(pair, list) and len(pair) == 2):
                raise SkeletonError("a dict item is not a [key, value] pair")
            out[_decode(pair[0])] = _decode(pair[1])  # an unhashable key: TypeError, refused by the caller
        return out
    elif tag == "p" and len(args) == 1 and isinstance(args[0], str):
        try:
            raw = base64.b64decode(args[0], validate=True)
        except binascii.Error as exc:
            raise SkeletonError(f"pickled leaf is not base64: {exc}") from None
        return pickle.loads(raw)  # only inside bytes whose MAC the backend checked
    raise SkeletonError(f"malformed {tag!r} node")
