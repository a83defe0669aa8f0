"""One step's collectives, overlapped with the backward pass: gradient buckets, rank 0's buffers, the
control words.

This module owns :class:`GradReducer`, the launcher's answer to ``DistributedDataParallel``'s reducer,
and with it everything a training step sends between workers, so that the step boundary costs the
same for a model of 60 tensors as for one of 600:

* **Gradients.** Parameters are cut into buckets in reverse registration order (about the order
  backward produces their gradients; the first bucket small so communication starts early, the
  others up to ``bucket_bytes``). A hook after each parameter's gradient is accumulated copies it,
  times the step's weight, into its bucket; a full bucket is all-reduced asynchronously while backward
  goes on. Buckets are launched strictly in index order on every rank, so the collectives match even
  if ranks finish gradients in another order.
* **Buffers** (BatchNorm statistics). At construction the model's buffers are moved into one flat
  tensor per dtype and device, each buffer a tensor of its own shape on that memory, so sharing
  rank 0's buffers with all (DDP's ``broadcast_buffers``) is one broadcast per dtype, not one per
  tensor.
* **Control words** (the agent's resize, stop and stop-request words), summed over the ranks. On the
  host (gloo on CPU) they ride in the last gradient bucket as extra elements; elsewhere they take one
  small all-reduce on the control group (gloo, on the host, beside NCCL: reading them never waits
  for the GPU).

At the end of backward (an autograd callback) the reducer launches what is left, waits for every
collective and points each ``p.grad`` at its slice of the reduced bucket: no copy back.

**The rollback point needs no copy of the model or the optimizer.** Every collective of a step is
finished before the optimizer's step may run, so a lost peer is seen while the parameters and the
optimizer still hold the state of the last step boundary. A failed collective never raises inside
backward (that would leave the user's loop mid-step): it is recorded in :attr:`GradReducer.failure`,
the buffers go back to their copy from the step's start (:meth:`arm`; the forward pass moved them),
and :attr:`failed` tells the optimizer guard (:mod:`.user_loop`) to skip the step; the caller turns
the failure into a lost peer at the step boundary. The only per-step copy is the buffers' (one
``copy_`` per dtype).

The weight makes the sum over ranks the mean over the step's samples: ``n_rank / n_global`` when each
rank's loss is its own batch's mean (the DDP convention), ``1 / n_global`` when it is a sum.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

FIRST_BUCKET_BYTES = 1 << 20
"""The first bucket's size (DDP's ``1 MiB``): its all-reduce starts as soon as the last layers are done."""

BUCKET_BYTES = 25 << 20
"""Every other bucket's size (DDP's default ``bucket_cap_mb=25``)."""

BOUNDARY = "slurm_elastic.boundary"
"""Name of the profiler ranges around the launcher's own work at a step boundary (``bench step``
counts the torch operators inside them: :mod:`.step_bench`)."""


@dataclasses.dataclass(eq=False)
class _Bucket:
    """Parameters sharing one flat buffer (one dtype, one device)."""

    buffer: torch.Tensor
    members: list[int]
    pending: int = 0
    work: Any = None


@dataclasses.dataclass(eq=False)
class _FlatBuffers:
    """A model's buffers of one dtype and device on the memory of one flat tensor (one broadcast
    shares them all: rank 0's values are copied, never summed), with the step's copy."""

    flat: torch.Tensor
    shadow: torch.Tensor
    owners: list[tuple[torch.nn.Module, str, torch.Tensor]]  # (module, name, the view it must hold)


class GradReducer:
    """Bucketed, overlapped all-reduce of a model's gradients, with its buffers and the control words
    (see the module docstring).

    Args:
        model: the model: its parameters with ``requires_grad`` are averaged, its buffers are rank 0's.
        group: returns the process group of the current world (None: the default group).
        control_group: returns the group the control words are summed on (None: the default group).
        bucket_bytes: size cap of a bucket after the first.
        first_bucket_bytes: size cap of the first bucket.
        control_words: how many control words :meth:`arm` takes. Where the last bucket (the last one
            launched) is a host tensor of ``float32`` or ``float64`` (gloo on CPU) they ride in it, as
            extra elements summed with the gradients (exact: order numbers and counts stay far below
            2**24); elsewhere they get an all-reduce of their own on ``control_group`` (with NCCL, a
            gloo group on the host: reading them never waits for the GPU).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        group: Callable[[], Any],
        control_group: Callable[[], Any] | None = None,
        bucket_bytes: int = BUCKET_BYTES,
        first_bucket_bytes: int = FIRST_BUCKET_BYTES,
        control_words: int = 0,
    ) -> None:
        self.model = model
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.group = group
        self.control_group = control_group or group
        self.weight = 1.0
        self.armed = False
        self.paused = False  # backward passes that accumulate locally (``no_sync``)
        self.failure: str | None = None
        self.decided: list[int] = []
        self._control = torch.zeros(control_words, dtype=torch.int64)  # unless they ride in the last bucket
        self._control_words: Any = self._control.numpy()  # the same memory: written and read with no operator
        self._control_in_bucket = False
        self._seen: list[bool] = [False] * len(self.params)
        self._queued = False
        self._next = 0  # index of the next bucket to launch
        self.buckets: list[_Bucket] = []
        self._where: list[tuple[int, torch.Tensor]] = [(0, torch.empty(0))] * len(self.params)
        self._build(bucket_bytes, first_bucket_bytes, control_words)
        self.buffers: list[_FlatBuffers] = []
        self._flatten_buffers()
        self._hooks = [p.register_post_accumulate_grad_hook(self._hook(i))  # type: ignore[no-untyped-call]
                       for i, p in enumerate(self.params)]

    def _build(self, bucket_bytes: int, first_bucket_bytes: int, control_words: int) -> None:
        open_: dict[tuple[torch.dtype, torch.device], list[int]] = {}
        sizes: dict[tuple[torch.dtype, torch.device], int] = {}
        groups: list[list[int]] = []
        for i in reversed(range(len(self.params))):
            p = self.params[i]
            key = (p.dtype, p.device)
            members = open_.setdefault(key, [])
            members.append(i)
            sizes[key] = sizes.get(key, 0) + p.numel() * p.element_size()
            if sizes[key] >= (first_bucket_bytes if not groups else bucket_bytes):
                groups.append(members)
                del open_[key]
                sizes[key] = 0
        groups.extend(members for members in open_.values() if members)
        for members in groups:
            p0 = self.params[members[0]]
            last = members is groups[-1]
            carry = last and control_words > 0 and p0.device.type == "cpu" and p0.dtype in (torch.float32,
                                                                                             torch.float64)
            size = sum(self.params[i].numel() for i in members)
            buffer = torch.zeros(size + (control_words if carry else 0), dtype=p0.dtype, device=p0.device)
            if carry:
                self._control_in_bucket = True
                self._control_words = buffer[size:].numpy()
            b = len(self.buckets)
            self.buckets.append(_Bucket(buffer, members))
            offset = 0
            for i in members:
                n = self.params[i].numel()
                self._where[i] = (b, buffer[offset : offset + n].view_as(self.params[i]))
                offset += n

    def _flatten_buffers(self) -> None:
        """Move the model's buffers into one flat tensor per dtype and device (each buffer on its memory).

        One memory per dtype, not one for all: ``torch.save`` refuses tensors that see one memory as
        different dtypes, and the user's script saves its model.
        """
        by_key: dict[tuple[torch.dtype, torch.device], list[tuple[torch.nn.Module, str, torch.Tensor]]] = {}
        for module in self.model.modules():
            for name, b in module._buffers.items():
                if b is not None:
                    by_key.setdefault((b.dtype, b.device), []).append((module, name, b))
        self.buffers = []
        for (dtype, device), entries in by_key.items():
            unique = list({id(b): b for _, _, b in entries}.values())  # one registered twice stays one
            flat = torch.zeros(sum(b.numel() for b in unique), dtype=dtype, device=device)
            views: dict[int, torch.Tensor] = {}
            start = 0
            for b in unique:
                # set_, not a view: the buffer shares the flat memory but keeps a version counter of its
                # own (views share their base's, so one buffer changed in place in a forward pass would
                # make autograd refuse every other buffer it saved, as BatchNorm saves its statistics)
                view = torch.empty(0, dtype=dtype, device=device)
                view.set_(flat.untyped_storage(), start, b.shape, b.contiguous().stride())
                start += b.numel()
                with torch.no_grad():
                    view.copy_(b)
                views[id(b)] = view
            owners = []
            for module, name, b in entries:
                module._buffers[name] = views[id(b)]
                owners.append((module, name, views[id(b)]))
            self.buffers.append(_FlatBuffers(flat, flat.clone(), owners))

    def _buffers_moved(self) -> bool:
        """True if the model no longer holds the flat buffers' views (the script replaced a buffer, or
        called ``model.half()``): they are flattened again, as they are now."""
        return any(module._buffers.get(name) is not view for fb in self.buffers for module, name, view in fb.owners)

    def remove(self) -> None:
        """Take the hooks off the parameters."""
        for h in self._hooks:
            h.remove()
        self._hooks = []

    @property
    def failed(self) -> bool:
        """True from a failed collective until the next :meth:`arm`: the optimizer must not step."""
        return self.failure is not None

    def arm(self, weight: float, control: Sequence[int] = ()) -> None:
        """Start a step: reduce the gradients of the next backward pass, each multiplied by ``weight``
        first, and sum ``control`` over the ranks with them (empty: no control words).

        The buffers are copied as they are (the rollback point of the one thing a forward pass changes
        before the collectives run; :meth:`complete` puts them back if a collective fails).
        """
        self.weight = weight
        self.armed = True
        self.failure = None
        self.decided = []
        self._seen = [False] * len(self.params)
        self._queued = False
        self._next = 0
        for b in self.buckets:
            b.pending, b.work = len(b.members), None
        if self._buffers_moved():
            self._flatten_buffers()
        for fb in self.buffers:
            fb.shadow.copy_(fb.flat)
        if len(control) != len(self._control_words):
            raise ValueError(f"arm(control={list(control)}): this reducer takes {len(self._control_words)} "
                             "control words")
        self._control_words[:] = control

    # -- during backward ---------------------------------------------------------------------------
    def _hook(self, i: int) -> Callable[[torch.Tensor], None]:
        def on_grad(p: torch.Tensor) -> None:
            if not self.armed or self.paused or self._seen[i]:
                return
            if not self._queued:
                torch.autograd.Variable._execution_engine.queue_callback(self.complete)
                self._queued = True
            self._seen[i] = True
            b, view = self._where[i]
            grad = p.grad
            if grad is not None and grad.data_ptr() == view.data_ptr():
                view.mul_(self.weight)
            elif grad is not None:
                torch.mul(grad, self.weight, out=view)
            else:
                view.zero_()
            bucket = self.buckets[b]
            bucket.pending -= 1
            self._launch_ready()

        return on_grad

    def _launch(self, what: str, launch: Callable[[], Any]) -> Any:
        if self.failure is not None:
            return None
        try:
            return launch()
        except (RuntimeError, dist.DistError) as exc:
            self.failure = f"{what} failed: {exc}"
            return None

    def _launch_ready(self) -> None:
        while self._next < len(self.buckets) and self.buckets[self._next].pending == 0:
            bucket = self.buckets[self._next]
            self._next += 1
            bucket.work = self._launch(f"all_reduce of gradient bucket {self._next - 1}", functools.partial(
                dist.all_reduce, bucket.buffer, group=self.group(), async_op=True))

    def complete(self) -> None:
        """Finish the armed step: launch what is left (buckets, rank 0's buffers, the control words),
        wait for all, point ``p.grad`` at the result.

        Runs at the end of backward (queued by the first hook), or from the step boundary when no
        backward ran on this rank; a no-op when not armed. A collective that fails is recorded in
        :attr:`failure` (never raised here), and the buffers go back to their copy of :meth:`arm`.
        """
        if not self.armed:
            return
        self.armed = False
        with torch.profiler.record_function(BOUNDARY):
            self._finish()

    def _finish(self) -> None:
        for i, seen in enumerate(self._seen):
            if not seen:
                b, view = self._where[i]
                view.zero_()
                self.buckets[b].pending -= 1
        self._launch_ready()
        buffer_works = [self._launch("broadcast of rank 0's buffers", functools.partial(
            dist.broadcast, fb.flat, group=self.group(), group_src=0, async_op=True)) for fb in self.buffers]
        control_work = None
        if self._control.numel() and not self._control_in_bucket:
            control_work = self._launch("all_reduce of the control words", functools.partial(
                dist.all_reduce, self._control, group=self.control_group(), async_op=True))
        works = [(f"all_reduce of gradient bucket {b}", bucket.work) for b, bucket in enumerate(self.buckets)]
        works += [("broadcast of rank 0's buffers", w) for w in buffer_works]
        works = [(what, w) for what, w in works if w is not None]
        if works and dist.get_backend(self.group()) == "nccl":
            # NCCL runs a group's collectives in the order they were issued, on one stream: waiting for
            # the last makes the step's stream wait for all (a wait is an operator: one, not one per bucket)
            works = works[-1:]
        if control_work is not None:
            works.append(("all_reduce of the control words", control_work))
        for what, work in works:
            try:
                work.wait()
            except (RuntimeError, dist.DistError) as exc:
                self.failure = self.failure or f"{what} failed: {exc}"
        for bucket in self.buckets:
            bucket.work = None
        if self.failure is not None:
            with torch.no_grad():
                for fb in self.buffers:
                    fb.flat.copy_(fb.shadow)
            return
        self.decided = [round(v) for v in self._control_words.tolist()]
        for p, (_, view) in zip(self.params, self._where, strict=True):
            p.grad = view
