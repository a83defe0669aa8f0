"""The resize agent: the in-job state machine, written once for every backend.

This module owns the protocol of an in-place resize (ONES §3.3): orders arrive from a pluggable
:class:`OrderSource` and are authenticated by :meth:`.orders.Order.parse` (the wire form is
:mod:`.orders`'); rank 0 reads them and announces a decision in the control words of
the step's all-reduce, so every rank sees the same typed interrupt at the same step boundary. On grow,
joiners start, initialise and run one warm-up pass while the old workers keep training; when all
joiners are ready, the old workers finish their step, everyone leaves the old group and forms the new
one (generation ``o<seq>``, a fresh prefix on the long-lived store), and the staying workers send the
state point-to-point to the joiners only (:func:`transfer_plan`). On shrink, the staying workers narrow
the group they are in (no new world, no state moved) and the leaving workers exit cleanly. A lost peer
is a :class:`PeerLostError`: survivors roll back to the last step boundary (nothing is copied per step
for it: every collective of a step ends before the optimizer's step, :mod:`.grad_reducer`), agree on
the survivors through the store, and one holding the state broadcasts it (generation ``<gen>.r``).
It owns the batch and LR policy (exo: global batch and LR scale with the workers; endo: global batch
kept, gradient accumulation above the per-GPU limit). It must not import torch or any communication
library: the backend does that.

Everything it reads from the job's store is hostile until checked: the backend verifies each value's
MAC (a forged one reads as absent) and :mod:`.control` checks each payload's shape; a key that fails
either is absent to the agent, which logs one line naming the key and the rule and carries on (the
survivors' leader claim takes such a key over). The agent names keys by their logical names
(``o0.r/leader``); the backend keeps them under names derived with the job's secret
(:func:`.control.store_key`), so no other user can write them in advance.
"""

from __future__ import annotations

import enum
import json
import logging
import math
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from . import control
from .control import ControlRejectedError
from .env import LauncherEnv, ScalingMode
from .orders import Order as Order
from .orders import OrderRejectedError as OrderRejectedError
from .orders import identity_problem
from .reports import Reporter, parameter_count
from .sampler import ElasticSampler, SamplerState
from .state import Stateful, TensorOps, TrainingState

log = logging.getLogger(__name__)

_T = TypeVar("_T")


class PeerLostError(RuntimeError):
    """A collective failed because a peer died, or hung past the group timeout."""


class AgentState(enum.Enum):
    """States of a worker's agent; transitions happen only at step boundaries.

    * STARTING → FORMING (initial worker) or JOINING (worker started by a grow order).
    * JOINING: initialise model/optimizer, find the order naming this worker, mark it ready → WAITING.
    * WAITING: the old workers keep training until every joiner is ready; then rank 0 announces the
      switch, and the joiner reads the go key → FORMING. A joiner whose loop labelled its warm-up
      with an epoch the job has since left goes back → JOINING, to warm up again under the new one.
    * FORMING: init the group of the new generation → SYNCING.
    * SYNCING: the staying workers send the state to the joiners (skipped when nobody joined); after a
      lost peer, a survivor holding the state broadcasts its rolled-back state → TRAINING.
    * TRAINING: steps; a step may end with an interrupt: Resize → SWITCHING, Stop → DONE, or a
      lost peer → RECOVERING.
    * SWITCHING: leave the old group; a worker the order drops → LEFT, others → FORMING.
    * RECOVERING: roll back to the last step boundary, agree on the survivors via the store → FORMING, or FAILED
      if this worker was declared lost.
    * DONE / LEFT / FAILED: final.
    """

    STARTING = "starting"
    JOINING = "joining"
    WAITING = "waiting"
    FORMING = "forming"
    SYNCING = "syncing"
    TRAINING = "training"
    SWITCHING = "switching"
    RECOVERING = "recovering"
    DONE = "done"
    LEFT = "left"
    FAILED = "failed"


# -- order sources -------------------------------------------------------------------------------


class OrderSource(Protocol):
    """Where raw orders come from (a file, the job's store, later the daemon's channel)."""

    def read(self) -> list[str]:
        """All raw orders currently available (authentication is the agent's job)."""


class FileOrderSource:
    """Orders as JSON lines in a file (tests, manual operation).

    Args:
        path: the file; missing means no orders yet.
    """

    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def read(self) -> list[str]:
        """Non-empty lines of the file (bytes that are not UTF-8 read as U+FFFD: that line is refused)."""
        try:
            text = self.path.read_bytes().decode(errors="replace")
        except FileNotFoundError:
            return []
        return [line for line in text.splitlines() if line.strip()]


class KeyValue(Protocol):
    """The store operations orders and rendezvous need; values are signed and checked by the store."""

    def store_set(self, key: str, value: str) -> None:
        """Set a key (signed)."""

    def store_get(self, key: str) -> str | None:
        """Verified value of a key, or None if absent or refused; never blocks, never raises."""

    def store_claim(self, key: str, value: str, accept: Callable[[str], bool] | None = None) -> str | None:
        """Set a key unless it holds a verified value ``accept`` takes (a value that does not verify, or
        that ``accept`` refuses, counts as absent and is claimed over); the value it holds then
        (``value`` if this claim took it), or None if the claim failed."""


