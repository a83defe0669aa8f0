"""The scheduling core's data model: frozen snapshots in, frozen plans out.

This module owns the vocabulary every other part speaks: :class:`Node`, :class:`Job`,
:class:`ClusterSnapshot` (what an observer saw at one instant) and :class:`JobPlan` /
:class:`Plan` (what a planner decided). Everything here is an immutable value; nothing here does
I/O, reads a clock or draws random numbers.

Units: times in seconds (``now`` and ``submit_time`` on the same clock, wall or virtual), batch
sizes in samples, throughput in samples per second, learning rates as given by the user.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, NewType, NoReturn

from slurm_elastic.errors import SnapshotError
from slurm_elastic_predictor.progress import BetaProgressModel
from slurm_elastic_predictor.throughput import ThroughputModel

JobId = NewType("JobId", str)
NodeName = NewType("NodeName", str)


class NodeState(enum.Enum):
    """Scheduling state of a node, reduced from Slurm's many node states.

    ``UP`` nodes take work. ``DRAINING`` nodes take no new work; their rigid jobs finish there,
    while elastic jobs leave them (the node's GPUs are not schedulable, so a plan gives those jobs
    GPUs elsewhere: elasticity empties a draining node sooner): a job without the launcher is moved
    by a requeue, a launcher job is shrunk off the node in place and grown elsewhere, and a launcher
    job whose batch host drains stays there until it ends (:func:`slurm_elastic.core.actions.diff`).
    ``DOWN`` nodes (down, drained, not responding, powered off) hold nothing usable.
    """

    UP = "up"
    DRAINING = "draining"
    DOWN = "down"


class JobState(enum.Enum):
    """Life cycle of a job as the planner sees it.

    ``PENDING`` (never ran) -> ``RUNNING`` <-> ``PREEMPTED`` (ran, now waiting again) ->
    ``FINISHED``. Finished jobs are normally absent from a snapshot; they appear only so that an
    observer can report them in the same round in which they ended.
    """

    PENDING = "pending"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED = "finished"


class ElasticMode(enum.Enum):
    """How a job's batch size follows its GPU count.

    ``EXO``: exo-elastic (ONES, IBM): the global batch follows the GPUs, ``B = k * b_local``, and the
    learning rate is scaled linearly with the global batch. ``ENDO``: endo-elastic (Ares, DL2): the
    global batch stays at the job's base batch; the per-GPU batch shrinks as GPUs are added and
    gradient accumulation is used when it no longer fits.
    """

    EXO = "exo"
    ENDO = "endo"


@dataclass(frozen=True, slots=True)
class Node:
    """One compute node.

    Attributes:
        name: Slurm node name.
        gpus: indices of the node's GPUs (as in ``gres/gpu`` IDX).
        free_gpus: GPUs not allocated to any job (rigid or elastic).
        state: scheduling state.
    """

    name: NodeName
    gpus: tuple[int, ...]
    free_gpus: tuple[int, ...]
    state: NodeState = NodeState.UP
    _gpus: frozenset[int] = field(init=False, repr=False, compare=False, default=frozenset())
    _free: frozenset[int] = field(init=False, repr=False, compare=False, default=frozenset())
    _pairs: tuple[tuple[NodeName, int], ...] = field(init=False, repr=False, compare=False, default=())
    _busy: frozenset[tuple[NodeName, int]] = field(init=False, repr=False, compare=False, default=frozenset())

    def __post_init__(self) -> None:
        gpus, free = frozenset(self.gpus), frozenset(self.free_gpus)
        if len(gpus) != len(self.gpus):
            raise SnapshotError(f"node {self.name}: duplicate GPU index in {self.gpus}")
        stray = free - gpus
        if stray:
            raise SnapshotError(
                f"node {self.name}: free GPUs {sorted(stray)} are not among its GPUs {self.gpus}"
            )
        object.__setattr__(self, "_gpus", gpus)
        object.__setattr__(self, "_free", free)
        # Made once per node, not per snapshot: a snapshot lists its schedulable GPUs as these pairs.
        object.__setattr__(self, "_pairs", tuple((self.name, g) for g in self.gpus))
        object.__setattr__(self, "_busy", frozenset((self.name, g) for g in self.gpus if g not in free))

    def gpu_set(self) -> frozenset[int]:
        """The node's GPU indices."""
        return self._gpus

    def free_set(self) -> frozenset[int]:
        """Its free GPU indices."""
        return self._free

    def gpu_pairs(self) -> tuple[tuple[NodeName, int], ...]:
        """Its GPUs as ``(node, index)`` pairs, in :attr:`gpus` order."""
        return self._pairs

    def busy_pairs(self) -> frozenset[tuple[NodeName, int]]:
        """Its GPUs that are not free, as ``(node, index)`` pairs."""
        return self._busy


