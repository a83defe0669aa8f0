"""The daemon loop: observe (passive), plan (pure), act (the only side effects), with clock, signals, backoff.

Every ``poll_interval`` seconds it polls the queue (passive: ``squeue`` and the jobs' new
reports) and hands that observation to the act step for the work earlier actions left owed
(:meth:`Actor.tend`: a shrink's node release once its leavers reported they left, a satellite to
cancel, leases to renew), so owed work never waits for a planning round. It runs a round when the
observation's key changes (a job arrived, ended, started or was resized) or ``max_idle`` seconds
have passed: one observation (the snapshot and the records it was built from, with the actions
still on their way, :class:`~slurm_elastic.observe.inflight.InFlight`), planned on
(``run_round``: plan, validate, diff) and acted on (:meth:`Actor.apply`, the observation and the
actions, nothing else); each round is recorded in the store with its plan and its one-line
summary (logged at INFO). One failing round is logged with its traceback and retried with
exponential backoff; it never kills the loop. SIGTERM and SIGINT end the loop after the current
round.

In shadow mode (``dry_run = true``) it plans against the real queue and logs what it would do.
Otherwise it acts through the Slurm actor (:mod:`slurm_elastic.act`: start held jobs at the
planned size; resize launcher jobs in place with signed orders and satellite allocations;
requeue other jobs at a new size); its first poll is a whole observation, on which the actor
settles the actions a previous daemon left unfinished before the first round, inside the loop,
so a failing observation is retried like a round. One job's bad input never fails a round: the
view leaves it out or plans it from priors (its quarantine, in ``status`` and ``/metrics``), and
the actor refuses its action alone.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import FrameType
from typing import Any, Protocol

import numpy as np

from slurm_elastic import policies
from slurm_elastic.act.port import Actor
from slurm_elastic.collector import gc_paused
from slurm_elastic.config import Config
from slurm_elastic.core.actions import Action
from slurm_elastic.core.model import ClusterSnapshot
from slurm_elastic.core.rounds import ActionOutcome, RoundRecord, run_round
from slurm_elastic.daemon_metrics import Metrics
from slurm_elastic.errors import ConfigError
from slurm_elastic.observe.inflight import InFlight
from slurm_elastic.observe.observation import Observation
from slurm_elastic.store import Store

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 300.0


class View(Protocol):
    """The daemon's observer (:class:`~slurm_elastic.observe.view.ClusterView`): passive."""

    def poll(self) -> Observation:
        """Read the queue (and the jobs' new reports): an observation without a snapshot, whose key
        changes when the queue does."""
        ...

    def observation(self) -> Observation:
        """A round's observation: the snapshot now, with the resizes the store says are under way,
        and the records it was built from."""
        ...

    def quarantined(self) -> Mapping[str, str]:
        """The jobs of the queue now whose own input broke a rule, with the reason (planned from
        priors, or left out of the snapshot)."""
        ...

    @property
    def nodes_left_out(self) -> Mapping[str, str]:
        """The nodes of the last observation whose record did not read, with the reason."""
        ...

    def learned(self) -> Mapping[str, object] | None:
        """What the progress model was learned from; ``None`` when the view learns none."""
        ...


class _Snapshot:
    """A round's observation as ``run_round``'s observer: its snapshot."""

    def __init__(self, seen: Observation) -> None:
        self.seen = seen

    def observe(self) -> ClusterSnapshot:
        return self.seen.seen()


class _PlanOnly:
    """``run_round``'s actuator when the daemon acts itself, on the whole observation: nothing here."""

    def apply(self, snapshot: ClusterSnapshot, actions: tuple[Action, ...]) -> tuple[ActionOutcome, ...]:
        return ()