class StoreOrderSource:
    """Orders in the job's TCPStore: ``orders/<seq>`` for seq = 1, 2, … (:mod:`.control`).

    Args:
        kv: store access.
    """

    MAX_ORDERS = 1 << 16
    """Orders kept at most (a job gets one per resize)."""

    def __init__(self, kv: KeyValue) -> None:
        self.kv = kv
        self._cache: list[str] = []

    def read(self) -> list[str]:
        """Orders published so far (cached; one store round trip when nothing is new).

        A key that is absent or refused (not signed for it) ends the read; it is read again next time,
        so a forgery the daemon's order then overwrites hides nothing.
        """
        while len(self._cache) < self.MAX_ORDERS:
            raw = self.kv.store_get(control.order_key(len(self._cache) + 1))
            if raw is None:
                break
            self._cache.append(raw)
        return list(self._cache)

    @staticmethod
    def publish(kv: KeyValue, order: Order) -> None:
        """Publish a signed order under its number (what the daemon, or a test acting as it, does)."""
        kv.store_set(control.order_key(order.seq), order.to_json())


def stop_on_sigterm(agent: Agent) -> None:
    """Make SIGTERM (Slurm's preemption and time-limit signal) a stop at the next step boundary
    with a checkpoint (:meth:`Agent.request_stop`); only the main thread can set a handler."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda _signum, _frame: agent.request_stop())


def make_order_source(env: LauncherEnv, kv: KeyValue) -> OrderSource:
    """The order source named by ``SLURM_ELASTIC_ORDERS``."""
    if env.orders.startswith("file:"):
        return FileOrderSource(env.orders.removeprefix("file:"))
    return StoreOrderSource(kv)


@dataclass(frozen=True, slots=True)
class StepPlan:
    """One worker's part of one step, fixed at its start.

    Attributes:
        world: workers in the step.
        local: the per-worker batch.
        control: this worker's control words (:attr:`Agent.CONTROL_WORDS`).
        indices: this worker's sample ids (may be empty near an epoch's end).
        n_global: samples of the step over all workers.
    """

    world: int
    local: int
    control: list[int]
    indices: list[int]
    n_global: int


# -- interrupts ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Resize:
    """Interrupt: switch to the world of ``seq``'s order at this step boundary."""

    seq: int


@dataclass(frozen=True, slots=True)
class Stop:
    """Interrupt: checkpoint (if configured) and exit at this step boundary."""

    seq: int


@dataclass(frozen=True, slots=True)
class WorkerLost:
    """Interrupt: a collective failed; roll back and re-form with the survivors."""

    error: str


Interrupt = Resize | Stop | WorkerLost


# -- backend and user API ------------------------------------------------------------------------


class Backend(KeyValue, Protocol):
    """What the agent needs from a communication backend (start/stop/monitor + collectives)."""

    ops: TensorOps
    gpu_report: dict[str, Any]
    """The GPU this worker bound (index, Slurm's device, localid, node), for its ``formed`` events."""

    def form(self, generation: str, rank: int, world_size: int) -> None:
        """Join a generation's group."""

    def can_narrow(self, ranks: Sequence[int]) -> bool:
        """Whether :meth:`narrow` can make these ranks, in this order, a group."""

    def narrow(self, ranks: Sequence[int]) -> None:
        """Make the group of these ranks of the current group (in this order) current; only they call it."""

    def leave(self) -> None:
        """Leave the current group."""

    def broadcast(self, buffer: Any, src: int) -> None:
        """In-place broadcast of a flat buffer."""

    def broadcast_object(self, obj: Any, src: int) -> Any:
        """Broadcast a small object."""

    def send(self, buffer: Any, dsts: Sequence[int]) -> None:
        """Send a flat buffer to each of ``dsts``."""

    def recv(self, buffer: Any, src: int) -> None:
        """Receive a flat buffer from ``src``."""

    def send_object(self, obj: Any, dsts: Sequence[int]) -> None:
        """Send a small object to each of ``dsts``."""

    def recv_object(self, src: int) -> Any:
        """Receive a small object from ``src``."""

    def arm(self, model: Any, weight: float, control: Sequence[int]) -> None:
        """Start a step: average the gradients of the model's next backward pass over the group, each
        times ``weight`` (overlapped with backward; a rank with no backward this step takes part with
        zeros), share rank 0's buffers and sum ``control`` with them."""

    def pause(self, model: Any, paused: bool) -> None:
        """While paused, backward passes accumulate gradients locally (the step's earlier micro-batches)."""

    def reduce_step(self, model: Any) -> list[int]:
        """Finish the step's collectives; the summed control words (:class:`PeerLostError` if one failed)."""

    def save(self, tree: Any, path: str) -> None:
        """Write a checkpoint."""

    def load(self, path: str) -> Any:
        """Read a checkpoint."""

    def digest(self, model: Any) -> str:
        """Hash of the model's state."""


class BatchDataset(Protocol):
    """A dataset the agent can index by a list of sample ids."""

    def __len__(self) -> int:
        """Number of samples."""

    def batch(self, indices: Sequence[int]) -> Any:
        """The batch of those samples (what ``loss_fn`` takes)."""


