"""The virtual cluster: the simulator's observer and actuator for the shared ``run_round``.

This module owns the mutable state of a simulated cluster (nodes, jobs, their progress on a
virtual clock) and the two ports of :mod:`slurm_elastic.core.rounds`: :meth:`VirtualCluster.observe`
builds the same :class:`~slurm_elastic.core.model.ClusterSnapshot` the Slurm observer builds, and
:meth:`VirtualCluster.apply` carries out the same actions the Slurm actuator carries out, with the
configured resize cost. Job progress follows :mod:`slurm_elastic.sim.truth`. It never talks to
Slurm and never reads a real clock.

Moving the clock touches no job: a running job progresses at a constant rate until its
configuration changes, so its finish time is known when it is configured, and its progress is
brought up to the clock (:meth:`SimJob.sync`) only where it is read or changed (an observation, an
action, a completion). A 10,000-job trace has tens of thousands of events and hundreds of running
jobs at each.

A running job trains the batch the launcher makes of its plan (:func:`launcher_batch`): ``k`` workers
of ``local_batch x accumulation`` samples (exo-elastic) or of ``round(B / k)`` (endo-elastic), so the
plan's global batch where ``k`` does not divide it; the planner's view keeps the plan's batch.

Resize costs (a job makes no progress while paused):

* ``in-place`` (default): the launcher's measured pause on our machines
  (../shared/PYTHON-STACK-FACTS.md): grow 2.7 s, shrink/move/re-batch 0.9 s; a preempted job
  that resumes restarts from a checkpoint (30 s);
* ``checkpoint``: every change is a checkpoint-restart, 30 s (Pollux's figure);
* a number: that many seconds for every change.

Three physics of a real cluster that the profiles leave out, off unless asked for
(``bench fidelity`` measured them on the dev cluster):

* ``overhead_s``: seconds a job holds its GPUs without training beyond its work: its start-up
  (Slurm launching the tasks, the interpreter and the framework loading, the data built) and its
  ending (the processes exiting, Slurm ending the job), paid as a pause at every start (the same
  JCT and GPU time as paying the ending at the end); one figure for every job, or one per node
  count the job starts on (a site's, measured from its accounting: ``what-if``), where a node count
  not measured pays the nearest measured one's (:func:`overhead_for`);
* ``equal_start``: Slurm gives a job the same GPU count on every node, so the actuator starts a job
  planned on an unequal placement at the largest equal shape inside it (its nodes x their smallest
  count, :mod:`slurm_elastic.slurm.actions`); a later round grows it;
* ``host_cores``: the jobs' workers share this many CPU cores ``C`` (the dev cluster, where a "GPU"
  is a CPU process). A worker computes for the part ``c = min(1, step(1) / step(shape))`` of its
  step that its job's step on one GPU takes (from the profile) and spends the rest in the
  all-reduce, on the CPU too for :data:`COMM_CPU_SHARE` of it (gloo's copies and sockets) and
  waiting for the rest: it asks ``d = c + COMM_CPU_SHARE * (1 - c)`` of a core. The cores are
  shared in proportion to what is asked: with ``D`` asked in all (``k * d`` per job), each worker
  gets ``s = min(1, C / D)`` of what it asks, against ``s0 = min(1, C / (k * d))`` when its job
  ran alone (as profiled). Its busy part stretches by ``s0 / s``, so the job runs at
  ``1 / (d * s0 / s + 1 - d)`` of its profiled speed.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from slurm_elastic.core.actions import Action, ActionKind
from slurm_elastic.core.model import (
    ActionError,
    ClusterSnapshot,
    ElasticMode,
    Job,
    JobId,
    JobState,
    Node,
    NodeName,
    Placement,
    ProgressReport,
)
from slurm_elastic.core.rounds import ActionOutcome
from slurm_elastic.errors import ConfigError, ProfileError
from slurm_elastic.sim.workload import SimJobSpec
from slurm_elastic_predictor.errors import ProfileError as FitError
from slurm_elastic_predictor.progress import (
    TRAINING_POINTS,
    BetaProgressModel,
    JobHistory,
    ProgressPoint,
    learn,
    refit_due,
)
from slurm_elastic_predictor.throughput import ThroughputModel

CHECKPOINT_RESTART_S = 30.0
IN_PLACE_GROW_S = 2.7
IN_PLACE_SHRINK_S = 0.9
ARRIVAL_WINDOW_S = 3600.0
DONE_EPS = 1e-9
"""A job is finished once it has done ``1 - DONE_EPS`` of its work (rounding of the event times)."""


def _reports(spec: SimJobSpec, processed: float, batch: float) -> tuple[float, float]:
    """(training loss, validation metric) a simulated job reports after ``processed`` samples.

    The metric is the measured validation curve of the job's model at the nearest measured batch,
    at the same point of training (relative to the target), so the ONES progress regression sees
    a real, noisy signal and not the true progress. Loss curves are not in the profiles, so the
    loss stays at its initial value (no information, rather than invented information).
    """
    epochs_done = processed / spec.epoch_size / spec.work_scale
    conv = spec.model_truth.convergence
    if spec.epochs is not None or conv is None:  # a set number of epochs: the metric is the share done
        return 1.0, min(1.0, epochs_done / (spec.epochs or 1.0))
    return 1.0, conv.relative_metric(batch or spec.base_batch, epochs_done)


class ProgressPool:
    """The progress points of the completed jobs, as the ONES progress fit draws them, kept as the jobs.

    A completed job's history is one point per epoch it ended (its samples then, the validation
    metric it reported, :func:`_reports`), all of it a function of the job's spec and the samples it
    processed in all. The pool keeps only those two per job (and the running count of points), not
    the points: a million-job trace ends tens of millions of epochs, and keeping them as objects cost
    about 40 KiB per job. :meth:`sample` draws the fit's points by their place in the pool, as
    :func:`~slurm_elastic_predictor.progress.bounded_uniform_sample` draws them from the pooled list
    (the same random draw, the same points, in the same order), and builds only those.
    """

    def __init__(self) -> None:
        self._jobs: list[tuple[SimJobSpec, float]] = []  # (spec, samples processed), one per history
        self._ends: list[int] = []  # points of the histories up to and including each
        self.malformed = False  # a history the fit refuses (the predictor's ProfileError): no fit from then on

    def __len__(self) -> int:
        """Points in the pool."""
        return self._ends[-1] if self._ends else 0

    @property
    def histories(self) -> int:
        """Histories (completed jobs with at least one point) in the pool."""
        return len(self._jobs)

    @staticmethod
    def _point(spec: SimJobSpec, total: float, epoch: int) -> tuple[float, float, float]:
        """The history point of the ``epoch``-th epoch end (from 1) of a job that processed ``total``."""
        processed = min(total, epoch * spec.epoch_size)
        return (processed, *_reports(spec, processed, spec.base_batch))

    @staticmethod
    def _count(spec: SimJobSpec, total: float) -> int:
        """Points of the history of a job that processed ``total`` samples: its epoch ends before its end."""
        epochs = max(1, int(total // spec.epoch_size))
        n = 0
        for e in range(1, epochs + 1):
            if min(total, e * spec.epoch_size) >= total:
                break
            n += 1
        return n

    def add(self, spec: SimJobSpec, total: float) -> JobHistory | None:
        """Pool a completed job's history (``None`` when it has no point, and nothing is pooled); a
        history the fit refuses marks the pool :attr:`malformed`."""
        n = self._count(spec, total)
        if not n:
            return None
        history = JobHistory(float(spec.epoch_size), 1.0, float(total),
                             tuple(self._point(spec, total, e) for e in range(1, n + 1)))
        try:
            history.progress_points()  # checked once, as the fit would
        except FitError:
            self.malformed = True
        self._jobs.append((spec, total))
        self._ends.append(len(self) + n)
        return history

    def points(self, indices: Any) -> list[tuple[ProgressPoint, float]]:
        """The pooled ``(features, true progress)`` pairs at ``indices`` (ascending), built now."""
        out = []
        for i in indices:
            h = bisect.bisect_right(self._ends, int(i))
            spec, total = self._jobs[h]
            epoch = int(i) - (self._ends[h - 1] if h else 0) + 1
            point = JobHistory(float(spec.epoch_size), 1.0, float(total), (self._point(spec, total, epoch),))
            out.extend(point.progress_points())
        return out

    def sample(self, max_points: int, rng: np.random.Generator) -> list[tuple[ProgressPoint, float]]:
        """What :func:`~slurm_elastic_predictor.progress.bounded_uniform_sample` draws from the pooled
        points with ``rng``: all of them when at most ``max_points``, else ``max_points`` of them drawn
        uniformly without replacement, in pool order."""
        n = len(self)
        if n <= max_points:
            return self.points(range(n))
        return self.points(np.sort(rng.choice(n, size=max_points, replace=False)))


_NO_PROGRESS = ProgressReport()
"""What a job reports without the progress model (one value, shared: it never changes)."""

COMM_CPU_SHARE = 0.75
"""The part of a worker's all-reduce (its step beyond its one-GPU step) spent on a CPU core, with
``host_cores``. Fitted with ``bench fidelity --replay`` on two recorded dev-cluster runs (seeds 0
and 1: 0 gave fidelity ratios 0.62 and 0.82, 1 gave 1.10 and 1.20, 0.75 gave 0.96 and 1.08),
then checked on a third run (docs/throughput-model.md)."""


Overhead = float | Mapping[int, float]
"""Seconds of start-up and ending a job pays at each start: one figure, or one per node count."""


def overhead_for(overhead: Overhead, nodes: int) -> float:
    """What a job starting on ``nodes`` nodes pays: the figure, or its node count's, else the nearest
    node count's given (the smaller on a tie); 0 for an empty mapping."""
    if not isinstance(overhead, Mapping):
        return overhead
    if not overhead:
        return 0.0
    return overhead[min(overhead, key=lambda n: (abs(n - nodes), n))]


