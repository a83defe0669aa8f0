"""A site's start and end latencies, measured from its own ``sacct`` records: what ``what-if`` adds
to the simulator's physics (issue 39, item 3).

This module owns :func:`measure_site_physics` (records in, :class:`SitePhysics` out; pure: no
command, no clock) and :class:`SitePhysics`. ``bench fidelity`` found that a short job's start-up
and ending are a third of its JCT, and a throughput profile, measured at step boundaries, cannot
see them. What Slurm's accounting sees of them, per job that ran its work in a step (``srun``)
and completed:

* **start latency**: Slurm's start of the job to the start of its first work step (the prolog,
  the batch script up to ``srun``, ``srun`` launching the tasks on every node);
* **end latency**: the end of its last work step to Slurm's end of the job (the batch script's
  tail, the epilog, Slurm ending the job on every node).

Both are grouped by the job's node count (a job on more nodes launches and ends more daemons):
:class:`SitePhysics` keeps each node count's median over its jobs, and how many were measured.
A resized job counts from its first shape's start to its last shape's end, at its first shape's
node count. Jobs that did not complete (cancelled, failed, timed out, still running), that ran no
work step, or whose times are missing are left out; so are latencies that are negative (a clock
step), which Slurm's whole seconds allow only as rounding, clipped to 0.

What ``sacct`` cannot see is left out and said so: the time a job's processes spend inside the
step before their first training step (the interpreter and framework loading), which ``bench
fidelity`` measures from the launcher's reports. In a replayed history it is part of the job's
elapsed time (its replayed work).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from slurm_elastic.slurm.records import AccountingRecord

__all__ = ["NodeCountLatency", "SitePhysics", "measure_site_physics"]


@dataclass(frozen=True, slots=True)
class NodeCountLatency:
    """The median latencies (seconds) of the completed jobs that started on ``nodes`` nodes."""

    nodes: int
    jobs: int
    start_s: float
    end_s: float

    @property
    def overhead_s(self) -> float:
        """Start and end latency together: what a job on this many nodes pays at each start."""
        return self.start_s + self.end_s


@dataclass(frozen=True, slots=True)
class SitePhysics:
    """The measured latencies by node count (ascending), and the jobs the records held in all."""

    by_nodes: tuple[NodeCountLatency, ...]
    records_jobs: int

    @property
    def measured_jobs(self) -> int:
        """Jobs measured (completed, with a work step and every time known)."""
        return sum(x.jobs for x in self.by_nodes)

    def overhead_by_nodes(self) -> dict[int, float]:
        """Start and end latency per node count measured: the simulator's ``overhead_s``
        (:func:`slurm_elastic.sim.costs.overhead_for` says which a job on another node count pays)."""
        return {x.nodes: x.overhead_s for x in self.by_nodes}

    def describe(self) -> str:
        """One line for a report."""
        if not self.by_nodes:
            return (f"site physics: none measured (no completed job of the {self.records_jobs} in the window "
                    "ran its work in an srun step)")
        parts = ", ".join(f"{x.nodes} node{'s' if x.nodes > 1 else ''}: start {x.start_s:g} s + end {x.end_s:g} s "
                          f"({x.jobs} job{'s' if x.jobs > 1 else ''})" for x in self.by_nodes)
        return (f"site physics from sacct (median per node count; paid at every start, taken out of each "
                f"job's replayed work): {parts}")

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"source": "sacct", "records_jobs": self.records_jobs, "measured_jobs": self.measured_jobs,
                "by_nodes": [{"nodes": x.nodes, "jobs": x.jobs, "start_s": x.start_s, "end_s": x.end_s}
                             for x in self.by_nodes]}


def _job_latency(records: Sequence[AccountingRecord]) -> tuple[int, float, float] | None:
    """(node count, start latency, end latency) of one job's records (every segment), or ``None``."""
    ordered = sorted(records, key=lambda r: (r.start_time is None, r.start_time or 0))
    first, last = ordered[0], max(records, key=lambda r: r.end_time or 0)
    if last.slurm_state[:1] != ("COMPLETED",) or first.start_time is None or last.end_time is None:
        return None
    steps = [s for r in records for s in r.steps]
    starts = [a for a, _ in steps if a is not None]
    ends = [b for _, b in steps if b is not None]
    if not steps or len(ends) < len(steps) or not starts or not first.nodes:
        return None
    start = max(0.0, float(min(starts) - first.start_time))
    end = max(0.0, float(last.end_time - max(ends)))
    return len(first.nodes), start, end


def measure_site_physics(records: Sequence[AccountingRecord]) -> SitePhysics:
    """The site's start and end latencies per node count, from ``sacct`` records (module docstring).

    Args:
        records: ``sacct --json`` records (:func:`~slurm_elastic.slurm.json_records.parse_sacct`), every
            segment of a resized job; a satellite (its own job id) is a job of its own.
    """
    by_job: dict[int, list[AccountingRecord]] = {}
    for r in records:
        by_job.setdefault(r.slurm_job_id, []).append(r)
    found: dict[int, list[tuple[float, float]]] = {}
    for recs in by_job.values():
        measured = _job_latency(recs)
        if measured is not None:
            nodes, start, end = measured
            found.setdefault(nodes, []).append((start, end))
    by_nodes = tuple(NodeCountLatency(n, len(xs), float(statistics.median(a for a, _ in xs)),
                                      float(statistics.median(b for _, b in xs)))
                     for n, xs in sorted(found.items()))
    return SitePhysics(by_nodes, len(by_job))
