"""Gradient averaging overlapped with the backward pass: buckets all-reduced while backward runs.

This module owns :class:`GradReducer`, the launcher's answer to ``DistributedDataParallel``'s reducer.
Parameters are cut into buckets in reverse registration order (about the order backward produces their
gradients; the first bucket small so communication starts early, the others up to ``bucket_bytes``).
A hook after each parameter's gradient is accumulated copies it, times the step's weight, into its
bucket; a full bucket is all-reduced asynchronously while backward goes on. Buckets are launched
strictly in index order on every rank, so the collectives match even if ranks finish gradients in
another order. At the end of backward (an autograd callback) the reducer launches what is left
(gradients no backward reached are zeros), waits for every bucket and points each ``p.grad`` at its
slice of the reduced bucket: no copy back.

A failed collective never raises inside backward (that would leave the user's loop mid-step): it is
recorded in :attr:`GradReducer.failure`, the remaining buckets are not launched, and the caller turns
the failure into a lost peer at the step boundary (the state then rolls back to its last commit, so
whatever the optimizer did with the unreduced gradients is undone).

The weight makes the sum over ranks the mean over the step's samples: ``n_rank / n_global`` when each
rank's loss is its own batch's mean (the DDP convention), ``1 / n_global`` when it is a sum.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.distributed as dist

FIRST_BUCKET_BYTES = 1 << 20
"""The first bucket's size (DDP's ``1 MiB``): its all-reduce starts as soon as the last layers are done."""

BUCKET_BYTES = 25 << 20
"""Every other bucket's size (DDP's default ``bucket_cap_mb=25``)."""


@dataclasses.dataclass(eq=False)
class _Bucket:
    """Parameters sharing one flat buffer (one dtype, one device)."""

    buffer: torch.Tensor
    members: list[int]
    pending: int = 0
    work: Any = None


class GradReducer:
    """Bucketed, overlapped all-reduce of a model's gradients (see the module docstring).

    Args:
        params: the parameters to average (those without ``requires_grad`` are left out).
        group: returns the process group of the current world (None: the default group).
        bucket_bytes: size cap of a bucket after the first.
        first_bucket_bytes: size cap of the first bucket.
    """

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        group: Callable[[], Any],
        bucket_bytes: int = BUCKET_BYTES,
        first_bucket_bytes: int = FIRST_BUCKET_BYTES,
    ) -> None:
        self.params = [p for p in params if p.requires_grad]
        self.group = group
        self.weight = 1.0
        self.armed = False
        self.paused = False  # backward passes that accumulate locally (``no_sync``)
        self.failure: str | None = None
        self._seen: list[bool] = [False] * len(self.params)
        self._queued = False
        self._next = 0  # index of the next bucket to launch
        self.buckets: list[_Bucket] = []
        self._where: list[tuple[int, torch.Tensor]] = [(0, torch.empty(0))] * len(self.params)
        self._build(bucket_bytes, first_bucket_bytes)
        self._hooks = [p.register_post_accumulate_grad_hook(self._hook(i))  # type: ignore[no-untyped-call]
                       for i, p in enumerate(self.params)]

    def _build(self, bucket_bytes: int, first_bucket_bytes: int) -> None:
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
            buffer = torch.zeros(sum(self.params[i].numel() for i in members), dtype=p0.dtype, device=p0.device)
            b = len(self.buckets)
            self.buckets.append(_Bucket(buffer, members))
            offset = 0
            for i in members:
                n = self.params[i].numel()
                self._where[i] = (b, buffer[offset : offset + n].view_as(self.params[i]))
                offset += n

    def remove(self) -> None:
        """Take the hooks off the parameters."""
        for h in self._hooks:
            h.remove()
        self._hooks = []

    def arm(self, weight: float) -> None:
        """Reduce the gradients of the next backward pass, each multiplied by ``weight`` first."""
        self.weight = weight
        self.armed = True
        self.failure = None
        self._seen = [False] * len(self.params)
        self._queued = False
        self._next = 0
        for b in self.buckets:
            b.pending, b.work = len(b.members), None

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

    def _launch_ready(self) -> None:
        while self._next < len(self.buckets) and self.buckets[self._next].pending == 0:
            bucket = self.buckets[self._next]
            self._next += 1
            if self.failure is not None:
                continue
            try:
                bucket.work = dist.all_reduce(bucket.buffer, group=self.group(), async_op=True)
            except (RuntimeError, dist.DistError) as exc:
                self.failure = f"all_reduce of gradient bucket {self._next - 1} failed: {exc}"

    def complete(self) -> None:
        """Finish the armed reduction: launch what is left, wait for all, point ``p.grad`` at the result.

        Runs at the end of backward (queued by the first hook), or from the step boundary when no
        backward ran on this rank; a no-op when not armed. A collective that fails is recorded in
        :attr:`failure` (never raised here).
        """
        if not self.armed:
            return
        self.armed = False
        for i, seen in enumerate(self._seen):
            if not seen:
                b, view = self._where[i]
                view.zero_()
                self.buckets[b].pending -= 1
        self._launch_ready()
        for b, bucket in enumerate(self.buckets):
            if bucket.work is None:
                continue
            try:
                bucket.work.wait()
            except (RuntimeError, dist.DistError) as exc:
                self.failure = self.failure or f"all_reduce of gradient bucket {b} failed: {exc}"
            bucket.work = None
        if self.failure is None:
            for p, (_, view) in zip(self.params, self._where, strict=True):
                p.grad = view