@dataclass
class ElasticJob:
    """What the user hands the agent (in the spirit of Horovod Elastic's state object).

    Attributes:
        model: the model (a ``torch.nn.Module``).
        optimizer: its optimizer.
        dataset: ``len(dataset)`` samples and ``dataset.batch(indices)`` → the batch of those sample ids
            (:class:`~.torch_backend.TensorBatchDataset`; a standard map-style
            ``torch.utils.data.Dataset`` through :class:`~.torch_backend.MapBatchDataset`). Every
            worker, joiners included, must build the same dataset (seed any randomness).
        loss_fn: ``loss_fn(model, batch)`` → the loss over the batch's samples, summed or averaged as
            ``loss_reduction`` says (the agent divides gradients by the global sample count).
        scheduler: LR scheduler stepped once per step, or None.
        evaluate: ``evaluate(model)`` → a validation metric (higher or lower is better, as the user
            reads it), run by rank 0 at the end of each epoch and sent in the next report; it must leave
            the model in training mode. None: no metric.
        model_name: the model's name (e.g. ``"resnet18"``), sent in rank 0's reports so the daemon
            plans the job with that model's throughput profile when it has one; 1 to 64 of
            ``A-Z a-z 0-9 _ . -``. None: ``SLURM_ELASTIC_MODEL``, else no name. The model's
            parameter count is reported too, counted from ``model`` (:func:`.reports.parameter_count`).
        loss_reduction: ``"sum"`` (``loss_fn`` sums over the batch, ``reduction="sum"``) or ``"mean"``
            (it averages over the batch's *samples*, as ``cross_entropy``'s default does: the agent
            multiplies it by the micro-batch's sample count, so the gradients are the same; a loss
            averaged over more than the samples, such as ``mse_loss`` over several outputs, is not).
    """

    model: Any
    optimizer: Any
    dataset: BatchDataset
    loss_fn: Callable[[Any, Any], Any]
    scheduler: Stateful | None = None
    evaluate: Callable[[Any], float] | None = None
    model_name: str | None = None
    loss_reduction: str = "sum"


@dataclass
class AgentResult:
    """How a worker's agent ended.

    Attributes:
        state: DONE, LEFT or FAILED.
        steps: global steps of the job when this worker stopped.
        epoch: sampler epoch then.
        generations: generations this worker was part of.
    """

    state: AgentState
    steps: int
    epoch: int
    generations: list[str] = field(default_factory=list)


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


