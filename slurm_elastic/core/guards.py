"""Site guards around any planner: resize cooldown and rate, GPU limits, rigid-job protection.

This module owns :class:`GuardedPlanner`, a :class:`~slurm_elastic.core.planner.Planner` that wraps
another and enforces the admin's limits (``[guards]`` in ``elastic.toml``), so no planner has to
know them. Pure: its state (when each job last changed) lives in its memo.

* **Rigid-job protection** (``protect_rigid``): GPUs that waiting rigid jobs need (in submit
  order, whole free nodes first) are hidden from the inner planner, so elastic jobs never grow
  onto GPUs a rigid job is queued for.
* **Per-job cap** (``max_gpus_per_job``): lowers each job's ``max_gpus`` before planning.
* **Cooldown** (``cooldown_s``) and **rate** (``max_resizes_per_hour``): a running job whose
  allocation changed less than ``cooldown_s`` ago, or changed ``max_resizes_per_hour`` times in
  the last hour (as seen by this planner: each new ``last_change_time``), keeps its current size.
* **No preemption churn** (``min_run_s``, ``max_preemptions``): a running job the inner planner
  would stop keeps its size when its current run started less than ``min_run_s`` ago, or has
  been preempted ``max_preemptions`` times already (``Job.preemptions``). A run starts when the
  job starts or restarts (``Job.start_time``: Slurm's start time, which a requeue resets); a resize
  in place (the launcher's) does not restart it, so a job that started 2 h ago and was resized
  1 min ago may be preempted (``cooldown_s`` is the guard against resizing too often). So does a
  running job without the launcher (``Job.can_rebatch`` false) that it would resize: Slurm resizes
  such a job by requeueing it, which stops it as a preemption does, and each such resize restarted
  it, so its run started at its last change. The inner planner sees such a job pinned at its size,
  so the GPUs it would have had go to the others.
* **Whole blocks**: a running job whose GPUs are released only in whole blocks
  (``Job.shrink_sizes``: a launcher job on Slurm frees a node of its own allocation or a whole
  satellite, never part of one) is never planned to a size in between: its shrink is rounded up
  to the next size it can reach.
* **Per-user and per-account caps** (``max_gpus_per_user``, ``max_gpus_per_account``): if the
  plan gives a user or account more, its jobs are cut back, largest first, down to their minimum,
  then its most recently submitted jobs wait.

The guarded plan is rebuilt from the adjusted GPU counts with the shared ``build_plan`` (so
placement and sizing stay the inner planner's rules) and validated like any plan.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from slurm_elastic.core import sizing
from slurm_elastic.core.model import ClusterSnapshot, Job, JobId, JobState, NodeName, Plan
from slurm_elastic.core.planner import Planner, PlannerWrapper, PlanResult, build_plan
from slurm_elastic.errors import ConfigError

HOUR_S = 3600.0


@dataclass(frozen=True, slots=True)
class Guards:
    """The limits (0 or ``None`` = no limit).

    Attributes:
        cooldown_s: least seconds between two changes of one job.
        max_resizes_per_hour: most changes of one job in any hour.
        max_gpus_per_job: cap on every job's GPUs.
        max_gpus_per_user: cap on the GPUs of all elastic jobs of one user.
        max_gpus_per_account: cap on the GPUs of all elastic jobs of one account.
        protect_rigid: keep GPUs free for waiting rigid jobs.
        min_run_s: least seconds a running job keeps its allocation, counted from the start of its
            current run (its start or its restart after a requeue; not a resize in place), before
            it may be preempted (or, without the launcher, resized: a requeue).
        max_preemptions: most times one job is preempted; a job preempted that often runs on.
    """

    cooldown_s: float = 0.0
    max_resizes_per_hour: int = 0
    max_gpus_per_job: int = 0
    max_gpus_per_user: int = 0
    max_gpus_per_account: int = 0
    protect_rigid: bool = True
    min_run_s: float = 0.0
    max_preemptions: int = 0

    def __post_init__(self) -> None:
        for name in ("cooldown_s", "max_resizes_per_hour", "max_gpus_per_job", "max_gpus_per_user",
                     "max_gpus_per_account", "min_run_s", "max_preemptions"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ConfigError(f"guards.{name} = {value!r}: must be a number >= 0 (0 = no limit)")


@dataclass(frozen=True, slots=True)
class GuardMemo:
    """The inner planner's memo and the change times seen per job."""

    inner: Any = None
    changes: dict[JobId, tuple[float, ...]] = field(default_factory=dict)


