"""The one planner signature, the registry of planners, and the shared plan builder.

This module owns the :class:`Planner` protocol (``plan(snapshot, memo, rng) -> PlanResult``),
the name -> factory registry used by the daemon, the simulator, the benchmarks and the tests, and
:func:`build_plan`, which turns per-job GPU counts into a full :class:`Plan` (placement via
:mod:`~slurm_elastic.core.placement`, batch and learning rate via :mod:`~slurm_elastic.core.sizing`)
so that no planner re-implements either. Pure: no I/O, no clock; randomness only from ``rng``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from slurm_elastic.core import sizing
from slurm_elastic.core.model import ClusterSnapshot, Job, JobId, JobPlan, Plan, Unplaced
from slurm_elastic.core.placement import place
from slurm_elastic.errors import ConfigError, UnknownPolicyError


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
    """

    name: str

    def plan(self, snapshot: ClusterSnapshot, memo: Any, rng: np.random.Generator) -> PlanResult:
        """Plan the snapshot; ``memo`` is what the previous call returned (``None`` the first time)."""
        ...


PlannerFactory = Callable[..., Planner]
_REGISTRY: dict[str, PlannerFactory] = {}


def register(name: str) -> Callable[[PlannerFactory], PlannerFactory]:
    """Class decorator adding a planner factory to the registry under ``name``."""

    def deco(factory: PlannerFactory) -> PlannerFactory:
        if name in _REGISTRY and _REGISTRY[name] is not factory:
            raise ValueError(f"planner name {name!r} registered twice")
        _REGISTRY[name] = factory
        return factory

    return deco


def available() -> tuple[str, ...]:
    """Registered planner names, sorted."""
    _load_builtin()
    return tuple(sorted(_REGISTRY))


def create(name: str, **params: Any) -> Planner:
    """Instantiate the planner registered as ``name`` with keyword parameters.

    Raises:
        UnknownPolicyError: no planner has that name.
        ConfigError: a parameter is unknown (or a value breaks the planner's rule).
    """
    _load_builtin()
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise UnknownPolicyError(
            f"unknown policy {name!r}; known policies: {', '.join(sorted(_REGISTRY))}"
        ) from None
    try:
        inspect.signature(factory).bind(**params)
    except TypeError as exc:
        known = [n for n in inspect.signature(factory).parameters if n != "self"]
        raise ConfigError(
            f"policy {name!r}: bad parameters {sorted(params)} ({exc}); known parameters: {', '.join(known)}"
        ) from None
    return factory(**params)


def _load_builtin() -> None:
    # Importing the modules registers their planners; kept here so the registry is complete
    # whichever module a caller imported first. ``drl`` is registered by slurm_elastic.drl.weights
    # (outside the core, torch-free): its factory reads the model file, which the core must not.
    from slurm_elastic.core import baselines, dynprog, efq, evolutionary  # noqa: F401
    from slurm_elastic.drl import weights  # noqa: F401


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
    """Make a full plan from GPU counts per job.

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
    placements = place(snapshot, counts)
    plans: list[JobPlan] = []
    unplaced: list[Unplaced] = []
    for job in snapshot.elastic_jobs():
        k = counts.get(job.job_id, 0)
        model = snapshot.profiles[job.model]
        s = None
        if k > 0:
            s = choose(job, k) if choose else sizing.size_for(job, k, model, limits.get(job.job_id))
        if s is None:
            why = reasons.get(job.job_id) or (
                f"no valid batch on {k} GPUs" if k > 0 else f"no GPU assigned by {policy}"
            )
            unplaced.append(Unplaced(job.job_id, why))
            continue
        plans.append(JobPlan(job.job_id, placements[job.job_id], s.global_batch, s.local_batch, s.accumulation, s.lr))
    plans.sort(key=lambda p: p.job_id)
    return Plan(policy, tuple(plans), tuple(unplaced), score, notes)


def current_counts(snapshot: ClusterSnapshot) -> dict[JobId, int]:
    """GPUs each active elastic job holds now."""
    return {j.job_id: j.num_gpus for j in snapshot.elastic_jobs() if j.num_gpus}
