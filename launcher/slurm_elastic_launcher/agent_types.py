"""The types the resize agent's parts share, and its ports.

This module owns the vocabulary of one worker's agent (:mod:`.agent`): its states
(:class:`AgentState`), the interrupts a step ends with (:class:`Resize`, :class:`Stop`,
:class:`WorkerLost`), one worker's part of a step (:class:`StepPlan`), what the user hands it
(:class:`ElasticJob`) and how it ends (:class:`AgentResult`), and the ports it reaches the world
through: the job's store (:class:`KeyValue`), the communication backend (:class:`Backend`) and the
dataset (:class:`BatchDataset`). It holds no behaviour, and imports nothing of the agent's parts.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .state import Stateful, TensorOps

CONTROL_WORDS = 3
"""Control words summed with each step's all-reduce: [resize seq, stop seq, ranks asked to stop (SIGTERM)]."""


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


@dataclass(frozen=True, slots=True)
class StepPlan:
    """One worker's part of one step, fixed at its start.

    Attributes:
        world: workers in the step.
        local: the per-worker batch.
        control: this worker's control words (:data:`CONTROL_WORDS`).
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
