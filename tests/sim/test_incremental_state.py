"""The virtual cluster's incremental state equals a full rebuild at every round (issue 39's speed goal).

The cluster keeps what a round reads between rounds: each job's view (kept while it waits, progressed
while it runs unchanged, reconfigured when an action or a completion changed it), each node as last
seen (made again only where GPUs were taken or given back) and a heap of the running jobs' finish
times (the engine's next completion). Here every snapshot a planner sees is compared, field by
field, with one built from scratch from the jobs' state alone, and the heap's least with the least
finish time of the running jobs; a deliberately broken update is caught by the same check.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from slurm_elastic import policies
from slurm_elastic.core.model import ClusterSnapshot, Job, JobState, Node
from slurm_elastic.sim.cluster import VirtualCluster
from slurm_elastic.sim.engine import simulate
from slurm_elastic.sim.job import SimJob
from slurm_elastic.workloads.philly import philly_like


def rebuilt(cluster: VirtualCluster) -> tuple[tuple[Node, ...], tuple[Any, ...]]:
    """The nodes and jobs of a snapshot made from nothing but the jobs' state now."""
    held: dict[str, set[int]] = {name: set() for name in cluster.node_names}
    for job in cluster.jobs.values():
        if job.end is None and job.state is JobState.RUNNING:
            for node, gpus in job.placement.slots:
                held[node].update(gpus)
    every = tuple(range(cluster.gpus_per_node))
    nodes = tuple(Node(n, every, tuple(g for g in every if g not in held[n])) for n in cluster.node_names)
    jobs = tuple(cluster._job(j) for j in cluster.jobs.values() if j.end is None)
    return nodes, jobs


def checked_run(monkeypatch: pytest.MonkeyPatch, policy: str, jobs: int = 40, gpus: int = 16) -> int:
    """Simulate with every observation compared against :func:`rebuilt`; the rounds compared."""
    observe = VirtualCluster.observe
    seen = [0]

    def compared(self: VirtualCluster) -> ClusterSnapshot:
        running = [j for j in self.jobs.values() if j.end is None and j.state is JobState.RUNNING]
        assert self.next_finish() == min((j.finish_at for j in running), default=math.inf)
        snap = observe(self)
        nodes, views = rebuilt(self)
        assert snap.nodes == nodes
        assert len(snap.jobs) == len(views)
        for got, want in zip(snap.jobs, views, strict=True):
            assert got == want, f"t={self.now}: job {want.job_id}'s kept view differs from a rebuilt one"
        seen[0] += 1
        return snap

    monkeypatch.setattr(VirtualCluster, "observe", compared)
    res = simulate(philly_like(jobs, gpus, 1), policies.create(policy), gpus=gpus, seed=1)
    assert res["metrics"]["jobs_completed"] == jobs
    assert seen[0] == res["rounds"] > 0
    return seen[0]


@pytest.mark.parametrize("policy", ["dp", "min-jct", "efq"])
def test_kept_state_equals_a_full_rebuild_every_round(monkeypatch: pytest.MonkeyPatch, policy: str) -> None:
    checked_run(monkeypatch, policy)


def test_kept_state_with_progress_reports_equals_a_full_rebuild(monkeypatch: pytest.MonkeyPatch) -> None:
    # ones reads the jobs' progress reports, so the views carry them, and rounds come at epoch ends.
    checked_run(monkeypatch, "ones", jobs=20)


def test_a_missed_progress_update_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # A running job's view left as it was (its samples and run time not brought up to now).
    monkeypatch.setattr(Job, "progressed", lambda self, samples, run_time, progress: self)
    with pytest.raises(AssertionError, match="kept view differs"):
        checked_run(monkeypatch, "dp")


def test_a_missed_reconfiguration_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # A change of configuration (a start, a resize, a completion) not carried into the view.
    monkeypatch.setattr(Job, "reconfigured", lambda self, **changes: self)
    with pytest.raises(AssertionError, match="kept view differs"):
        checked_run(monkeypatch, "dp")


def test_a_finish_time_left_out_of_the_heap_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # The finish time of a job configured again (resized, its cores shared anew) left out of the heap.
    configure = SimJob.configure

    def unheaped(self: SimJob, now: float) -> None:
        finishes, self.finishes = self.finishes, (self.finishes if self.configured == 0 else None)
        configure(self, now)
        self.finishes = finishes

    monkeypatch.setattr(SimJob, "configure", unheaped)
    with pytest.raises(AssertionError):
        checked_run(monkeypatch, "dp")
