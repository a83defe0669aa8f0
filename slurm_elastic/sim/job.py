"""One simulated job: its state on the virtual clock, and the batch it trains.

This module owns :class:`SimJob`, the mutable state of one job of
:class:`~slurm_elastic.sim.cluster.VirtualCluster` (its placement, its batch as planned and as
trained, its pause, its progress), and :func:`launcher_batch`. A running job progresses at a
constant rate until its configuration changes, so its finish time is known when it is configured
(:meth:`SimJob.configure`) and its progress is brought up to a time (:meth:`SimJob.sync`) only where
it is read or changed. How fast it trains and how much work it needs are
:mod:`slurm_elastic.sim.truth`'s; the cluster owns the jobs and the clock. It reads no clock.

A running job trains the batch the launcher makes of its plan (:func:`launcher_batch`): ``k`` workers
of ``local_batch x accumulation`` samples (exo-elastic) or of ``round(B / k)`` (endo-elastic), so the
plan's global batch where ``k`` does not divide it; the planner's view keeps the plan's batch.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

from slurm_elastic.core.model import ElasticMode, Job, JobState, NodeName, Placement
from slurm_elastic.sim.workload import SimJobSpec

DONE_EPS = 1e-9
"""A job is finished once it has done ``1 - DONE_EPS`` of its work (rounding of the event times)."""


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


Finish = tuple[float, int, int, "SimJob"]
"""A running job's finish time in :meth:`~slurm_elastic.sim.cluster.VirtualCluster.next_finish`'s heap:
``(finish_at, seq, configured, job)``."""


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
    blocks: tuple[tuple[NodeName, tuple[int, ...]], ...] = ()  # what Slurm can free of it (whole_blocks)
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