def _reserve_for_rigid(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """Hide free GPUs that waiting rigid jobs need (whole free nodes first, then fullest)."""
    demand = sum(j.requested_gpus for j in snapshot.jobs if not j.elastic and j.is_waiting)
    if demand <= 0:
        return snapshot
    elastic_held = {g for j in snapshot.elastic_jobs() for g in j.placement.gpu_set()}
    free = {n.name: [g for g in n.free_gpus if (n.name, g) not in elastic_held] for n in snapshot.nodes}
    hidden: dict[NodeName, set[int]] = defaultdict(set)
    for name in sorted(free, key=lambda n: -len(free[n])):
        for g in free[name]:
            if demand <= 0:
                break
            hidden[name].add(g)
            demand -= 1
    nodes = tuple(replace(n, free_gpus=tuple(g for g in n.free_gpus if g not in hidden[n.name]))
                  for n in snapshot.nodes)
    return replace(snapshot, nodes=nodes)


class GuardedPlanner(PlannerWrapper):
    """Wraps ``inner`` with the site's :class:`Guards` (same signature and traits as every planner;
    the traits are the inner planner's)."""

    def __init__(self, inner: Planner, guards: Guards) -> None:
        super().__init__(inner)
        self.guards = guards

    def plan(self, snapshot: ClusterSnapshot, memo: Any, rng: np.random.Generator) -> PlanResult:
        """Plan with the inner planner on a guarded view, then enforce the caps."""
        m = memo if isinstance(memo, GuardMemo) else GuardMemo()
        g = self.guards
        changes = self._changes(snapshot, m)
        view = _reserve_for_rigid(snapshot) if g.protect_rigid else snapshot
        if g.max_gpus_per_job:
            view = replace(view, jobs=tuple(
                replace(j, max_gpus=max(j.min_gpus, min(j.max_gpus, g.max_gpus_per_job))) if j.elastic else j
                for j in view.jobs))
        if any(not j.can_grow and j.num_gpus for j in view.jobs):  # the inner planner gives their growth to others
            view = replace(view, jobs=tuple(
                replace(j, max_gpus=max(j.min_gpus, min(j.max_gpus, j.num_gpus))) if not j.can_grow and j.num_gpus
                else j for j in view.jobs))
        sched = snapshot.schedulable_set()
        pinned = {j.job_id for j in view.jobs if j.elastic and j.state is JobState.RUNNING and not j.can_rebatch
                  and self._unpreemptable(j, snapshot.now) and j.placement.gpu_set() <= sched}
        if pinned:  # a resize would requeue them: the inner planner gives their growth to others
            view = replace(view, jobs=tuple(replace(j, min_gpus=j.num_gpus, max_gpus=j.num_gpus)
                                            if j.job_id in pinned else j for j in view.jobs))
        inner = self.inner.plan(view, m.inner, rng)
        counts = {p.job_id: p.num_gpus for p in inner.plan.jobs}
        inner_counts = dict(counts)
        reasons = {u.job_id: u.reason for u in inner.plan.unplaced}
        frozen: dict[JobId, str] = {}
        for job in snapshot.elastic_jobs():
            if job.state is not JobState.RUNNING or counts.get(job.job_id, 0) == job.num_gpus:
                continue
            why = self._frozen(job, changes.get(job.job_id, ()), snapshot.now)
            if not why and (not counts.get(job.job_id) or not job.can_rebatch):  # stopped, or requeued
                why = self._unpreemptable(job, snapshot.now)
            kept = len(job.placement.gpu_set() & sched)  # GPUs on lost or draining nodes cannot be kept
            if why and kept >= job.min_gpus:
                counts[job.job_id] = kept
                frozen[job.job_id] = f"job {job.job_id} kept at {kept} GPUs: {why}"
        for key, cap in (("user", g.max_gpus_per_user), ("account", g.max_gpus_per_account)):
            if cap:
                self._cap(snapshot, counts, reasons, key, int(cap))
        # Keeping frozen jobs may overbook: trim the newest growth, then un-freeze, newest first.
        total = len(view.schedulable_gpus())
        newest_first = sorted(snapshot.elastic_jobs(), key=lambda j: (-j.submit_time, j.job_id))
        for job in newest_first:
            over = sum(counts.values()) - total
            if over <= 0:
                break
            k = counts.get(job.job_id, 0)
            if job.job_id not in frozen and k > max(job.num_gpus, job.min_gpus):
                counts[job.job_id] = max(job.num_gpus, job.min_gpus, k - over)
            elif k and job.job_id not in frozen and job.state is not JobState.RUNNING:
                counts.pop(job.job_id)
                reasons[job.job_id] = "waiting: GPUs kept by jobs in their resize cooldown"
        for job in newest_first:
            if sum(counts.values()) <= total:
                break
            if job.job_id in frozen:
                counts[job.job_id] = min(counts[job.job_id], inner_counts.get(job.job_id, 0))
                if not counts[job.job_id]:
                    counts.pop(job.job_id)
                del frozen[job.job_id]
        blocks = self._whole_blocks(snapshot, counts, reasons, total)
        notes = (*inner.plan.notes, *frozen.values(), *blocks)
        plan = self._rebuild(snapshot, inner.plan, counts, reasons, notes)
        return PlanResult(plan, GuardMemo(inner.memo, changes))

    @staticmethod
    def _whole_blocks(snapshot: ClusterSnapshot, counts: dict[JobId, int], reasons: dict[JobId, str],
                      total: int) -> list[str]:
        """Round each shrink up to a size the job can really be shrunk to (``Job.shrink_sizes``).

        Rounding up may overbook: then waiting jobs give way, newest first, and other jobs' growth
        is trimmed, newest first.
        """
        notes = []
        for job in snapshot.elastic_jobs():
            k = counts.get(job.job_id, 0)
            sizes = job.shrink_sizes
            if job.state is not JobState.RUNNING or sizes is None or not 0 < k < job.num_gpus or k in sizes:
                continue
            up = min([s for s in sizes if s >= k] + [job.num_gpus])
            counts[job.job_id] = up
            reach = f"it can shrink to {', '.join(map(str, sizes))}" if sizes else "it cannot shrink"
            notes.append(f"job {job.job_id} kept at {up} GPUs, not {k}: its GPUs are released only in whole "
                         f"blocks ({reach})")
        if notes:
            for job in sorted(snapshot.elastic_jobs(), key=lambda j: (-j.submit_time, j.job_id)):
                over = sum(counts.values()) - total
                if over <= 0:
                    break
                k = counts.get(job.job_id, 0)
                if job.state is not JobState.RUNNING and k:
                    counts.pop(job.job_id)
                    reasons[job.job_id] = "waiting: a running job can only shrink by whole blocks"
                elif job.state is JobState.RUNNING and k > job.num_gpus:
                    counts[job.job_id] = max(job.num_gpus, k - over)
        return notes

    def _changes(self, snapshot: ClusterSnapshot, m: GuardMemo) -> dict[JobId, tuple[float, ...]]:
        out: dict[JobId, tuple[float, ...]] = {}
        for job in snapshot.elastic_jobs():
            seen = m.changes.get(job.job_id, ())
            t = job.last_change_time
            if t is not None and (not seen or t > seen[-1]):
                seen = (*seen, t)
            out[job.job_id] = tuple(x for x in seen if x > snapshot.now - HOUR_S)
        return out

    def _frozen(self, job: Job, changes: tuple[float, ...], now: float) -> str:
        g = self.guards
        if g.cooldown_s and job.last_change_time is not None and now - job.last_change_time < g.cooldown_s:
            return f"changed {now - job.last_change_time:.0f} s ago, cooldown {g.cooldown_s:g} s"
        if g.max_resizes_per_hour and len(changes) > g.max_resizes_per_hour:
            return f"changed {len(changes) - 1} times in the last hour, limit {g.max_resizes_per_hour}"
        return ""

    @staticmethod
    def _run_start(job: Job) -> float | None:
        """When the job's current run started: its start time (Slurm's, reset by a requeue), or for
        a job without the launcher, whose every resize was a requeue, its last change."""
        if not job.can_rebatch and job.last_change_time is not None:
            return job.last_change_time if job.start_time is None else max(job.start_time, job.last_change_time)
        return job.start_time if job.start_time is not None else job.last_change_time

    def _unpreemptable(self, job: Job, now: float) -> str:
        g = self.guards
        since = self._run_start(job)
        if g.min_run_s and since is not None and now - since < g.min_run_s:
            return f"its run started {now - since:.0f} s ago, preempted only after {g.min_run_s:g} s"
        if g.max_preemptions and job.preemptions >= g.max_preemptions:
            return f"preempted {job.preemptions} times, limit {g.max_preemptions}"
        return ""

    @staticmethod
    def _cap(snapshot: ClusterSnapshot, counts: dict[JobId, int], reasons: dict[JobId, str], key: str,
             cap: int) -> None:
        groups: dict[str, list[Job]] = defaultdict(list)
        for job in snapshot.elastic_jobs():
            if counts.get(job.job_id):
                groups[getattr(job, key)].append(job)
        for who, jobs in groups.items():
            over = sum(counts[j.job_id] for j in jobs) - cap
            for job in sorted(jobs, key=lambda j: -counts[j.job_id]):
                if over <= 0:
                    break
                cut = min(over, counts[job.job_id] - job.min_gpus)
                counts[job.job_id] -= cut
                over -= cut
            for job in sorted(jobs, key=lambda j: -j.submit_time):
                if over <= 0:
                    break
                over -= counts.pop(job.job_id)
                reasons[job.job_id] = f"waiting: {key} {who} is at its limit of {cap} GPUs"

    @staticmethod
    def _rebuild(snapshot: ClusterSnapshot, plan: Plan, counts: dict[JobId, int], reasons: dict[JobId, str],
                 notes: tuple[str, ...]) -> Plan:
        before = {p.job_id: p for p in plan.jobs}
        if set(before) == set(counts) and all(before[j].num_gpus == k for j, k in counts.items()):
            return replace(plan, notes=notes)
        jobs = {j.job_id: j for j in snapshot.jobs}

        def choose(job: Job, k: int) -> sizing.Sizing | None:
            old = before.get(job.job_id)
            if old is not None and old.num_gpus == k:  # untouched by the guards: the inner planner's sizing
                return sizing.Sizing(old.global_batch, old.local_batch, old.accumulation, old.lr)
            if job.state is JobState.RUNNING and k == job.num_gpus:  # kept as it is
                return sizing.kept(jobs[job.job_id])
            return sizing.size_for(job, k, snapshot.profiles[job.model])

        return build_plan(snapshot, plan.policy, counts, reasons=reasons, choose=choose, score=plan.score,
                          notes=notes)
