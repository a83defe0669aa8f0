"""The virtual cluster accounts a running job's progress only where it is read or changed.

Moving the clock touches no job (``VirtualCluster.advance``); these tests check that the result is
the one of accounting every job at every event, and the epoch boundary that rounding could blur.
"""

from __future__ import annotations

import pytest

from slurm_elastic import policies
from slurm_elastic.core.actions import Action, ActionKind
from slurm_elastic.core.model import JobId, JobState, NodeName, Placement
from slurm_elastic.sim import engine
from slurm_elastic.sim.cluster import VirtualCluster
from slurm_elastic.sim.costs import ResizeCost
from slurm_elastic.sim.job import DONE_EPS, SimJob
from slurm_elastic.workloads.philly import philly_like


class EagerCluster(VirtualCluster):
    """Accounts every running job at every event, as the simulator did before it was lazy."""

    def advance(self, t: float) -> None:
        super().advance(t)
        self.sync()


def _runs(policy: str, monkeypatch: pytest.MonkeyPatch) -> tuple[dict, dict]:  # type: ignore[type-arg]
    trace = philly_like(40, 16, 1)
    lazy = engine.simulate(trace, policies.create(policy), gpus=16, seed=1, resize_cost="in-place")
    monkeypatch.setattr(engine, "VirtualCluster", EagerCluster)
    eager = engine.simulate(trace, policies.create(policy), gpus=16, seed=1, resize_cost="in-place")
    return lazy, eager


@pytest.mark.parametrize("policy", ["dp", "efq", "tiresias"])
def test_lazy_accounting_is_the_eager_one(policy: str, monkeypatch: pytest.MonkeyPatch) -> None:
    lazy, eager = _runs(policy, monkeypatch)
    assert lazy["rounds"] == eager["rounds"]
    for a, b in zip(lazy["jobs"], eager["jobs"], strict=True):
        assert a["job_id"] == b["job_id"] and a["resizes"] == b["resizes"] and a["start"] == b["start"]
        assert a["end"] == pytest.approx(b["end"], rel=1e-9)
        assert a["gpu_seconds"] == pytest.approx(b["gpu_seconds"], rel=1e-9)
    if policy != "tiresias":  # paused jobs were accounted across their pauses
        assert sum(j["resizes"] for j in lazy["jobs"]) > 0


def test_an_epoch_end_just_reached_is_not_due_again() -> None:
    spec = philly_like(1, 4, 0)[0]
    size = spec.epoch_size
    job = SimJob(spec, state=JobState.RUNNING, speed=100.0, samples=3 * size - 0.5e-9 * size)
    assert job.time_to_epoch_end(50.0) == pytest.approx(50.0 + size / 100.0)
    job.samples = 3 * size + 0.5 * size
    assert job.time_to_epoch_end(50.0) == pytest.approx(50.0 + 0.5 * size / 100.0)


def test_the_busy_gpus_counted_as_jobs_change_are_the_ones_they_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[int, int]] = []

    class Checked(VirtualCluster):
        def observe(self):  # type: ignore[no-untyped-def]
            seen.append((self.busy_gpus(), sum(j.placement.num_gpus for j in self.active.values())))
            return super().observe()

    monkeypatch.setattr(engine, "VirtualCluster", Checked)
    engine.simulate(philly_like(40, 16, 1), policies.create("efq"), gpus=16, seed=1, equal_start=True)
    assert len(seen) > 10 and all(a == b for a, b in seen) and any(a > 0 for a, _ in seen)


def test_the_nodes_seen_are_the_ones_the_jobs_leave_free(monkeypatch: pytest.MonkeyPatch) -> None:
    looks = 0

    class Checked(VirtualCluster):
        def observe(self):  # type: ignore[no-untyped-def]
            nonlocal looks
            snap = super().observe()
            held = {(n, g) for j in self.active.values() for n, gs in j.placement.slots for g in gs}
            assert {(n.name, g) for n in snap.nodes for g in n.gpus if g not in n.free_gpus} == held
            looks += 1
            return snap

    monkeypatch.setattr(engine, "VirtualCluster", Checked)
    engine.simulate(philly_like(40, 16, 1), policies.create("dp"), gpus=16, seed=1, equal_start=True)
    assert looks > 10


def test_a_job_done_when_a_resize_pauses_it_finishes_at_once() -> None:
    """A job whose work is done as a resize pauses it finishes at the next completion check, not
    when its pause ends (its finish time)."""
    spec = philly_like(1, 4, 0)[0]
    cluster = VirtualCluster(1, 4, ResizeCost.parse("in-place"))
    cluster.arrive(spec)
    job = cluster.jobs[spec.job_id]
    one, two = Placement(((NodeName("sim000"), (0,)),)), Placement(((NodeName("sim000"), (0, 1)),))
    batch = spec.base_batch
    cluster.apply(cluster.observe(), (Action(ActionKind.START, JobId(spec.job_id), Placement(), one, batch, batch),))
    cluster.advance(job.finish_at - 0.1 * DONE_EPS / job.rate)
    cluster.apply(cluster.observe(), (Action(ActionKind.GROW, JobId(spec.job_id), one, two, batch, batch // 2),))
    assert job.done >= 1.0 - DONE_EPS and job.finish_at > cluster.now + 1.0  # paused for the grow
    assert cluster.complete_finished() == [job] and job.end == cluster.now
