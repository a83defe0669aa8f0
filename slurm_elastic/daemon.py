"""The daemon loop: observe (passive), plan (pure), act (the only side effects), with clock, signals, backoff.

Every ``poll_interval`` seconds it polls the queue (passive: ``squeue`` and the jobs' new
reports) and then runs the act step's own work that is due (:meth:`Actor.tend`: a shrink's node
release once its leavers reported they left, a satellite to cancel), so owed work never waits for
a planning round. It runs a round (``run_round``: observe, plan, act on the plan's diff) when the
queue's key changes (a job arrived, ended, started or was resized) or ``max_idle`` seconds have
passed; each round is recorded in the store with its plan and its one-line summary (logged at
INFO). One failing round is logged with its traceback and retried with exponential backoff; it
never kills the loop. SIGTERM and SIGINT end the loop after the current round.

In shadow mode (``dry_run = true``) it plans against the real queue and logs what it would do.
Otherwise it acts through :class:`~slurm_elastic.slurm.actions.SlurmActuator` (start held jobs
at the planned size; resize launcher jobs in place with signed orders and satellite allocations;
requeue other jobs at a new size); before its first round it settles the actions a previous daemon
left unfinished (:meth:`Actor.reconcile`), inside the loop, so a failing observation is retried
like a round. One job's bad input never fails a round: the view leaves it out or plans it from
priors (its quarantine, in ``status`` and ``/metrics``), and the actor refuses its action alone.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from types import FrameType
from typing import Any, Protocol

import numpy as np

from slurm_elastic import policies
from slurm_elastic.collector import gc_paused
from slurm_elastic.config import Config
from slurm_elastic.core.actions import Action, ActionKind
from slurm_elastic.core.model import ClusterSnapshot, InFlightResize, JobId
from slurm_elastic.core.rounds import ActionOutcome, RoundRecord, run_round
from slurm_elastic.errors import ConfigError
from slurm_elastic.metrics import Metrics
from slurm_elastic.observe.inflight import settle
from slurm_elastic.store import Store

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 300.0


class Actor(Protocol):
    """The act step: carries out a round's actions, and settles what earlier actions left owed."""

    def apply(self, snapshot: ClusterSnapshot, actions: tuple[Action, ...]) -> tuple[ActionOutcome, ...]:
        """Carry out the actions."""
        ...

    def tend(self) -> list[str]:
        """Do what earlier actions left due (node releases, satellites to cancel); one line each."""
        ...

    def reconcile(self, snapshot: ClusterSnapshot) -> list[str]:
        """Settle what a previous daemon's journal left unfinished, by ``snapshot``; one line each."""
        ...

    def lease(self, snapshot: ClusterSnapshot, started: Collection[str]) -> list[str]:
        """Keep Slurm from starting the waiting elastic jobs the round did not start; one line each failure."""
        ...


class View(Protocol):
    """The daemon's observer (:class:`~slurm_elastic.observe.view.ClusterView`): passive."""

    def poll(self) -> object:
        """Read the queue (and the jobs' new reports); a key that changes when the queue does."""
        ...

    def observe(self) -> ClusterSnapshot:
        """The snapshot now, with the resizes the store says are under way."""
        ...

    def quarantined(self) -> Mapping[str, str]:
        """The jobs of the queue now whose own input broke a rule, with the reason (planned from
        priors, or left out of the snapshot)."""
        ...

    @property
    def nodes_left_out(self) -> Mapping[str, str]:
        """The nodes of the last observation whose record did not read, with the reason."""
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

    def reconcile(self, snapshot: ClusterSnapshot) -> list[str]:
        """Nothing to settle: shadow mode journals nothing."""
        return []

    def lease(self, snapshot: ClusterSnapshot, started: Collection[str]) -> list[str]:
        """Nothing held: in shadow mode Slurm starts every job itself."""
        return []


