"""The one planner signature and the shared plan builder.

This module owns the :class:`Planner` protocol (``plan(snapshot, memo, rng) -> PlanResult`` and
the traits a driver reads: ``interval``, ``epoch_events``, ``uses_progress``) and
:func:`build_plan`, which turns per-job GPU counts into a full :class:`Plan` (placement via
:mod:`~slurm_elastic.core.placement`, batch and learning rate via :mod:`~slurm_elastic.core.sizing`)
so that no planner re-implements either. The name -> planner table lives outside the core, in
:mod:`slurm_elastic.policies`. Pure: no I/O, no clock; randomness only from ``rng``; imports
nothing from outside the core.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from slurm_elastic.core import sizing
from slurm_elastic.core.model import ClusterSnapshot, Job, JobId, JobPlan, Plan, Unplaced
from slurm_elastic.core.placement import place


@dataclass(frozen=True, slots=True)
class PlanResult:
    """A plan and the planner's memo for its next call (its warm start; ``None`` if stateless)."""

    plan: Plan
    memo: Any


class Planner(Protocol):
    """Anything that maps a snapshot to a plan.

    Implementations must be deterministic for a given ``(snapshot, memo, rng state)``, keep all
    state between calls in the returned memo (never in attributes), and count any search budget in
    iterations, not wall-clock time.

    Besides :meth:`plan`, every planner declares three traits that drivers (the simulator, the
    daemon's wrappers) read; a plain class attribute satisfies each:

    * ``interval``: seconds between the planner's own re-plans (a periodic planner keeps its
      allocation in between; the simulator schedules a tick every ``interval``); 0 re-plans at
      every call.
    * ``epoch_events``: the planner wants a round when a job finishes an epoch.
    * ``uses_progress``: the planner reads ``snapshot.progress_model`` (the simulator then has jobs
      report validation metrics and refits the progress model as jobs complete).
    """

    name: str

    @property
    def interval(self) -> float:
        """Seconds between re-plans; 0 = every call."""
        ...

    @property
    def epoch_events(self) -> bool:
        """Whether the planner wants a round at each job's epoch end."""
        ...

    @property
    def uses_progress(self) -> bool:
        """Whether the planner reads ``snapshot.progress_model``."""
        ...

    def plan(self, snapshot: ClusterSnapshot, memo: Any, rng: np.random.Generator) -> PlanResult:
        """Plan the snapshot; ``memo`` is what the previous call returned (``None`` the first time)."""
        ...


class PlannerWrapper:
    """Base of the planners that wrap another (the site guards, the finish-time-fairness guard):
    the wrapper's name and traits are its inner planner's; subclasses write :meth:`plan`."""

    def __init__(self, inner: Planner) -> None:
        self.inner = inner
        self.name = inner.name

    @property
    def interval(self) -> float:
        """The inner planner's re-plan interval (seconds; 0 = every call)."""
        return self.inner.interval

    @property
    def epoch_events(self) -> bool:
        """Whether the inner planner wants a round at each epoch end."""
        return self.inner.epoch_events

    @property
    def uses_progress(self) -> bool:
        """Whether the inner planner reads ``snapshot.progress_model``."""
        return self.inner.uses_progress


def build_plan(
    snapshot: ClusterSnapshot,
    policy: str,
    counts: Mapping[JobId, int],
    *,
    reasons: Mapping[JobId, str] | None = None,
    batch_limits: Mapping[JobId, int] | None = None,
    choose: Callable[[Job, int], sizing.Sizing | None] | None = None,
    score: float | None = None,
    notes: tuple[str, ...] = (),
) -> Plan:
    """Make a full plan from GPU counts per job, within what each job can do.

    A running job that cannot grow (``Job.can_grow``) is held at its size, and one that cannot
    change its batch while it runs (``Job.can_rebatch``) keeps its configuration when its size
    does not change: a plan never asks for what the job cannot do.

    Args:
        snapshot: the cluster now.
        policy: planner name recorded in the plan.
        counts: GPUs per elastic job; absent or 0 means "does not run".
        reasons: why a job is not run (default: "no GPU assigned by <policy>").
        batch_limits: per-job global batch limit (ONES ``R_j``), used by the default sizing.
        choose: sizing rule ``(job, k) -> Sizing``; default :func:`sizing.size_for` under
            ``batch_limits``.
        score: the planner's objective value.
        notes: remarks for the round log.
    """
    reasons = reasons or {}
    limits = batch_limits or {}
    counts, capped = _capable(snapshot, counts)
    placements = place(snapshot, counts)
    plans: list[JobPlan] = []
    unplaced: list[Unplaced] = []
    for job in snapshot.elastic_jobs():
        k = counts.get(job.job_id, 0)
        model = snapshot.profiles[job.model]
        s = None
        if k > 0 and not job.can_rebatch and k == job.num_gpus:
            s = sizing.kept(job)  # its batch changes only with a restart, and its size did not change
        elif k > 0:
            s = choose(job, k) if choose else sizing.size_for(job, k, model, limits.get(job.job_id))
        if s is None:
            why = reasons.get(job.job_id) or (
                f"no valid batch on {k} GPUs" if k > 0 else f"no GPU assigned by {policy}"
            )
            unplaced.append(Unplaced(job.job_id, why))
            continue
        plans.append(JobPlan(job.job_id, placements[job.job_id], s.global_batch, s.local_batch, s.accumulation, s.lr))
    plans.sort(key=lambda p: p.job_id)
    return Plan(policy, tuple(plans), tuple(unplaced), score, (*notes, *capped))


def _capable(snapshot: ClusterSnapshot, counts: Mapping[JobId, int]) -> tuple[dict[JobId, int], tuple[str, ...]]:
    """``counts`` within what each job can do: a running job that cannot grow keeps its size."""
    out = dict(counts)
    notes = []
    for job in snapshot.elastic_jobs():
        k = out.get(job.job_id, 0)
        if not job.can_grow and job.num_gpus and k > job.num_gpus:
            out[job.job_id] = job.num_gpus
            notes.append(f"job {job.job_id} kept at {job.num_gpus} GPUs, not {k}: it cannot grow (no join script)")
    return out, tuple(notes)


def current_counts(snapshot: ClusterSnapshot) -> dict[JobId, int]:
    """GPUs each active elastic job holds now."""
    return {j.job_id: j.num_gpus for j in snapshot.elastic_jobs() if j.num_gpus}
