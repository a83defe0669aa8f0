"""The resize agent: the in-job state machine, written once for every backend.

The agent carries out an in-place resize (ONES §3.3): orders arrive from a pluggable
:class:`.order_sources.OrderSource` and are authenticated by :meth:`.orders.Order.parse` (the wire form is
:mod:`.orders`'); rank 0 reads them and announces a decision in the control words of
the step's all-reduce, so every rank sees the same typed interrupt at the same step boundary. On grow,
joiners start, initialise and run one warm-up pass while the old workers keep training; when all
joiners are ready, the old workers finish their step, everyone leaves the old group and forms the new
one (generation ``o<seq>``, a fresh prefix on the long-lived store), and the staying workers send the
state point-to-point to the joiners only (:func:`.membership.transfer_plan`). On shrink, the staying workers narrow
the group they are in (no new world, no state moved) and the leaving workers exit cleanly. A lost peer
is a :class:`.agent_types.PeerLostError`: survivors roll back to the last step boundary (nothing is copied per step
for it: every collective of a step ends before the optimizer's step, :mod:`.grad_reducer`), agree on
the survivors through the store, and one holding the state broadcasts it (generation ``<gen>.r``).
It applies the batch and LR policy (:mod:`.batch_policy`; exo: global batch and LR scale with the
workers; endo: global batch kept, gradient accumulation above the per-GPU limit). None of its modules
imports torch or any communication library: the backend does that.

Everything it reads from the job's store is hostile until checked: the backend verifies each value's
MAC (a forged one reads as absent) and :mod:`.control` checks each payload's shape; a key that fails
either is absent to the agent, which logs one line naming the key and the rule and carries on (the
survivors' leader claim takes such a key over). The agent names keys by their logical names
(``o0.r/leader``); the backend keeps them under names derived with the job's secret
(:func:`.control.store_key`), so no other user can write them in advance.

The agent is split along its state machine's seams. This module owns its face and the loop of
``run(ElasticJob)``: :class:`Agent` composes the worker's shared state (:mod:`.worker_context`, with
its typed counters, :mod:`.counters`), membership and rendezvous (:mod:`.membership`), the resize
protocol (:mod:`.resize`) and the step driver (:mod:`.step_driver`), which the user's loop
(:mod:`.user_loop`) drives too. The types they share are :mod:`.agent_types`'; the order sources
:mod:`.order_sources`'. Each is imported from the module that owns it; this one re-exports none.
"""

from __future__ import annotations

import math
import signal
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .agent_types import AgentResult, AgentState, Backend, ElasticJob
from .counters import Counters
from .env import LauncherEnv
from .membership import Membership
from .order_sources import OrderSource
from .reports import Reporter
from .resize import ResizeProtocol
from .sampler import ElasticSampler, SamplerState
from .state import TrainingState
from .step_driver import StepDriver
from .worker_context import WorkerContext


