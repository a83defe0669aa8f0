"""Membership and rendezvous: forming a generation's group, and the survivors' recovery.

This module owns how a worker's world is made: :meth:`Membership.form` joins a generation's group of
given members (a new group, or a narrowed one on a shrink) and moves the training state where it
must move (a broadcast from one rank at the start and after a recovery; point to point from the
staying workers to the joiners on a grow, :func:`transfer_plan`). After a lost peer,
:meth:`Membership.recover` rolls back to the last step boundary, agrees on the survivors through the
store (:meth:`Membership.agree`) and forms their world (generation ``<gen>.r``). Each formed world
gets its batch and LR from :mod:`.batch_policy` (:meth:`Membership.apply_policy`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from . import control
from .agent_types import AgentState, PeerLostError
from .batch_policy import apply_batch_policy
from .worker_context import WorkerContext

log = logging.getLogger(__name__)


def transfer_plan(old: Sequence[str], new: Sequence[str]) -> dict[int, int]:
    """Who sends the state to whom on a grow: each joiner's new rank → a staying worker's new rank.

    Only joiners need the state (the staying workers already hold it, equal on all of them), so the
    joiners are spread round-robin over the staying workers, which send in parallel.

    Args:
        old: worker ids of the current world.
        new: worker ids of the new world, in rank order.

    Returns:
        ``{joiner rank: sender rank}``; empty when nobody joins.

    Raises:
        ValueError: if nobody stays (the state would have no source).
    """
    stays = [i for i, w in enumerate(new) if w in old]
    joiners = [i for i, w in enumerate(new) if w not in old]
    if joiners and not stays:
        raise ValueError(f"no worker of {list(old)} stays in {list(new)}: the state has no source")
    return {j: stays[k % len(stays)] for k, j in enumerate(joiners)}

class Membership:
    """One worker's part in forming worlds and in the survivors' rendezvous.

    Args:
        ctx: the worker's shared state; :meth:`form` sets its generation, members and rank.
    """

    def __init__(self, ctx: WorkerContext) -> None:
        self.ctx = ctx

    def apply_policy(self, override: int = 0) -> None:
        """Set the current world's per-worker batch and LR (:func:`.batch_policy.apply_batch_policy`).

        Args:
            override: an order's ``local_batch`` (0: none).
        """
        ctx = self.ctx
        apply_batch_policy(ctx.counters, ctx.env.scaling, len(ctx.members), ctx.job.optimizer, ctx.job.scheduler,
                           override)

    def form(
        self,
        generation: str,
        members: Sequence[str],
        *,
        sync_src: int | None = None,
        plan: Mapping[int, int] | None = None,
        within: Sequence[int] | None = None,
    ) -> None:
        """Join ``generation``'s group of ``members`` and move the state if it must move.

        Args:
            generation: group name (a fresh store prefix).
            members: worker ids in rank order.
            sync_src: broadcast the state from this rank to all (start, recovery).
            plan: grow: new rank of each joiner → rank that sends it the state (:func:`transfer_plan`).
            within: shrink: narrow the current group to these of its ranks instead of forming a new one
                (every member already holds the state).
        """
        ctx = self.ctx
        ctx.transition(AgentState.FORMING)
        ctx.generation = generation
        ctx.members = tuple(members)
        ctx.rank = ctx.members.index(ctx.me)
        t0 = time.perf_counter()
        if within is not None:
            ctx.backend.narrow(within)
        else:
            ctx.backend.form(generation, ctx.rank, len(ctx.members))
        t1 = time.perf_counter()
        ctx.generations.append(generation)
        moved = 0
        if plan:
            ctx.transition(AgentState.SYNCING)
            if ctx.rank in plan:
                moved = ctx.state.receive(ctx.backend.recv, ctx.backend.recv_object, plan[ctx.rank])
            else:
                dsts = sorted(dst for dst, src in plan.items() if src == ctx.rank)
                moved = ctx.state.send(ctx.backend.send, ctx.backend.send_object, dsts)
        elif sync_src is not None:
            ctx.transition(AgentState.SYNCING)
            moved = ctx.state.sync(ctx.backend.broadcast, ctx.backend.broadcast_object, sync_src, ctx.rank)
        ctx.state.holds_state = True  # every member of a formed world holds the same, whole state
        t2 = time.perf_counter()
        fields: dict[str, Any] = {"world": len(ctx.members), "synced_bytes": moved,
                                  "form_s": round(t1 - t0, 4), "sync_s": round(t2 - t1, 4)}
        if ctx.env.log_indices:
            fields["digest"] = ctx.backend.digest(ctx.job.model)
        ctx.event("formed", **fields, **ctx.backend.gpu_report)  # which GPU it bound

    def recover(self, error: str) -> None:
        """After a lost peer (RECOVERING): roll back to the last step boundary, agree on the survivors
        (:meth:`agree`) and form their world from a survivor holding the state → TRAINING; → FAILED if
        this worker was declared lost, none holds a state, or the survivors' world cannot form."""
        ctx = self.ctx
        t0 = ctx.clock()
        ctx.transition(AgentState.RECOVERING)
        log.warning("%s: peer lost in %s: %s", ctx.me, ctx.generation, error)
        ctx.backend.leave()
        holds = ctx.state.holds_state
        if holds:
            ctx.state.rollback()
        gen = f"{ctx.generation}.r"
        before = ctx.members
        try:
            survivors, src = self.agree(gen, holds)
            if ctx.me not in survivors:
                log.error("%s: declared lost by the survivors of %s", ctx.me, ctx.generation)
                ctx.transition(AgentState.FAILED)
                return
            if src is None:
                log.error("%s: no survivor of %s holds a state to go on from", ctx.me, ctx.generation)
                ctx.transition(AgentState.FAILED)
                return
            self.form(gen, survivors, sync_src=survivors.index(src))
        except PeerLostError as exc:  # the survivors' world could not be formed either
            log.error("%s: recovery of %s failed: %s", ctx.me, gen, exc)
            ctx.transition(AgentState.FAILED)
            return
        self.apply_policy()
        ctx.event("recovered", world=len(survivors), since=ctx.clock() - t0)
        ctx.report("resize", ctx.clock() - t0, lost=[w for w in before if w not in survivors])
        ctx.say(f"lost {','.join(w for w in before if w not in survivors)}: {len(survivors)} workers "
                f"({','.join(survivors)}) went on after {ctx.clock() - t0:.2f} s from the last step")
        ctx.transition(AgentState.TRAINING)

    def agree(self, gen: str, holds: bool) -> tuple[tuple[str, ...], str | None]:
        """The survivors' rendezvous after a loss in the current world (keys of :mod:`.control`).

        Each survivor signs in (``who``, with whether it holds the state), then claims ``leader``; the
        first claim wins. The leader waits for all but one member to sign in (or a group timeout and
        2 s), names the survivors in rank order and the first of them holding the state, and writes
        that as ``members``; the others wait for it. Only values that verify count, so a forged
        sign-in, claim or decision can neither add a worker nor remove one. A value at ``leader`` that
        does not verify, or names no member of the world, counts as absent and is claimed over, so
        garbage there never stops the agreement; and no key of ``gen`` can be written in advance
        (its name in the store takes the job's secret, :func:`.control.store_key`).

        Args:
            gen: the generation the survivors will form.
            holds: this worker holds the state of a step boundary (a joiner holds none until its
                state has arrived whole).

        Returns:
            The survivors and the worker whose state wins (None if none holds one); ``((), None)``
            if no decision came in time.

        Raises:
            PeerLostError: the store cannot be reached to sign in.
        """
        ctx = self.ctx
        members = ctx.members
        ctx.backend.store_set(control.who_key(gen, ctx.me), control.who_payload(holds))  # before the claim
        key = control.leader_key(gen)

        def check(payload: str) -> str:
            return control.read_leader(payload, members)

        leader = ctx.checked(key, ctx.backend.store_claim(key, control.leader_payload(ctx.me),
                                                          lambda p: ctx.checked(key, p, check) is not None),
                             check)
        if leader != ctx.me:
            decided = ctx.wait_control(control.members_key(gen), lambda p: control.read_members(p, members),
                                       ctx.env.group_timeout_s * 2 + 5.0)
            return decided if decided is not None else ((), None)
        deadline = time.monotonic() + ctx.env.group_timeout_s + 2.0
        seen: dict[str, bool] = {}
        while True:
            for w in members:
                if w not in seen:
                    holder = ctx.read_control(control.who_key(gen, w), control.read_who)
                    if holder is not None:
                        seen[w] = holder
            if len(seen) >= len(members) - 1 or time.monotonic() >= deadline:
                break
            time.sleep(0.02)
        survivors = tuple(w for w in members if w in seen)
        src = next((w for w in survivors if seen[w]), None)
        ctx.backend.store_set(control.members_key(gen), control.members_payload(survivors, src))
        return survivors, src
