"""Leases: while the daemon runs, it alone starts elastic jobs.

This module owns :class:`Leases`. Every waiting elastic job a round did not start has its begin
time pushed :data:`LEASE_S` seconds ahead (``scontrol update JobId=J,K,... StartTime=now+LEASE_S``,
:data:`LEASE_BATCH` ids a command), renewed at every poll when half of it is left. A daemon that
is gone renews nothing, and Slurm starts the job itself when the lease runs out: the fallback
(``job_submit.lua`` holds a new job for its first seconds the same way). A job the round just
started, or one with an action on its way (the snapshot's ``in_flight``: a START whose job is not
running yet), is not leased: that would undo its ``StartTime=now``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from slurm_elastic.act.commands import UNSTARTABLE
from slurm_elastic.act.context import Hands
from slurm_elastic.core.model import ClusterSnapshot, JobState
from slurm_elastic.errors import ElasticError
from slurm_elastic.slurm.records import JobRecord

LEASE_S = 60
"""Seconds a lease keeps Slurm from starting a waiting elastic job (module docstring)."""
LEASE_BATCH = 200
"""Job ids per lease command."""


class Leases:
    """The waiting elastic jobs the daemon holds, and until when."""

    def __init__(self, hands: Hands) -> None:
        self.hands = hands
        self.lease_s = LEASE_S
        self._leasing: set[str] = set()  # the waiting elastic jobs of the last round
        self._leased: dict[str, float] = {}  # job id -> until when Slurm will not start it

    def lease(self, snapshot: ClusterSnapshot, records: Mapping[str, JobRecord], started: Collection[str]) -> list[str]:
        """Lease the waiting elastic jobs of ``snapshot`` but ``started`` and those in flight; one
        line per failure, and one per job Slurm started itself (its lease ran out)."""
        flying = {str(f.job_id) for f in snapshot.in_flight}
        lapsed = [f"job {j.job_id} was started by Slurm itself: its lease ran out (the daemon was away or slow)"
                  for j in snapshot.elastic_jobs() if j.state is JobState.RUNNING and j.job_id in self._leased]
        self._leasing = {str(j.job_id) for j in snapshot.elastic_jobs() if j.is_waiting} - {str(j) for j in started} \
            - flying
        return lapsed + self.renew(records)

    def renew(self, records: Mapping[str, JobRecord]) -> list[str]:
        """Renew the leases with half or less left, of jobs ``records`` show still waiting and startable."""
        now = self.hands.clock()
        self._leased = {j: t for j, t in self._leased.items() if j in self._leasing}
        due = sorted(j for j in self._leasing if self._leased.get(j, 0.0) - now < self.lease_s / 2
                     and (r := records.get(j)) is not None and r.state in (JobState.PENDING, JobState.PREEMPTED)
                     and not set(r.slurm_state) & UNSTARTABLE)
        lines = []
        for i in range(0, len(due), LEASE_BATCH):
            chunk = due[i:i + LEASE_BATCH]
            try:
                self.hands.runner(["scontrol", "update", f"JobId={','.join(chunk)}", f"StartTime=now+{self.lease_s}"])
            except ElasticError as exc:  # one job that just started or ended: the others next poll
                lines.append(f"lease of waiting jobs {','.join(chunk[:5])}{'...' if len(chunk) > 5 else ''} "
                             f"failed: {exc}")
                continue
            self._leased.update({j: now + self.lease_s for j in chunk})
        return lines
