"""The actor driven the earlier way: a records callback, and each entrance apart (tests, fuzzer).

The acting step is the :mod:`slurm_elastic.act` package; the daemon reaches it through its port
alone (:class:`~slurm_elastic.act.port.Actor`, one observation in). This module keeps the earlier
interface of the same actor for the tests and ``bench fuzz`` that drive its parts one at a time
(:meth:`SlurmActuator.apply` without the leases, :meth:`~SlurmActuator.lease`,
:meth:`~SlurmActuator.tend`, :meth:`~SlurmActuator.reconcile`): :class:`SlurmActuator` makes the
observation each call would get from the raw records ``records`` returns, with the jobs whose
training ended judged as the view judges them, and hands it to a
:class:`~slurm_elastic.act.actor.SlurmActor`. The daemon never uses it (:mod:`slurm_elastic.wiring`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping

from slurm_elastic.act.actor import SlurmActor
from slurm_elastic.act.commands import CREDENTIAL_WAIT_S, commands
from slurm_elastic.act.context import Runner
from slurm_elastic.act.journal import reconcile
from slurm_elastic.act.satellite_upkeep import SATELLITE_END_GRACE_S
from slurm_elastic.act.shrink import EXIT_GRACE_S
from slurm_elastic.core.actions import Action
from slurm_elastic.core.model import ClusterSnapshot
from slurm_elastic.core.rounds import ActionOutcome
from slurm_elastic.observe.inflight import finished_jobs
from slurm_elastic.slurm.records import JobRecord
from slurm_elastic.slurm.satellites import NotExpressible
from slurm_elastic.store import Store

__all__ = ["CREDENTIAL_WAIT_S", "EXIT_GRACE_S", "SATELLITE_END_GRACE_S", "NotExpressible", "SlurmActuator",
           "commands", "reconcile"]


class SlurmActuator:
    """A :class:`~slurm_elastic.act.actor.SlurmActor` over the records ``records`` returns at each call.

    Args:
        runner, store, clock, me, sleep, client_env, crash: the actor's
            (:class:`~slurm_elastic.act.actor.SlurmActor`).
        records: the raw Slurm records of the last observation, by job id (satellites not folded).
    """

    def __init__(self, runner: Runner, store: Store, clock: Callable[[], float],
                 records: Callable[[], Mapping[str, JobRecord]] | None = None, me: str = "",
                 sleep: Callable[[float], None] = time.sleep, client_env: Mapping[str, str] | None = None,
                 crash: Callable[[str], None] | None = None) -> None:
        self.actor = SlurmActor(runner, store, clock, me=me, sleep=sleep, client_env=client_env, crash=crash)
        self.runner, self.store, self.clock = runner, store, clock
        self.records: Callable[[], Mapping[str, JobRecord]] = records or dict

    @property
    def lease_s(self) -> int:
        """Seconds of a lease (:data:`~slurm_elastic.act.leases.LEASE_S`)."""
        return self.actor.leases.lease_s

    @lease_s.setter
    def lease_s(self, value: int) -> None:
        self.actor.leases.lease_s = value

    @property
    def user_command_timeout_s(self) -> float:
        """Seconds a satellite's sbatch may take (:data:`~slurm_elastic.act.grow.USER_COMMAND_TIMEOUT_S`)."""
        return self.actor.grows.user_command_timeout_s

    @user_command_timeout_s.setter
    def user_command_timeout_s(self, value: float) -> None:
        self.actor.grows.user_command_timeout_s = value

    def apply(self, snapshot: ClusterSnapshot, actions: tuple[Action, ...]) -> tuple[ActionOutcome, ...]:
        """Carry out each action (no leases: :meth:`lease`)."""
        records = self.records()
        return self.actor.carry_out(snapshot, records, finished_jobs(self.store, records, snapshot.now), actions)

    def lease(self, snapshot: ClusterSnapshot, started: Collection[str]) -> list[str]:
        """Lease the waiting elastic jobs of ``snapshot`` but ``started``."""
        return self.actor.lease(snapshot, self.records(), started)

    def tend(self) -> list[str]:
        """The owed work by the records now (no reconcile: :meth:`reconcile`)."""
        records, now = self.records(), self.clock()
        return self.actor.owed(records, finished_jobs(self.store, records, now), now)

    def reconcile(self, snapshot: ClusterSnapshot) -> list[str]:
        """Settle what a previous daemon's journal left unfinished."""
        return self.actor.reconcile(snapshot, self.records())
