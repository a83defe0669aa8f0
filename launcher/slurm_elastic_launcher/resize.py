"""The resize protocol: orders in, a decision in the step's control words, the switch of worlds.

This module owns an in-place resize (ONES §3.3) on both sides. Rank 0 reads the orders (authenticated
by :meth:`.orders.Order.parse`) at most every :attr:`ResizeProtocol.ORDERS_EVERY_S`, tells the joiners
the job's epoch, and announces an order in the control words of a step once every joiner is ready
(:meth:`ResizeProtocol.decide`); at that step's boundary every rank switches
(:meth:`ResizeProtocol.switch`): a worker the order drops leaves, the stayers narrow their group on a
shrink, and on a grow everyone forms generation ``o<seq>`` and the joiners receive the state. A
joiner finds the order naming it, warms up, says it is ready and waits for rank 0's go
(:meth:`ResizeProtocol.await_order`, :meth:`ResizeProtocol.join`). Forming a world is
:mod:`.membership`'s.
"""

from __future__ import annotations

import logging
import time

from . import control
from .agent_types import CONTROL_WORDS, AgentState, PeerLostError
from .membership import Membership, transfer_plan
from .orders import Order, OrderRejectedError
from .worker_context import WorkerContext

log = logging.getLogger(__name__)


class ResizeProtocol:
    """One worker's side of the resize protocol (module docstring).

    Args:
        ctx: the worker's shared state.
        membership: forms the worlds a resize switches to.
    """

    ORDERS_EVERY_S = 0.2  # rank 0 reads the orders and the joiners' ready keys at most this often

    def __init__(self, ctx: WorkerContext, membership: Membership) -> None:
        self.ctx = ctx
        self.membership = membership
        self.pending: Order | None = None  # rank 0: the order it will announce once the joiners are ready
        self._next_read = 0.0  # monotonic time of rank 0's next read of the orders (:meth:`decide`)
        self._ready: dict[tuple[int, str], int] = {}  # (order, joiner) seen ready -> its warm-up's epoch
        self._told_epoch: dict[int, int] = {}  # order -> the job's epoch last told its joiners
        self._parsed: dict[str, Order | None] = {}

    def valid_orders(self) -> list[Order]:
        """Authenticated orders from the source; each raw order is parsed (and refused) once."""
        ctx = self.ctx
        out = []
        for raw in ctx.source.read():
            if raw not in self._parsed:
                try:
                    self._parsed[raw] = Order.parse(raw, ctx.env.job_id, ctx.env.secret)
                except OrderRejectedError as exc:
                    log.warning("%s: refused order: %s", ctx.me, exc)
                    ctx.event("refused", reason=str(exc))
                    self._parsed[raw] = None
            order = self._parsed[raw]
            if order is not None:
                out.append(order)
        return out

    # -- rank 0 ---------------------------------------------------------------------------------------

    def decide(self) -> list[int]:
        """Rank 0: the control words of this step (resize/stop seq, once joiners are ready).

        The order source and the joiners' ready keys are read at most every :attr:`ORDERS_EVERY_S`
        seconds, not at every step: a step in between does no I/O (a store round trip is a few
        percent of a GPU's 10 ms step), and an order waits at most that long more.
        """
        ctx = self.ctx
        words = [0] * CONTROL_WORDS
        applied = ctx.counters.applied_seq
        if self.pending is not None and self.pending.seq <= applied:
            self.pending = None
        now = time.monotonic()
        read = now >= self._next_read
        if read:
            self._next_read = now + self.ORDERS_EVERY_S
            newer = [o for o in self.valid_orders() if o.seq > applied and o.run == ctx.job_run]  # an earlier
            # run's orders name the workers of that run, gone since the requeue
            if newer:  # every order is a whole target world: the latest one supersedes any still waiting
                self.pending = max(newer, key=lambda o: o.seq)
        order = self.pending
        if order is None:
            return words
        if order.kind == "stop":
            words[1] = order.seq
            return words
        joiners = [w for w in order.workers if w not in ctx.members]
        if len(joiners) == len(order.workers):
            log.error("%s: refused order %d: no current worker stays, the state has no source", ctx.me, order.seq)
            ctx.counters.applied_seq = order.seq
            self.pending = None
            return words
        epoch = ctx.sampler.state.epoch
        if read:
            if self._told_epoch.get(order.seq) != epoch:  # the epoch a joiner's loop labels its warm-up with
                ctx.backend.store_set(control.epoch_key(order.seq), control.epoch_payload(epoch))
                self._told_epoch[order.seq] = epoch
            for w in joiners:
                if self._ready.get((order.seq, w)) not in (epoch, control.ANY_EPOCH):
                    label = ctx.read_control(control.ready_key(order.seq, w), control.read_ready)
                    if label is not None:
                        self._ready[(order.seq, w)] = label
        # this step ends in epoch E or at the start of E + 1: where a warm-up labelled E goes on
        if all(self._ready.get((order.seq, w)) in (epoch, control.ANY_EPOCH) for w in joiners):
            words[0] = order.seq
        return words

    def switch(self, seq: int) -> None:
        """Every rank, at the boundary of the step that announced order ``seq`` (SWITCHING): rank 0
        writes the go key, the others read the order; then leave (a worker it drops → LEFT), keep the
        group (a new batch only), narrow it (a shrink) or form generation ``o<seq>`` and send the state
        to the joiners (a grow) → TRAINING.

        Raises:
            PeerLostError: the announcement is not rank 0's, a peer died while the worlds switched, or
                no go key came (the step's end recovers, :meth:`.step_driver.StepDriver.handle`).
        """
        ctx = self.ctx
        t0 = ctx.clock()
        ctx.transition(AgentState.SWITCHING)
        ctx.event("switch", seq=seq)
        if ctx.rank == 0:
            pending = self.pending
            if pending is None or pending.seq != seq:  # the control words were not rank 0's: re-form
                raise PeerLostError(f"{ctx.me}: the step announced order {seq}, which rank 0 does not hold")
            order = pending
            ctx.backend.store_set(control.go_key(seq), control.go_payload(ctx.members, order))
        else:
            order = self.announced(seq)
        t_go = ctx.clock()
        ctx.counters.applied_seq = seq
        self.pending = None
        old = ctx.members
        if ctx.me not in order.workers:
            self.leave_job()
            return
        if tuple(order.workers) == old:  # the same world (a new batch size only): the group stays
            ctx.event("rebatched", seq=seq, local_batch=order.local_batch)
        elif all(w in old for w in order.workers) and ctx.backend.can_narrow([old.index(w) for w in order.workers]):
            # shrink: the stayers narrow the group they are in
            self.membership.form(f"o{seq}", order.workers, within=[old.index(w) for w in order.workers])
        else:  # a grow, or a shrink into another rank order this torch cannot narrow to: a new world
            ctx.backend.leave()
            self.membership.form(f"o{seq}", order.workers, plan=transfer_plan(old, order.workers))
        t_formed = ctx.clock()
        self.membership.apply_policy(order.local_batch)
        # Nothing is copied here: the rollback point is the live state of the step boundary, and the
        # applied order number is part of it (an order is never applied twice).
        ctx.event("resumed", go_s=round(t_go - t0, 4), form_s=round(t_formed - t_go, 4))
        ctx.report("resize", ctx.clock() - t0)
        ctx.say(f"order {seq}: {len(old)} -> {len(ctx.members)} workers ({','.join(ctx.members)}), per-GPU "
                f"batch {ctx.counters.local_batch}, paused {ctx.clock() - t0:.2f} s at sample "
                f"{ctx.counters.samples}")
        ctx.transition(AgentState.TRAINING)

    def leave_job(self) -> None:
        """A worker the order drops: leave the group and say so; it exits once :meth:`.Agent.run` returns.

        Its priority stays as it is: at a lower one its teardown on a busy node outlived the daemon's
        grace after the "left" report, the node release killed it, and the job ended FAILED.
        """
        ctx = self.ctx
        ctx.backend.leave()
        ctx.report_left()
        ctx.transition(AgentState.LEFT)

    def announced(self, seq: int) -> Order:
        """The order rank 0 announced as ``seq``: read from the source, else from rank 0's go key.

        Raises:
            PeerLostError: no go key that verifies came within three group timeouts.
        """
        ctx = self.ctx
        matches = {o for o in self.valid_orders() if o.seq == seq}
        if len(matches) == 1:
            return matches.pop()
        go = ctx.wait_control(control.go_key(seq), lambda p: control.read_go(p, seq, ctx.env.job_id, ctx.env.secret),
                              ctx.env.group_timeout_s * 3)
        if go is None:
            raise PeerLostError(f"{ctx.me}: rank 0 announced order {seq} but wrote no go key that verifies")
        return go.order

    # -- a joiner -------------------------------------------------------------------------------------

    def await_order(self) -> Order:
        """A joiner: the order naming this worker (JOINING), whose run it acts for from now on (as rank 0
        it reads that run's orders); its warm-up pass comes next."""
        ctx = self.ctx
        ctx.transition(AgentState.JOINING)
        order = self.find_my_order()
        ctx.job_run = order.run  # its own allocation's restart count is not the job's
        return order

    def find_my_order(self) -> Order:
        """A joiner: the latest resize order naming this worker whose switch has not happened yet.

        Raises:
            TimeoutError: none within the join timeout.
        """
        ctx = self.ctx
        deadline = time.monotonic() + ctx.env.join_timeout_s
        while time.monotonic() < deadline:
            mine = [
                o
                for o in self.valid_orders()
                if o.kind == "resize" and ctx.me in o.workers and ctx.read_go(o.seq) is None
            ]
            if mine:
                return max(mine, key=lambda o: o.seq)
            time.sleep(0.05)
        raise TimeoutError(f"{ctx.me}: no resize order names this worker within {ctx.env.join_timeout_s} s")

    def job_epoch(self, order: Order) -> int:
        """A joiner of ``order``: the job's epoch now, as rank 0 tells it (the epoch its loop's warm-up
        pass is labelled with, :meth:`join`).

        Raises:
            TimeoutError: rank 0 said nothing within the join timeout.
        """
        ctx = self.ctx
        epoch = ctx.wait_control(control.epoch_key(order.seq), control.read_epoch, ctx.env.join_timeout_s)
        if epoch is None:
            raise TimeoutError(f"{ctx.me}: no epoch for order {order.seq} within {ctx.env.join_timeout_s} s")
        return epoch

    def warm_up(self) -> None:
        """Joiner: one forward and backward pass on real samples before it says it is ready.

        The old workers are still training then, so the first-call costs of a fresh process (allocator,
        kernel selection) are not paid in the first step of the new world. Parameters, buffers and
        gradients it touches are replaced by the state the joiner receives; the optimizer is not stepped.
        """
        ctx = self.ctx
        n = min(len(ctx.job.dataset), ctx.env.local_batch, ctx.env.max_local_batch)
        if n < 1:
            return
        t0 = time.perf_counter()
        ctx.job.loss_fn(ctx.job.model, ctx.job.dataset.batch(list(range(n)))).backward()
        ctx.job.optimizer.zero_grad(set_to_none=True)
        ctx.event("warmed", samples=n, s=round(time.perf_counter() - t0, 4))

    def join(self, order: Order, epoch: int | None = None) -> int | None:
        """A joiner, warmed up: say ready, wait for the go, form the new world and receive the state
        (WAITING → FORMING → SYNCING → TRAINING).

        Args:
            order: the order naming this worker.
            epoch: the epoch the script's loop labelled the warm-up pass with (:meth:`job_epoch`), or
                None (no loop: ``run``). Rank 0 switches this worker in only while the job is in that
                epoch, so the pass goes on in the epoch it was labelled with (or that epoch's end).

        Returns:
            None once joined; the job's epoch if it moved on from ``epoch`` first: not joined, the
            script's loop ends that pass and warms up again labelled with the new one (JOINING).

        Raises:
            TimeoutError: no go within the join timeout.
        """
        ctx = self.ctx
        ctx.backend.store_set(control.ready_key(order.seq, ctx.me), control.ready_payload(epoch))
        ctx.transition(AgentState.WAITING)
        deadline = time.monotonic() + ctx.env.join_timeout_s
        while True:
            go = ctx.read_go(order.seq)
            if go is not None or time.monotonic() >= deadline:
                break
            if epoch is not None:
                now = ctx.read_control(control.epoch_key(order.seq), control.read_epoch)
                if now is not None and now != epoch and ctx.read_go(order.seq) is None:
                    ctx.transition(AgentState.JOINING)
                    return now
            time.sleep(0.01)
        if go is None:
            raise TimeoutError(f"{ctx.me}: no go for order {order.seq} within {ctx.env.join_timeout_s} s")
        self.membership.form(f"o{order.seq}", go.order.workers, plan=transfer_plan(go.members, go.order.workers))
        self.membership.apply_policy(go.order.local_batch)
        ctx.transition(AgentState.TRAINING)
        return None
