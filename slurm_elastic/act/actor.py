"""The Slurm actor: the acting step over real Slurm, the only place that changes it.

This module owns :class:`SlurmActor`, the :class:`~slurm_elastic.act.port.Actor` of an acting
daemon. It reads the cluster through the observation it is handed and nothing else, and sends
each part of its work to the module that owns it:

* a job without the launcher is started, dropped, preempted or resized by a requeue with Slurm's
  commands (:mod:`slurm_elastic.act.commands`);
* a job that runs the launcher is resized in place: a grow by an order and satellites
  (:mod:`slurm_elastic.act.grow`), a shrink by an order and a deferred node release
  (:mod:`slurm_elastic.act.shrink`), a rebatch by an order (:mod:`slurm_elastic.act.launcher`);
  a MOVE of such a job is refused (the diff never asks for one: it shrinks it off a draining node
  first, or leaves it there, :func:`slurm_elastic.core.actions.diff`), and so is any resize of a
  job whose training ended (its workers are exiting);
* the waiting elastic jobs a round did not start are leased (:mod:`slurm_elastic.act.leases`);
* at every poll, what earlier actions left owed is done: node releases that fell due and lost
  workers' nodes (:mod:`slurm_elastic.act.shrink`), lost workers' GPUs that no node release frees
  started again with a new worker (:mod:`slurm_elastic.act.replace`), satellites
  (:mod:`slurm_elastic.act.satellite_upkeep`), leases; and at the first, the previous daemon's
  unfinished actions are settled (:mod:`slurm_elastic.act.journal`).

Each action is written to the store before its first command and again after its last, its
steps journaled in between (:mod:`slurm_elastic.slurm.steps`). One job's action, whatever it
meets, never stops the others'. Commands are argv lists run through an injected runner; no shell.
A command run as root on Slurm's own records (``scontrol``, ``scancel``) has the runner's limit
(:data:`~slurm_elastic.slurm.runner.COMMAND_TIMEOUT_S`); a satellite's sbatch, run as the job's
user, has its own (:mod:`slurm_elastic.act.grow`).
"""

from __future__ import annotations

import getpass
import logging
import os
import time
from collections.abc import Callable, Collection, Mapping

from slurm_elastic.act import commands
from slurm_elastic.act.context import Hands, Runner
from slurm_elastic.act.grow import Grows
from slurm_elastic.act.journal import reconcile_journal
from slurm_elastic.act.launcher import channel_of, rebatch
from slurm_elastic.act.leases import Leases
from slurm_elastic.act.replace import Replacements, Spawn, spawn_detached
from slurm_elastic.act.satellite_upkeep import cancel_orphans, tend_satellites
from slurm_elastic.act.shrink import give_back_lost, release_due_nodes, shrink
from slurm_elastic.core.actions import Action, ActionKind
from slurm_elastic.core.model import ClusterSnapshot
from slurm_elastic.core.rounds import ActionOutcome
from slurm_elastic.errors import ElasticError
from slurm_elastic.observe.observation import Observation
from slurm_elastic.slurm.records import JobRecord
from slurm_elastic.slurm.satellites import NotExpressible, client_settings
from slurm_elastic.slurm.steps import Steps, crash_from_env
from slurm_elastic.store import Store

log = logging.getLogger(__name__)

IN_PLACE = (ActionKind.GROW, ActionKind.SHRINK, ActionKind.REBATCH, ActionKind.MOVE)


