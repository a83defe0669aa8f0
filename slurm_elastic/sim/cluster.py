"""The virtual cluster: the simulator's observer and actuator for the shared ``run_round``.

This module owns the mutable state of a simulated cluster (nodes, jobs, their progress on a
virtual clock) and the two ports of :mod:`slurm_elastic.core.rounds`: :meth:`VirtualCluster.observe`
builds the same :class:`~slurm_elastic.core.model.ClusterSnapshot` the Slurm observer builds, and
:meth:`VirtualCluster.apply` carries out the same actions the Slurm actuator carries out, with the
configured resize cost. Job progress follows :mod:`slurm_elastic.sim.truth`. It never talks to
Slurm and never reads a real clock.

Moving the clock touches no job: a running job progresses at a constant rate until its
configuration changes, so its finish time is known when it is configured, and its progress is
brought up to the clock (:meth:`~slurm_elastic.sim.job.SimJob.sync`) only where it is read or
changed (an observation, an action, a completion). A 10,000-job trace has tens of thousands of
events and hundreds of running jobs at each.

What a change or the sharing of the host's cores costs a job (the resize costs, the start-up
overhead, the equal start, the shared cores) is :mod:`slurm_elastic.sim.costs`'; one job's state and
the batch it trains, :mod:`slurm_elastic.sim.job`'s; the completed jobs' progress points the
progress model is refitted from, :mod:`slurm_elastic.sim.progress_pool`'s.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Mapping
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
from slurm_elastic.sim import blocks
from slurm_elastic.sim.costs import Overhead, ResizeCost, cpu_ask, overhead_for
from slurm_elastic.sim.job import DONE_EPS, Finish, SimJob, launcher_batch
from slurm_elastic.sim.progress_pool import ProgressPool, job_reports
from slurm_elastic.sim.workload import SimJobSpec
from slurm_elastic_predictor.progress import TRAINING_POINTS, BetaProgressModel, learn, refit_due
from slurm_elastic_predictor.throughput import ThroughputModel

ARRIVAL_WINDOW_S = 3600.0

_NO_PROGRESS = ProgressReport()
"""What a job reports without the progress model (one value, shared: it never changes)."""


class VirtualCluster:
    """Nodes and jobs on a virtual clock; observer and actuator of ``run_round``.

    Args:
        nodes: number of nodes.
        gpus_per_node: GPUs per node.
        cost: resize cost.
        fit_progress: refit the ONES progress model from completed jobs (as ONES does online).
        overhead_s: seconds of start-up and ending a job pays at each start, one figure or one per
            node count (:mod:`slurm_elastic.sim.costs`).
        equal_start: start a job at the equal shape inside its planned placement
            (:mod:`slurm_elastic.sim.costs`).
        host_cores: CPU cores every job's workers share (:mod:`slurm_elastic.sim.costs`); ``None``: none
            shared.
        whole_blocks: a running job frees GPUs only in the whole blocks Slurm frees of a launcher job
            (:mod:`slurm_elastic.sim.blocks`), and its view says which (``Job.release_blocks``).
    """

    def __init__(self, nodes: int, gpus_per_node: int, cost: ResizeCost, fit_progress: bool = True, *,
                 overhead_s: Overhead = 0.0, equal_start: bool = False, host_cores: int | None = None,
                 whole_blocks: bool = False) -> None:
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
        self.whole_blocks = whole_blocks
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
        """Rescale every running job's speed to its workers' share of the host's cores
        (:mod:`slurm_elastic.sim.costs`)."""
        if self.host_cores is None:
            return
        running = [j for j in self.running.values() if j.placement.num_gpus]
        asks = {j.spec.job_id: cpu_ask(j) for j in running}
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
        except ProfileError:  # the predictor's (the one ProfileError: slurm_elastic.errors re-exports it)
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
        return ProgressReport(1.0, *job_reports(j.spec, j.samples, j.run_batch)) if self.fit_progress \
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
                "preemptions": j.preemptions, "progress": self._progress(j),
                "release_blocks": tuple((n, len(g)) for n, g in j.blocks) if running and self.whole_blocks
                else None}

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
            job.blocks = ()
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
        self._place(job, self._reached(job, a))
        job.global_batch, job.local_batch, job.accumulation = a.global_batch, a.local_batch, a.accumulation
        k = job.placement.num_gpus
        if k and (k != a.after.num_gpus or (a.kind is ActionKind.START and self.equal_start)):  # physics moved it
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

    def _reached(self, job: SimJob, a: Action) -> Placement:
        """Where an action that runs the job really places it: the plan's placement but for the equal
        start and the whole blocks (:mod:`slurm_elastic.sim.costs`, :mod:`slurm_elastic.sim.blocks`),
        whose blocks it records."""
        after = a.after
        if a.kind is ActionKind.START and self.equal_start and after.num_gpus:
            fewest = min(len(g) for _, g in after.slots)
            after = Placement(tuple((n, g[:fewest]) for n, g in after.slots))
        if not self.whole_blocks:
            return after
        before = job.placement
        if a.kind is ActionKind.START or not before.num_gpus:
            job.blocks = blocks.after_start(after)
        elif after.gpu_set() == before.gpu_set():
            pass
        elif after.num_gpus > before.num_gpus and before.gpu_set() <= after.gpu_set():
            job.blocks = blocks.after_grow(job.blocks, before, after)
        elif after.num_gpus < before.num_gpus:
            after, job.blocks = blocks.after_shrink(job.blocks, before, after)
        else:  # a move: its new allocation's blocks
            job.blocks = blocks.after_start(after)
        return after
