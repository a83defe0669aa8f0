"""One observation of the cluster: what observing hands the acting step, and all it hands it.

This module owns :class:`Observation`. The daemon's view makes one at every poll (the queue's
records alone) and at every round (the records, and the snapshot built from them); the daemon
plans on its snapshot and gives the whole observation to the actor
(:class:`~slurm_elastic.act.port.Actor`), which reads the cluster through nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from slurm_elastic.core.model import ClusterSnapshot
from slurm_elastic.slurm.records import JobRecord


@dataclass(frozen=True)
class Observation:
    """What one read of the cluster saw.

    Attributes:
        now: the instant of the read (seconds since the epoch, the view's clock).
        records: Slurm's raw job records of the read, by job id (satellites not folded, every
            partition): what the acting step finds a job's user, comment, nodes and run in.
        key: changes whenever the queue does (job ids, states and node lists).
        snapshot: the snapshot built from ``records`` with the resizes under way (a round's
            observation); ``None`` for a poll, which reads the queue alone.
        finished: the running jobs whose last report says their training ended, in their current
            run (:func:`~slurm_elastic.observe.job_reports.finished_training`): their workers are
            exiting, nothing is resized or given back any more.
    """

    now: float
    records: Mapping[str, JobRecord] = field(default_factory=dict)
    key: object = None
    snapshot: ClusterSnapshot | None = None
    finished: frozenset[str] = frozenset()

    def seen(self) -> ClusterSnapshot:
        """The snapshot of a round's observation.

        Raises:
            ValueError: a poll's observation, which has none.
        """
        if self.snapshot is None:
            raise ValueError("a poll's observation has no snapshot")
        return self.snapshot
