"""The discrete-event loop of the simulator: the same ``run_round`` as the daemon, on virtual time.

This module owns :func:`simulate` and its cadence (:class:`Cadence`: when a round runs). Events
are job arrivals, job completions, epoch ends (only for planners that ask for them, see below), a
periodic tick (only for planners that are periodic by design) and, at the daemon's cadence, the
``max_idle`` round. Between events every running job progresses at a constant rate, so the loop
jumps from event to event.

By default a round (:func:`~slurm_elastic.core.rounds.run_round`) runs when the daemon's would
(:mod:`slurm_elastic.daemon`): the daemon polls every ``poll_interval`` seconds and plans at the
poll after the queue changed, and at least every ``max_idle`` seconds. So a round is owed at an
arrival, a completion, a report that changes what the planner sees (an epoch end, for a planner
that declares it reads them: ``epoch_events``; such a round comes at least ``Cadence.epoch_group``,
30 s, after the last round, as ``ones``'s rounds at every 2-s poll cost ten times the rounds), an
owed action falling due (a periodic planner's own re-plan, its tick), and ``max_idle`` seconds
after the last round while any job is active; it runs at the first poll (a multiple of
``poll_interval`` from time 0) at or after that moment and never closer than ``poll_interval`` to
the last round. The poll and ``max_idle`` are the site's
(``[daemon]`` of its ``elastic.toml``) or :class:`~slurm_elastic.config.DaemonConfig`'s defaults
(2 s and 60 s). The daemon's own follow-up poll (its actions change the queue it reads next) is
not a round here: the virtual cluster shows an action's result at once, so that round would see
what the acting round saw.

``round_gap`` (``Cadence.fixed``) keeps the fixed rounds of the papers that scheduled at an
interval (a batch scheduler's scheduling interval): a round runs after arrivals, completions,
ticks and epoch ends at most once per ``round_gap`` seconds, events that come sooner served
together at the end of the gap; epoch ends are grouped at least 30 s apart (a 50-job workload has
thousands), and there is no ``max_idle`` round. ``round_gap=0`` makes every arrival and completion
its own round. A periodic planner keeps its allocation between its own re-plans (its memo knows
when it last planned), so calling it at every event is what a daemon does too.

The horizon follows the workload: every job arrives, and the run ends when the last job ends,
however long the trace (:data:`~slurm_elastic.sim.workload.MAX_SUBMIT_S`). A ``horizon`` cuts the
run there instead; the jobs that did not end by then (running, waiting, or never arrived) are
named in the result's ``unfinished``. Two stops keep a run that cannot end from running for ever:
a few rounds in a row that start nothing while nothing runs and every job has arrived (for a
periodic planner, rounds at its ticks), and, without a horizon, a safety stop
(:func:`safety_stop`), far past any end a policy that runs its jobs reaches. A trace whose run
ended within the old 30-day horizon ends exactly as it did.

Memory and time grow linearly with the jobs: each event costs the running and waiting jobs of that
moment (the snapshot a round sees), not the jobs of the whole trace.

The planner's declared traits (:class:`~slurm_elastic.core.planner.Planner`) are read here:
``interval`` (seconds; ticks are scheduled every ``interval``, none when 0), ``epoch_events``
(rounds at epoch ends) and ``uses_progress`` (jobs report validation metrics and the ONES
progress model is refitted as jobs complete).

Returns a JSON-ready result (the schema ``slurm_elastic.reports.simulation`` renders): per-job
records, metrics (:mod:`slurm_elastic.sim.metrics`) and a timeline of busy GPUs and completed
jobs.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from slurm_elastic.collector import gc_paused
from slurm_elastic.config import MAX_IDLE_S, MAX_POLL_INTERVAL_S, MIN_POLL_INTERVAL_S, DaemonConfig
from slurm_elastic.core.planner import Planner
from slurm_elastic.core.rounds import run_round
from slurm_elastic.errors import ConfigError
from slurm_elastic.sim.cluster import VirtualCluster
from slurm_elastic.sim.costs import ResizeCost
from slurm_elastic.sim.metrics import metrics
from slurm_elastic.sim.workload import MAX_HORIZON_S, SIM_HORIZON_S, SimJobSpec, requested_time

log = logging.getLogger(__name__)

MAX_IDLE_ROUNDS = 3
EPOCH_GROUP_S = 30.0
"""Least seconds from the last round to a round owed only to epoch ends (module docstring)."""
_DAEMON = DaemonConfig()
SHOWN_UNFINISHED = 20
"""Most unfinished job ids a log line names (the result lists them all)."""


def safety_stop(jobs: Sequence[SimJobSpec]) -> float:
    """When a run without a horizon of its own stops at the latest: the last arrival, plus 30 days
    (:data:`~slurm_elastic.sim.workload.SIM_HORIZON_S`), plus twice the GPU-seconds the jobs bring
    at their requests (every job run one after another, each on one GPU at its requested
    GPU-seconds, twice over), capped at :data:`~slurm_elastic.sim.workload.MAX_HORIZON_S`. Only a
    policy that never runs some job (or pauses it for ever) gets there."""
    last = max((j.submit_time for j in jobs), default=0.0)
    work = 0.0
    for j in jobs:
        work += j.requested_gpus * requested_time(j)
    return min(MAX_HORIZON_S, last + SIM_HORIZON_S + 2.0 * work)


def unfinished_names(ids: Sequence[str]) -> str:
    """``a, b, c`` for at most :data:`SHOWN_UNFINISHED` ids, ``(and N more)`` after."""
    shown = ", ".join(ids[:SHOWN_UNFINISHED])
    return shown + (f" (and {len(ids) - SHOWN_UNFINISHED} more)" if len(ids) > SHOWN_UNFINISHED else "")


@dataclass(frozen=True, slots=True)
class Cadence:
    """When rounds run (module docstring): the daemon's, or fixed rounds ``fixed`` seconds apart.

    Attributes:
        poll: the daemon's ``poll_interval`` (seconds, 0.5 .. 3600): rounds run at its multiples.
        max_idle: the daemon's ``max_idle`` (seconds, ``poll`` .. 86400): a round at least this often
            while a job is active.
        fixed: seconds between fixed rounds (``round_gap``, >= 0); ``None``: the daemon's cadence.
        epoch_group: least seconds from the last round to a round owed only to epoch ends (>= 0;
            the rounds and the poll are never closer, whatever it says; module docstring).
    """

    poll: float = _DAEMON.poll_interval
    max_idle: float = _DAEMON.max_idle
    fixed: float | None = None
    epoch_group: float = EPOCH_GROUP_S

    def __post_init__(self) -> None:
        if not (math.isfinite(self.poll) and MIN_POLL_INTERVAL_S <= self.poll <= MAX_POLL_INTERVAL_S):
            raise ConfigError(f"poll interval {self.poll!r} s: must be a finite number in "
                              f"[{MIN_POLL_INTERVAL_S:g}, {MAX_POLL_INTERVAL_S:g}]")
        if not (math.isfinite(self.max_idle) and self.poll <= self.max_idle <= MAX_IDLE_S):
            raise ConfigError(f"max_idle {self.max_idle!r} s: must be a finite number in "
                              f"[the poll interval ({self.poll:g}), {MAX_IDLE_S:g}]")
        if self.fixed is not None and not (math.isfinite(self.fixed) and self.fixed >= 0):
            raise ConfigError(f"round gap {self.fixed!r} s: must be a finite number >= 0")
        if not (math.isfinite(self.epoch_group) and self.epoch_group >= 0):
            raise ConfigError(f"epoch grouping {self.epoch_group!r} s: must be a finite number >= 0")

    @classmethod
    def of(cls, daemon: DaemonConfig) -> Cadence:
        """The cadence of a site's daemon (its ``[daemon]`` table)."""
        return cls(daemon.poll_interval, daemon.max_idle)

    @property
    def label(self) -> str:
        """How a result names it: ``fixed 30 s`` or ``daemon (poll 2 s, max_idle 60 s)``."""
        if self.fixed is not None:
            return f"fixed {self.fixed:g} s"
        return f"daemon (poll {self.poll:g} s, max_idle {self.max_idle:g} s)"

    def next_poll(self, t: float) -> float:
        """The first poll (a multiple of ``poll``) at or after ``t``."""
        k = math.ceil(t / self.poll)
        at = k * self.poll
        return at if at >= t else (k + 1) * self.poll

    def round_at(self, now: float, last_round: float) -> float:
        """When a round owed at ``now`` runs, the last round having run at ``last_round``."""
        if self.fixed is not None:
            return max(now, last_round + self.fixed)
        return self.next_poll(max(now, last_round + self.poll))

    def idle_round_at(self, last_round: float) -> float:
        """When the ``max_idle`` round after a round at ``last_round`` runs (``inf``: none)."""
        if self.fixed is not None or not math.isfinite(last_round):
            return math.inf
        return self.next_poll(last_round + self.max_idle)

    def epoch_spacing(self) -> float:
        """Least seconds from the last round to a round owed to an epoch end."""
        return max(self.poll if self.fixed is None else self.fixed, self.epoch_group)