def launcher_batch(mode: ElasticMode, gpus: int, global_batch: int, local_batch: int, accumulation: int,
                   limit: int) -> tuple[int, int, int]:
    """What the launcher trains for a planned batch on ``gpus`` workers: ``(global batch, per-GPU
    micro-batch, micro-steps)``.

    The daemon's order carries an exo-elastic job's per-worker batch, ``local_batch * accumulation``
    (:func:`slurm_elastic.act.launcher.batch_of`), and an endo-elastic job's global batch, which the
    launcher's batch policy spreads as ``max(1, round(B / k))`` per worker (Python's rounding, half to
    even: ``slurm_elastic_launcher.batch_policy``). Each worker trains its batch ``L`` in
    ``ceil(L / limit)`` micro-batches of ``ceil(L / micro-steps)`` samples (its step driver; the
    per-GPU limit here is the job's, ``limit``). So the batch trained is ``k * L``, not the plan's
    global batch where ``k`` does not divide it (a plan's 100 on 3 GPUs of an exo job trains 102).
    """
    per_worker = local_batch * accumulation if mode is ElasticMode.EXO else max(1, round(global_batch / gpus))
    steps = max(1, math.ceil(per_worker / limit))
    return gpus * per_worker, math.ceil(per_worker / steps), steps


