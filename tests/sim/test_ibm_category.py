"""Issue 16, part 1: IBM's single-category benchmarks (MASCOTS'20 Fig. 5). "Each benchmark only runs
jobs of a single job category; all jobs have the same length [...] about half an hour to execute on a
single GPU with the maximum feasible batch size", at the paper's high arrival rate; and the same
category at our overload, where the fixed-batch baseline must drop jobs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from slurm_elastic import policies
from slurm_elastic.errors import TraceError
from slurm_elastic.experiments import papers
from slurm_elastic.sim.engine import simulate
from slurm_elastic.sim.workload import requested_time
from slurm_elastic.workloads.catalog import BUILTIN, builtin
from slurm_elastic.workloads.ibm import (
    _IBM_CATEGORIES,
    IBM_CATEGORY_MINUTES,
    IBM_KMAX,
    IBM_OVERLOAD,
    ibm_category,
    largest_batch_time,
)
from slurm_elastic.workloads.offered_load import offered_gpus


@pytest.mark.parametrize("category", [1, 2, 3, 4])
def test_one_category_thirty_minutes_at_the_largest_batch_on_one_gpu(category: int) -> None:
    name, profile, bmin, bmax, _, elastic, _ = _IBM_CATEGORIES[category - 1]
    jobs = builtin(f"ibm-category-{category}", 1, 40)
    assert jobs and {j.category for j in jobs} == {name} and {j.model for j in jobs} == {profile}
    for j in jobs:
        assert largest_batch_time(j) == pytest.approx(60 * IBM_CATEGORY_MINUTES)
        assert bmin <= j.base_batch <= bmax and j.max_gpus == (IBM_KMAX if elastic else 1)
    assert (len({j.base_batch for j in jobs}) > 1) == (bmin < bmax)  # Random-BS: uniform in the range


def test_the_papers_high_rate_is_k_max_jobs_per_job_length_per_40_gpus() -> None:
    for gpus in (40, 80):
        gaps = np.diff([0.0, *(j.submit_time for j in ibm_category(3, 1, gpus=gpus, minutes=24000))])
        assert float(np.mean(gaps)) == pytest.approx(60 * IBM_CATEGORY_MINUTES / IBM_KMAX * 40 / gpus, rel=0.05)
    assert offered_gpus(builtin("ibm-category-1", 1, 40)) / 40 < 0.5  # light: the baseline seldom drops


def test_the_overload_rate_brings_load_times_the_clusters_gpu_time() -> None:
    jobs = ibm_category(1, 2, gpus=40, minutes=24000, load=1.5)
    w = float(np.mean([requested_time(j) for j in jobs]))
    gaps = np.diff([0.0, *(j.submit_time for j in jobs)])
    assert float(np.mean(gaps)) == pytest.approx(w / (1.5 * 40), rel=0.06)
    assert builtin("ibm-category-2-overload", 1, 40)[0].submit_time == ibm_category(1, 2, load=IBM_OVERLOAD)[
        0].submit_time
    assert {f"ibm-category-{c}{t}" for c in range(1, 5) for t in ("", "-overload")} <= set(BUILTIN)


def test_bad_categories_and_loads_are_refused_naming_them() -> None:
    with pytest.raises(TraceError, match=r"ibm-category 5: must be 1 to 4"):
        ibm_category(1, 5)
    with pytest.raises(TraceError, match=r"ibm-category load -1: must be above 0 and at most 100"):
        ibm_category(1, 1, load=-1)
    with pytest.raises(TraceError, match="unknown workload 'ibm-category-5'"):
        builtin("ibm-category-5", 1, 40)


def test_under_overload_the_optimizer_completes_more_compute_bound_jobs() -> None:
    """Category 1 (compute bound) at overload: the baseline's fixed batches need many GPUs each, so
    it must drop far more jobs than dp, which shrinks a batch to fit; category 4 (not elastic) is the
    same under both."""
    done = {}
    for category in (1, 4):
        jobs = ibm_category(1, category, gpus=16, minutes=120, load=IBM_OVERLOAD)
        for name in ("dp", "dp-fixed"):
            m = simulate(jobs, policies.create(name, mode="drop"), gpus=16, gpus_per_node=4, seed=1)["metrics"]
            done[(category, name)] = m["jobs_completed"]
    assert done[(1, "dp")] > 1.3 * done[(1, "dp-fixed")]
    assert done[(4, "dp")] == done[(4, "dp-fixed")]


def test_reproduce_shows_each_category_next_to_the_papers_gain(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def fake(pols: Any, seeds: Any, **kw: Any) -> list[dict[str, Any]]:
        calls.append(kw["workload"])
        done = {"dp": 150.0, "dp-fixed": 100.0}
        return [{"policy": p.shown, "seed": s, "workload": kw["workload"], "jobs": [],
                 "metrics": {"jobs": 200.0, "jobs_completed": done[p.name], "jobs_dropped": 200.0 - done[p.name],
                             "avg_jct": 900.0}} for s in seeds for p in pols]

    monkeypatch.setattr(papers, "run_comparison", fake)
    lines, results = papers.ibm_category_section([1, 2])
    assert calls == [f"ibm-category-{c}{t}" for c in range(1, 5) for t in ("", "-overload")]
    text = "\n".join(lines)
    assert "| ibm-category-2 | 1,2 | dp | 200 | 150 | 50 | 900 | +50% | +64.4% |" in text
    assert "| ibm-category-2-overload | 1,2 | dp | 200 | 150 | 50 | 900 | +50% |  |" in text  # the paper ran none
    assert "| ibm-category-4 | 1,2 | dp-fixed | 200 | 100 | 100 | 900 |  |  |" in text
    assert {r["policy"] for r in results} == {"dp (drop)", "dp-fixed (drop)"}
    calls.clear()
    papers.ibm_category_section([1, 2], quick=True)
    assert calls == ["ibm-category-1", "ibm-category-1-overload"]