@dataclass(frozen=True, slots=True)
class Placement:
    """Which GPUs of which nodes a job holds: ``((node, (gpu, ...)), ...)`` sorted by node name."""

    slots: tuple[tuple[NodeName, tuple[int, ...]], ...] = ()
    _gpus: frozenset[tuple[NodeName, int]] = field(init=False, repr=False, compare=False, default=frozenset())

    def __post_init__(self) -> None:
        object.__setattr__(self, "_gpus", frozenset((n, g) for n, gs in self.slots for g in gs))

    @classmethod
    def of(cls, gpus: Iterable[tuple[str, int]]) -> Placement:
        """Build a placement from ``(node, gpu_index)`` pairs."""
        per_node: dict[NodeName, list[int]] = {}
        for node, gpu in gpus:
            per_node.setdefault(NodeName(node), []).append(gpu)
        return cls.of_nodes(per_node)

    @classmethod
    def of_nodes(cls, per_node: Mapping[NodeName, Iterable[int]]) -> Placement:
        """Build a placement from each node's GPU indices (nodes without any are left out)."""
        return cls(tuple((node, tuple(sorted(idx))) for node, idx in sorted(per_node.items()) if idx))

    @property
    def num_gpus(self) -> int:
        """Number of GPUs held."""
        return len(self._gpus)

    @property
    def num_nodes(self) -> int:
        """Number of nodes spanned."""
        return len(self.slots)

    def gpu_set(self) -> frozenset[tuple[NodeName, int]]:
        """The held GPUs as ``(node, index)`` pairs."""
        return self._gpus

    def per_node_counts(self) -> tuple[int, ...]:
        """GPUs per spanned node, largest first (the shape that decides sync cost)."""
        return tuple(sorted((len(g) for _, g in self.slots), reverse=True))


@dataclass(frozen=True, slots=True)
class ProgressReport:
    """The latest training progress a job reported (ONES Beta-model features).

    Attributes:
        initial_loss: training loss before the first step (``None`` until reported).
        current_loss: latest training loss.
        val_metric: latest validation accuracy in [0, 1] (``None`` until evaluated).
    """

    initial_loss: float | None = None
    current_loss: float | None = None
    val_metric: float | None = None


