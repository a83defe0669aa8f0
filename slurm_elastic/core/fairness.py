"""Finish-time fairness guard for the batch-size optimizers (``ones``, ``dp``): reserve GPUs first
for the jobs that fall behind their fair share.

This module owns the planning-time finish-time fairness estimate :func:`ftf_estimates` and the guard
:func:`guarded_plan` / :class:`FtfGuardedPlanner`. ``ones`` and ``dp`` take a parameter
``ftf_bound`` (0 = off) and call :func:`guarded_plan` around their own search when it is set;
:class:`FtfGuardedPlanner` wraps any other planner the same way. Pure: no I/O, no clock, no
randomness of its own; the set of reserved jobs lives in :class:`FtfMemo`.

**Estimate** (Themis's ``rho = T_shared / T_id``, made computable at planning time). For an active
elastic job ``j`` at time ``now``, with requested size ``k0`` (clamped into its range), total
samples ``W = processed + E[remaining]`` (the ONES progress estimate of
:mod:`~slurm_elastic.core.remaining`, with the declared epochs or ``default_epochs_to_go`` as the
prior), throughput ``X(k0)`` at its requested batch (profile, corrected by its measurement):

* isolated time ``T_id = W / X(k0)``;
* fair time ``T_fair = T_id * max(1, N * k0 / M)``: the job at its request on an ``N``-share of
  the ``M`` schedulable GPUs (``N`` active elastic jobs now), slowed linearly below its request
  (the same definition as the simulator's FTF metric, with the instantaneous ``N``);
* shared time ``T_sh = (now - submit) + R / X(k0)``: the time it has spent plus what it needs at
  its request from now on, ``R`` its expected remaining samples;
* ``rho = T_sh / T_fair``: the finish-time fairness the job will have *at best* if it runs at its
  request from now on (a waiting job's ``rho`` grows with every second it waits).

**Guard.** A job with ``rho > ftf_bound`` is *reserved*: it gets ``k0`` GPUs, or keeps the GPUs it
holds if it runs on more (reserving must not slow it down), taken
before the optimizer plans, and stays reserved until it finishes (sticky, so the optimizer cannot
preempt it again when ``N`` grows). Reserved jobs are served in descending ``rho`` while GPUs last.
The optimizer then plans the rest on a view without the reserved jobs and with fewer GPUs: free
GPUs are hidden first (fullest free nodes first); when they do not suffice, the most recently
submitted running unreserved jobs are shown to it as preempted, and their surplus GPUs as free.
The final plan is rebuilt from the merged GPU counts with the shared ``build_plan``; the reserved
jobs are sized by :func:`~slurm_elastic.core.sizing.size_for` (their requested batch at ``k0``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from slurm_elastic.core import sizing
from slurm_elastic.core.model import ClusterSnapshot, Job, JobId, JobState, NodeName, Placement, Plan
from slurm_elastic.core.planner import Planner, PlannerWrapper, PlanResult, build_plan
from slurm_elastic.core.remaining import expected_remaining, progress_shapes
from slurm_elastic.errors import ConfigError

PlanFn = Callable[[ClusterSnapshot, Any, np.random.Generator], PlanResult]


@dataclass(frozen=True, slots=True)
class FtfMemo:
    """The inner planner's memo and the jobs reserved so far (until they finish)."""

    inner: Any = None
    reserved: frozenset[JobId] = frozenset()


def check_bound(policy: str, bound: float) -> float:
    """Validate an ``ftf_bound`` parameter (0 = off, else > 1).

    Raises:
        ConfigError: naming the policy, the value and the rule.
    """
    if isinstance(bound, bool) or not isinstance(bound, int | float) or not (bound == 0 or 1.0 < bound < float("inf")):
        raise ConfigError(f"{policy}.ftf_bound = {bound!r}: must be 0 (off) or a finite number > 1")
    return float(bound)


def requested_size(job: Job) -> int:
    """``requested_gpus`` clamped into the job's GPU range."""
    return min(job.max_gpus, max(job.min_gpus, job.requested_gpus))