def _cpu_ask(job: SimJob) -> float:
    """The part of a core each worker of a running job asks (module docstring): the part of its step
    it computes (its step on one GPU over its step on its placement), and :data:`COMM_CPU_SHARE`
    of the rest."""
    speed = job.spec.model_truth.speed
    shape = tuple(len(g) for _, g in job.placement.slots)
    one = speed.step_time(job.run_local, (1,), job.run_steps)
    computing = min(1.0, one / speed.step_time(job.run_local, shape, job.run_steps))
    return computing + COMM_CPU_SHARE * (1.0 - computing)


@dataclass(frozen=True, slots=True)
class ResizeCost:
    """Seconds of pause per kind of change."""

    grow: float
    shrink: float
    restart: float
    label: str

    @classmethod
    def parse(cls, text: str | ResizeCost) -> ResizeCost:
        """``in-place``, ``checkpoint`` or a number of seconds (a :class:`ResizeCost` as it is)."""
        if isinstance(text, ResizeCost):
            return text
        if text == "in-place":
            return cls(IN_PLACE_GROW_S, IN_PLACE_SHRINK_S, CHECKPOINT_RESTART_S, text)
        if text == "checkpoint":
            return cls(CHECKPOINT_RESTART_S, CHECKPOINT_RESTART_S, CHECKPOINT_RESTART_S, text)
        try:
            value = float(text)
        except ValueError:
            raise ConfigError(f"resize cost {text!r}: must be in-place, checkpoint or seconds >= 0") from None
        if not math.isfinite(value) or value < 0:
            raise ConfigError(f"resize cost {text!r}: must be in-place, checkpoint or seconds >= 0")
        return cls(value, value, value, f"{value:g}s")