@dataclass(frozen=True, slots=True)
class Job:
    """One job as the planner sees it.

    Attributes:
        job_id: Slurm job id.
        user: owner (Slurm user name).
        account: Slurm account charged.
        submit_time: seconds, same clock as the snapshot's ``now``.
        state: life-cycle state.
        elastic: ``False`` for rigid jobs (fixed load the planner never touches).
        min_gpus, max_gpus: elastic GPU range (inclusive).
        min_batch, max_batch: global batch range in samples (inclusive).
        base_batch: global batch the user asked for at ``requested_gpus`` GPUs (samples).
        base_lr: learning rate at ``base_batch``.
        requested_gpus: GPUs asked for at submit (the size a rigid scheduler would give).
        max_local_batch: largest per-GPU batch that fits in one GPU's memory (samples).
        mode: exo- or endo-elastic.
        epoch_size: samples per epoch.
        samples_processed: samples trained so far.
        target_epochs: epochs the user declared, if any (prior for the progress model).
        observed_throughput: last measured samples/s at the current placement, if any.
        placement: GPUs held now (empty unless running).
        local_batch: per-GPU batch now (0 unless running).
        start_time: when the job first started (``None`` if never).
        run_time: seconds the job has executed (T_processed in ONES).
        last_change_time: when its allocation last changed (``None`` if never).
        samples_at_last_change: ``samples_processed`` at ``last_change_time``.
        model: key of the job's throughput profile in ``ClusterSnapshot.profiles``.
        model_points: how many of its own measured configurations (GPUs, nodes, per-GPU batch)
            that profile was fitted from; 0: a prior profile, as shipped or measured by the site.
        progress: latest progress report.
        release_blocks: when the job's GPUs are released only in whole blocks, those blocks as
            ``(node, GPUs)``, each freed on its own (a node of its own allocation, a satellite);
            ``()``: it cannot shrink at all; ``None``: any GPU can go. See :attr:`shrink_sizes`.
        can_rebatch: its batch can change while it runs (it runs the launcher); a job that cannot
            keeps the batch it started with until it is restarted.
        preemptions: times it was preempted (requeued) so far (Slurm's restart count).
        can_grow: it can be given more GPUs while it runs (in place, or by a restart for a job
            without the launcher); ``False`` for a launcher job whose join script is missing.
        prior: the same job as it would be had it never reported (its fields from Slurm's record and
            the profiles alone), when any field here came from the job's own reports; ``None``: no
            field did. The trust guard (:mod:`slurm_elastic.core.trust`) plans from it to bound
            what a report can take from other jobs.
    """

    job_id: JobId
    user: str
    account: str
    submit_time: float
    state: JobState
    min_gpus: int
    max_gpus: int
    min_batch: int
    max_batch: int
    base_batch: int
    base_lr: float
    requested_gpus: int
    max_local_batch: int
    mode: ElasticMode = ElasticMode.EXO
    elastic: bool = True
    epoch_size: int = 1
    samples_processed: int = 0
    target_epochs: float | None = None
    observed_throughput: float | None = None
    placement: Placement = field(default_factory=Placement)
    local_batch: int = 0
    start_time: float | None = None
    run_time: float = 0.0
    last_change_time: float | None = None
    samples_at_last_change: int = 0
    model: str = ""
    progress: ProgressReport = field(default_factory=ProgressReport)
    release_blocks: tuple[tuple[NodeName, int], ...] | None = None
    can_rebatch: bool = True
    can_grow: bool = True
    preemptions: int = 0
    model_points: int = 0
    prior: Job | None = None

    def __post_init__(self) -> None:
        # Each message is formatted only for a rule that fails: a snapshot builds thousands of jobs.
        fail = self._fail
        if not 1 <= self.min_gpus <= self.max_gpus:
            fail(f"GPU range {self.min_gpus}:{self.max_gpus} must satisfy 1 <= min <= max")
        if not 1 <= self.min_batch <= self.max_batch:
            fail(f"batch range {self.min_batch}:{self.max_batch} must satisfy 1 <= min <= max")
        if not self.min_batch <= self.base_batch <= self.max_batch:
            fail(f"base batch {self.base_batch} must lie in {self.min_batch}:{self.max_batch}")
        if not self.max_local_batch >= 1:
            fail(f"max per-GPU batch {self.max_local_batch} must be >= 1")
        if not self.requested_gpus >= 1:
            fail(f"requested GPUs {self.requested_gpus} must be >= 1")
        if not self.epoch_size >= 1:
            fail(f"epoch size {self.epoch_size} must be >= 1 sample")
        if not self.base_lr > 0:
            fail(f"base learning rate {self.base_lr} must be > 0")
        self._check_configuration()

    def _check_configuration(self) -> None:
        """The rules on what changes as the job runs (:data:`CONFIGURATION_FIELDS`)."""
        fail = self._fail
        if not self.samples_processed >= 0:
            fail(f"samples processed {self.samples_processed} must be >= 0")
        if not self.preemptions >= 0:
            fail(f"preemptions {self.preemptions} must be >= 0")
        running = self.state is JobState.RUNNING
        if running != (self.placement.num_gpus > 0):
            fail(f"state {self.state.value} does not match placement of {self.placement.num_gpus} GPUs")
        if (self.local_batch > 0) != running:
            fail(f"local batch {self.local_batch} must be > 0 exactly when running")
        if self.release_blocks:
            held = {n: len(g) for n, g in self.placement.slots}
            in_blocks: dict[NodeName, int] = {}
            for node, n in self.release_blocks:
                in_blocks[node] = in_blocks.get(node, 0) + n
            if not (all(n > 0 for _, n in self.release_blocks)
                    and all(n <= held.get(node, 0) for node, n in in_blocks.items())
                    and sum(in_blocks.values()) < max(1, self.placement.num_gpus)):
                fail(f"release blocks {self.release_blocks} must be GPUs it holds, never all of them")

    def _fail(self, what: str) -> NoReturn:
        raise SnapshotError(f"job {self.job_id}: {what}")

    def _unchecked(self, **changes: Any) -> Job:
        """A copy with ``changes``, none of which any rule involves, so no rule is checked again
        (``dataclasses.replace`` would re-check them all)."""
        job: Job = _copy_job(self, changes)
        return job

    def progressed(self, samples_processed: int, run_time: float, progress: ProgressReport) -> Job:
        """This job later, changed only in its progress, as an observer sees a job that runs on unchanged.
        Samples never go back, so the one rule they are in still holds and none is checked again.

        Raises:
            SnapshotError: ``samples_processed`` below this job's.
        """
        if samples_processed < self.samples_processed:
            raise SnapshotError(f"job {self.job_id}: samples processed went back from {self.samples_processed} "
                                f"to {samples_processed}")
        return self._unchecked(samples_processed=samples_processed, run_time=float(run_time), progress=progress)

    def reconfigured(self, **changes: Any) -> Job:
        """This job in another configuration: ``changes`` to :data:`CONFIGURATION_FIELDS` only (its state,
        GPUs, batch and progress, as a job changes while it runs). Only the rules on those are checked
        again; the job's own ranges and sizes are as they were.

        Raises:
            SnapshotError: a rule broken, naming the value.
            TypeError: a change to another field.
        """
        other = changes.keys() - CONFIGURATION_FIELDS
        if other:
            raise TypeError(f"job {self.job_id}: {sorted(other)} are not configuration fields")
        job = self._unchecked(**changes)
        job._check_configuration()
        return job

    def ran_for(self, run_time: float) -> Job:
        """This job having run ``run_time`` seconds (no rule involves the run time, so none is checked again:
        an observer brings an unchanged running job to the snapshot's instant this way)."""
        return self._unchecked(run_time=float(run_time))

    @property
    def num_gpus(self) -> int:
        """GPUs held now."""
        return self.placement.num_gpus

    @property
    def shrink_sizes(self) -> tuple[int, ...] | None:
        """GPU counts below the current one that whole :attr:`release_blocks` reach (``None``: any)."""
        if self.release_blocks is None:
            return None
        k = self.placement.num_gpus
        sums = {0}
        for _, n in self.release_blocks:
            sums |= {s + n for s in sums}
        return tuple(sorted(k - s for s in sums if 0 < s < k))

    @property
    def unreachable_sizes(self) -> tuple[int, ...]:
        """GPU counts between 1 and the current one that this running job cannot be shrunk to (its
        GPUs go only in whole :attr:`release_blocks`); planners plan around them. Empty for a job
        whose any GPU can go, and for a job not running."""
        sizes = self.shrink_sizes
        if sizes is None or self.state is not JobState.RUNNING:
            return ()
        return tuple(k for k in range(1, self.placement.num_gpus) if k not in sizes)

    @property
    def base_local_batch(self) -> int:
        """Per-GPU batch of the user's request: ``ceil(base_batch / requested_gpus)``."""
        return min(self.max_local_batch, max(1, math.ceil(self.base_batch / self.requested_gpus)))

    @property
    def global_batch(self) -> int:
        """Global batch now (0 unless running)."""
        if self.mode is ElasticMode.ENDO:
            return self.base_batch if self.num_gpus else 0
        return self.local_batch * self.num_gpus

    @property
    def epochs_done(self) -> float:
        """Epochs processed (fractional)."""
        return self.samples_processed / self.epoch_size

    @property
    def epochs_since_change(self) -> float:
        """Epochs processed since the allocation last changed."""
        return (self.samples_processed - self.samples_at_last_change) / self.epoch_size

    @property
    def is_active(self) -> bool:
        """Running or waiting (pending or preempted), i.e. plannable."""
        return self.state is not JobState.FINISHED

    @property
    def is_waiting(self) -> bool:
        """Pending or preempted."""
        return self.state in (JobState.PENDING, JobState.PREEMPTED)


