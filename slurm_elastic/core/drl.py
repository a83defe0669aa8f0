"""The ``drl`` policy: DL2's learned scheduler (Peng et al.), adapted to all-reduce jobs as ONES did.

This module owns the pure, torch-free half of DL2: the featurisation of a snapshot into DL2's
fixed-size state (:class:`FeatureSpec`, :func:`slot_features`), the forward pass of the policy
network from plain numpy weights (:class:`PolicyWeights`, :func:`forward`), the decision loop
that turns repeated policy inferences into GPU counts (:func:`allocate`), and the planner
:class:`DrlPlanner`. It must not read files, import torch or keep state between calls: the
weights are an argument, loading them from a model file is done outside the core (by
:mod:`slurm_elastic.drl.weights`, whose factory :mod:`slurm_elastic.policies` lists as ``drl``),
and training lives in :mod:`slurm_elastic.drl.train`.

DL2 (arXiv:1909.06040, §4.1) adapted to data-parallel all-reduce jobs (ONES SC'21 §4.1, "we
modify its action space because we use the All-reduce architecture"):

* State: ``J`` job slots (jobs in arrival order; more than ``J`` active jobs are scheduled in
  batches of ``J``, as DL2 does) x per-slot features (:data:`SLOT_FEATURES` and a one-hot of the
  job's model type, DL2's ``x``), then :data:`GLOBAL_FEATURES`. DL2's "time slots run" is the run
  time, its "remaining epochs" the ONES progress model's expected remaining epochs, its
  "allocated workers" the GPUs allocated so far in this round; there are no parameter servers.
* Action: ``J + 1`` outputs: "add one GPU to the job in slot ``i``" (a waiting job jumps to its
  ``min_gpus``) or "stop" (DL2's void action). One inference changes one job; the state is
  updated and the network asked again until it stops or nothing more can be added.
* No preemption (the ONES comparison's DRL): a running job always keeps at least ``min_gpus``;
  the rest of its allocation is decided anew each round, as DL2 decides worker counts anew
  each time slot. Only when GPUs are lost (down or draining nodes) and the running jobs' minimums
  no longer fit is a running job left out, with its reason.
* Batch: fixed at the user's ``base_batch`` (DL2 keeps a job's total batch; ONES notes that only
  ONES scales batches): per-GPU batch ``ceil(B / k)`` with gradient accumulation when it does not
  fit, as :func:`~slurm_elastic.core.baselines.fixed_batch_sizing`.

Actions are masked: adding is offered only to an occupied slot whose job stays within
``min_gpus..max_gpus``, within the GPUs still free and at a count that holds its batch
(``k <= base_batch``). "Stop" is not offered while nothing at all would run (a liveness guard
of ours: an idle cluster with startable jobs would otherwise be a fixed point of a bad policy).
The planner takes the most probable allowed action (ties to the lower index), or with
``sample=True`` draws it from the policy with the ``rng`` passed in. Same snapshot, weights and
rng state give the same plan.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from slurm_elastic.core.baselines import fixed_batch_sizing, submit_order
from slurm_elastic.core.model import ClusterSnapshot, Job, JobId, JobState, NodeState
from slurm_elastic.core.planner import PlanResult, build_plan
from slurm_elastic.core.remaining import expected_remaining, progress_shapes
from slurm_elastic.core.sizing import Sizing
from slurm_elastic.errors import ConfigError
from slurm_elastic_predictor import portable

FloatArr = NDArray[np.float64]
BoolArr = NDArray[np.bool_]
IntArr = NDArray[np.int64]

#: Per-slot features, in order, before the model one-hot. Times are in minutes and GPU counts
#: divided by :attr:`FeatureSpec.gpu_scale`; ``allocated`` and ``can_add`` change at every step.
SLOT_FEATURES = (
    "occupied",      # 1 if a job sits in the slot
    "running",       # 1 if the job runs now (it keeps its min_gpus: no preemption)
    "age",           # log1p(minutes since submission)
    "run_time",      # log1p(minutes executed)            (DL2: time slots run)
    "epochs_to_go",  # log1p(expected remaining epochs)   (DL2: remaining epochs)
    "samples_to_go", # log1p(expected remaining samples / 10,000)
    "batch",         # log2(user's global batch) / 10     (kept fixed by drl)
    "requested",     # requested GPUs / gpu_scale          (the user's demand)
    "max_gpus",      # usable maximum GPUs / gpu_scale
    "held",          # GPUs held now / gpu_scale
    "allocated",     # GPUs allocated so far this round / gpu_scale (DL2: allocated workers)
    "can_add",       # 1 if "add one GPU" is allowed for this slot now
)
#: Features of the whole round, after the slots.
GLOBAL_FEATURES = (
    "free",          # GPUs not yet allocated this round / schedulable GPUs
    "cluster",       # schedulable GPUs / (4 * gpu_scale)
    "queued_beyond", # active jobs in later batches of slots / slots
)
_ALLOC = SLOT_FEATURES.index("allocated")
_CAN_ADD = SLOT_FEATURES.index("can_add")
FORMAT_VERSION = 1
DEFAULT_EPOCHS_TO_GO = 10.0


@dataclass(frozen=True, slots=True)
class FeatureSpec:
    """The shape of the policy's input.

    Attributes:
        slots: ``J``, job slots per inference (DL2's upper bound on concurrent jobs).
        models: model types with a one-hot column each; any other model shares one more column.
        gpu_scale: GPUs that map to 1.0 in GPU-count features.
    """

    slots: int
    models: tuple[str, ...]
    gpu_scale: float = 16.0

    def __post_init__(self) -> None:
        if self.slots < 1:
            raise ConfigError(f"drl feature spec: slots = {self.slots} must be >= 1")
        if not (math.isfinite(self.gpu_scale) and self.gpu_scale > 0):
            raise ConfigError(f"drl feature spec: gpu_scale = {self.gpu_scale} must be > 0")
        if len(set(self.models)) != len(self.models):
            raise ConfigError(f"drl feature spec: duplicate model types in {self.models}")

    @property
    def per_slot(self) -> int:
        """Features per slot: :data:`SLOT_FEATURES` then ``len(models) + 1`` one-hot columns."""
        return len(SLOT_FEATURES) + len(self.models) + 1

    @property
    def input_size(self) -> int:
        """Length of the state vector."""
        return self.slots * self.per_slot + len(GLOBAL_FEATURES)

    @property
    def actions(self) -> int:
        """``J + 1``: add a GPU to slot ``i`` for ``i < J``; ``J`` is stop."""
        return self.slots + 1


@dataclass(frozen=True, slots=True, eq=False)
class PolicyWeights:
    """A policy network as plain arrays: ``h = relu(h @ W + b)`` per hidden layer, logits last.

    Attributes:
        spec: the input it expects.
        layers: ``((W, b), ...)``; ``W`` has shape ``(inputs, outputs)``; the first takes
            ``spec.input_size`` inputs, the last gives ``spec.actions`` logits.
        meta: free-form provenance (training command, seed, figures), strings only.
    """

    spec: FeatureSpec
    layers: tuple[tuple[FloatArr, FloatArr], ...]
    meta: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.layers:
            raise ConfigError("drl weights: no layer")
        width = self.spec.input_size
        for i, (w, b) in enumerate(self.layers):
            if w.ndim != 2 or b.shape != (w.shape[1],) or w.shape[0] != width:
                raise ConfigError(f"drl weights: layer {i} has W{w.shape} and b{b.shape}; expected W({width}, n) "
                                  "and b(n,)")
            if not (np.all(np.isfinite(w)) and np.all(np.isfinite(b))):
                raise ConfigError(f"drl weights: layer {i} holds a non-finite value")
            width = w.shape[1]
        if width != self.spec.actions:
            raise ConfigError(f"drl weights: the last layer gives {width} outputs; {self.spec.slots} slots need "
                              f"{self.spec.actions}")


def forward(weights: PolicyWeights, state: FloatArr) -> FloatArr:
    """Logits of the policy for one state ``(input_size,)`` or a batch ``(n, input_size)``
    (products by :func:`~slurm_elastic_predictor.portable.matmul`: a choice must not depend on
    the CPU's BLAS kernel)."""
    h = state
    last = len(weights.layers) - 1
    for i, (w, b) in enumerate(weights.layers):
        h = portable.matmul(h, w) + b
        if i < last:
            h = np.maximum(h, 0.0)
    return h


def masked_probabilities(logits: FloatArr, mask: BoolArr) -> FloatArr:
    """Softmax of ``logits`` over the allowed actions (0 elsewhere)."""
    z = np.where(mask, logits, -np.inf)
    z = portable.exp(z - np.max(z))
    out: FloatArr = z / np.sum(z)
    return out


@dataclass(frozen=True, slots=True)
class Step:
    """One inference of the decision loop, as a chooser sees it.

    Attributes:
        state: the state vector (``FeatureSpec.input_size``); a copy the chooser may keep.
        mask: allowed actions (``FeatureSpec.actions``); the last entry is "stop", allowed
            unless nothing at all would run (then some add action is allowed).
        slot_jobs: the job in each slot (``None`` for an empty slot).
        allocated: GPUs allocated so far to each slot's job.
        free: GPUs not yet allocated.
    """

    state: FloatArr
    mask: BoolArr
    slot_jobs: tuple[Job | None, ...]
    allocated: tuple[int, ...]
    free: int


Chooser = Callable[[Step], int]


@dataclass(frozen=True, slots=True)
class Allocation:
    """What the decision loop decided.

    Attributes:
        counts: GPUs per job that runs.
        reasons: why each other active elastic job does not run.
        steps: ``(step, action)`` per inference, in order (empty unless recorded).
        stopped: inferences that chose "stop".
    """

    counts: dict[JobId, int]
    reasons: dict[JobId, str]
    steps: tuple[tuple[Step, int], ...]
    stopped: int


def usable_range(job: Job, total: int) -> tuple[int, int]:
    """``(kmin, kmax)``: GPU counts the job may have at its fixed batch (``kmin > kmax``: none)."""
    return job.min_gpus, min(job.max_gpus, total, job.base_batch)


def slot_features(snapshot: ClusterSnapshot, jobs: Sequence[Job], spec: FeatureSpec,
                  default_epochs_to_go: float = DEFAULT_EPOCHS_TO_GO) -> FloatArr:
    """The static part of each job's slot row, shape ``(len(jobs), spec.per_slot)``.

    ``allocated`` and ``can_add`` are left 0: the decision loop fills them at every step.
    """
    n = len(jobs)
    if not n:
        return np.zeros((n, spec.per_slot), dtype=np.float64)
    total = len(snapshot.schedulable_gpus())
    alpha, beta, yp = progress_shapes(snapshot, jobs, default_epochs_to_go)
    togo = (expected_remaining(alpha, beta, yp) / np.array([j.epoch_size for j in jobs], dtype=np.float64)).tolist()
    index = {m: i for i, m in enumerate(spec.models)}
    base = len(SLOT_FEATURES)
    scale = spec.gpu_scale
    rows = []
    for job, to_go in zip(jobs, togo, strict=True):  # rows as lists, one array at the end
        rows.append([
            1.0,
            1.0 if job.state is JobState.RUNNING else 0.0,
            portable.log1p_float(max(0.0, snapshot.now - job.submit_time) / 60.0),
            portable.log1p_float(max(0.0, job.run_time) / 60.0),
            portable.log1p_float(max(0.0, to_go)),
            portable.log1p_float(max(0.0, to_go * job.epoch_size) / 1e4),
            portable.log2_float(job.base_batch) / 10.0,
            job.requested_gpus / scale,
            max(0, usable_range(job, total)[1]) / scale,
            job.num_gpus / scale,
        ])
    out = np.zeros((n, spec.per_slot), dtype=np.float64)
    out[:, :_ALLOC] = rows  # "allocated" and "can_add" stay 0 here
    out[np.arange(n), [base + index.get(job.model, len(spec.models)) for job in jobs]] = 1.0
    return out


def allocate(snapshot: ClusterSnapshot, spec: FeatureSpec, choose: Chooser, *, record: bool = False,
             policy: str = "drl", default_epochs_to_go: float = DEFAULT_EPOCHS_TO_GO) -> Allocation:
    """DL2's decision loop: ask ``choose`` for one action at a time until it stops.

    Running jobs start at ``min_gpus`` (no preemption), waiting jobs at 0. Jobs are taken in
    arrival order in batches of ``spec.slots``; within a batch ``choose`` is asked while some
    add action is allowed; "stop" (or nothing left to add) moves on to the next batch.

    Args:
        snapshot: the cluster now.
        spec: the state's shape.
        choose: picks an allowed action index for a step (``spec.slots`` is stop).
        record: keep every ``(step, action)`` in the result (for training).
        policy: name used in reasons.
        default_epochs_to_go: progress prior for the ``epochs_to_go`` feature.

    Raises:
        ConfigError: ``choose`` returned an action that is not allowed.
    """
    jobs = sorted(snapshot.elastic_jobs(), key=submit_order)
    total = len(snapshot.schedulable_gpus())
    sched = snapshot.schedulable_set()
    counts: dict[JobId, int] = {}
    reasons: dict[JobId, str] = {}
    free = total
    # No preemption: running jobs keep their minimum (those wholly on schedulable GPUs first, a
    # stable sort of the arrival order; with every node up, every running job's GPUs are schedulable).
    running = [j for j in jobs if j.state is JobState.RUNNING]
    if any(nd.state is not NodeState.UP for nd in snapshot.nodes):
        running.sort(key=lambda j: not j.placement.gpu_set() <= sched)
    for job in running:
        kmin, kmax = usable_range(job, total)
        if kmin > kmax:
            reasons[job.job_id] = f"preempted by {policy}: no GPU count in {kmin}:{job.max_gpus} holds its batch"
        elif kmin <= free:
            counts[job.job_id] = kmin
            free -= kmin
        else:
            reasons[job.job_id] = (f"preempted by {policy}: its minimum of {kmin} GPUs does not fit in the {free} "
                                   "left after GPUs were lost")
    candidates = [j for j in jobs if j.job_id not in reasons]
    steps: list[tuple[Step, int]] = []
    stopped = 0
    n_slots = spec.slots
    greedy = choose if isinstance(choose, GreedyChooser) and not record else None
    for start in range(0, len(candidates), n_slots):
        if not free:  # no slot of this or a later batch can grow: their jobs keep what they have
            break
        batch = candidates[start:start + n_slots]
        n = len(batch)
        mat = np.zeros((n_slots, spec.per_slot), dtype=np.float64)
        mat[:n] = slot_features(snapshot, batch, spec, default_epochs_to_go)
        alloc = np.zeros(n_slots, dtype=np.int64)
        lo = np.zeros(n_slots, dtype=np.int64)
        hi = np.zeros(n_slots, dtype=np.int64)
        for i, job in enumerate(batch):
            alloc[i] = counts.get(job.job_id, 0)
            lo[i], hi[i] = usable_range(job, total)
        occupied = np.arange(n_slots) < n
        glob = np.array([0.0, total / (4 * spec.gpu_scale), max(0, len(candidates) - start - n) / n_slots])
        slot_jobs: tuple[Job | None, ...] = (*batch, *([None] * (n_slots - n)))
        # A slot may grow while it stays in range and its next step (min_gpus first, then one GPU)
        # fits in the GPUs left; adding only ever takes a slot's or a free GPU's chance away.
        need = np.where(alloc == 0, lo, 1)
        can = occupied & (alloc < hi) & (lo <= hi) & (need <= free)
        n_open = int(np.count_nonzero(can))
        widest = int(need[can].max()) if n_open else 0  # at least every open slot's next step
        run: _GreedyRun | None = None
        # Liveness guard: "stop" is not offered while the whole cluster would stay idle.
        stop_ok = bool(counts) or bool(alloc.any())
        while n_open:
            if run is None:
                mat[:, _ALLOC] = alloc / spec.gpu_scale
                mat[:, _CAN_ADD] = can
                glob[0] = free / total if total else 0.0
                state = np.concatenate([mat.ravel(), glob])
            if greedy is not None:
                run = run or _GreedyRun(greedy.weights, state, can, total)
                action = run.pick(stop_ok)
            else:
                mask = np.append(can, stop_ok)
                step = Step(state, mask, slot_jobs, tuple(alloc.tolist()), free)
                action = int(choose(step))
                if not (0 <= action < len(mask) and mask[action]):
                    raise ConfigError(f"{policy}: the chooser picked action {action}, which is not allowed")
                if record:
                    steps.append((step, action))
            if action == n_slots:
                stopped += 1
                break
            added = int(need[action])
            free -= added
            alloc[action] += added
            stop_ok = True
            need[action] = 1
            closed = alloc[action] >= hi[action]
            can[action] = not closed
            if widest > free:  # some open slot's next step may no longer fit
                can &= need <= free
                closed = True
            if run is not None:
                run.added(action, added)
            if closed:
                n_open = int(np.count_nonzero(can))
                widest = int(need[can].max()) if n_open else 0
                if run is not None:
                    run.closed(can)
        for i, job in enumerate(batch):
            if alloc[i] > 0:
                counts[job.job_id] = int(alloc[i])
    reasons.update(_waiting_reasons(candidates, counts, total, free, policy))
    return Allocation(counts, reasons, tuple(steps), stopped)


def _waiting_reasons(candidates: Sequence[Job], counts: Mapping[JobId, int], total: int, free: int,
                     policy: str) -> dict[JobId, str]:
    """Why each candidate the loop gave no GPU waits; one text per distinct reason (queues run to thousands)."""
    reasons: dict[JobId, str] = {}
    said: dict[tuple[int, int, int, int], str] = {}
    for job in candidates:
        if job.job_id in counts:
            continue
        kmin, kmax = usable_range(job, total)
        key = (kmin, kmax, job.max_gpus, job.base_batch)  # all the text depends on
        why = said.get(key)
        if why is None:
            if kmin > kmax:
                why = (f"cannot run: no GPU count in {kmin}:{min(job.max_gpus, total)} holds its fixed batch of "
                       f"{job.base_batch}")
            elif kmin > free:
                why = f"waiting: needs {kmin} GPUs, {free} are free after {policy}'s allocation"
            else:
                why = f"waiting: {policy} stopped allocating with {free} GPUs free"
            said[key] = why
        reasons[job.job_id] = why
    return reasons


class GreedyChooser:
    """Pick the allowed action with the highest logit (ties to the lower index).

    Called on a :class:`Step`, it runs the whole network on the step's state. :func:`allocate`
    does not call it when it records no steps: it asks a :class:`_GreedyRun` per batch of slots
    instead, which makes the same choice from the first layer kept up to date.
    """

    def __init__(self, weights: PolicyWeights) -> None:
        self.weights = weights

    def __call__(self, step: Step) -> int:
        logits = forward(self.weights, step.state)
        return int(np.argmax(np.where(step.mask, logits, -np.inf)))


def greedy_chooser(weights: PolicyWeights) -> GreedyChooser:
    """Pick the allowed action with the highest logit (ties to the lower index)."""
    return GreedyChooser(weights)


class _GreedyRun:
    """The greedy choices over one batch of slots, with the first layer's pre-activation kept.

    Between two inferences of a batch only three inputs change: the chosen slot's ``allocated``,
    the ``free`` share, and ``can_add`` of the slots that can no longer grow (it never comes
    back within a batch). So instead of multiplying the whole state by the first layer at every
    step (611 x 128 for the shipped model), the pre-activation is moved by those inputs' rows of
    the first layer, and the later layers run whole: the same sums up to float rounding
    (``tests/unit/test_drl.py`` checks that both give the same decisions). The last layer's bias
    is kept at -inf for the actions not allowed, so a choice is one argmax.
    """

    def __init__(self, weights: PolicyWeights, state: FloatArr, can: BoolArr, total: int) -> None:
        spec = weights.spec
        n, per = spec.slots, spec.per_slot
        (w1, b1), *rest = weights.layers
        first = portable.vecmat(state, w1)
        self.h1: FloatArr = first + b1 if rest else first
        free_row = w1[n * per] / total if total else np.zeros(w1.shape[1])
        # One GPU more for slot i: its ``allocated`` rises by 1/gpu_scale, the free share falls by 1/total.
        self.grow_rows: FloatArr = w1[_ALLOC:n * per:per] / spec.gpu_scale - free_row
        self.can_rows: FloatArr = w1[_CAN_ADD:n * per:per]
        self.hidden = [(w, b, np.empty(w.shape[1]), np.empty_like(w)) for w, b in rest[:-1]]
        out_w, out_b = rest[-1] if rest else (None, b1)
        self.out_w = out_w
        self.out_scratch = None if out_w is None else np.empty_like(out_w)
        self.stop_b = float(out_b[n])
        self.out_b: FloatArr = np.where(np.append(can, False), out_b, -np.inf)
        self.open = can.copy()
        self.relu = np.empty_like(self.h1)
        self.logits = np.empty(n + 1)

    def pick(self, stop_ok: bool) -> int:
        """The allowed action of highest logit; ``stop_ok``: whether "stop" is allowed now."""
        self.out_b[-1] = self.stop_b if stop_ok else -np.inf
        if self.out_w is None:  # a single layer: the kept pre-activation is the logits
            np.add(self.h1, self.out_b, out=self.logits)
            return int(self.logits.argmax())
        h = np.maximum(self.h1, 0.0, out=self.relu)
        for w, b, out, scratch in self.hidden:
            portable.vecmat(h, w, out=out, scratch=scratch)
            out += b
            h = np.maximum(out, 0.0, out=out)
        portable.vecmat(h, self.out_w, out=self.logits, scratch=self.out_scratch)
        self.logits += self.out_b
        return int(self.logits.argmax())

    def added(self, slot: int, gpus: int) -> None:
        """Slot ``slot`` got ``gpus`` more."""
        if gpus == 1:
            self.h1 += self.grow_rows[slot]
        else:
            self.h1 += gpus * self.grow_rows[slot]

    def closed(self, can: BoolArr) -> None:
        """``can``: the slots that may still grow (fewer than before or the same: it only shrinks)."""
        gone = self.open ^ can
        if gone.any():
            self.h1 -= self.can_rows[gone].sum(axis=0)
            self.out_b[:-1][gone] = -np.inf
            self.open = can.copy()


def sampling_chooser(weights: PolicyWeights, rng: np.random.Generator) -> Chooser:
    """Draw the action from the masked policy distribution with ``rng``."""

    def choose(step: Step) -> int:
        p = masked_probabilities(forward(weights, step.state), step.mask)
        return int(rng.choice(len(p), p=p))

    return choose


class DrlPlanner:
    """The ``drl`` policy: a trained DL2 policy network decides GPU counts, one GPU at a time.

    Listed as ``drl`` in :mod:`slurm_elastic.policies` through the factory of
    :mod:`slurm_elastic.drl.weights`, which loads the weights from a model file; construct this
    class directly when the weights are already in memory.

    Args:
        weights: the policy network.
        sample: draw actions from the policy with the planner's ``rng`` instead of taking the most
            probable one (deterministic either way for a given rng state).
        default_epochs_to_go: progress prior for jobs that declared no epoch count (as ONES).
    """

    name = "drl"
    interval = 0.0
    epoch_events = False
    uses_progress = True  # the epochs_to_go feature reads snapshot.progress_model

    def __init__(self, weights: PolicyWeights, sample: bool = False,
                 default_epochs_to_go: float = DEFAULT_EPOCHS_TO_GO) -> None:
        if not isinstance(weights, PolicyWeights):
            raise ConfigError(f"drl.weights = {weights!r}: must be PolicyWeights")
        if not isinstance(sample, bool):
            raise ConfigError(f"drl.sample = {sample!r}: must be true or false")
        if not (math.isfinite(default_epochs_to_go) and default_epochs_to_go >= 1):
            raise ConfigError(f"drl.default_epochs_to_go = {default_epochs_to_go}: must be >= 1")
        self.weights = weights
        self.sample = sample
        self.default_epochs_to_go = float(default_epochs_to_go)

    def plan(self, snapshot: ClusterSnapshot, memo: Any, rng: np.random.Generator) -> PlanResult:
        """Run the decision loop with the policy network and build the plan (stateless: memo ``None``)."""
        choose = sampling_chooser(self.weights, rng) if self.sample else greedy_chooser(self.weights)
        alloc = allocate(snapshot, self.weights.spec, choose, policy=self.name,
                         default_epochs_to_go=self.default_epochs_to_go)

        def sizing_rule(job: Job, k: int) -> Sizing | None:
            return fixed_batch_sizing(job, k, snapshot)

        plan = build_plan(snapshot, self.name, alloc.counts, reasons=alloc.reasons, choose=sizing_rule)
        return PlanResult(plan, None)
