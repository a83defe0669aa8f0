"""The daemon's observer: one record source and the store, seen through one snapshot function.

This module owns :class:`ClusterView`, the :class:`~slurm_elastic.core.rounds.Observer` of the
daemon, the demo and the real-cluster tests, whichever backend reads Slurm (the CLI or pyslurm,
both a :class:`RecordSource`). It is passive: it reads Slurm's records and the jobs' new reports
(stored as progress rows), and hands each read over as one
:class:`~slurm_elastic.observe.observation.Observation` (the records and, for a round, the snapshot
built from them), which the acting step gets through its port; it never changes anything in Slurm.
One job's bad input never fails an observation: a record
Slurm wrote that does not parse, a job that breaks a snapshot rule or a report out of its job's
bounds leaves that job out or plans it from priors, and puts it in the store's quarantine with
the reason (:attr:`ClusterView.left_out` names the jobs left out now).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from slurm_elastic.collector import gc_paused
from slurm_elastic.core.model import ClusterSnapshot, JobId, JobState
from slurm_elastic.observe.bounds import limits_of
from slurm_elastic.observe.history import ProgressLearner
from slurm_elastic.observe.inflight import finished_jobs, owed_by_store
from slurm_elastic.observe.job_reports import ingest, join_checked, runtimes
from slurm_elastic.observe.observation import Observation
from slurm_elastic.observe.snapshot import SnapshotMemo, fingerprint, in_partitions, snapshot_of
from slurm_elastic.slurm.dialects import is_bare_completing
from slurm_elastic.slurm.records import JobRecord, NodeRecord
from slurm_elastic.store import Store
from slurm_elastic_predictor.progress import BetaProgressModel
from slurm_elastic_predictor.throughput import ThroughputModel

log = logging.getLogger(__name__)


class RecordSource(Protocol):
    """Reads Slurm's records (:class:`~slurm_elastic.slurm.cli_backend.SlurmCli`,
    :class:`~slurm_elastic.slurm.pyslurm_backend.PyslurmSource`)."""

    @property
    def release(self) -> tuple[int, int, int]:
        """The running Slurm's release."""
        ...

    @property
    def runner(self) -> Callable[[Sequence[str]], str]:
        """Runs Slurm's commands (argv lists); the acting step is handed it, the view never calls it."""
        ...

    def jobs(self) -> list[JobRecord]:
        """Every job Slurm lists (a record that does not convert is left out, named in ``refused``)."""
        ...

    @property
    def refused(self) -> Mapping[str, str]:
        """The job records of the last read that were left out, by job id, with the reason."""
        ...

    @property
    def refused_nodes(self) -> Mapping[str, str]:
        """The node records of the last :meth:`read` that were left out, by node name, with the reason."""
        ...

    def read(self) -> tuple[list[NodeRecord], list[JobRecord]]:
        """Every node and every job."""
        ...


