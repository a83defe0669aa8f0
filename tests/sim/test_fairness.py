"""The fairness section of ``reproduce`` and efq in the simulator."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slurm_elastic import policies
from slurm_elastic.core.model import Job
from slurm_elastic.experiments import papers
from slurm_elastic.sim import engine
from slurm_elastic.sim.cluster import VirtualCluster
from slurm_elastic.sim.job import SimJob
from slurm_elastic.sim.workload import SimJobSpec, scaled_to
from slurm_elastic_predictor.profiles import MODEL_DEFAULTS


class DeclaringCluster(VirtualCluster):
    def _job(self, j: SimJob) -> Job:
        return replace(super()._job(j), target_epochs=j.spec.epochs_needed(j.spec.base_batch))


def test_efq_serves_short_late_jobs_before_a_long_early_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine, "VirtualCluster", DeclaringCluster)
    local, epoch = MODEL_DEFAULTS["cifar10"]

    def job(i: int, t: float, d: float) -> SimJobSpec:
        return scaled_to(SimJobSpec(str(i), t, "cifar10", 4, 4, 4, 4 * local, 4 * local, 4 * local, epoch), d)

    jobs = [job(1, 0.0, 3600.0), job(2, 60.0, 300.0), job(3, 120.0, 300.0)]
    efq = engine.simulate(jobs, policies.create("efq"), gpus=4, round_gap=0.0)
    fifo = engine.simulate(jobs, policies.create("fifo"), gpus=4, round_gap=0.0)
    ends = {r["job_id"]: r["end"] for r in efq["jobs"]}
    assert ends["2"] < ends["1"] and ends["3"] < ends["1"]  # preempted for the short ones
    assert efq["metrics"]["avg_jct"] < 0.75 * fifo["metrics"]["avg_jct"]
    assert efq["metrics"]["unfair_fraction"] <= fifo["metrics"]["unfair_fraction"]


def test_drl_rows_only_when_drl_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(policies, "available", lambda: ("dp", "efq", "ones"))
    assert "drl" not in [p.name for p in papers.fairness_policies()]
    monkeypatch.setattr(policies, "available", lambda: ("dp", "drl", "efq", "ones"))
    monkeypatch.setitem(policies._FACTORIES, "drl", lambda: policies.create("fifo"))
    names = [p.shown for p in papers.fairness_policies()]
    assert names == ["efq", "ones", "ones+guard", "dp", "dp+guard", "tiresias", "optimus", "min-jct", "drl"]
    assert papers.fairness_policies()[-1].params == {}


def test_quick_fairness_section() -> None:
    lines, runs = papers.fairness_section([1], quick=True)
    text = "\n".join(lines)
    for pol in ("efq", "ones", "ones+guard", "dp", "dp+guard", "tiresias", "optimus"):
        assert f"| {pol} |" in text
    assert {r["policy"] for r in runs} >= {"efq", "dp+guard"}
    assert all(r["metrics"]["worst_ftf"] is not None for r in runs)
    assert "Sia reaches a worst FTF of 1.2" in text and "philly-like" in text
    assert "| avg JCT (s) | ×LB |" in text and all(r["metrics"]["avg_jct_over_lower_bound"] >= 1 for r in runs)