class ShadowActor:
    """Carries out nothing: logs each action the plan implies (dry-run / shadow mode)."""

    def apply(self, seen: Observation, actions: tuple[Action, ...]) -> tuple[ActionOutcome, ...]:
        """Log the actions; report each as not executed."""
        for a in actions:
            log.info("dry-run: would %s job %s: %d -> %d GPUs, batch %d", a.kind.value, a.job_id,
                     a.before.num_gpus, a.after.num_gpus, a.global_batch)
        return tuple(ActionOutcome(a, True, "dry-run: not executed") for a in actions)

    def tend(self, seen: Observation) -> list[str]:
        """Nothing to settle: shadow mode starts nothing and journals nothing."""
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
    in_flight: InFlight = field(default_factory=InFlight)
    _last_key: object = field(default=None, repr=False)
    _last_round: float = field(default=float("-inf"), repr=False)
    _polled: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        act: Actor | None = ShadowActor() if self.config.daemon.dry_run else self.actuator
        if act is None:
            raise ConfigError("daemon.dry_run = false needs an actuator (the Slurm actor)")
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
        """Run one round now (observe, plan, act on the one observation), record it, and count it."""
        t0 = time.perf_counter()
        with gc_paused():  # the collector runs after the round's decisions, not in the middle of them
            seen = self.observe()
            planned = run_round(_Snapshot(seen), self.planner, _PlanOnly(), self.memo, self.rng)
            rec = replace(planned, outcomes=self.act.apply(seen, planned.actions))
        if not self.config.daemon.dry_run:
            self.in_flight.carried_out(rec.outcomes, rec.snapshot.now)
        self.metrics.observe_round(rec, time.perf_counter() - t0)
        self.metrics.observe_quarantine(self.view.quarantined())
        self.metrics.observe_nodes_left_out(self.view.nodes_left_out)
        learned = self.view.learned()  # the real view's; a simulated one learns none
        if learned is not None:
            self.metrics.observe_progress_model(learned)
        self.memo = rec.memo
        self.rounds += 1
        self._last_round = self.clock()
        self.store.record_round(rec.snapshot.now, rec.plan, rec.summary(), rec.violations)
        log.info("%s", rec.summary())
        return rec

    def observe(self) -> Observation:
        """The view's observation of a round, with the actions this daemon carried out still on
        their way (passive).

        The view adds what the store says is under way (a satellite still waiting to start, a node
        release not done yet: a restarted daemon does not repeat them); this adds the actions of
        recent rounds until the snapshot shows them (:class:`~slurm_elastic.observe.inflight.InFlight`).
        """
        seen = self.view.observation()
        return replace(seen, snapshot=self.in_flight.added_to(seen.seen()))

    def due(self) -> bool:
        """One poll (read the queue and the reports, let the act step do what is owed); whether a
        round is due: the queue changed since the last round, or the last round is too old.

        The first poll is a whole observation: on it the actor settles what a previous daemon's
        journal left unfinished, before the first round."""
        seen = self.view.poll() if self._polled else self.observe()
        for line in self.act.tend(seen):
            log.info("%s", line)
        self._polled = True
        changed = seen.key != self._last_key
        self._last_key = seen.key
        return changed or self.clock() - self._last_round >= self.config.daemon.max_idle

    def run(self, max_rounds: int | None = None) -> int:
        """The loop; returns the number of rounds run (all of this daemon's, failed ones not counted).

        Unbounded (``max_rounds`` None), a failed round is logged and retried after a backoff that
        doubles up to :data:`MAX_BACKOFF_S`: a daemon outlives a slurmctld outage. ``max_rounds``
        (tests, ``--once``) ends the loop once this daemon has run that many rounds, or after as many
        tries in this call as it had rounds left to run, failed tries included: a bounded run never
        retries a failing round forever.
        """
        backoff = self.config.daemon.poll_interval
        tries_left = None if max_rounds is None else max_rounds - self.rounds
        while not self.stopping and (tries_left is None or tries_left > 0):
            try:
                ran = self.due()
                if ran:
                    self.round()
                backoff = self.config.daemon.poll_interval
            except Exception:  # the loop boundary: log with traceback, back off, go on
                if tries_left is not None:
                    tries_left -= 1
                    if tries_left <= 0:
                        log.exception("round failed")
                        break
                log.exception("round failed; retrying in %.0f s", backoff)
                self.sleep(backoff)
                backoff = min(MAX_BACKOFF_S, backoff * 2)
                continue
            if ran and tries_left is not None:
                tries_left -= 1
            if tries_left is None or tries_left > 0:
                self.sleep(self.config.daemon.poll_interval)
        return self.rounds


def install_signal_handlers(daemon: Daemon) -> None:
    """SIGTERM/SIGINT end the loop cleanly."""
    signal.signal(signal.SIGTERM, daemon.stop)
    signal.signal(signal.SIGINT, daemon.stop)