def _slot_copier(cls: type) -> Callable[[Any, dict[str, Any]], Any]:
    """``copy(obj, changes)``: a copy of a slotted dataclass instance with ``changes`` (field names to
    values), made without ``__init__`` and so without its checks.

    Generated, as ``dataclasses`` generates ``__init__``: one slot store per field, written out, costs
    a third of a loop over the fields, and an observer copies every running job at every look.
    """
    names = [f.name for f in fields(cls)]
    scope: dict[str, Any] = {"make": object.__new__, "cls": cls,
                             "setters": {name: getattr(cls, name).__set__ for name in names}}
    scope.update({f"set_{name}": setter for name, setter in scope["setters"].items()})
    body = "".join(f"    set_{name}(new, obj.{name})\n" for name in names)
    # The source holds only the dataclass's own field names, never data.
    exec("def copy(obj, changes):\n    new = make(cls)\n" + body
         + "    for name, value in changes.items():\n        setters[name](new, value)\n    return new\n", scope)
    copy: Callable[[Any, dict[str, Any]], Any] = scope["copy"]
    return copy


_copy_job = _slot_copier(Job)
CONFIGURATION_FIELDS = frozenset({
    "state", "placement", "local_batch", "observed_throughput", "start_time", "run_time", "last_change_time",
    "samples_at_last_change", "samples_processed", "progress", "preemptions", "release_blocks"})