Finish = tuple[float, int, int, "SimJob"]
"""A running job's finish time in :meth:`VirtualCluster.next_finish`'s heap: ``(finish_at, seq, configured, job)``."""


@dataclass
class SimJob:
    """Mutable state of one simulated job."""

    spec: SimJobSpec
    seq: int = 0  # its place in the order of arrival
    synced: float = 0.0  # the time up to which its progress is accounted (SimJob.sync)
    state: JobState = JobState.PENDING
    placement: Placement = field(default_factory=Placement)
    global_batch: int = 0  # as planned (what the planner sees)
    local_batch: int = 0
    accumulation: int = 1
    run_batch: int = 0  # as the launcher trains it (launcher_batch)
    run_local: int = 0
    run_steps: int = 1
    done: float = 0.0  # fraction of the work to the target
    samples: float = 0.0
    start: float | None = None
    end: float | None = None
    run_time: float = 0.0
    gpu_seconds: float = 0.0
    paused_until: float = 0.0
    last_change: float | None = None
    samples_at_change: float = 0.0
    resizes: int = 0
    preemptions: int = 0
    dropped: bool = False
    speed: float = 0.0  # samples/s while not paused
    rate: float = 0.0  # work fraction/s while not paused
    cpu_share: float = 1.0  # of its profiled speed, with the host's cores shared (VirtualCluster.host_cores)
    finish_at: float = math.inf  # absolute time of completion at the current configuration
    configured: int = 0  # how many times it was configured
    view: Job | None = None  # the planner's view, as last seen
    viewed: int = -1  # ``configured`` when the view was last brought up to date
    finishes: list[Finish] | None = field(default=None, repr=False, compare=False)  # its cluster's (next_finish)

    @property
    def active(self) -> bool:
        return self.end is None

    def sync(self, now: float) -> None:
        """Account its progress up to ``now`` at its current configuration."""
        if now > self.synced:
            self.advance(self.synced, now)
            self.synced = now

    def configure(self, now: float) -> None:
        """Recompute speed, rate and finish time after a change (of placement, batch, pause or core
        share) at ``now``, its progress accounted up to ``now`` first. The finish time then stays put
        while the job runs unchanged: progress at a constant rate moves the job and the clock alike."""
        self.sync(now)
        self.configured += 1
        if self.state is not JobState.RUNNING:
            self.speed = self.rate = 0.0
            self.finish_at = math.inf
            return
        shape = tuple(len(g) for _, g in self.placement.slots)
        self.speed = self.cpu_share * self.spec.model_truth.speed.throughput(self.run_batch, self.run_local, shape,
                                                                             self.run_steps)
        self.rate = self.speed / (self.spec.epoch_size * self.spec.epochs_needed(self.run_batch))
        self.finish_at = self.time_to_finish(now)
        if self.finishes is not None and self.finish_at < math.inf:
            heapq.heappush(self.finishes, (self.finish_at, self.seq, self.configured, self))

    def advance(self, t0: float, t1: float) -> None:
        """Progress from ``t0`` to ``t1`` at the current configuration."""
        if self.state is not JobState.RUNNING or t1 <= t0:
            return
        k = self.placement.num_gpus
        self.run_time += t1 - t0
        self.gpu_seconds += k * (t1 - t0)
        busy = max(0.0, t1 - max(t0, self.paused_until))
        self.done += self.rate * busy
        self.samples += self.speed * busy

    def time_to_finish(self, now: float) -> float:
        """Absolute time of completion at the current configuration (inf if not running)."""
        if self.state is not JobState.RUNNING or self.rate <= 0:
            return math.inf
        return max(now, self.paused_until) + max(0.0, 1.0 - self.done) / self.rate

    def time_to_epoch_end(self, now: float) -> float:
        """Absolute time of the next epoch boundary (inf if not running)."""
        if self.state is not JobState.RUNNING or self.speed <= 0:
            return math.inf
        size = self.spec.epoch_size
        left = size - (self.samples % size)
        if left <= size * DONE_EPS:  # at a boundary but for the rounding of the samples: the next one
            left += size
        return max(now, self.paused_until) + left / self.speed


