"""The daemon's observer: one record source and the store, seen through one snapshot function.

This module owns :class:`ClusterView`, the :class:`~slurm_elastic.core.rounds.Observer` of the
daemon, the demo and the real-cluster tests, whichever backend reads Slurm (the CLI or pyslurm,
both a :class:`RecordSource`). It is passive: it reads Slurm's records and the jobs' new reports
(stored as progress rows), and it keeps the raw records of its last read for the acting step;
it never changes anything in Slurm.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from slurm_elastic.core.model import ClusterSnapshot
from slurm_elastic.observe.inflight import owed_by_store
from slurm_elastic.observe.progress import ingest, runtimes
from slurm_elastic.observe.snapshot import fingerprint, in_partitions, snapshot_of
from slurm_elastic.slurm.records import JobRecord, NodeRecord
from slurm_elastic.store import Store
from slurm_elastic_predictor.throughput import ThroughputModel


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
        """Every job Slurm lists."""
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
    """

    source: RecordSource
    profiles: Mapping[str, ThroughputModel]
    clock: Callable[[], float]
    partitions: tuple[str, ...] = ()
    default_model: str = "cifar10"
    store: Store | None = None
    records: dict[str, JobRecord] = field(default_factory=dict)
    """The raw job records of the last read, by id (satellites not folded): what the actuator acts on."""

    def _jobs_read(self, jobs: list[JobRecord]) -> list[JobRecord]:
        self.records = {j.job_id: j for j in jobs}
        managed = in_partitions(jobs, self.partitions)
        if self.store is not None:
            ingest(self.store, managed)
        return managed

    def poll(self) -> object:
        """Read the queue and the jobs' new reports; return a key that changes when the queue does."""
        jobs = self.source.jobs()
        self._jobs_read(jobs)
        return fingerprint(jobs)

    def observe(self) -> ClusterSnapshot:
        """The snapshot now: managed nodes, their jobs (satellites folded in), what launchers reported,
        and the resizes the store says are still under way."""
        nodes, jobs = self.source.read()
        managed = self._jobs_read(jobs)
        store = self.store
        snap = snapshot_of(nodes, jobs, now=self.clock(), profiles=self.profiles, partitions=self.partitions,
                           default_model=self.default_model,
                           satellites=store.satellites() if store is not None else None,
                           runtimes=runtimes(store, managed) if store is not None else None)
        owed = owed_by_store(store, self.records, snap) if store is not None else ()
        return replace(snap, in_flight=owed) if owed else snap

    def nodes(self) -> list[NodeRecord]:
        """The managed nodes now."""
        wanted = set(self.partitions)
        return [n for n in self.source.read()[0] if not wanted or wanted & set(n.partitions)]