"""The fields of a :class:`Job` that change as it runs (:meth:`Job.reconfigured`)."""


@dataclass(frozen=True, slots=True)
class InFlightResize:
    """An action issued in an earlier round that has not completed yet.

    Attributes:
        job_id: the job being resized.
        target_gpus: GPU count the action is moving the job to.
        since: when the action was issued (seconds).
        target_local_batch: per-GPU batch the action is moving the job to (a REBATCH: the GPUs do
            not change, so only the batch shows it has arrived); 0 when any batch will do.
    """

    job_id: JobId
    target_gpus: int
    since: float
    target_local_batch: int = 0


@dataclass(frozen=True, slots=True)
class ActionError:
    """An action of the previous round that failed (its message as reported by the actuator)."""

    job_id: JobId
    action: str
    message: str


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """Everything a planner may look at, captured at one instant.

    Attributes:
        now: the instant (seconds).
        nodes: the nodes of the managed partitions, sorted by name.
        jobs: active jobs (elastic and rigid), sorted by submit time then id.
        in_flight: resizes issued earlier and not yet complete.
        last_errors: actions of the previous round that failed.
        profiles: throughput models by job ``model`` key.
        progress_model: fitted ONES Beta progress model (``None`` until enough history).
        arrival_rate: recent job arrival rate, jobs per second (ONES sigma).
    """

    now: float
    nodes: tuple[Node, ...]
    jobs: tuple[Job, ...]
    in_flight: tuple[InFlightResize, ...] = ()
    last_errors: tuple[ActionError, ...] = ()
    profiles: Mapping[str, ThroughputModel] = field(default_factory=dict)
    progress_model: BetaProgressModel | None = None
    arrival_rate: float = 0.0
    _elastic: tuple[Job, ...] = field(init=False, repr=False, compare=False, default=())
    _schedulable: tuple[tuple[NodeName, int], ...] = field(init=False, repr=False, compare=False, default=())
    _schedulable_set: frozenset[tuple[NodeName, int]] | None = field(init=False, repr=False, compare=False,
                                                                     default=None)

    def __post_init__(self) -> None:
        names = [n.name for n in self.nodes]
        if len(set(names)) != len(names):
            raise SnapshotError(f"duplicate node names in snapshot: {sorted(names)}")
        ids = [j.job_id for j in self.jobs]
        if len(set(ids)) != len(ids):
            raise SnapshotError("duplicate job ids in snapshot")
        if self.arrival_rate < 0:
            raise SnapshotError(f"arrival rate {self.arrival_rate} must be >= 0 jobs/s")
        # Every GPU held is known and held once (checked by whole sets; the slow scan names the fault).
        known = {n.name: n.gpu_set() for n in self.nodes}
        held: set[tuple[NodeName, int]] = set()
        for job in self.jobs:
            slots = job.placement.slots
            if not slots:
                continue
            before = len(held)
            held |= job.placement.gpu_set()
            if len(held) - before != sum(len(g) for _, g in slots) or not all(
                    node in known and known[node].issuperset(g) for node, g in slots):
                self._name_the_held_fault()
        # Every model named is profiled (the usual case, checked at once), or each job is checked in order.
        if not {j.model for j in self.jobs if j.elastic and j.model} <= self.profiles.keys():
            for job in self.jobs:
                if job.elastic and job.is_active and job.model and job.model not in self.profiles:
                    raise SnapshotError(f"job {job.job_id}: no throughput profile named {job.model!r}")
        # Derived views, computed once: planners, placement and validation all ask for them.
        elastic = tuple(j for j in self.jobs if j.elastic and j.is_active)
        elastic_held: set[tuple[NodeName, int]] = set().union(*(j.placement.gpu_set() for j in elastic))
        sched: list[tuple[NodeName, int]] = []
        for nd in self.nodes:
            if nd.state is not NodeState.UP:
                continue
            if nd.busy_pairs() <= elastic_held:  # wholly free, or its busy GPUs all held by elastic jobs
                sched.extend(nd.gpu_pairs())
            else:
                free = nd.free_set()
                sched.extend((nd.name, g) for g in nd.gpus if g in free or (nd.name, g) in elastic_held)
        object.__setattr__(self, "_elastic", elastic)
        object.__setattr__(self, "_schedulable", tuple(sched))

    def _name_the_held_fault(self) -> None:
        """Raise for the first GPU, in job order, that is unknown to the snapshot or held twice."""
        known = {n.name: n.gpu_set() for n in self.nodes}
        held: set[tuple[NodeName, int]] = set()
        for job in self.jobs:
            for node, gpus in job.placement.slots:
                if node not in known or not set(gpus) <= known[node]:
                    raise SnapshotError(f"job {job.job_id} holds GPUs {node}:{gpus} unknown to the snapshot")
                for g in gpus:
                    if (node, g) in held:
                        raise SnapshotError(f"GPU {node}:{g} is held by two jobs")
                    held.add((node, g))
        raise AssertionError("a held-GPU fault was found, then not found again")

    def job(self, job_id: JobId) -> Job:
        """The job with this id (``KeyError`` if absent)."""
        for j in self.jobs:
            if j.job_id == job_id:
                return j
        raise KeyError(job_id)

    def elastic_jobs(self) -> tuple[Job, ...]:
        """Active elastic jobs, in snapshot order."""
        return self._elastic

    def schedulable_gpus(self) -> tuple[tuple[NodeName, int], ...]:
        """GPUs the planner may assign: on UP nodes, free or held by an active elastic job."""
        return self._schedulable

    def schedulable_set(self) -> frozenset[tuple[NodeName, int]]:
        """:meth:`schedulable_gpus` as a set, made at the first call (placement and validation both ask)."""
        got = self._schedulable_set
        if got is None:
            got = frozenset(self._schedulable)
            object.__setattr__(self, "_schedulable_set", got)
        return got

    def in_flight_for(self, job_id: JobId) -> InFlightResize | None:
        """The in-flight resize of this job, if any."""
        for r in self.in_flight:
            if r.job_id == job_id:
                return r
        return None


