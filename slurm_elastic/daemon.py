"""The daemon loop: clock, signals, change detection and backoff around ``run_round`` — nothing else.

It polls a cheap fingerprint of the queue every ``poll_interval`` seconds and runs a round when the
fingerprint changes (a job arrived, ended, started or was resized) or ``max_idle`` seconds have
passed; each round is recorded in the store with its plan and its one-line summary (logged at
INFO). One failing round is logged with its traceback and retried with exponential backoff; it
never kills the loop. SIGTERM and SIGINT end the loop after the current round.

In shadow mode (``dry_run = true``) it plans against the real queue and logs what it would do.
Otherwise it acts through :class:`~slurm_elastic.slurm.actions.SlurmActuator` (start held jobs
at the planned size; resize launcher jobs in place with signed orders and satellite allocations;
requeue other jobs at a new size), which also tends the satellites on every observation; at start
it first settles the actions a previous daemon left unfinished
(:func:`~slurm_elastic.slurm.actions.reconcile`).
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from types import FrameType
from typing import Any, Protocol

import numpy as np

from slurm_elastic.config import Config
from slurm_elastic.core import planner as registry
from slurm_elastic.core.actions import Action
from slurm_elastic.core.guards import GuardedPlanner
from slurm_elastic.core.model import ClusterSnapshot, InFlightResize, JobId, JobState
from slurm_elastic.core.rounds import ActionOutcome, RoundRecord, run_round
from slurm_elastic.errors import ConfigError
from slurm_elastic.metrics import Metrics
from slurm_elastic.store import Store

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 300.0
IN_FLIGHT_TIMEOUT_S = 60.0


class Actuator(Protocol):
    """Carries out a round's actions (shadow or Slurm)."""

    def apply(self, snapshot: ClusterSnapshot, actions: tuple[Action, ...]) -> tuple[ActionOutcome, ...]:
        """Carry out the actions."""
        ...

    def tend(self) -> list[str]:
        """Settle what earlier actions left running (satellites) after an observation; one line each."""
        ...

    def on_the_way(self, snapshot: ClusterSnapshot) -> tuple[InFlightResize, ...]:
        """Resizes the actuator knows are still under way (they survive a daemon restart)."""
        ...


class QueueObserver(Protocol):
    """An observer with a cheap change fingerprint (:class:`~slurm_elastic.slurm.cli.SlurmObserver`)."""

    def observe(self) -> ClusterSnapshot:
        """The snapshot now."""
        ...

    def change_key(self) -> object:
        """A value that changes when the queue does."""
        ...


class ShadowActuator:
    """Carries out nothing: logs each action the plan implies (dry-run / shadow mode)."""

    def apply(self, snapshot: ClusterSnapshot, actions: tuple[Action, ...]) -> tuple[ActionOutcome, ...]:
        """Log the actions; report each as not executed."""
        for a in actions:
            log.info("dry-run: would %s job %s: %d -> %d GPUs, batch %d", a.kind.value, a.job_id,
                     a.before.num_gpus, a.after.num_gpus, a.global_batch)
        return tuple(ActionOutcome(a, True, "dry-run: not executed") for a in actions)

    def tend(self) -> list[str]:
        """Nothing to settle: shadow mode starts nothing."""
        return []

    def on_the_way(self, snapshot: ClusterSnapshot) -> tuple[InFlightResize, ...]:
        """Nothing under way: shadow mode starts nothing."""
        return ()


