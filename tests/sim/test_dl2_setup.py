"""Issue 16, part 1: DL2's own simulation setup (§6.2) and its baselines DRF and Tetris."""

from __future__ import annotations

import statistics
from typing import Any

import pytest

from slurm_elastic import policies
from slurm_elastic.experiments import papers
from slurm_elastic.sim.engine import simulate
from slurm_elastic.sim.workload import requested_time
from slurm_elastic.workloads.catalog import builtin
from slurm_elastic.workloads.dl2 import DL2_GPUS, DL2_MAX_GPUS, DL2_MODELS, DL2_SLOT_S, dl2_simulation
from slurm_elastic.workloads.offered_load import offered_gpus
from slurm_elastic.workloads.philly import PHILLY_GPUS


def test_dl2_simulation_is_200_table_1_jobs_of_147_minutes_on_average() -> None:
    jobs = dl2_simulation(3)
    assert len(jobs) == 200 and builtin("dl2-simulation", 3, 64) == jobs and dl2_simulation(3) == jobs
    assert {j.category for j in jobs} == {name for name, _ in DL2_MODELS}  # all eight Table 1 models drawn
    assert all(dict(DL2_MODELS)[j.category] == j.model for j in jobs)
    assert all(j.min_gpus == 1 and j.max_gpus == DL2_MAX_GPUS for j in jobs)
    assert {j.requested_gpus for j in jobs} <= {g for g, _ in PHILLY_GPUS}
    durations = [requested_time(j) for s in range(1, 6) for j in dl2_simulation(s)]
    assert statistics.fmean(durations) == pytest.approx(147 * 60, rel=0.08)
    assert sum(d > 3600 for d in durations) > len(durations) / 2  # "over a half of jobs run for more than an hour"
    spans = [dl2_simulation(s)[-1].submit_time for s in range(1, 6)]
    per_slot = 200 / (statistics.fmean(spans) / DL2_SLOT_S)  # Little's law on DL2's "around 40" jobs
    assert per_slot == pytest.approx(40 / (147 / 20), rel=0.1)
    assert offered_gpus(jobs) < 0.1 * DL2_GPUS  # the paper's cluster is hardly used by these jobs


def test_dl2_baselines_on_the_dl2_setup_keep_every_job_and_resize_only_when_they_decide() -> None:
    """On the paper's 1,000 GPUs every job fits at its largest size: DRF gives each its maximum and
    never resizes it (a job whose GPUs do not divide its fixed batch used to get a needless rebatch at
    every round), Tetris each its request."""
    jobs = dl2_simulation(1)[:40]
    drf = simulate(jobs, policies.create("drf"), gpus=DL2_GPUS, seed=1)
    assert drf["metrics"]["jobs_completed"] == 40 and drf["metrics"]["resizes_per_job"] == 0
    tetris = simulate(jobs, policies.create("tetris"), gpus=DL2_GPUS, seed=1)
    assert tetris["metrics"]["jobs_completed"] == 40 and tetris["metrics"]["resizes_per_job"] == 0
    assert tetris["metrics"]["avg_queue"] < 30  # nothing waits longer than for the next round


def test_reproduce_shows_dl2_against_drf_tetris_and_optimus_next_to_the_paper(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, int, tuple[float, ...]]] = []

    def fake(pols: Any, seeds: Any, **kw: Any) -> list[dict[str, Any]]:
        calls.append((kw["workload"], kw["gpus"], tuple(kw.get("loads", ()))))
        jct = {papers.DL2_LABEL: 60.0, "drl": 90.0, "drf": 100.0, "tetris": 80.0, "optimus": 75.0}
        out = []
        for s in seeds:
            for p in pols:
                for load in kw.get("loads") or [None]:
                    metrics = {k: 10.0 for k in ("p99_jct", "lower_bound_avg_jct", "worst_ftf", "resizes_per_job")}
                    metrics.update(avg_jct=jct.get(p.shown, 50.0), avg_jct_over_lower_bound=2.0)
                    r = {"policy": p.shown, "seed": s, "workload": kw["workload"], "gpus": 80 if load else kw["gpus"],
                         "jobs": [], "metrics": metrics}
                    if load is not None:
                        r["load"] = load
                    out.append(r)
        return out

    monkeypatch.setattr(papers, "run_comparison", fake)
    lines, results = papers.dl2_section([1, 2])
    text = "\n".join(lines)
    assert calls == [("dl2-simulation", 1000, ()), ("dl2-simulation", 1000, (papers.DL2_LOAD,))]
    assert "| 1,000 GPUs | drf | 100 | 10 | 2.00x | 10 | 10.00 | 10.00 | -40.0% |  |  | -44.1% |" in text
    assert "| 1,000 GPUs | optimus | 75 | 10 | 2.00x | 10 | 10.00 | 10.00 | -20.0% |  |  | -17.5% |" in text
    assert "| 1,000 GPUs | tetris | 80 | 10 | 2.00x | 10 | 10.00 | 10.00 | -25.0% |  |  |  |" in text
    assert "| 1,000 GPUs | drl | 90 | 10 | 2.00x | 10 | 10.00 | 10.00 | -33.3% |  |  |  |" in text
    assert f"| 1,000 GPUs | {papers.DL2_LABEL} | 60 | 10 | 2.00x | 10 | 10.00 | 10.00 |  |  |  |  |" in text
    assert "| load 1 (80, 80 GPUs) | drf | 100 |" in text
    assert {r["policy"] for r in results} == {papers.DL2_LABEL, "drl", "drf", "tetris", "optimus", "dp", "min-jct"}
    calls.clear()
    lines, _ = papers.dl2_section([1, 2], quick=True)
    assert calls == [("dl2-simulation", 1000, ())] and not any("load 1" in line for line in lines)
