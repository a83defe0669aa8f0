"""Resizes under way: what the planner must not touch again until Slurm and the job show the result.

This module owns the passive views of work already started. :func:`owed_by_store` reads the
store a (possibly restarted) daemon shares with its predecessors: node releases owed after a
shrink, satellites submitted but not yet started, and jobs whose training reported its end
(:func:`finished_jobs`). :class:`InFlight` is the daemon's own bookkeeping of the actions it
carried out recently: noted after each round, dropped once the snapshot shows their target (or
they are too old to wait for, :func:`settle`), added to each round's observation. Nothing here
changes anything in Slurm.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field, replace

from slurm_elastic.core.actions import ActionKind
from slurm_elastic.core.model import ClusterSnapshot, InFlightResize, JobId, JobState
from slurm_elastic.core.rounds import ActionOutcome
from slurm_elastic.observe.job_reports import finished_training
from slurm_elastic.slurm.records import JobRecord, run_start_of
from slurm_elastic.store import Store

IN_FLIGHT_TIMEOUT_S = 60.0
"""Longest wait for a carried-out action to show in Slurm before the planner may plan the job again."""


def finished_jobs(store: Store, records: Mapping[str, JobRecord], now: float) -> frozenset[str]:
    """The running jobs of ``records`` with a comment (the launcher's channel) whose last report says
    their training ended, in their current run, by ``now`` (:func:`finished_training`)."""
    return frozenset(jid for jid, rec in records.items()
                     if rec.state is JobState.RUNNING and rec.comment
                     and finished_training(store.progress_of(jid), now, run_start_of(rec)))


def owed_by_store(store: Store, records: Mapping[str, JobRecord],
                  snapshot: ClusterSnapshot) -> tuple[InFlightResize, ...]:
    """Resizes still under way by the store: node releases not done, satellites not started.

    A job with a waiting satellite is on its way to its GPUs plus the satellite's; a job with
    a node release owed is on its way to its new world; a job that reported the end of its
    training is on its way out. The daemon keeps such jobs out of the plan's actions, also
    after a restart.

    Args:
        store: the daemon's store.
        records: the raw job records of the same observation (satellites not folded).
        snapshot: the snapshot built from them.
    """
    out = {r.job_id: InFlightResize(JobId(r.job_id), r.world, r.ordered) for r in store.releases()}
    jobs = {j.job_id: j for j in snapshot.jobs}
    times = store.satellite_times()
    waiting: dict[str, tuple[int, float]] = {}
    for sat_id, parent in store.satellites().items():
        sat = records.get(sat_id)
        if sat is not None and sat.state is JobState.PENDING and parent in jobs:
            gpus, since = waiting.get(parent, (0, times.get(sat_id, snapshot.now)))
            waiting[parent] = (gpus + sat.requested_gpus, min(since, times.get(sat_id, snapshot.now)))
    for parent, (gpus, since) in waiting.items():
        out.setdefault(parent, InFlightResize(JobId(parent), jobs[JobId(parent)].num_gpus + gpus, since))
    for job in snapshot.jobs:  # trained to the end, its workers are exiting: nothing to resize any more
        rows = store.progress_of(job.job_id) if job.state is JobState.RUNNING else []
        rec = records.get(job.job_id)
        if finished_training(rows, snapshot.now, run_start_of(rec) if rec is not None else None):
            out.setdefault(job.job_id, InFlightResize(job.job_id, job.num_gpus, rows[-1].t))
    return tuple(out.values())


def settle(in_flight: MutableMapping[JobId, InFlightResize], snapshot: ClusterSnapshot) -> None:
    """Forget the carried-out actions that have arrived.

    An action is on its way until the job shows its target (a START until the job runs at the new
    size, a DROP until it is gone, a REBATCH until the job reports the new per-GPU batch: a job
    still starting reports nothing for seconds, and its order is not sent again every round) or
    for at most ``IN_FLIGHT_TIMEOUT_S`` seconds.
    """
    jobs = {j.job_id: j for j in snapshot.jobs}
    for jid, fl in list(in_flight.items()):
        job = jobs.get(jid)
        arrived = (job is None) if fl.target_gpus == 0 else (
            job is not None and job.state is JobState.RUNNING and job.num_gpus == fl.target_gpus
            and fl.target_local_batch in (0, job.local_batch))
        if arrived or snapshot.now - fl.since > IN_FLIGHT_TIMEOUT_S:
            del in_flight[jid]


@dataclass
class InFlight:
    """The actions this daemon carried out, until the snapshot shows them (:func:`settle`)."""

    actions: dict[JobId, InFlightResize] = field(default_factory=dict)

    def carried_out(self, outcomes: Iterable[ActionOutcome], now: float) -> None:
        """Note the actions of a round that were carried out (``now``: the round's snapshot's instant)."""
        for o in outcomes:
            if o.ok:
                rebatch = o.action.kind is ActionKind.REBATCH
                self.actions[o.action.job_id] = InFlightResize(o.action.job_id, o.action.after.num_gpus, now,
                                                               o.action.local_batch if rebatch else 0)

    def added_to(self, snapshot: ClusterSnapshot) -> ClusterSnapshot:
        """``snapshot`` with the actions still on their way added to what it says is under way
        (one it already names for a job is replaced by this daemon's)."""
        settle(self.actions, snapshot)
        under_way = {**{fl.job_id: fl for fl in snapshot.in_flight}, **self.actions}
        return replace(snapshot, in_flight=tuple(under_way.values())) if under_way else snapshot
