"""One scheduling round: observe -> plan -> validate -> diff -> act. Written once, driven thrice.

This module owns :func:`run_round` and the two ports it drives: an :class:`Observer` that returns a
:class:`~slurm_elastic.core.model.ClusterSnapshot` and an :class:`Actuator` that carries out
:class:`~slurm_elastic.core.actions.Action` s. The daemon plugs in Slurm, the simulator a virtual
cluster, the tests in-memory fakes; nothing here knows which. A plan that fails
:func:`~slurm_elastic.core.constraints.validate_plan` is refused (no action runs) and reported in
the round record; an action that fails is recorded by the actuator and shows up in the next
snapshot's ``last_errors``. Pure apart from what the ports do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from slurm_elastic.core.actions import Action, diff
from slurm_elastic.core.constraints import plan_violations
from slurm_elastic.core.model import ClusterSnapshot, Plan
from slurm_elastic.core.planner import Planner


class Observer(Protocol):
    """Reads the cluster."""

    def observe(self) -> ClusterSnapshot:
        """The cluster now."""
        ...


class Actuator(Protocol):
    """Changes the cluster."""

    def apply(self, snapshot: ClusterSnapshot, actions: tuple[Action, ...]) -> tuple[ActionOutcome, ...]:
        """Carry out the actions in order; one failure must not stop the others."""
        ...


@dataclass(frozen=True, slots=True)
class ActionOutcome:
    """What happened to one action: ``ok`` and, when not, the error message."""

    action: Action
    ok: bool
    message: str = ""


@dataclass(frozen=True, slots=True)
class RoundRecord:
    """Everything one round saw and did (stored by the daemon, aggregated by reports)."""

    snapshot: ClusterSnapshot
    plan: Plan
    actions: tuple[Action, ...]
    outcomes: tuple[ActionOutcome, ...]
    violations: tuple[str, ...]
    memo: Any

    def summary(self) -> str:
        """The one INFO line per round."""
        running = sum(1 for j in self.plan.jobs)
        failed = sum(1 for o in self.outcomes if not o.ok)
        kinds: dict[str, int] = {}
        for a in self.actions:
            kinds[a.kind.value] = kinds.get(a.kind.value, 0) + 1
        acts = ",".join(f"{k}={v}" for k, v in sorted(kinds.items())) or "none"
        state = "REFUSED " + "; ".join(self.violations[:3]) if self.violations else "ok"
        return (
            f"round t={self.snapshot.now:.1f} policy={self.plan.policy} jobs={len(self.snapshot.elastic_jobs())} "
            f"running={running} waiting={len(self.plan.unplaced)} actions={acts} failed={failed} plan={state}"
        )


def run_round(observer: Observer, planner: Planner, actuator: Actuator, memo: Any,
              rng: np.random.Generator) -> RoundRecord:
    """Run one round.

    Args:
        observer: where the snapshot comes from.
        planner: the policy.
        actuator: where actions go.
        memo: the planner's memo from the previous round (``None`` at first).
        rng: the only source of randomness for the planner.

    Returns:
        The round record; its ``memo`` is the one to pass next time. A refused plan keeps the old
        memo so that the planner's next call starts from what was really executed.
    """
    snapshot = observer.observe()
    result = planner.plan(snapshot, memo, rng)
    violations = plan_violations(snapshot, result.plan)
    if violations:
        return RoundRecord(snapshot, result.plan, (), (), violations, memo)
    actions = diff(snapshot, result.plan)
    outcomes = actuator.apply(snapshot, actions) if actions else ()
    return RoundRecord(snapshot, result.plan, actions, outcomes, (), result.memo)