class Agent:
    """One worker's resize state machine.

    Args:
        env: parsed launcher environment.
        backend: communication backend.
        job: the user's model, optimizer, dataset and loss.
        source: order source (rank 0 and joiners read it).
        clock: wall clock for event timestamps (seconds).

    Raises:
        ValueError: ``job.model_name`` breaks its rule (the message names the value and the rule).
    """

    CONTROL_WORDS = 3  # [resize seq, stop seq, ranks asked to stop (SIGTERM)]
    ORDERS_EVERY_S = 0.2  # rank 0 reads the orders and the joiners' ready keys at most this often

    def __init__(
        self,
        env: LauncherEnv,
        backend: Backend,
        job: ElasticJob,
        source: OrderSource,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.env = env
        self.backend = backend
        self.job = job
        self.source = source
        self.clock = clock
        self.me = env.worker_id
        self.job_run = env.run  # the job's run it acts for: Slurm's restart count, a joiner's order's run
        self.sampler = ElasticSampler(len(job.dataset), SamplerState(env.seed))
        self.state = TrainingState(job.model, job.optimizer, job.scheduler, self.sampler, backend.ops)
        self.status = AgentState.STARTING
        self.generation = ""
        self.members: tuple[str, ...] = ()
        self.rank = -1
        self._pending: Order | None = None
        self._next_read = 0.0  # monotonic time of rank 0's next read of the orders (:meth:`_decide`)
        self._ready: dict[tuple[int, str], int] = {}  # (order, joiner) seen ready -> its warm-up's epoch
        self._told_epoch: dict[int, int] = {}  # order -> the job's epoch last told its joiners
        self._parsed: dict[str, Order | None] = {}
        self._refused: dict[str, int] = {}  # control key -> hash of the payload last refused (logged once)
        self._generations: list[str] = []
        self.stop_requested = False
        self.reference_workers: int | None = None
        self._log: Any = open(env.event_log, "a", buffering=1) if env.event_log else None  # noqa: SIM115
        if job.loss_reduction not in ("sum", "mean"):
            raise ValueError(f"ElasticJob.loss_reduction={job.loss_reduction!r}: must be 'sum' or 'mean'")
        model_name = job.model_name or env.model or None
        problem = identity_problem(model_name, None)
        if problem is not None:
            raise ValueError(f"ElasticJob.model_name: {problem}")
        self._reporter = Reporter(env.reports, env.job_id, env.secret, env.report_every_s, model=model_name,
                                  params=parameter_count(job.model), epochs=env.epochs) if env.reports else None

    def request_stop(self) -> None:
        """Stop at the next step boundary, as a stop order would: rank 0 writes the checkpoint
        (``SLURM_ELASTIC_CHECKPOINT``) and every worker ends DONE. Safe from a signal handler: it
        only sets a flag, which the next step's control words carry to every rank."""
        self.stop_requested = True

    # -- helpers ---------------------------------------------------------------------------------
    @property
    def reporter(self) -> Reporter | None:
        """Rank 0's progress reporter (None without ``SLURM_ELASTIC_REPORTS``)."""
        return self._reporter

    def event(self, ev: str, **fields: Any) -> None:
        """One line in the event log (``SLURM_ELASTIC_EVENT_LOG``), if there is one."""
        if self._log is not None:
            rec = {"ev": ev, "t": self.clock(), "worker": self.me, "gen": self.generation, "rank": self.rank}
            rec.update(fields)
            self._log.write(json.dumps(rec) + "\n")

    def _transition(self, new: AgentState) -> None:
        log.debug("%s: %s -> %s", self.me, self.status.value, new.value)
        self.status = new

    @property
    def extra(self) -> dict[str, Any]:
        """Counters synced with the state: step, applied_seq, lr_scale, global_batch0, local_batch."""
        return self.state.extra

    def _valid_orders(self) -> list[Order]:
        """Authenticated orders from the source; each raw order is parsed (and refused) once."""
        out = []
        for raw in self.source.read():
            if raw not in self._parsed:
                try:
                    self._parsed[raw] = Order.parse(raw, self.env.job_id, self.env.secret)
                except OrderRejectedError as exc:
                    log.warning("%s: refused order: %s", self.me, exc)
                    self.event("refused", reason=str(exc))
                    self._parsed[raw] = None
            order = self._parsed[raw]
            if order is not None:
                out.append(order)
        return out

    def _read_control(self, key: str, check: Callable[[str], _T]) -> _T | None:
        """The checked payload of a control key (:mod:`.control`), or None if absent or refused.

        The store refuses a value whose MAC fails; ``check`` one of the wrong shape. A refusal is
        logged once per key and payload, naming the key and the rule, and the key reads as absent.
        """
        return self._checked(key, self.backend.store_get(key), check)

    def _checked(self, key: str, raw: str | None, check: Callable[[str], _T]) -> _T | None:
        if raw is None:
            return None
        try:
            return check(raw)
        except ControlRejectedError as exc:
            if self._refused.get(key) != hash(raw):
                if len(self._refused) >= 1024:
                    self._refused.clear()
                self._refused[key] = hash(raw)
                log.warning("%s: refused store key %r: %s", self.me, key, exc)
                self.event("refused", key=key, reason=str(exc))
            return None

    def _wait_control(self, key: str, check: Callable[[str], _T], timeout_s: float) -> _T | None:
        """Poll a control key until it holds a payload that passes ``check``, up to ``timeout_s`` seconds."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = self._read_control(key, check)
            if value is not None or time.monotonic() >= deadline:
                return value
            time.sleep(0.01)

    def _read_go(self, seq: int) -> control.Go | None:
        return self._read_control(control.go_key(seq), lambda p: control.read_go(p, seq, self.env.job_id,
                                                                                  self.env.secret))

    # -- batch and LR policy ---------------------------------------------------------------------
    def _apply_policy(self, override: int = 0) -> None:
        """Set the per-worker batch for the current world and rescale the LR linearly.

        Exo keeps the per-worker batch (an order's ``local_batch`` replaces it), so the global batch
        scales with the workers; endo keeps the global batch (an order's ``local_batch`` is the new
        global batch) up to rounding to a multiple of the world size. The LR follows the global batch
        linearly, relative to the initial one.
        """
        world = len(self.members)
        if self.env.scaling is ScalingMode.EXO:
            if override:
                self.extra["local_target"] = override
            local = int(self.extra["local_target"])
        else:
            if override:
                self.extra["global_target"] = override
            local = max(1, round(int(self.extra["global_target"]) / world))
        self.extra["local_batch"] = local
        scale = world * local / int(self.extra["global_batch0"])
        factor = scale / float(self.extra["lr_scale"])
        if factor != 1.0:
            for group in self.job.optimizer.param_groups:
                group["lr"] *= factor
                if "initial_lr" in group:
                    group["initial_lr"] *= factor
            sched = self.job.scheduler
            if sched is not None and hasattr(sched, "base_lrs"):
                sched.base_lrs = [lr * factor for lr in sched.base_lrs]
        self.extra["lr_scale"] = scale

    def _micro_batches(self, indices: list[int]) -> list[list[int]]:
        local = int(self.extra["local_batch"])
        accum = max(1, math.ceil(local / self.env.max_local_batch))
        if not indices:
            return []
        size = math.ceil(len(indices) / accum)
        return [indices[i : i + size] for i in range(0, len(indices), size)]

    # -- the loop --------------------------------------------------------------------------------
    def run(self) -> AgentResult:
        """Run this worker until the job is done, it is dropped, or it is declared lost."""
        try:
            self._start()
            while self.status is AgentState.TRAINING:
                if self.sampler.state.epoch >= self.env.epochs:
                    self.finish(None, stopped=False)
                    break
                interrupt = self._step()
                if interrupt is not None:
                    self.handle(interrupt)
        finally:
            self.close()
        return self.result()

    def result(self) -> AgentResult:
        """How this worker stands (DONE, LEFT or FAILED once it has ended)."""
        return AgentResult(self.status, int(self.extra.get("step", 0)), self.sampler.state.epoch, self._generations)

    def close(self) -> None:
        """Leave the group and close the event log (idempotent)."""
        self.backend.leave()
        if self._log is not None:
            self.event("exit", state=self.status.value, step=self.extra.get("step", 0))
            self._log.close()
            self._log = None

    def _start(self) -> None:
        if self.env.join:
            order = self.await_order()
            self.job_run = order.run  # its own allocation's restart count is not the job's
            self._warm_up()
            self.join(order)
        else:
            self.start_world()

    def start_world(self) -> None:
        """An initial worker: load the checkpoint to resume from, if any, form the first world, sync
        rank 0's state to all → TRAINING.

        The LR is the script's at :attr:`reference_workers` workers (the initial world when None) and
        follows the global batch from there (exo).
        """
        workers = len(self.env.workers)
        reference = self.reference_workers or workers
        self.extra.update(
            step=0,
            applied_seq=0,
            lr_scale=1.0,
            local_target=self.env.local_batch,
            global_target=self.env.local_batch * workers,
            global_batch0=self.env.local_batch * reference,
            local_batch=self.env.local_batch,
        )
        resume = self.resume_path()
        if resume:
            self.state.apply(self.backend.load(resume))
            self.event("resumed_from", path=resume)
        gen = f"resume{self.extra['applied_seq']}.{self.extra['step']}" if resume else "o0"
        self._form(gen, self.env.workers, sync_src=0)
        if resume:
            self._say(f"resumed from {resume} at step {self.extra['step']} (epoch {self.sampler.state.epoch}, "
                      f"sample {self.sampler.state.consumed} of it), {len(self.members)} workers")
        self._apply_policy()
        self._transition(AgentState.TRAINING)

    def await_order(self) -> Order:
        """A joiner: the order naming this worker (JOINING); its warm-up pass comes next."""
        self._transition(AgentState.JOINING)
        return self._find_my_order()

    def job_epoch(self, order: Order) -> int:
        """A joiner of ``order``: the job's epoch now, as rank 0 tells it (the epoch its loop's warm-up
        pass is labelled with, :meth:`join`).

        Raises:
            TimeoutError: rank 0 said nothing within the join timeout.
        """
        epoch = self._wait_control(control.epoch_key(order.seq), control.read_epoch, self.env.join_timeout_s)
        if epoch is None:
            raise TimeoutError(f"{self.me}: no epoch for order {order.seq} within {self.env.join_timeout_s} s")
        return epoch

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
        self.backend.store_set(control.ready_key(order.seq, self.me), control.ready_payload(epoch))
        self._transition(AgentState.WAITING)
        deadline = time.monotonic() + self.env.join_timeout_s
        while True:
            go = self._read_go(order.seq)
            if go is not None or time.monotonic() >= deadline:
                break
            if epoch is not None:
                now = self._read_control(control.epoch_key(order.seq), control.read_epoch)
                if now is not None and now != epoch and self._read_go(order.seq) is None:
                    self._transition(AgentState.JOINING)
                    return now
            time.sleep(0.01)
        if go is None:
            raise TimeoutError(f"{self.me}: no go for order {order.seq} within {self.env.join_timeout_s} s")
        self._form(f"o{order.seq}", go.order.workers, plan=transfer_plan(go.members, go.order.workers))
        self._apply_policy(go.order.local_batch)
        self._transition(AgentState.TRAINING)
        return None

    def resume_path(self) -> str:
        """The checkpoint a starting job loads: ``SLURM_ELASTIC_RESUME``, else its own stop checkpoint
        (``SLURM_ELASTIC_CHECKPOINT``) when one was written, so a requeued job goes on where it
        stopped; empty for a fresh start."""
        if self.env.resume:
            return self.env.resume
        if self.env.checkpoint and Path(f"{self.env.checkpoint}.mac").is_file():
            return self.env.checkpoint
        return ""

    def _find_my_order(self) -> Order:
        deadline = time.monotonic() + self.env.join_timeout_s
        while time.monotonic() < deadline:
            mine = [
                o
                for o in self._valid_orders()
                if o.kind == "resize" and self.me in o.workers and self._read_go(o.seq) is None
            ]
            if mine:
                return max(mine, key=lambda o: o.seq)
            time.sleep(0.05)
        raise TimeoutError(f"{self.me}: no resize order names this worker within {self.env.join_timeout_s} s")

    def _warm_up(self) -> None:
        """Joiner: one forward and backward pass on real samples before it says it is ready.

        The old workers are still training then, so the first-call costs of a fresh process (allocator,
        kernel selection) are not paid in the first step of the new world. Parameters, buffers and
        gradients it touches are replaced by the state the joiner receives; the optimizer is not stepped.
        """
        n = min(len(self.job.dataset), self.env.local_batch, self.env.max_local_batch)
        if n < 1:
            return
        t0 = time.perf_counter()
        self.job.loss_fn(self.job.model, self.job.dataset.batch(list(range(n)))).backward()
        self.job.optimizer.zero_grad(set_to_none=True)
        self.event("warmed", samples=n, s=round(time.perf_counter() - t0, 4))

    def _form(
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
        self._transition(AgentState.FORMING)
        self.generation = generation
        self.members = tuple(members)
        self.rank = self.members.index(self.me)
        t0 = time.perf_counter()
        if within is not None:
            self.backend.narrow(within)
        else:
            self.backend.form(generation, self.rank, len(self.members))
        t1 = time.perf_counter()
        self._generations.append(generation)
        moved = 0
        if plan:
            self._transition(AgentState.SYNCING)
            if self.rank in plan:
                moved = self.state.receive(self.backend.recv, self.backend.recv_object, plan[self.rank])
            else:
                dsts = sorted(dst for dst, src in plan.items() if src == self.rank)
                moved = self.state.send(self.backend.send, self.backend.send_object, dsts)
        elif sync_src is not None:
            self._transition(AgentState.SYNCING)
            moved = self.state.sync(self.backend.broadcast, self.backend.broadcast_object, sync_src, self.rank)
        self.state.holds_state = True  # every member of a formed world holds the same, whole state
        t2 = time.perf_counter()
        fields: dict[str, Any] = {"world": len(self.members), "synced_bytes": moved,
                                  "form_s": round(t1 - t0, 4), "sync_s": round(t2 - t1, 4)}
        if self.env.log_indices:
            fields["digest"] = self.backend.digest(self.job.model)
        self.event("formed", **fields, **self.backend.gpu_report)  # which GPU it bound

    def _decide(self) -> list[int]:
        """Rank 0: the control words of this step (resize/stop seq, once joiners are ready).

        The order source and the joiners' ready keys are read at most every :attr:`ORDERS_EVERY_S`
        seconds, not at every step: a step in between does no I/O (a store round trip is a few
        percent of a GPU's 10 ms step), and an order waits at most that long more.
        """
        words = [0] * self.CONTROL_WORDS
        applied = int(self.extra["applied_seq"])
        if self._pending is not None and self._pending.seq <= applied:
            self._pending = None
        now = time.monotonic()
        read = now >= self._next_read
        if read:
            self._next_read = now + self.ORDERS_EVERY_S
            newer = [o for o in self._valid_orders() if o.seq > applied and o.run == self.job_run]  # an earlier
            # run's orders name the workers of that run, gone since the requeue
            if newer:  # every order is a whole target world: the latest one supersedes any still waiting
                self._pending = max(newer, key=lambda o: o.seq)
        order = self._pending
        if order is None:
            return words
        if order.kind == "stop":
            words[1] = order.seq
            return words
        joiners = [w for w in order.workers if w not in self.members]
        if len(joiners) == len(order.workers):
            log.error("%s: refused order %d: no current worker stays, the state has no source", self.me, order.seq)
            self.extra["applied_seq"] = order.seq
            self._pending = None
            return words
        epoch = self.sampler.state.epoch
        if read:
            if self._told_epoch.get(order.seq) != epoch:  # the epoch a joiner's loop labels its warm-up with
                self.backend.store_set(control.epoch_key(order.seq), control.epoch_payload(epoch))
                self._told_epoch[order.seq] = epoch
            for w in joiners:
                if self._ready.get((order.seq, w)) not in (epoch, control.ANY_EPOCH):
                    label = self._read_control(control.ready_key(order.seq, w), control.read_ready)
                    if label is not None:
                        self._ready[(order.seq, w)] = label
        # this step ends in epoch E or at the start of E + 1: where a warm-up labelled E goes on
        if all(self._ready.get((order.seq, w)) in (epoch, control.ANY_EPOCH) for w in joiners):
            words[0] = order.seq
        return words

    def begin_step(self) -> StepPlan:
        """This worker's part of the next step: its sample ids, the step's size, and the control words
        (rank 0 decides; every rank adds whether a stop was asked of it, :meth:`request_stop`)."""
        world, local = len(self.members), int(self.extra["local_batch"])
        self.state.step_started()
        control = self._decide() if self.rank == 0 else [0] * self.CONTROL_WORDS
        control[2] = int(self.stop_requested)
        indices = self.sampler.indices(world, self.rank, local)
        return StepPlan(world, local, control, indices, self.sampler.step_size(world, local))

    def _step(self) -> Interrupt | None:
        plan = self.begin_step()
        self.job.optimizer.zero_grad(set_to_none=True)
        micro_batches = self._micro_batches(plan.indices)
        self.backend.arm(self.job.model, 1.0 / plan.n_global, plan.control)
        for k, micro in enumerate(micro_batches):
            # earlier micro-batches accumulate locally; the last one reduces (a rank with no samples
            # this step takes part in reduce_step, with zero gradients)
            self.backend.pause(self.job.model, k < len(micro_batches) - 1)
            loss = self.job.loss_fn(self.job.model, self.job.dataset.batch(micro))
            if self.job.loss_reduction == "mean":
                loss = loss * len(micro)
            loss.backward()
            if self._reporter is not None and self.rank == 0:
                self._reporter.add_loss(float(loss.detach()), len(micro))
        try:
            decided = self.backend.reduce_step(self.job.model)
        except PeerLostError as exc:  # before the optimizer's step: the state is the last boundary's
            return WorkerLost(str(exc))
        self.job.optimizer.step()
        if self.job.scheduler is not None:
            self.job.scheduler.step()  # type: ignore[attr-defined]
        return self.end_step(plan, decided)

    def end_step(self, plan: StepPlan, decided: Sequence[int]) -> Interrupt | None:
        """Account a step whose gradients were reduced and applied: advance the sampler, count, log,
        report; the interrupt the step's control words carry."""
        self.state.step_ended()
        epoch, consumed = self.sampler.state.epoch, self.sampler.state.consumed
        self.sampler.advance(plan.world, plan.local)
        if self.sampler.state.epoch > epoch and self.rank == 0:
            self._evaluate(epoch)
        self.extra["step"] = int(self.extra["step"]) + 1
        self.extra["samples"] = int(self.extra.get("samples", 0)) + plan.n_global
        fields: dict[str, Any] = {
            "step": self.extra["step"],
            "world": plan.world,
            "n": plan.n_global,
            "local": plan.local,
            "epoch": epoch,
            "consumed": consumed,
        }
        if self.env.log_indices:
            fields["indices"] = plan.indices
        self.event("step", **fields)
        if self._reporter is not None and self.rank == 0 and self._reporter.due(self.clock()):
            self._report("progress")
        if decided[1] or decided[2]:
            return Stop(decided[1])
        if decided[0]:
            return Resize(decided[0])
        return None

    def _evaluate(self, epoch: int) -> None:
        """Rank 0, at the end of ``epoch``: run the user's validation and keep the metric for the reports."""
        if self.job.evaluate is None:
            return
        t0 = time.perf_counter()
        metric = float(self.job.evaluate(self.job.model))
        self.event("evaluated", epoch=epoch, metric=metric, s=round(time.perf_counter() - t0, 4))
        if self._reporter is not None:
            self._reporter.metric = metric

    def _report(self, kind: str, pause_s: float = 0.0, lost: Sequence[str] = ()) -> None:
        """Rank 0: append a signed report (:mod:`.reports`); a failing write is logged, never fatal.
        ``lost``: the workers a recovery went on without (the daemon gives their GPUs back)."""
        if self._reporter is None or self.rank != 0:
            return
        try:
            self._reporter.write(kind, self.clock(), step=int(self.extra["step"]),
                                 samples=int(self.extra.get("samples", 0)), epoch=self.sampler.state.epoch,
                                 epoch_size=len(self.job.dataset), world=len(self.members),
                                 local_batch=int(self.extra["local_batch"]), pause_s=pause_s, lost=lost,
                                 members=self.members)
        except OSError as exc:
            log.warning("%s: progress report not written: %s", self.me, exc)

    def _say(self, text: str) -> None:
        """Rank 0: one line in the job's output for each change of its world (the job's own log
        shows its resizes; the reports file, the store and ``slurm-elastic report`` have the rest)."""
        if self.rank == 0:
            print(f"slurm-elastic: {text}", file=sys.stderr, flush=True)

    def _report_left(self) -> None:
        """A dropped worker: say it has left the group (any rank; the daemon then frees its node)."""
        if self._reporter is None:
            return
        try:
            self._reporter.write("left", self.clock(), step=int(self.extra["step"]),
                                 samples=int(self.extra.get("samples", 0)), epoch=self.sampler.state.epoch,
                                 epoch_size=len(self.job.dataset), world=len(self.members),
                                 local_batch=int(self.extra["local_batch"]), worker=self.me)
        except OSError as exc:
            log.warning("%s: left report not written: %s", self.me, exc)

    def handle(self, interrupt: Interrupt) -> None:
        match interrupt:
            case Resize(seq):
                try:
                    self._switch(seq)
                except PeerLostError as exc:  # a peer died while the worlds switched: re-form as for a step
                    self._recover(str(exc))
            case Stop(seq):
                self.finish(seq or None)  # 0: a stop asked of a rank (SIGTERM), not an order
            case WorkerLost(error):
                self._recover(error)

    def finish(self, seq: int | None, *, stopped: bool = True) -> None:
        """End the training here → DONE, with the last report.

        Args:
            seq: the stop order's sequence number, or None (a stop asked by SIGTERM, or the end).
            stopped: a stop (an order or SIGTERM): rank 0 writes ``SLURM_ELASTIC_CHECKPOINT`` for a
                requeue to resume from. False: the training ran to its end, and rank 0 removes that
                checkpoint (a requeue must not go back to an old stop; the trained model is the
                script's to save).
        """
        self.event("stop" if stopped else "end", seq=seq or 0)
        if seq is not None:
            self.extra["applied_seq"] = seq
        if self.rank == 0 and self.env.checkpoint:
            if stopped:
                self.backend.save(self.state.capture(), self.env.checkpoint)
                self.event("checkpoint", path=self.env.checkpoint)
                self._say(f"stopped at step {self.extra['step']}: checkpoint written to {self.env.checkpoint}")
            else:
                for path in (f"{self.env.checkpoint}.mac", self.env.checkpoint):  # the MAC first: no resume
                    Path(path).unlink(missing_ok=True)
        self._report("end")
        self._transition(AgentState.DONE)

    def _switch(self, seq: int) -> None:
        t0 = self.clock()
        self._transition(AgentState.SWITCHING)
        self.event("switch", seq=seq)
        if self.rank == 0:
            pending = self._pending
            if pending is None or pending.seq != seq:  # the control words were not rank 0's: re-form
                raise PeerLostError(f"{self.me}: the step announced order {seq}, which rank 0 does not hold")
            order = pending
            self.backend.store_set(control.go_key(seq), control.go_payload(self.members, order))
        else:
            order = self._announced(seq)
        t_go = self.clock()
        self.extra["applied_seq"] = seq
        self._pending = None
        old = self.members
        if self.me not in order.workers:
            self._leave_job()
            return
        if tuple(order.workers) == old:  # the same world (a new batch size only): the group stays
            self.event("rebatched", seq=seq, local_batch=order.local_batch)
        elif all(w in old for w in order.workers) and self.backend.can_narrow([old.index(w) for w in order.workers]):
            # shrink: the stayers narrow the group they are in
            self._form(f"o{seq}", order.workers, within=[old.index(w) for w in order.workers])
        else:  # a grow, or a shrink into another rank order this torch cannot narrow to: a new world
            self.backend.leave()
            self._form(f"o{seq}", order.workers, plan=transfer_plan(old, order.workers))
        t_formed = self.clock()
        self._apply_policy(order.local_batch)
        # Nothing is copied here: the rollback point is the live state of the step boundary, and the
        # applied order number is part of it (an order is never applied twice).
        self.event("resumed", go_s=round(t_go - t0, 4), form_s=round(t_formed - t_go, 4))
        self._report("resize", self.clock() - t0)
        self._say(f"order {seq}: {len(old)} -> {len(self.members)} workers ({','.join(self.members)}), per-GPU "
                  f"batch {self.extra['local_batch']}, paused {self.clock() - t0:.2f} s at sample "
                  f"{self.extra.get('samples', 0)}")
        self._transition(AgentState.TRAINING)

    def _leave_job(self) -> None:
        """A worker the order drops: leave the group and say so; it exits once :meth:`run` returns.

        Its priority stays as it is: at a lower one its teardown on a busy node outlived the daemon's
        grace after the "left" report, the node release killed it, and the job ended FAILED.
        """
        self.backend.leave()
        self._report_left()
        self._transition(AgentState.LEFT)

    def _announced(self, seq: int) -> Order:
        """The order rank 0 announced as ``seq``: read from the source, else from rank 0's go key.

        Raises:
            PeerLostError: no go key that verifies came within three group timeouts.
        """
        matches = {o for o in self._valid_orders() if o.seq == seq}
        if len(matches) == 1:
            return matches.pop()
        go = self._wait_control(control.go_key(seq), lambda p: control.read_go(p, seq, self.env.job_id,
                                                                                self.env.secret),
                                self.env.group_timeout_s * 3)
        if go is None:
            raise PeerLostError(f"{self.me}: rank 0 announced order {seq} but wrote no go key that verifies")
        return go.order

    def _recover(self, error: str) -> None:
        t0 = self.clock()
        self._transition(AgentState.RECOVERING)
        log.warning("%s: peer lost in %s: %s", self.me, self.generation, error)
        self.backend.leave()
        holds = self.state.holds_state
        if holds:
            self.state.rollback()
        gen = f"{self.generation}.r"
        before = self.members
        try:
            survivors, src = self._agree(gen, holds)
            if self.me not in survivors:
                log.error("%s: declared lost by the survivors of %s", self.me, self.generation)
                self._transition(AgentState.FAILED)
                return
            if src is None:
                log.error("%s: no survivor of %s holds a state to go on from", self.me, self.generation)
                self._transition(AgentState.FAILED)
                return
            self._form(gen, survivors, sync_src=survivors.index(src))
        except PeerLostError as exc:  # the survivors' world could not be formed either
            log.error("%s: recovery of %s failed: %s", self.me, gen, exc)
            self._transition(AgentState.FAILED)
            return
        self._apply_policy()
        self.event("recovered", world=len(survivors), since=self.clock() - t0)
        self._report("resize", self.clock() - t0, lost=[w for w in before if w not in survivors])
        self._say(f"lost {','.join(w for w in before if w not in survivors)}: {len(survivors)} workers "
                  f"({','.join(survivors)}) went on after {self.clock() - t0:.2f} s from the last step")
        self._transition(AgentState.TRAINING)

    def _agree(self, gen: str, holds: bool) -> tuple[tuple[str, ...], str | None]:
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
        members = self.members
        self.backend.store_set(control.who_key(gen, self.me), control.who_payload(holds))  # before the claim
        key = control.leader_key(gen)

        def check(payload: str) -> str:
            return control.read_leader(payload, members)

        leader = self._checked(key, self.backend.store_claim(key, control.leader_payload(self.me),
                                                             lambda p: self._checked(key, p, check) is not None),
                               check)
        if leader != self.me:
            decided = self._wait_control(control.members_key(gen), lambda p: control.read_members(p, members),
                                         self.env.group_timeout_s * 2 + 5.0)
            return decided if decided is not None else ((), None)
        deadline = time.monotonic() + self.env.group_timeout_s + 2.0
        seen: dict[str, bool] = {}
        while True:
            for w in members:
                if w not in seen:
                    holder = self._read_control(control.who_key(gen, w), control.read_who)
                    if holder is not None:
                        seen[w] = holder
            if len(seen) >= len(members) - 1 or time.monotonic() >= deadline:
                break
            time.sleep(0.02)
        survivors = tuple(w for w in members if w in seen)
        src = next((w for w in survivors if seen[w]), None)
        self.backend.store_set(control.members_key(gen), control.members_payload(survivors, src))
        return survivors, src
