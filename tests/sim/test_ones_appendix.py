"""Issue 16, part 1: ``ones-longhorn`` is the experiment the ONES appendix describes (400 jobs
matched to a Philly-shaped GPU-time draw, Poisson arrivals every 30 s on average, the first 5% not
counted), run at 16, 32 and 64 GPUs by ``reproduce``; the 50-job set is ``ones-longhorn-50``."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from slurm_elastic import policies
from slurm_elastic.experiments import papers
from slurm_elastic.sim.engine import simulate
from slurm_elastic.sim.workload import requested_time
from slurm_elastic.workloads.catalog import builtin
from slurm_elastic.workloads.ones import _ONES_TABLE2, ONES_REQUESTS, _ones_job, ones_longhorn, ones_longhorn_50
from slurm_elastic.workloads.philly import philly_draw


def test_the_appendix_workload_has_its_shape() -> None:
    jobs = ones_longhorn(7)
    assert len(jobs) == 400 and [j.job_id for j in jobs] == [str(i + 1) for i in range(400)]
    assert [j.measured for j in jobs] == [False] * 20 + [True] * 380  # the first 5% by arrival
    gaps = np.diff([0.0, *(j.submit_time for j in jobs)])
    assert (gaps >= 0).all() and 25.0 < gaps.mean() < 35.0  # Poisson, 30 s on average
    table2 = {f"{name}-{size // 1000}k" for _, names, sizes in _ONES_TABLE2 for name in names for size in sizes}
    assert {j.category for j in jobs} <= table2 and {j.requested_gpus for j in jobs} <= set(ONES_REQUESTS)
    assert builtin("ones-longhorn", 7, 64) == jobs and len(builtin("ones-longhorn-50", 7, 64)) == 50


def test_each_job_is_the_table2_job_with_the_closest_gpu_time_to_its_draw() -> None:
    jobs = ones_longhorn(3, n_jobs=60)
    ks, durations = philly_draw(np.random.default_rng(3), 60)  # the draw comes first from the seed
    entries = [(p, n, s) for p, names, sizes in _ONES_TABLE2 for n in names for s in sizes]
    cands = [(e, r) for e in entries for r in ONES_REQUESTS]
    times = np.array([r * requested_time(_ones_job("0", 0.0, e, r)) for e, r in cands])
    for job, k, d in zip(jobs, ks, durations, strict=True):
        mine = job.requested_gpus * requested_time(job)
        assert abs(mine - k * d) == pytest.approx(float(np.min(np.abs(times - k * d))), rel=1e-9)


def test_the_50_job_set_is_unchanged() -> None:
    jobs = ones_longhorn_50(1)
    assert len(jobs) == 50 and all(j.measured for j in jobs)
    assert [(j.category, j.requested_gpus, j.submit_time) for j in jobs[:3]] == [
        (j.category, j.requested_gpus, j.submit_time) for j in builtin("ones-longhorn-50", 1, 64)[:3]]


def test_warm_up_jobs_are_scheduled_but_counted_in_no_metric() -> None:
    jobs = ones_longhorn_50(2)[:10]
    warm = [replace(j, measured=False) if i < 3 else j for i, j in enumerate(jobs)]
    planner = policies.create("fifo")
    every = simulate(jobs, planner, gpus=16, gpus_per_node=4, seed=1)
    part = simulate(warm, policies.create("fifo"), gpus=16, gpus_per_node=4, seed=1)
    m = part["metrics"]
    assert (m["jobs"], m["jobs_completed"], m["jobs_warmup"], m["jobs_unfinished"]) == (10, 7, 3, 0)
    counted = [r["jct"] for r in every["jobs"] if r["job_id"] not in {j.job_id for j in jobs[:3]}]
    assert m["avg_jct"] == pytest.approx(float(np.mean(counted)))  # the same schedule, fewer jobs counted
    assert m["avg_jct"] >= m["lower_bound_avg_jct"] > 0
    assert [r["measured"] for r in part["jobs"]][:3] == [False] * 3


def test_reproduce_shows_the_scalability_table_next_to_the_papers(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, int]] = []

    def fake(pols: Any, seeds: Any, **kw: Any) -> list[dict[str, Any]]:
        calls.append((kw["workload"], kw["gpus"]))
        jct = {"ones": 60.0, "tiresias": 100.0, "optimus": 80.0, "drl": 75.0}
        return [{"policy": p.shown, "seed": s, "workload": kw["workload"], "gpus": kw["gpus"], "jobs": [],
                 "metrics": {**dict.fromkeys(("p50_jct", "p99_jct", "avg_exec", "jobs", "jobs_completed",
                                               "jobs_dropped", "scaling_efficiency", "avg_utilization",
                                               "lower_bound_avg_jct"), 10.0),
                             "avg_jct": jct.get(p.shown, 90.0) * 64 / kw["gpus"], "avg_queue": 1.0,
                             "avg_jct_over_lower_bound": 2.0}}
                for s in seeds for p in pols]

    monkeypatch.setattr(papers, "run_comparison", fake)
    monkeypatch.setattr(papers, "fairness_section", lambda *a, **k: ([], []))
    text, results = papers.reproduce([1, 2])
    assert [c for c in calls if c[0] == "ones-longhorn"] == [("ones-longhorn", 64), ("ones-longhorn", 16),
                                                            ("ones-longhorn", 32)]
    assert "| 16 | tiresias | 400 | 2.00x | 1 | 40.0% | 44% |" in text
    assert "| 64 | optimus | 80 | 2.00x | 1 | 25.0% | 42% |" in text
    assert "| 32 | optimus | 160 | 2.00x | 1 | 25.0% |  |" in text  # the paper gives no 32-GPU figure
    assert papers.WORKLOAD_NOTE in text
    assert {r["gpus"] for r in results if r["workload"] == "ones-longhorn"} == {16, 32, 64}
    calls.clear()
    papers.reproduce([1, 2], quick=True)
    assert [c for c in calls if c[0] == "ones-longhorn"] == [("ones-longhorn", 64)]
