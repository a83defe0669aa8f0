"""Resizes under way: what the planner must not touch again until Slurm and the job show the result.

This module owns two passive views of work already started. :func:`owed_by_store` reads the
store a (possibly restarted) daemon shares with its predecessors: node releases owed after a
shrink, satellites submitted but not yet started, and jobs whose training reported its end.
:func:`settle` drops, from the actions this daemon carried out recently, those whose target the
snapshot now shows (or that are too old to wait for). Neither changes anything in Slurm.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping

from slurm_elastic.core.model import ClusterSnapshot, InFlightResize, JobId, JobState
from slurm_elastic.observe.progress import finished_training
from slurm_elastic.slurm.records import JobRecord, run_start_of
from slurm_elastic.store import Store

IN_FLIGHT_TIMEOUT_S = 60.0
"""Longest wait for a carried-out action to show in Slurm before the planner may plan the job again."""


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
    out = {r["job_id"]: InFlightResize(JobId(r["job_id"]), int(r["world"]), float(r["ordered"]))
           for r in store.releases()}
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