@dataclass
class Daemon:
    """One daemon instance: view, planner, store, actor, and the loop state."""

    config: Config
    view: View
    store: Store
    actuator: Actor | None = None
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.time
    stopping: bool = False
    memo: Any = None
    rounds: int = 0
    metrics: Metrics = field(default_factory=Metrics)
    in_flight: dict[JobId, InFlightResize] = field(default_factory=dict)
    _last_key: object = field(default=None, repr=False)
    _last_round: float = field(default=float("-inf"), repr=False)
    _reconciled: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        act: Actor | None = ShadowActuator() if self.config.daemon.dry_run else self.actuator
        if act is None:
            raise ConfigError("daemon.dry_run = false needs an actuator (the Slurm actuator)")
        if not self.config.daemon.dry_run:
            self.store.hold()  # one acting daemon per store (StoreError names the other one)
        self.act: Actor = act
        self.planner = policies.build(self.config.daemon.policy, self.config.policy_params, self.config.guards)
        self.rng = np.random.default_rng(self.config.daemon.seed)

    def stop(self, signum: int = 0, frame: FrameType | None = None) -> None:
        """Ask the loop to end after the current round (signal handler)."""
        log.info("stopping (signal %d)", signum)
        self.stopping = True

    def round(self) -> RoundRecord:
        """Run one round now and record it."""
        t0 = time.perf_counter()
        with gc_paused():  # the collector runs after the round's decisions, not in the middle of them
            rec = run_round(self, self.planner, self.act, self.memo, self.rng)
        started = {o.action.job_id for o in rec.outcomes if o.ok and o.action.kind is ActionKind.START}
        for line in self.act.lease(rec.snapshot, started):
            log.warning("%s", line)
        for o in rec.outcomes:
            if o.ok and not self.config.daemon.dry_run:
                rebatch = o.action.kind is ActionKind.REBATCH
                self.in_flight[o.action.job_id] = InFlightResize(o.action.job_id, o.action.after.num_gpus,
                                                                 rec.snapshot.now,
                                                                 o.action.local_batch if rebatch else 0)
        self.metrics.observe_round(rec, time.perf_counter() - t0)
        self.metrics.observe_quarantine(self.view.quarantined())
        self.metrics.observe_nodes_left_out(self.view.nodes_left_out)
        learner = getattr(self.view, "learner", None)  # the real view's; a simulated one has none
        if learner is not None:
            self.metrics.observe_progress_model(learner.summary())
        self.memo = rec.memo
        self.rounds += 1
        self._last_round = self.clock()
        self.store.record_round(rec.snapshot.now, rec.plan, rec.summary(), rec.violations)
        log.info("%s", rec.summary())
        return rec

    def observe(self) -> ClusterSnapshot:
        """The view's snapshot, with the actions this daemon carried out still on their way (passive).

        The view adds what the store says is under way (a satellite still waiting to start, a node
        release not done yet: a restarted daemon does not repeat them); this adds the actions of
        recent rounds until the snapshot shows them (:func:`~slurm_elastic.observe.inflight.settle`).
        """
        snap = self.view.observe()
        settle(self.in_flight, snap)
        under_way = {**{fl.job_id: fl for fl in snap.in_flight}, **self.in_flight}
        return replace(snap, in_flight=tuple(under_way.values())) if under_way else snap

    def tend(self) -> None:
        """The act step's owed work (node releases, satellites), logged one line each."""
        for line in self.act.tend():
            log.info("%s", line)

    def reconcile(self) -> None:
        """Once, before the first round: settle the actions a previous daemon left unfinished."""
        if not self._reconciled:
            for line in self.act.reconcile(self.observe()):
                log.info("reconciled: %s", line)
            self._reconciled = True

    def due(self) -> bool:
        """One poll (read the queue and the reports, do what is owed); whether a round is due:
        the queue changed since the last round, or the last round is too old."""
        self.reconcile()
        key = self.view.poll()
        self.tend()
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