@dataclass
class Daemon:
    """One daemon instance: observer, planner, store, and the loop state."""

    config: Config
    observer: QueueObserver
    store: Store
    actuator: Actuator | None = None
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.time
    stopping: bool = False
    memo: Any = None
    rounds: int = 0
    metrics: Metrics = field(default_factory=Metrics)
    in_flight: dict[JobId, InFlightResize] = field(default_factory=dict)
    _last_key: object = field(default=None, repr=False)
    _last_round: float = field(default=float("-inf"), repr=False)

    def __post_init__(self) -> None:
        act: Actuator | None = ShadowActuator() if self.config.daemon.dry_run else self.actuator
        if act is None:
            raise ConfigError("daemon.dry_run = false needs an actuator (the Slurm actuator)")
        self.act: Actuator = act
        self.planner = GuardedPlanner(registry.create(self.config.daemon.policy, **self.config.policy_params),
                                      self.config.guards)
        self.rng = np.random.default_rng(self.config.daemon.seed)

    def stop(self, signum: int = 0, frame: FrameType | None = None) -> None:
        """Ask the loop to end after the current round (signal handler)."""
        log.info("stopping (signal %d)", signum)
        self.stopping = True

    def round(self) -> RoundRecord:
        """Run one round now and record it."""
        t0 = time.perf_counter()
        rec = run_round(self, self.planner, self.act, self.memo, self.rng)
        for o in rec.outcomes:
            if o.ok and not self.config.daemon.dry_run:
                self.in_flight[o.action.job_id] = InFlightResize(o.action.job_id, o.action.after.num_gpus,
                                                                 rec.snapshot.now)
        self.metrics.observe_round(rec, time.perf_counter() - t0)
        self.memo = rec.memo
        self.rounds += 1
        self._last_round = self.clock()
        self.store.record_round(rec.snapshot.now, rec.plan, rec.summary(), rec.violations)
        log.info("%s", rec.summary())
        return rec

    def observe(self) -> ClusterSnapshot:
        """The observer's snapshot, with the actions still on their way (the round's observer).

        An action is on its way until the job shows its target (a START until the job runs at the
        new size, a DROP until it is gone) or for at most ``IN_FLIGHT_TIMEOUT_S`` seconds; and for
        as long as the actuator says so (a satellite still waiting to start, a node release not
        done yet: these come from the store, so a restarted daemon does not repeat them).
        """
        snap = self.observer.observe()
        for line in self.act.tend():
            log.info("%s", line)
        jobs = {j.job_id: j for j in snap.jobs}
        for jid, fl in list(self.in_flight.items()):
            job = jobs.get(jid)
            arrived = (job is None) if fl.target_gpus == 0 else (
                job is not None and job.state is JobState.RUNNING and job.num_gpus == fl.target_gpus)
            if arrived or snap.now - fl.since > IN_FLIGHT_TIMEOUT_S:
                del self.in_flight[jid]
        under_way = {**{fl.job_id: fl for fl in self.act.on_the_way(snap)}, **self.in_flight}
        return replace(snap, in_flight=tuple(under_way.values())) if under_way else snap

    def due(self) -> bool:
        """Whether the queue changed since the last round, or the last round is too old."""
        key = self.observer.change_key()
        changed = key != self._last_key
        self._last_key = key
        return changed or self.clock() - self._last_round >= self.config.daemon.max_idle

    def run(self, max_rounds: int | None = None) -> int:
        """The loop; returns the number of rounds run. ``max_rounds`` ends it early (tests, ``--once``)."""
        backoff = self.config.daemon.poll_interval
        while not self.stopping and (max_rounds is None or self.rounds < max_rounds):
            try:
                if self.due():
                    self.round()
                backoff = self.config.daemon.poll_interval
            except Exception:  # the loop boundary: log with traceback, back off, go on
                log.exception("round failed; retrying in %.0f s", backoff)
                self.sleep(backoff)
                backoff = min(MAX_BACKOFF_S, backoff * 2)
                continue
            if max_rounds is None or self.rounds < max_rounds:
                self.sleep(self.config.daemon.poll_interval)
        return self.rounds


def install_signal_handlers(daemon: Daemon) -> None:
    """SIGTERM/SIGINT end the loop cleanly."""
    signal.signal(signal.SIGTERM, daemon.stop)
    signal.signal(signal.SIGINT, daemon.stop)