@dataclass
class ClusterView:
    """Observes the cluster for the daemon.

    Args:
        source: where Slurm's records come from.
        profiles: throughput models by name (the default model's must be present).
        clock: seconds since the epoch.
        partitions: partitions whose nodes the daemon manages (empty: all).
        default_model: profile of elastic jobs that report no model.
        store: the daemon's store (satellites, launcher reports, owed releases); ``None``: Slurm alone.
        writes_store: store the jobs' new reports and quarantine (the daemon); ``False`` for a
            reader beside the daemon (``status``), which sees what the store holds and writes nothing.
    """

    source: RecordSource
    profiles: Mapping[str, ThroughputModel]
    clock: Callable[[], float]
    partitions: tuple[str, ...] = ()
    default_model: str = "cifar10"
    store: Store | None = None
    writes_store: bool = True
    records: dict[str, JobRecord] = field(default_factory=dict)
    """The raw job records of the last read, by id (satellites not folded); the acting step gets
    them in the read's :class:`~slurm_elastic.observe.observation.Observation`, never here."""
    left_out: dict[str, str] = field(default_factory=dict)
    """Jobs of the last observation left out of the snapshot, by id, with the reason (a record Slurm
    wrote that does not parse, a job that breaks a snapshot rule)."""
    nodes_left_out: dict[str, str] = field(default_factory=dict)
    """Nodes of the last observation left out of the snapshot, by name, with the reason (a record
    Slurm printed that does not parse; the elastic jobs running there are left out too)."""
    learner: ProgressLearner | None = None
    """The progress model learned from the jobs Slurm's records showed completed (made from ``store``
    at the first observation: it notes them, refits and keeps the model only when the view
    ``writes_store``)."""
    made: SnapshotMemo = field(default_factory=SnapshotMemo)
    """The jobs of the last snapshot (an unchanged one is not made again)."""
    snapshot_s: float = 0.0
    """Seconds the last observation spent building its snapshot from the records (``bench observe``)."""
    restart_counts: dict[JobId, int] = field(default_factory=dict)
    """Each job's restart count when last read other than completing (:meth:`_requeues_under_way`)."""

    def _progress_model(self) -> BetaProgressModel | None:
        if self.store is None:
            return None
        if self.learner is None:
            self.learner = ProgressLearner(self.store, writes=self.writes_store)
        return self.learner.current(self.records.values())

    def _jobs_read(self, jobs: list[JobRecord]) -> tuple[list[JobRecord], list[JobRecord]]:
        """Keep the records of this read and store the managed jobs' new reports; returns the
        records (requeues under way told apart) and the managed ones among them."""
        jobs = self._requeues_under_way(jobs)
        self.records = {j.job_id: j for j in jobs}
        self._quarantine(self.source.refused)
        managed = in_partitions(jobs, self.partitions)
        self.read_reports(managed)
        return jobs, managed

    def _requeues_under_way(self, jobs: list[JobRecord]) -> list[JobRecord]:
        """Records in which a job being requeued waits again instead of having ended.

        Slurm 22.05 prints a job whose processes are being killed as ``COMPLETING``, whether it ends
        or was just requeued (25.11 prints ``PENDING`` with the flag; the dialect reads that). A
        ``COMPLETING`` job whose restart count rose since it was last read is a requeue under way:
        taken for ended, it would leave the plan (a policy learns it ended) and return a moment later."""
        last = self.restart_counts
        out: list[JobRecord] = []
        counts: dict[JobId, int] = {}
        for rec in jobs:
            requeuing = is_bare_completing(rec.slurm_state)
            if requeuing and rec.job_id in last:
                counts[rec.job_id] = last[rec.job_id]
                if rec.restart_count > last[rec.job_id]:
                    rec = replace(rec, state=JobState.PREEMPTED)
            elif not requeuing:
                counts[rec.job_id] = rec.restart_count
            out.append(rec)
        self.restart_counts = counts
        return out

    def read_reports(self, records: list[JobRecord]) -> int:
        """Store the new reports of these jobs, each checked against its job's bounds; returns how many."""
        if self.store is None or not self.writes_store:
            return 0
        now = self.clock()
        return ingest(self.store, records, lambda rec: limits_of(rec, now=now, profiles=self.profiles,
                                                              default_model=self.default_model), now)

    def _first_submits(self, jobs: list[JobRecord]) -> list[JobRecord]:
        """Records with each job's first submit time: Slurm resets it on every requeue, so a
        policy that serves by submit time would send a preempted job to the back of the queue."""
        if self.store is None:
            return jobs
        seen: dict[str, float] = {j.job_id: float(j.submit_time) for j in jobs if j.submit_time}
        first = self.store.first_submits(seen) if self.writes_store else {
            **seen, **{j: min(t, seen[j]) for j, t in self.store.submit_times(seen).items()}}
        return [replace(j, submit_time=int(first[j.job_id])) if j.job_id in first and first[j.job_id] < (
            j.submit_time or 0) else j for j in jobs]

    def _quarantine(self, reasons: Mapping[str, str]) -> None:
        """Jobs left out of this observation: logged once, and kept in the store's quarantine."""
        for jid, reason in reasons.items():
            new = self.store.quarantine(jid, reason, self.clock()) if self.store is not None and self.writes_store \
                else jid not in self.left_out
            if new:
                log.warning("job %s left out (every other job is planned): %s", jid, reason)

    def _nodes_left_out(self, reasons: Mapping[str, str]) -> None:
        """Nodes left out of this observation: logged when a node is first left out (or its reason
        changes) and when it reads again."""
        for name, reason in reasons.items():
            if self.nodes_left_out.get(name) != reason:
                log.warning("node %s left out (every other node is planned): %s", name, reason)
        for name in set(self.nodes_left_out) - set(reasons):
            log.info("node %s reads again", name)
        self.nodes_left_out = dict(reasons)

    def poll(self) -> Observation:
        """Read the queue and the jobs' new reports: the observation of the queue alone, whose key
        changes when the queue does (the collector paused, as :meth:`observe`)."""
        with gc_paused():
            jobs, _ = self._jobs_read(self.source.jobs())
            return self._observation(jobs)

    def _observation(self, jobs: list[JobRecord], snapshot: ClusterSnapshot | None = None) -> Observation:
        now = snapshot.now if snapshot is not None else self.clock()
        finished = finished_jobs(self.store, self.records, now) if self.store is not None else frozenset()
        return Observation(now, self.records, fingerprint(jobs), snapshot, finished)  # a new dict every read

    def observation(self) -> Observation:
        """The observation of a round: the snapshot now (managed nodes, their jobs with satellites
        folded in, what launchers reported, and the resizes the store says are still under way)
        and the records it was built from.

        Python's cyclic garbage collector is paused while it reads and builds (:func:`gc_paused`)."""
        with gc_paused():
            return self._observe()

    def observe(self) -> ClusterSnapshot:
        """The snapshot of a new observation (:meth:`observation`): what a planner plans on."""
        return self.observation().seen()

    def _observe(self) -> Observation:
        nodes, jobs = self.source.read()
        jobs, managed = self._jobs_read(self._first_submits(jobs))
        self._nodes_left_out(self.source.refused_nodes)
        store = self.store
        refused: dict[str, str] = {}
        t = time.perf_counter()
        now = self.clock()  # one instant: the act step judges a job's end report by the snapshot's
        snap = snapshot_of(nodes, jobs, now=now, profiles=self.profiles, partitions=self.partitions,
                           default_model=self.default_model,
                           satellites=store.satellites() if store is not None else None,
                           runtimes=join_checked(runtimes(store, managed, now), managed) if store is not None else None,
                           refused=refused,
                           unreadable_nodes=self.nodes_left_out,
                           progress_model=self._progress_model(), memo=self.made)
        self.snapshot_s = time.perf_counter() - t
        self._quarantine(refused)
        self.left_out = {**self.source.refused, **refused}
        owed = owed_by_store(store, self.records, snap) if store is not None else ()
        return self._observation(jobs, replace(snap, in_flight=owed) if owed else snap)

    def learned(self) -> dict[str, object] | None:
        """What the progress model was learned from (:meth:`ProgressLearner.summary`); ``None``
        before the first observation or without a store."""
        return self.learner.summary() if self.learner is not None else None

    def quarantined(self) -> dict[str, str]:
        """Jobs of the last read whose own input broke a rule, with the reason: those in the store's
        quarantine (planned from priors) and those left out of the snapshot."""
        held = self.store.quarantined() if self.store is not None else {}
        return {**{j: r for j, r in held.items() if j in self.records}, **self.left_out}

    def nodes(self) -> list[NodeRecord]:
        """The managed nodes now."""
        wanted = set(self.partitions)
        return [n for n in self.source.read()[0] if not wanted or wanted & set(n.partitions)]