@dataclass(frozen=True, slots=True)
class JobPlan:
    """The planned configuration of one running job.

    Attributes:
        job_id: the job.
        placement: GPUs it should hold.
        global_batch: samples per optimizer step.
        local_batch: samples per GPU per micro-step.
        accumulation: micro-steps per optimizer step (endo-elastic jobs whose per-GPU batch does
            not fit; 1 otherwise).
        lr: learning rate to use (linearly scaled for exo-elastic jobs).
    """

    job_id: JobId
    placement: Placement
    global_batch: int
    local_batch: int
    accumulation: int = 1
    lr: float = 0.0

    @property
    def num_gpus(self) -> int:
        """GPUs planned."""
        return self.placement.num_gpus


@dataclass(frozen=True, slots=True)
class Unplaced:
    """A job the plan leaves waiting, and why (one line a user can read).

    ``dropped`` marks a job the policy rejects for good (the IBM autoscaler's drop mode); the
    actuator cancels it instead of leaving it queued.
    """

    job_id: JobId
    reason: str
    dropped: bool = False


@dataclass(frozen=True, slots=True)
class Plan:
    """A planner's decision: the configuration of every job that should run.

    Active elastic jobs absent from ``jobs`` should not run (they wait, or are preempted); each
    of them has an entry in ``unplaced`` saying why.

    Attributes:
        policy: name of the planner that made it.
        jobs: configurations of the jobs that should run, sorted by job id.
        unplaced: jobs left waiting, with reasons.
        score: the planner's own objective value (lower is better for ONES, higher for DP);
            ``None`` where the policy has none.
        notes: free-form remarks for the round log (e.g. "update gated: job 7 mid-epoch").
    """

    policy: str
    jobs: tuple[JobPlan, ...]
    unplaced: tuple[Unplaced, ...] = ()
    score: float | None = None
    notes: tuple[str, ...] = ()

    def by_job(self) -> dict[JobId, JobPlan]:
        """Job plans keyed by id."""
        return {p.job_id: p for p in self.jobs}