def simulate(jobs: Sequence[SimJobSpec], planner: Planner, *, gpus: int, gpus_per_node: int = 4,
             resize_cost: str | ResizeCost = "in-place", seed: int = 0, round_gap: float | None = None,
             horizon: float | None = None, workload: str = "", overhead_s: float = 0.0,
             equal_start: bool = False, host_cores: int | None = None, whole_blocks: bool = False,
             cadence: Cadence | None = None) -> dict[str, Any]:
    """Replay ``jobs`` under ``planner`` on a virtual cluster.

    Args:
        jobs: the workload (any order; sorted by submit time here).
        planner: the policy.
        gpus: cluster size (a multiple of ``gpus_per_node``).
        gpus_per_node: GPUs per node.
        resize_cost: ``in-place``, ``checkpoint``, seconds, or the pauses themselves.
        seed: seed of the planner's random numbers.
        round_gap: fixed rounds, at least this many seconds apart (module docstring); ``None``: the
            cadence's (by default the daemon's).
        horizon: stop at this virtual time, seconds in ``(0, MAX_HORIZON_S]`` (jobs running, waiting
            or not yet arrived then are reported in ``unfinished``); ``None``: when the last job
            ends (module docstring).
        workload: name recorded in the result.
        overhead_s, equal_start, host_cores, whole_blocks: physics of a real cluster the profiles
            leave out (:class:`~slurm_elastic.sim.cluster.VirtualCluster`; off by default).
        cadence: when rounds run (a site's daemon: :meth:`Cadence.of`); ``None``: the daemon's
            defaults. ``round_gap`` given replaces it with fixed rounds.

    Returns:
        The result (module docstring); ``horizon`` is the one given (``None``: the trace's own),
        ``cadence`` the cadence's label and ``unfinished`` the ids of the jobs that did not end, in
        submit order.

    Raises:
        ConfigError: bad cluster shape, resize cost, horizon, round gap or cadence.
    """
    if horizon is not None and not (math.isfinite(horizon) and 0 < horizon <= MAX_HORIZON_S):
        raise ConfigError(f"horizon {horizon!r} s: must be a finite number > 0 and <= {MAX_HORIZON_S:g} s")
    gap_limit = MAX_HORIZON_S if horizon is None else horizon
    if round_gap is not None and not (math.isfinite(round_gap) and 0 <= round_gap <= gap_limit):
        raise ConfigError(f"round gap {round_gap!r} s: must be a finite number >= 0 and <= the horizon "
                          f"({gap_limit:g} s)")
    cadence = cadence or Cadence()
    if round_gap is not None:
        cadence = Cadence(cadence.poll, cadence.max_idle, round_gap, cadence.epoch_group)
    if gpus < 1 or gpus_per_node < 1 or gpus % gpus_per_node:
        raise ConfigError(f"--gpus {gpus} must be a positive multiple of --gpus-per-node {gpus_per_node}")
    cost = ResizeCost.parse(resize_cost)
    cluster = VirtualCluster(gpus // gpus_per_node, gpus_per_node, cost, fit_progress=planner.uses_progress,
                             overhead_s=overhead_s, equal_start=equal_start, host_cores=host_cores,
                             whole_blocks=whole_blocks)
    order = sorted(jobs, key=lambda j: (j.submit_time, j.job_id))
    interval = float(planner.interval)
    epoch_events = planner.epoch_events
    daemon = cadence.fixed is None
    epoch_gap = cadence.epoch_spacing()
    rng = np.random.default_rng(seed)
    memo: Any = None
    nxt = 0
    next_tick = interval if interval > 0 else math.inf
    last_round = -math.inf
    timeline_t: list[float] = [0.0]
    timeline_busy: list[int] = [0]
    timeline_done: list[int] = [0]
    timeline_active: list[int] = [0]
    idle_rounds = 0
    rounds = 0
    pending = False  # a round is owed (arrival, completion, tick, epoch end or max_idle seen since the last one)
    due = math.inf  # when the owed round runs
    total = len(order)
    # Without a horizon: the safety stop, first its cheap part (30 days past the last arrival: no run
    # that ended within the old 30-day horizon gets near it), the whole of it only when a run gets there.
    stop = horizon if horizon is not None else (order[-1].submit_time if order else 0.0) + SIM_HORIZON_S
    stop_known = horizon is not None
    while nxt < total or cluster.active:
        t_arrival = order[nxt].submit_time if nxt < total else math.inf
        t_finish = cluster.next_finish()
        t_epoch = math.inf
        if epoch_events and not (daemon and pending):  # an owed round already sees the next epoch end
            t_epoch = max(cluster.next_epoch_end(), last_round + epoch_gap)
        t_due = due if pending else math.inf
        t_idle = cadence.idle_round_at(last_round) if daemon and not pending and cluster.active else math.inf
        t = min(t_arrival, t_finish, next_tick, t_epoch, t_due, t_idle)
        if math.isfinite(t) and t > stop and not stop_known:
            stop, stop_known = max(stop, safety_stop(order)), True
        if not math.isfinite(t) or t > stop:
            if cluster.active or nxt < total:
                why = ("nothing left to happen" if not math.isfinite(t) else
                       f"horizon {stop:g} s" if horizon is not None else f"safety stop {stop:g} s")
                log.warning("simulation stopped at t=%.0f (%s) with %d job(s) unfinished", cluster.now, why,
                            len(cluster.active) + total - nxt)
            break
        moved = t > cluster.now
        cluster.advance(t)
        arrived = 0
        while nxt < total and order[nxt].submit_time <= cluster.now:
            cluster.arrive(order[nxt])
            nxt += 1
            arrived += 1
        finished = cluster.complete_finished()
        now = cluster.now
        if not (moved or arrived or finished or now >= next_tick or now >= t_epoch or now >= t_due
                or now >= t_idle):
            # Nothing happened and nothing changed, so nothing ever would: the clock is stuck at a
            # job's finish time, its work short of done by less than the clock's last bit (late in a
            # long trace, a short job). That job ends now.
            finished = cluster.complete_finished(at_finish_time=True)
            if not finished:
                log.error("t=%.0f: the simulation cannot move on; stopped with %d job(s) unfinished", now,
                          len(cluster.active) + total - nxt)
                break
        tick = now >= next_tick
        if tick:
            next_tick = (math.floor(now / interval) + 1) * interval
        epoch = epoch_events and now >= t_epoch
        if not pending and (arrived or finished or tick or epoch or now >= t_idle):
            pending, due = True, cadence.round_at(now, last_round)
        if pending and not cluster.active:
            pending = False  # nothing to plan for
        if pending and now >= due:
            pending = False
            busy_before = cluster.busy_gpus()
            with gc_paused():  # as the daemon runs its rounds (slurm_elastic.collector)
                rec = run_round(cluster, planner, cluster, memo, rng)
            memo = rec.memo
            rounds += 1
            last_round = now
            if rec.violations:
                log.error("t=%.0f plan refused: %s", now, "; ".join(rec.violations[:3]))
            log.debug("%s", rec.summary())
            # A round that starts nothing while nothing runs would repeat forever: stop after a few
            # (a periodic planner's: a few at its ticks, where it re-plans).
            idle = not rec.actions and busy_before == 0 and nxt >= total
            if idle and (not interval or tick):
                idle_rounds += 1
                if idle_rounds >= MAX_IDLE_ROUNDS:
                    log.warning("no job can be placed; %d job(s) left waiting", len(cluster.active))
                    break
            elif not idle:
                idle_rounds = 0
        if timeline_t[-1] == now:
            timeline_t.pop(), timeline_busy.pop(), timeline_done.pop(), timeline_active.pop()
        timeline_t.append(now)
        timeline_busy.append(cluster.busy_gpus())
        timeline_done.append(cluster.completed)
        timeline_active.append(len(cluster.active))
    timeline: dict[str, list[float]] = {"t": timeline_t, "busy_gpus": [float(b) for b in timeline_busy],
                                        "completed": [float(c) for c in timeline_done],
                                        "active": [float(a) for a in timeline_active]}
    cluster.sync()  # jobs left unfinished at the horizon
    records = [_record(j) for j in cluster.jobs.values()]
    unfinished = [s.job_id for s in order if (j := cluster.jobs.get(s.job_id)) is None or j.end is None]
    if unfinished:
        log.warning("%s: %d job(s) did not end by t=%.0f: %s", planner.name, len(unfinished), cluster.now,
                    unfinished_names(unfinished))
    return {
        "workload": workload,
        "policy": planner.name,
        "seed": seed,
        "gpus": gpus,
        "gpus_per_node": gpus_per_node,
        "resize_cost": cost.label,
        "cadence": cadence.label,
        "rounds": rounds,
        "horizon": horizon,
        "unfinished": unfinished,
        "metrics": metrics(records, order, timeline, gpus, gpus_per_node=gpus_per_node, bound=not equal_start),
        "jobs": records,
        "timeline": timeline,
    }


def _record(j: Any) -> dict[str, Any]:
    s = j.spec
    done = j.end is not None and not j.dropped
    return {
        "job_id": s.job_id, "model": s.model, "category": s.category, "user": s.user, "account": s.account,
        "submit": s.submit_time, "requested_gpus": s.requested_gpus,
        "start": j.start, "end": j.end if done else None,
        "queue": (j.start - s.submit_time) if j.start is not None else None,
        "exec": (j.end - j.start) if done and j.start is not None else None,
        "jct": (j.end - s.submit_time) if done else None,
        "gpu_seconds": j.gpu_seconds, "resizes": j.resizes, "dropped": j.dropped, "finished": done,
        "ftf": None, "measured": s.measured,
    }

