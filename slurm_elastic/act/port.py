"""The acting step's port: the one interface the daemon acts through.

This module owns :class:`Actor`. An actor is entered twice, each time with one
:class:`~slurm_elastic.observe.observation.Observation` and nothing else: at every round with the
round's actions (:meth:`Actor.apply`), and at every poll for what earlier actions left owed
(:meth:`Actor.tend`). The Slurm actor is :class:`~slurm_elastic.act.actor.SlurmActor`; shadow
mode's, which carries out nothing, is :class:`~slurm_elastic.daemon.ShadowActor`.
"""

from __future__ import annotations

from typing import Protocol

from slurm_elastic.core.actions import Action
from slurm_elastic.core.rounds import ActionOutcome
from slurm_elastic.observe.observation import Observation


class Actor(Protocol):
    """The act step: carries out a round's actions, and settles what earlier actions left owed."""

    def apply(self, seen: Observation, actions: tuple[Action, ...]) -> tuple[ActionOutcome, ...]:
        """Carry out a round's actions (none, for a round that has none) on what ``seen``, the
        round's observation (it has a snapshot), saw; keep Slurm from starting the waiting elastic
        jobs the round did not start."""
        ...

    def tend(self, seen: Observation) -> list[str]:
        """Do what earlier actions left due by what ``seen`` saw (node releases, satellites to
        cancel, leases to renew); the first observation with a snapshot first settles what a
        previous daemon's journal left unfinished. One line each."""
        ...