class VirtualCluster:
    """Nodes and jobs on a virtual clock; observer and actuator of ``run_round``.

    Args:
        nodes: number of nodes.
        gpus_per_node: GPUs per node.
        cost: resize cost.
        fit_progress: refit the ONES progress model from completed jobs (as ONES does online).
        overhead_s: seconds of start-up and ending a job pays at each start, one figure or one per
            node count (module docstring).
        equal_start: start a job at the equal shape inside its planned placement (module docstring).
        host_cores: CPU cores every job's workers share (module docstring); ``None``: none shared.
    """

    def __init__(self, nodes: int, gpus_per_node: int, cost: ResizeCost, fit_progress: bool = True, *,
                 overhead_s: Overhead = 0.0, equal_start: bool = False, host_cores: int | None = None) -> None:
        if nodes < 1 or gpus_per_node < 1:
            raise ConfigError(f"cluster of {nodes} nodes x {gpus_per_node} GPUs: both must be >= 1")
        figures = overhead_s.items() if isinstance(overhead_s, Mapping) else [(1, overhead_s)]
        for n, seconds in figures:
            if not (isinstance(n, int) and n >= 1 and math.isfinite(seconds) and seconds >= 0):
                raise ConfigError(f"job overhead {seconds} s on {n} node(s): must be a finite number >= 0 "
                                  "on a node count >= 1")
        if isinstance(overhead_s, Mapping):
            overhead_s = dict(overhead_s)
        if host_cores is not None and host_cores < 1:
            raise ConfigError(f"host cores {host_cores}: must be >= 1")
        self.overhead_s = overhead_s
        self.equal_start = equal_start
        self.host_cores = host_cores
        width = max(3, len(str(nodes - 1)))
        self.node_names = tuple(NodeName(f"sim{i:0{width}d}") for i in range(nodes))
        self.gpus_per_node = gpus_per_node
        self.cost = cost
        self.now = 0.0
        self.jobs: dict[str, SimJob] = {}
        self.active: dict[str, SimJob] = {}  # submitted, not finished
        self.running: dict[str, SimJob] = {}  # the active jobs in state RUNNING
        self._busy = 0  # GPUs they hold
        self._held: dict[NodeName, set[int]] = {name: set() for name in self.node_names}  # GPUs held, by node
        every = tuple(range(gpus_per_node))
        self._nodes = {name: Node(name, every, every) for name in self.node_names}  # as last seen
        self._changed: set[NodeName] = set()
        self.finished: list[SimJob] = []
        self._finishes: list[Finish] = []  # the running jobs' finish times, and stale ones (next_finish)
        self.completed = 0  # finished jobs that were not dropped
        self.arrivals: list[float] = []
        self.profiles: dict[str, ThroughputModel] = {}
        self.fit_progress = fit_progress
        self.histories = ProgressPool()  # the completed jobs' progress points, kept as the jobs
        self.progress_model: BetaProgressModel | None = None
        self._fitted_at = 0
        self._errors: list[tuple[str, str, str]] = []

    @property
    def total_gpus(self) -> int:
        """GPUs in the cluster."""
        return len(self.node_names) * self.gpus_per_node

    def busy_gpus(self) -> int:
        """GPUs held by running jobs."""
        return self._busy

    def _place(self, job: SimJob, placement: Placement) -> None:
        self._busy += placement.num_gpus - job.placement.num_gpus
        for node, gpus in job.placement.slots:
            self._held[node].difference_update(gpus)
            self._changed.add(node)
        for node, gpus in placement.slots:
            self._held[node].update(gpus)
            self._changed.add(node)
        job.placement = placement

    # -- time -------------------------------------------------------------------------------------

    def advance(self, t: float) -> None:
        """Move the clock to ``t`` (running jobs progress; :meth:`sync` accounts it)."""
        self.now = max(self.now, t)

    def sync(self) -> None:
        """Account every running job's progress up to now."""
        for job in self.running.values():
            job.sync(self.now)

    def next_finish(self) -> float:
        """The soonest finish time of a running job (``inf`` when none runs): the least of a heap of
        ``(finish_at, seq, configured, job)`` that each configuration of a running job adds to; an
        entry whose job was configured again since is stale, dropped when it comes to the top."""
        heap = self._finishes
        if len(heap) > 4 * len(self.running) + 64:  # mostly stale: made again from the running jobs
            heap[:] = [(j.finish_at, j.seq, j.configured, j) for j in self.running.values() if j.finish_at < math.inf]
            heapq.heapify(heap)
        while heap:
            at, _, configured, job = heap[0]
            if job.configured == configured and job.state is JobState.RUNNING:
                return at
            heapq.heappop(heap)
        return math.inf

    def next_epoch_end(self) -> float:
        """The soonest epoch boundary of a running job (``inf`` when none runs)."""
        self.sync()
        return min((j.time_to_epoch_end(self.now) for j in self.running.values()), default=math.inf)

    def arrive(self, spec: SimJobSpec) -> None:
        """A job is submitted now."""
        if spec.job_id in self.jobs:
            raise ConfigError(f"job id {spec.job_id!r} submitted twice")
        job = SimJob(spec, len(self.jobs), self.now, finishes=self._finishes)
        self.jobs[spec.job_id] = job
        self.active[spec.job_id] = job
        self.arrivals.append(self.now)
        if spec.model not in self.profiles:
            self.profiles[spec.model] = spec.model_truth.speed.planner_model

    def complete_finished(self, eps: float = DONE_EPS, *, at_finish_time: bool = False) -> list[SimJob]:
        """Finish every job whose work is done; returns them.

        Args:
            eps: the share of its work a job may leave undone (the rounding of its progress).
            at_finish_time: also finish every job whose finish time has come (``finish_at <= now``)
                though its accounted work falls short by more than ``eps``. Late in a long run the
                clock's last bit is longer than a short job's ``eps`` of work, so the clock can
                reach a job's finish time with its work still short; the engine asks for this only
                when the clock is stuck there (``sim.engine``).
        """
        # Only a job whose finish time has come can be done (2 * eps: the rounding of the finish time).
        due = [j for j in self.running.values()
               if j.done >= 1.0 - eps or (j.rate > 0 and j.finish_at - self.now <= 2 * eps / j.rate)]
        for job in due:
            job.sync(self.now)
        done = sorted((j for j in due if j.done >= 1.0 - eps or (at_finish_time and j.finish_at <= self.now)),
                      key=lambda j: j.seq)
        for job in done:
            self._finish(job)
            self._record_history(job)
        if done:
            self._maybe_refit()
            self._share_cores()
        return done

    def _share_cores(self) -> None:
        """Rescale every running job's speed to its workers' share of the host's cores (module docstring)."""
        if self.host_cores is None:
            return
        running = [j for j in self.running.values() if j.placement.num_gpus]
        asks = {j.spec.job_id: _cpu_ask(j) for j in running}
        given = min(1.0, self.host_cores / sum(j.placement.num_gpus * asks[j.spec.job_id] for j in running)) \
            if running else 1.0
        for job in running:
            d = asks[job.spec.job_id]
            alone = min(1.0, self.host_cores / (job.placement.num_gpus * d))
            share = 1.0 / (d * alone / given + 1.0 - d)
            if share != job.cpu_share:
                job.cpu_share = share
                job.configure(self.now)

    def _finish(self, job: SimJob) -> None:
        job.sync(self.now)
        job.end = self.now
        job.state = JobState.FINISHED
        self._place(job, Placement())
        job.configure(self.now)
        del self.active[job.spec.job_id]
        self.running.pop(job.spec.job_id, None)
        job.view = None  # the planner never sees it again: its last view is not kept
        self.finished.append(job)
        self.completed += not job.dropped

    # -- progress model (ONES learns it online from completed jobs) -------------------------------

    def _record_history(self, job: SimJob) -> None:
        if self.fit_progress:
            self.histories.add(job.spec, job.samples)

    def _maybe_refit(self) -> None:
        n = self.histories.histories
        if not self.fit_progress or not refit_due(n, self._fitted_at) or self.histories.malformed:
            return
        rng = np.random.default_rng(n)
        try:  # the fit's bounded sample drawn from the pool (ProgressPool.sample), then learned as it is
            self.progress_model, _ = learn((), self.progress_model, rng, self.histories.sample(TRAINING_POINTS, rng))
        except (ProfileError, FitError):  # the predictor's own error (slurm_elastic's was never raised here)
            return
        self._fitted_at = n

    # -- observer ---------------------------------------------------------------------------------

    def observe(self) -> ClusterSnapshot:
        """The snapshot a planner sees now."""
        self.sync()
        gpus = tuple(range(self.gpus_per_node))
        for name in self._changed:  # the nodes whose GPUs were taken or given back since the last look
            self._nodes[name] = Node(name, gpus, tuple(g for g in gpus if g not in self._held[name]))
        self._changed.clear()
        nodes = tuple(self._nodes.values())
        view = self._view
        jobs = tuple([view(j) for j in self.active.values()])
        window = min(self.now, ARRIVAL_WINDOW_S)
        # Arrivals are appended in time order: count the window's by bisection, not by a scan per round.
        recent = len(self.arrivals) - bisect.bisect_left(self.arrivals, self.now - ARRIVAL_WINDOW_S)
        rate = recent / window if window > 0 else 0.0
        errors = tuple(self._errors)
        self._errors.clear()

        return ClusterSnapshot(
            now=self.now, nodes=nodes, jobs=jobs, profiles=self.profiles, progress_model=self.progress_model,
            arrival_rate=rate, last_errors=tuple(ActionError(JobId(a), b, c) for a, b, c in errors),
        )

    def _view(self, j: SimJob) -> Job:
        # A waiting job does not change between rounds; a running one changes only in its progress
        # until it is configured again, and then only in its configuration.
        view = j.view
        if view is not None and j.viewed == j.configured:  # unchanged since the last look: the usual case
            if j.state is JobState.RUNNING:
                j.view = view = view.progressed(int(j.samples), j.run_time, self._progress(j))
            return view
        view = self._job(j) if view is None else view.reconfigured(**self._configuration(j))
        j.view, j.viewed = view, j.configured
        return view

    def _progress(self, j: SimJob) -> ProgressReport:
        return ProgressReport(1.0, *_reports(j.spec, j.samples, j.run_batch)) if self.fit_progress \
            else _NO_PROGRESS

    def _job(self, j: SimJob) -> Job:
        """The planner's first view of a job; later views are it, reconfigured and progressed."""
        s = j.spec
        return Job(
            job_id=JobId(s.job_id), user=s.user, account=s.account, submit_time=s.submit_time,
            min_gpus=s.min_gpus, max_gpus=s.max_gpus, min_batch=s.min_batch, max_batch=s.max_batch,
            base_batch=s.base_batch, base_lr=0.1, requested_gpus=s.requested_gpus,
            max_local_batch=s.local_limit, mode=s.mode, epoch_size=s.epoch_size, model=s.model,
            **self._configuration(j))

    def _configuration(self, j: SimJob) -> dict[str, Any]:
        """What the planner sees of a job that changes as it runs (``Job.reconfigured``)."""
        running = j.state is JobState.RUNNING
        return {"state": j.state, "samples_processed": int(j.samples),
                "observed_throughput": j.speed if running else None, "placement": j.placement,
                "local_batch": j.local_batch if running else 0, "start_time": j.start, "run_time": j.run_time,
                "last_change_time": j.last_change, "samples_at_last_change": int(j.samples_at_change),
                "preemptions": j.preemptions, "progress": self._progress(j)}

    # -- actuator ---------------------------------------------------------------------------------

    def apply(self, snapshot: ClusterSnapshot, actions: tuple[Action, ...]) -> tuple[ActionOutcome, ...]:
        """Carry out the actions now (they cannot fail here except on unknown jobs)."""
        out = []
        for a in actions:
            job = self.active.get(a.job_id)
            if job is None:
                self._errors.append((a.job_id, a.kind.value, "job is not active"))
                out.append(ActionOutcome(a, False, "job is not active"))
                continue
            self._apply(job, a)
            out.append(ActionOutcome(a, True))
        self._share_cores()
        return tuple(out)

    def _apply(self, job: SimJob, a: Action) -> None:
        now = self.now
        job.sync(now)  # its progress so far, at the configuration it had
        if a.kind is ActionKind.DROP:
            job.dropped = True
            self._finish(job)
            return
        if a.kind is ActionKind.PREEMPT:
            job.preemptions += 1
            job.state = JobState.PREEMPTED
            self._place(job, Placement())
            job.last_change = now
            job.samples_at_change = job.samples
            del self.running[job.spec.job_id]
            job.configure(now)
            return
        resumed = job.state is JobState.PREEMPTED
        if a.kind is ActionKind.START:
            job.state = JobState.RUNNING
            self.running[job.spec.job_id] = job
            if job.start is None:
                job.start = now
            pause = self.cost.restart if resumed else 0.0
        else:
            job.resizes += 1
            grew = a.after.num_gpus > a.before.num_gpus
            pause = self.cost.grow if grew else self.cost.shrink
        self._place(job, a.after)
        job.global_batch, job.local_batch, job.accumulation = a.global_batch, a.local_batch, a.accumulation
        if a.kind is ActionKind.START and self.equal_start and a.after.num_gpus:
            fewest = min(len(g) for _, g in a.after.slots)
            self._place(job, Placement(tuple((n, g[:fewest]) for n, g in a.after.slots)))
            k = job.placement.num_gpus
            if job.spec.mode is ElasticMode.EXO:  # the batch follows the GPUs
                job.global_batch = a.local_batch * a.accumulation * k
            else:
                job.local_batch = math.ceil(a.global_batch / (a.accumulation * k))
        if a.kind is ActionKind.START:  # on the nodes it starts on
            pause += overhead_for(self.overhead_s, len(job.placement.slots))
        if job.placement.num_gpus:  # what the launcher trains (the planner goes on seeing the plan's batch)
            job.run_batch, job.run_local, job.run_steps = launcher_batch(
                job.spec.mode, job.placement.num_gpus, job.global_batch, job.local_batch, job.accumulation,
                job.spec.local_limit)
        job.paused_until = max(job.paused_until, now + pause) if pause else job.paused_until
        job.last_change = now
        job.samples_at_change = job.samples
        job.configure(now)