def ftf_estimates(snapshot: ClusterSnapshot, default_epochs_to_go: float = 10.0) -> dict[JobId, float]:
    """``rho`` of every active elastic job (see the module docstring); ``inf`` if it cannot run at
    its requested size."""
    jobs = list(snapshot.elastic_jobs())
    if not jobs:
        return {}
    total = max(1, len(snapshot.schedulable_gpus()))
    alpha, beta, yp = progress_shapes(snapshot, jobs, default_epochs_to_go)
    remaining = expected_remaining(alpha, beta, yp)
    n = len(jobs)
    out: dict[JobId, float] = {}
    for job, r in zip(jobs, remaining, strict=True):
        model = snapshot.profiles[job.model]
        k0 = requested_size(job)
        s = sizing.size_for(job, k0, model)
        x = 0.0
        if s is not None:
            step = s.accumulation * float(model.t_proc(s.local_batch)) + float(
                model.t_comm(k0, -(-k0 // model.gpus_per_node)))
            x = s.global_batch / step if step > 0 else 0.0
            x *= sizing.correction(job, model)
        if x <= 0:
            out[job.job_id] = float("inf")
            continue
        t_id = (job.samples_processed + float(r)) / x
        t_fair = t_id * max(1.0, n * k0 / total)
        t_sh = max(0.0, snapshot.now - job.submit_time) + float(r) / x
        out[job.job_id] = t_sh / t_fair if t_fair > 0 else float("inf")
    return out


def _choose_reserved(snapshot: ClusterSnapshot, rho: dict[JobId, float], bound: float,
                     sticky: frozenset[JobId]) -> dict[JobId, int]:
    total = len(snapshot.schedulable_gpus())
    order = sorted((j for j in snapshot.elastic_jobs() if j.job_id in sticky or rho[j.job_id] > bound),
                   key=lambda j: (j.job_id not in sticky, -rho[j.job_id], j.submit_time, j.job_id))
    out: dict[JobId, int] = {}
    left = total
    for job in order:
        k = max(requested_size(job), min(job.num_gpus, job.max_gpus))
        if rho[job.job_id] == float("inf") or k > left:
            continue
        out[job.job_id] = k
        left -= k
    return out


def _view(snapshot: ClusterSnapshot, reserved: dict[JobId, int]) -> ClusterSnapshot:
    """The snapshot without the reserved jobs and with ``sum(reserved)`` fewer schedulable GPUs."""
    sched = snapshot.schedulable_set()
    elastic_held = {g for j in snapshot.elastic_jobs() for g in j.placement.gpu_set()}
    need = sum(reserved.values())
    # GPUs reserved jobs already hold (up to their reserved size) vanish with them.
    hidden: set[tuple[NodeName, int]] = set()
    for job in snapshot.elastic_jobs():
        if job.job_id in reserved:
            mine = sorted(job.placement.gpu_set() & sched)[: reserved[job.job_id]]
            need -= len(mine)
            hidden.update(mine)
    freed: set[tuple[NodeName, int]] = {g for job in snapshot.elastic_jobs() if job.job_id in reserved
                                        for g in job.placement.gpu_set()} - hidden
    free_now = {(n.name, g) for n in snapshot.nodes for g in n.free_gpus if (n.name, g) not in elastic_held}
    per_node: dict[NodeName, int] = {}
    for node, _ in free_now:
        per_node[node] = per_node.get(node, 0) + 1
    pool = sorted((free_now | freed) & sched, key=lambda ng: (-per_node.get(ng[0], 0), ng))
    for gpu in pool:
        if need <= 0:
            break
        hidden.add(gpu)
        need -= 1
    jobs: list[Job] = []
    victims: set[JobId] = set()
    if need > 0:  # take GPUs from the newest running unreserved jobs
        for job in sorted(snapshot.elastic_jobs(), key=lambda j: (-j.submit_time, j.job_id)):
            if need <= 0:
                break
            if job.job_id in reserved or job.state is not JobState.RUNNING:
                continue
            held = sorted(job.placement.gpu_set() & sched)
            take = held[:need]
            hidden.update(take)
            need -= len(take)
            freed.update(set(held) - set(take))
            victims.add(job.job_id)
    for job in snapshot.jobs:
        if job.job_id in reserved:
            continue
        if job.job_id in victims:
            job = replace(job, state=JobState.PREEMPTED, placement=Placement(), local_batch=0,
                          observed_throughput=None)
        jobs.append(job)
    nodes = tuple(replace(n, free_gpus=tuple(sorted(
        {g for g in n.free_gpus if (n.name, g) not in hidden}
        | {g for (nn, g) in freed if nn == n.name and (nn, g) not in hidden})))
        for n in snapshot.nodes)
    return replace(snapshot, nodes=nodes, jobs=tuple(jobs))


def guarded_plan(plan_fn: PlanFn, policy: str, bound: float, snapshot: ClusterSnapshot, memo: Any,
                 rng: np.random.Generator, default_epochs_to_go: float = 10.0) -> PlanResult:
    """Reserve GPUs for jobs whose ``rho`` exceeds ``bound``, let ``plan_fn`` plan the rest.

    Args:
        plan_fn: the optimizer's own (unguarded) planning function.
        policy: name recorded in the plan.
        bound: the ``ftf_bound`` (> 1).
        snapshot: the cluster now.
        memo: an :class:`FtfMemo` (anything else starts afresh).
        rng: passed to ``plan_fn``.
        default_epochs_to_go: progress prior of jobs that declared no epochs.
    """
    m = memo if isinstance(memo, FtfMemo) else FtfMemo()
    present = {j.job_id for j in snapshot.elastic_jobs()}
    rho = ftf_estimates(snapshot, default_epochs_to_go)
    reserved = _choose_reserved(snapshot, rho, bound, m.reserved & present)
    if not reserved:
        inner = plan_fn(snapshot, m.inner, rng)
        return PlanResult(inner.plan, FtfMemo(inner.memo, frozenset()))
    inner = plan_fn(_view(snapshot, reserved), m.inner, rng)
    counts = {p.job_id: p.num_gpus for p in inner.plan.jobs}
    counts.update(reserved)
    reasons = {u.job_id: u.reason for u in inner.plan.unplaced if u.job_id not in reserved}
    before = {p.job_id: p for p in inner.plan.jobs}

    def choose(job: Job, k: int) -> sizing.Sizing | None:
        old = before.get(job.job_id)
        if job.job_id not in reserved and old is not None and old.num_gpus == k:
            return sizing.Sizing(old.global_batch, old.local_batch, old.accumulation, old.lr)
        return sizing.size_for(job, k, snapshot.profiles[job.model])

    worst = max(reserved, key=lambda j: (rho[j], j))
    notes = (*inner.plan.notes,
             f"ftf guard: {len(reserved)} job(s) reserved at their requested size (rho > {bound:g} or reserved "
             f"earlier), worst {worst} rho={rho[worst]:.2f}")
    plan: Plan = build_plan(snapshot, policy, counts, reasons=reasons, choose=choose, score=inner.plan.score,
                            notes=notes)
    return PlanResult(plan, FtfMemo(inner.memo, frozenset(reserved)))


class FtfGuardedPlanner(PlannerWrapper):
    """Wraps any planner with the finish-time fairness guard (same signature as every planner; its
    traits ``interval``, ``epoch_events``, ``uses_progress`` are the inner planner's).

    Args:
        inner: the planner to guard.
        ftf_bound: reserve GPUs for jobs whose estimated FTF exceeds this (> 1).
        default_epochs_to_go: progress prior of jobs that declared no epochs.
    """

    def __init__(self, inner: Planner, ftf_bound: float, default_epochs_to_go: float = 10.0) -> None:
        super().__init__(inner)
        self.ftf_bound = check_bound(inner.name, ftf_bound)
        if not self.ftf_bound:
            raise ConfigError(f"{inner.name}.ftf_bound = 0: a guarded planner needs a bound > 1")
        self.default_epochs_to_go = default_epochs_to_go

    def plan(self, snapshot: ClusterSnapshot, memo: Any, rng: np.random.Generator) -> PlanResult:
        """Reserve for the jobs that fall behind, then plan the rest with the inner planner."""
        return guarded_plan(self.inner.plan, self.name, self.ftf_bound, snapshot, memo, rng,
                            self.default_epochs_to_go)