def stop_on_sigterm(agent: Agent) -> None:
    """Make SIGTERM (Slurm's preemption and time-limit signal) a stop at the next step boundary
    with a checkpoint (:meth:`Agent.request_stop`); only the main thread can set a handler."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda _signum, _frame: agent.request_stop())


class Agent:
    """One worker's resize state machine.

    Args:
        env: parsed launcher environment.
        backend: communication backend.
        job: the user's model, optimizer, dataset and loss.
        source: order source (rank 0 and joiners read it).
        clock: wall clock for event timestamps (seconds).
        reference_workers: workers the script's LR was tuned for (exo scales it with the global batch
            from there); None: the initial world's size.
        carried: more of the user's state a resize carries, a recovery rolls back and a checkpoint
            holds, by name (:attr:`.state.TrainingState.carried`).

    Attributes:
        ctx: the worker's shared state (:class:`.worker_context.WorkerContext`).
        membership: forms worlds and recovers from a lost peer (:class:`.membership.Membership`).
        resize: the resize protocol, rank 0's and a joiner's sides (:class:`.resize.ResizeProtocol`).
        driver: the step driver both :meth:`run` and the user's loop use (:class:`.step_driver.StepDriver`).

    Raises:
        ValueError: ``job.model_name`` or ``job.loss_reduction`` breaks its rule (the message names the
            value and the rule).
    """

    ORDERS_EVERY_S = ResizeProtocol.ORDERS_EVERY_S  # rank 0 reads the orders at most this often

    def __init__(
        self,
        env: LauncherEnv,
        backend: Backend,
        job: ElasticJob,
        source: OrderSource,
        clock: Callable[[], float] = time.time,
        *,
        reference_workers: int | None = None,
        carried: Mapping[str, Any] | None = None,
    ) -> None:
        self.ctx = WorkerContext(env, backend, job, source, clock, carried)
        self.membership = Membership(self.ctx)
        self.resize = ResizeProtocol(self.ctx, self.membership)
        self.driver = StepDriver(self.ctx, self.membership, self.resize)
        self.reference_workers = reference_workers

    def request_stop(self) -> None:
        """Stop at the next step boundary, as a stop order would: rank 0 writes the checkpoint
        (``SLURM_ELASTIC_CHECKPOINT``) and every worker ends DONE. Safe from a signal handler: it
        only sets a flag, which the next step's control words carry to every rank."""
        self.ctx.stop_requested = True

    # -- what the rest of the launcher reads -------------------------------------------------------
    @property
    def env(self) -> LauncherEnv:
        """The parsed launcher environment."""
        return self.ctx.env

    @property
    def backend(self) -> Backend:
        """The communication backend."""
        return self.ctx.backend

    @property
    def job(self) -> ElasticJob:
        """The user's model, optimizer, dataset and loss."""
        return self.ctx.job

    @property
    def source(self) -> OrderSource:
        """Where the orders come from."""
        return self.ctx.source

    @property
    def me(self) -> str:
        """This worker's id."""
        return self.ctx.me

    @property
    def status(self) -> AgentState:
        """The state this worker is in."""
        return self.ctx.status

    @property
    def generation(self) -> str:
        """The generation of the current world."""
        return self.ctx.generation

    @property
    def members(self) -> tuple[str, ...]:
        """The workers of the current world, in rank order."""
        return self.ctx.members

    @property
    def rank(self) -> int:
        """This worker's rank in the current world (-1 before it is in one)."""
        return self.ctx.rank

    @property
    def sampler(self) -> ElasticSampler:
        """The elastic sampler (its position is part of the state)."""
        return self.ctx.sampler

    @property
    def state(self) -> TrainingState:
        """The training state a resize moves, a recovery rolls back and a checkpoint holds."""
        return self.ctx.state

    @property
    def counters(self) -> Counters:
        """The counters synced with the state: step, samples, applied order, batch, LR scale."""
        return self.ctx.counters

    @property
    def reporter(self) -> Reporter | None:
        """Rank 0's progress reporter (None without ``SLURM_ELASTIC_REPORTS``)."""
        return self.ctx.reporter

    def clock(self) -> float:
        """The wall clock of events and reports (seconds)."""
        return self.ctx.clock()

    def event(self, ev: str, **fields: Any) -> None:
        """One line in the event log (``SLURM_ELASTIC_EVENT_LOG``), if there is one."""
        self.ctx.event(ev, **fields)

    # -- the loop of run(ElasticJob) ---------------------------------------------------------------
    def run(self) -> AgentResult:
        """Run this worker until the job is done, it is dropped, or it is declared lost."""
        try:
            self._start()
            while self.status is AgentState.TRAINING:
                if self.sampler.state.epoch >= self.env.epochs:
                    self.driver.finish(None, stopped=False)
                    break
                self._train_step()
        finally:
            self.close()
        return self.result()

    def _train_step(self) -> None:
        """One step of the :class:`.agent_types.ElasticJob`: its forward and backward passes over this
        worker's samples, in micro-batches above the per-GPU limit, between the driver's begin and end
        (which carries out the interrupt it ends with)."""
        job, backend = self.job, self.backend
        job.optimizer.zero_grad(set_to_none=True)
        plan = self.driver.begin(job.model, batch_mean=False)
        micro_batches = self._micro_batches(plan.indices)
        reporter = self.reporter if self.rank == 0 else None
        for k, micro in enumerate(micro_batches):
            # earlier micro-batches accumulate locally; the last one reduces (a rank with no samples
            # this step takes part in reduce_step, with zero gradients)
            backend.pause(job.model, k < len(micro_batches) - 1)
            loss = job.loss_fn(job.model, job.dataset.batch(micro))
            if job.loss_reduction == "mean":
                loss = loss * len(micro)
            loss.backward()
            if reporter is not None:
                reporter.add_loss(float(loss.detach()), len(micro))
        self.driver.end(plan, job.model, apply=self._apply_update)

    def _apply_update(self) -> None:
        """The ElasticJob's update, once the step's collectives succeeded: the optimizer's step, the
        scheduler's."""
        self.job.optimizer.step()
        if self.job.scheduler is not None:
            self.job.scheduler.step()  # type: ignore[attr-defined]

    def _micro_batches(self, indices: list[int]) -> list[list[int]]:
        accum = max(1, math.ceil(self.counters.local_batch / self.env.max_local_batch))
        if not indices:
            return []
        size = math.ceil(len(indices) / accum)
        return [indices[i : i + size] for i in range(0, len(indices), size)]

    def result(self) -> AgentResult:
        """How this worker stands (DONE, LEFT or FAILED once it has ended)."""
        return AgentResult(self.status, self.counters.step, self.sampler.state.epoch, self.ctx.generations)

    def close(self) -> None:
        """Leave the group and close the event log (idempotent)."""
        self.backend.leave()
        self.ctx.close_log()

    # -- how a worker starts -----------------------------------------------------------------------
    def _start(self) -> None:
        if self.env.join:
            order = self.resize.await_order()
            self.resize.warm_up()
            self.resize.join(order)
        else:
            self.start_world()

    def start_world(self, first_epoch: int = 0) -> None:
        """An initial worker: load the checkpoint to resume from, if any, form the first world, sync
        rank 0's state to all → TRAINING.

        The LR is the script's at :attr:`reference_workers` workers (the initial world when None) and
        follows the global batch from there (exo).

        Args:
            first_epoch: the epoch a fresh start begins in (a script that resumed from a checkpoint of
                its own); the launcher's checkpoint, when there is one, says where to go on instead.
        """
        ctx = self.ctx
        workers = len(self.env.workers)
        self.counters.start(local_batch=self.env.local_batch, workers=workers,
                            reference_workers=self.reference_workers or workers)
        ctx.sampler.state = SamplerState(self.env.seed, first_epoch, 0)
        resume = self.resume_path()
        if resume:
            ctx.state.apply(self.backend.load(resume))
            ctx.event("resumed_from", path=resume)
        gen = f"resume{self.counters.applied_seq}.{self.counters.step}" if resume else "o0"
        self.membership.form(gen, self.env.workers, sync_src=0)
        if resume:
            ctx.say(f"resumed from {resume} at step {self.counters.step} (epoch {ctx.sampler.state.epoch}, "
                    f"sample {ctx.sampler.state.consumed} of it), {len(self.members)} workers")
        self.membership.apply_policy()
        ctx.transition(AgentState.TRAINING)

    def resume_path(self) -> str:
        """The checkpoint a starting job loads: ``SLURM_ELASTIC_RESUME``, else its own stop checkpoint
        (``SLURM_ELASTIC_CHECKPOINT``) when one was written, so a requeued job goes on where it
        stopped; empty for a fresh start."""
        if self.env.resume:
            return self.env.resume
        if self.env.checkpoint and Path(f"{self.env.checkpoint}.mac").is_file():
            return self.env.checkpoint
        return ""
