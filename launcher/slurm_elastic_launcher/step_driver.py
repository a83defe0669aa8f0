"""The step and its commit: the one driver of a training step, for ``run(ElasticJob)`` and the user's loop.

This module owns a step's life at the agent's level. :meth:`StepDriver.begin` fixes this worker's part
of the step (its sample ids, the step's size, the control words: rank 0's decision on an order,
:meth:`.resize.ResizeProtocol.decide`, and whether a stop was asked of this rank) and arms the
backend's gradient reduction. :meth:`StepDriver.end` finishes the step's collectives, applies the
update, commits it (the sampler advances, the counters count, the event log and rank 0's reports
follow) and carries out the interrupt the step ends with (:meth:`StepDriver.handle`): a resize
(:mod:`.resize`), a stop (:meth:`StepDriver.finish`) or a lost peer (:mod:`.membership`).

Both ways of training go through the same driver object (:attr:`.agent.Agent.driver`): the agent's
own loop over an :class:`.agent_types.ElasticJob` (:meth:`.agent.Agent.run`) and the user's loop
(:meth:`.user_loop.ElasticWorld.step`); they differ only in who runs the forward and backward passes
and the optimizer's step.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .agent_types import CONTROL_WORDS, AgentState, Interrupt, PeerLostError, Resize, StepPlan, Stop, WorkerLost
from .membership import Membership
from .resize import ResizeProtocol
from .sampler import SamplerState
from .worker_context import WorkerContext


class StepDriver:
    """Begins, ends and commits one worker's steps, and carries out what a step ends with.

    Args:
        ctx: the worker's shared state.
        membership: recovers from a lost peer.
        resize: decides on orders (rank 0) and switches worlds.
    """

    def __init__(self, ctx: WorkerContext, membership: Membership, resize: ResizeProtocol) -> None:
        self.ctx = ctx
        self.membership = membership
        self.resize = resize

    def begin(self, model: Any, *, batch_mean: bool) -> StepPlan:
        """Start a step: this worker's part of it, and the backend armed to reduce its gradients.

        Rank 0 decides the control words (:meth:`.resize.ResizeProtocol.decide`); every rank adds
        whether a stop was asked of it (:meth:`.agent.Agent.request_stop`).

        Args:
            model: the model whose next backward pass is reduced.
            batch_mean: the backward pass runs on the mean loss over this worker's samples (the
                user's loop, as DDP expects; its gradients weigh ``samples / step's samples``), not
                on their sum (:class:`.agent_types.ElasticJob`'s ``loss_fn``: ``1 / step's samples``).
        """
        ctx = self.ctx
        world, local = len(ctx.members), ctx.counters.local_batch
        ctx.state.step_started()
        control = self.resize.decide() if ctx.rank == 0 else [0] * CONTROL_WORDS
        control[2] = int(ctx.stop_requested)
        indices = ctx.sampler.indices(world, ctx.rank, local)
        plan = StepPlan(world, local, control, indices, ctx.sampler.step_size(world, local))
        weight = len(plan.indices) / plan.n_global if batch_mean else 1.0 / plan.n_global
        ctx.backend.arm(model, weight, plan.control)
        return plan

    def end(self, plan: StepPlan, model: Any, apply: Callable[[], None] | None = None) -> Interrupt | None:
        """End the step :meth:`begin` started: finish its collectives, apply the update, commit, and
        carry out the interrupt it ends with (:meth:`handle`).

        Args:
            plan: the step's plan.
            model: the model the backend was armed on.
            apply: the update, once the collectives succeeded (the ElasticJob's optimizer step); None
                when it was already made (the user's loop steps its optimizer before the step ends,
                guarded so a step whose collectives fail changes nothing).

        Returns:
            The interrupt the step ended with, carried out; None when the next step begins in the same
            world.
        """
        try:
            decided = self.ctx.backend.reduce_step(model)
        except PeerLostError as exc:  # before the update: the state is the last boundary's
            interrupt: Interrupt | None = WorkerLost(str(exc))
        else:
            if apply is not None:
                apply()
            interrupt = self._commit(plan, decided)
        if interrupt is not None:
            self.handle(interrupt)
        return interrupt

    def _commit(self, plan: StepPlan, decided: Sequence[int]) -> Interrupt | None:
        """Account a step whose gradients were reduced and applied: advance the sampler, count, log,
        report; the interrupt the step's control words carry."""
        ctx = self.ctx
        ctx.state.step_ended()
        epoch, consumed = ctx.sampler.state.epoch, ctx.sampler.state.consumed
        ctx.sampler.advance(plan.world, plan.local)
        if ctx.sampler.state.epoch > epoch and ctx.rank == 0:
            self._evaluate(epoch)
        ctx.counters.step += 1
        ctx.counters.samples += plan.n_global
        fields: dict[str, Any] = {
            "step": ctx.counters.step,
            "world": plan.world,
            "n": plan.n_global,
            "local": plan.local,
            "epoch": epoch,
            "consumed": consumed,
        }
        if ctx.env.log_indices:
            fields["indices"] = plan.indices
        ctx.event("step", **fields)
        if ctx.reporter is not None and ctx.rank == 0 and ctx.reporter.due(ctx.clock()):
            ctx.report("progress")
        if decided[1] or decided[2]:
            return Stop(decided[1])
        if decided[0]:
            return Resize(decided[0])
        return None

    def _evaluate(self, epoch: int) -> None:
        """Rank 0, at the end of ``epoch``: run the user's validation and keep the metric for the reports."""
        ctx = self.ctx
        if ctx.job.evaluate is None:
            return
        t0 = time.perf_counter()
        metric = float(ctx.job.evaluate(ctx.job.model))
        ctx.event("evaluated", epoch=epoch, metric=metric, s=round(time.perf_counter() - t0, 4))
        if ctx.reporter is not None:
            ctx.reporter.metric = metric

    def skip_epoch_tail(self, epoch: int) -> bool:
        """``drop_last``: skip the rest of ``epoch`` (a step smaller than a full one), counted in the
        event log; False if the job is no longer in ``epoch``."""
        ctx = self.ctx
        state = ctx.sampler.state
        if state.epoch != epoch:
            return False
        ctx.sampler.state = SamplerState(state.seed, epoch + 1, 0)
        ctx.event("dropped", epoch=epoch, samples=ctx.sampler.dataset_size - state.consumed)
        return True

    def handle(self, interrupt: Interrupt) -> None:
        """Carry out what a step ended with: switch worlds, stop, or recover from a lost peer."""
        match interrupt:
            case Resize(seq):
                try:
                    self.resize.switch(seq)
                except PeerLostError as exc:  # a peer died while the worlds switched: re-form as for a step
                    self.membership.recover(str(exc))
            case Stop(seq):
                self.finish(seq or None)  # 0: a stop asked of a rank (SIGTERM), not an order
            case WorkerLost(error):
                self.membership.recover(error)

    def finish(self, seq: int | None, *, stopped: bool = True) -> None:
        """End the training here → DONE, with the last report.

        Args:
            seq: the stop order's sequence number, or None (a stop asked by SIGTERM, or the end).
            stopped: a stop (an order or SIGTERM): rank 0 writes ``SLURM_ELASTIC_CHECKPOINT`` for a
                requeue to resume from. False: the training ran to its end, and rank 0 removes that
                checkpoint (a requeue must not go back to an old stop; the trained model is the
                script's to save).
        """
        ctx = self.ctx
        ctx.event("stop" if stopped else "end", seq=seq or 0)
        if seq is not None:
            ctx.counters.applied_seq = seq
        if ctx.rank == 0 and ctx.env.checkpoint:
            if stopped:
                ctx.backend.save(ctx.state.capture(), ctx.env.checkpoint)
                ctx.event("checkpoint", path=ctx.env.checkpoint)
                ctx.say(f"stopped at step {ctx.counters.step}: checkpoint written to {ctx.env.checkpoint}")
            else:
                for path in (f"{ctx.env.checkpoint}.mac", ctx.env.checkpoint):  # the MAC first: no resume
                    Path(path).unlink(missing_ok=True)
        ctx.report("end")
        ctx.transition(AgentState.DONE)