class SlurmActor:
    """Carries out actions on Slurm, journaling each one (the daemon's acting mode).

    Args:
        runner: runs one command (argv), returns stdout, raises on failure.
        store: the action journal, and the jobs' workers, satellites and owed releases.
        clock: seconds since the epoch.
        me: the user the daemon runs as (satellites of other users' jobs go through ``setpriv``).
        client_env: the environment ``runner`` runs Slurm commands with (``None``: this process's);
            a satellite's sbatch keeps only its Slurm client settings (:func:`client_settings`).
        sleep: waits that many seconds (the requeue path's polls).
        crash: called at each crash point (:mod:`slurm_elastic.slurm.steps`; default: what
            ``SLURM_ELASTIC_CRASH_AT`` asks for, nothing when it is unset).
        spawn: starts a lost worker's replacement step detached (:mod:`slurm_elastic.act.replace`).
    """

    def __init__(self, runner: Runner, store: Store, clock: Callable[[], float], *, me: str = "",
                 sleep: Callable[[float], None] = time.sleep, client_env: Mapping[str, str] | None = None,
                 crash: Callable[[str], None] | None = None, spawn: Spawn = spawn_detached) -> None:
        self.hands = Hands(runner, store, clock, sleep, crash if crash is not None else crash_from_env(),
                           me or getpass.getuser(), client_settings(os.environ if client_env is None else client_env))
        self.grows = Grows(self.hands)
        self.leases = Leases(self.hands)
        self.replacements = Replacements(self.hands, spawn)
        self._reconciled = False

    # -- the port ---------------------------------------------------------------------------------

    def apply(self, seen: Observation, actions: tuple[Action, ...]) -> tuple[ActionOutcome, ...]:
        """Carry out the round's actions, then lease the waiting elastic jobs it did not start."""
        out = self.carry_out(seen.seen(), seen.records, seen.finished, actions)
        started = {o.action.job_id for o in out if o.ok and o.action.kind is ActionKind.START}
        for line in self.lease(seen.seen(), seen.records, started):
            log.warning("%s", line)
        return out

    def tend(self, seen: Observation) -> list[str]:
        """What earlier actions left owed (:meth:`owed`); the first observation with a snapshot
        first settles the previous daemon's journal (:meth:`reconcile`)."""
        lines = []
        if not self._reconciled and seen.snapshot is not None:
            lines = [f"reconciled: {line}" for line in self.reconcile(seen.snapshot, seen.records)]
            self._reconciled = True
        return lines + self.owed(seen.records, seen.finished, seen.now)

    # -- its parts --------------------------------------------------------------------------------

    def carry_out(self, snapshot: ClusterSnapshot, records: Mapping[str, JobRecord], finished: frozenset[str],
                  actions: tuple[Action, ...]) -> tuple[ActionOutcome, ...]:
        """Carry out each action, journaled; one failure never stops the others."""
        store, clock = self.hands.store, self.hands.clock
        out: list[ActionOutcome] = []
        for a in actions:
            aid = store.begin_action(a, clock())
            steps = Steps(store, aid, a.kind.value, clock, self.hands.crash)
            try:
                note = self._one(snapshot, a, records.get(a.job_id), a.job_id in finished, steps)
            except Exception as exc:  # one job's action, whatever it met, never stops the others'
                reason = str(exc) if isinstance(exc, ElasticError) else f"failed: {type(exc).__name__}: {exc}"
                if isinstance(exc, ElasticError):
                    log.warning("%s job %s refused: %s", a.kind.value, a.job_id, reason)
                else:
                    log.exception("%s job %s %s", a.kind.value, a.job_id, reason)
                store.finish_action(aid, False, clock(), reason)
                out.append(ActionOutcome(a, False, reason))
                continue
            log.info("%s job %s: %d -> %d GPUs%s", a.kind.value, a.job_id, a.before.num_gpus, a.after.num_gpus,
                     f" ({note})" if note else "")
            store.finish_action(aid, True, clock(), note)
            out.append(ActionOutcome(a, True, note))
        return tuple(out)

    def _one(self, snapshot: ClusterSnapshot, a: Action, rec: JobRecord | None, finished: bool, steps: Steps) -> str:
        channel = channel_of(rec) if a.kind in IN_PLACE else None
        commands.refuse_unstartable(a, rec)
        if channel is None or rec is None:
            return commands.carry_out(self.hands, snapshot, a, rec, steps)
        if finished:
            return "nothing done: the job finished training, its workers are exiting"
        if a.kind is ActionKind.GROW:
            return self.grows.grow(a, rec, channel, steps)
        if a.kind is ActionKind.SHRINK:
            return shrink(self.hands, a, rec, channel, steps)
        if a.kind is ActionKind.REBATCH:
            return rebatch(self.hands, a, rec, channel, steps)
        raise NotExpressible(f"job {a.job_id}: moving a launcher job is a shrink then a grow; plan them apart")

    def lease(self, snapshot: ClusterSnapshot, records: Mapping[str, JobRecord], started: Collection[str]) -> list[str]:
        """Lease the waiting elastic jobs the round did not start (:mod:`slurm_elastic.act.leases`)."""
        return self.leases.lease(snapshot, records, started)

    def owed(self, records: Mapping[str, JobRecord], finished: frozenset[str], now: float) -> list[str]:
        """Node releases that fell due, orphan satellites, lost workers' nodes (or new workers on
        their GPUs, and those withdrawn that never joined), leases to renew, and
        satellites to record or cancel, by what ``records`` show; one line per change."""
        lines = release_due_nodes(self.hands, records, now)
        lines += cancel_orphans(self.hands, records)
        lines += give_back_lost(self.hands, records, finished,
                                lambda rec, ch, stay, gone, freed: self.replacements.replace(rec, ch, stay, gone, freed,
                                                                                             records))
        lines += self.replacements.tend(records, now)
        lines += self.leases.renew(records)
        return lines + tend_satellites(self.hands, records, finished, now)

    def reconcile(self, snapshot: ClusterSnapshot, records: Mapping[str, JobRecord]) -> list[str]:
        """Settle the actions a previous daemon began and never finished (:mod:`slurm_elastic.act.journal`)."""
        return reconcile_journal(self.hands, snapshot, records)
