"""Every simulated run carries its clairvoyant lower bound on avg JCT, no policy beats it, and the
reports and ``reproduce`` show each policy's ratio to it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from slurm_elastic import policies
from slurm_elastic.experiments import papers
from slurm_elastic.reports.simulation import summary_table, write_report
from slurm_elastic.sim.engine import simulate
from slurm_elastic.sim.lower_bound import lower_bound
from slurm_elastic.sim.workload import SimJobSpec
from slurm_elastic.workloads.ibm import ibm_categories
from slurm_elastic.workloads.ones import ones_longhorn_50
from slurm_elastic.workloads.philly import philly_like

KEYS = ("lower_bound_avg_jct", "lower_bound_solo_avg_jct", "lower_bound_capacity_avg_jct",
        "lower_bound_fluid_avg_jct", "avg_jct_over_lower_bound")


def _case(name: str) -> tuple[list[SimJobSpec], int]:
    if name == "ones":
        return ones_longhorn_50(1)[:8], 16
    if name == "ibm":
        return ibm_categories(2, 8, minutes=40), 8
    return philly_like(12, 8, 3), 8


@pytest.mark.parametrize(("workload", "policy", "params"), [
    ("ones", "ones", {}), ("ones", "dp", {}), ("ones", "fifo", {}),
    ("ibm", "dp", {"mode": "drop"}), ("ibm", "tiresias", {}), ("ibm", "optimus", {}),
    ("philly", "efq", {}), ("philly", "dp", {}), ("philly", "fifo", {}),
])
def test_no_policy_beats_the_lower_bound(workload: str, policy: str, params: dict[str, Any]) -> None:
    jobs, gpus = _case(workload)
    res = simulate(jobs, policies.create(policy, **params), gpus=gpus, seed=1)
    m = res["metrics"]
    assert all(k in m for k in KEYS)
    assert m["avg_jct"] >= m["lower_bound_avg_jct"] > 0
    assert m["lower_bound_avg_jct"] == max(m["lower_bound_solo_avg_jct"], m["lower_bound_capacity_avg_jct"],
                                           m["lower_bound_fluid_avg_jct"])
    assert m["avg_jct_over_lower_bound"] == pytest.approx(m["avg_jct"] / m["lower_bound_avg_jct"])
    done = {j["job_id"] for j in res["jobs"] if j["finished"]}  # the bound is over the jobs avg_jct counts
    assert m["lower_bound_avg_jct"] == pytest.approx(lower_bound(jobs, gpus, 4, done).value)


def test_fifo_on_one_gpu_reaches_the_bound() -> None:
    # Two one-configuration jobs arriving together on one GPU: FIFO is SRPT here, so JCT = bound.
    jobs = [SimJobSpec(i, 0.0, "cifar10", 1, 1, 1, 1, 1, 1, 500, max_local_batch=1, epochs=2.0) for i in "ab"]
    m = simulate(jobs, policies.create("fifo"), gpus=1, gpus_per_node=1, round_gap=0.0)["metrics"]
    assert m["avg_jct_over_lower_bound"] == pytest.approx(1.0, rel=1e-6)
    assert m["lower_bound_capacity_avg_jct"] > m["lower_bound_solo_avg_jct"]


def test_dropped_jobs_are_left_out_of_the_bound() -> None:
    jobs, _ = _case("ibm")
    res = simulate(jobs, policies.create("dp", mode="drop"), gpus=2, gpus_per_node=2, seed=1)
    m = res["metrics"]
    assert m["jobs_dropped"] > 0
    done = {j["job_id"] for j in res["jobs"] if j["finished"]}
    assert m["lower_bound_avg_jct"] == pytest.approx(lower_bound(jobs, 2, 2, done).value)
    assert m["lower_bound_avg_jct"] != pytest.approx(lower_bound(jobs, 2, 2).value)


def test_no_bound_when_a_job_may_start_outside_its_ranges() -> None:
    jobs, gpus = _case("ones")
    m = simulate(jobs[:3], policies.create("dp"), gpus=gpus, equal_start=True)["metrics"]
    assert m["avg_jct"] is not None and all(m[k] is None for k in KEYS)


def _results() -> list[dict[str, Any]]:
    jobs, gpus = _case("ones")
    out = []
    for pol in ("dp", "fifo"):
        res = simulate(jobs[:4], policies.create(pol), gpus=gpus, seed=1, workload="ones-4")
        out.append(res)
    return out


def test_report_shows_the_bound_and_the_ratio(tmp_path: Path) -> None:
    results = _results()
    rows = summary_table(results)
    for row, res in zip(rows, results, strict=True):
        assert row["metrics"]["avg_jct_over_lower_bound"]["mean"] == res["metrics"]["avg_jct_over_lower_bound"]
        assert row["metrics"]["lower_bound_avg_jct"]["mean"] == res["metrics"]["lower_bound_avg_jct"]
    write_report(results, tmp_path)
    page = (tmp_path / "index.html").read_text()
    assert "<th>×LB</th>" in page and "LB avg JCT" in page
    header = (tmp_path / "summary.csv").read_text().splitlines()[0].split(",")
    assert {"lower_bound_avg_jct", "avg_jct_over_lower_bound", "lower_bound_solo_avg_jct"} <= set(header)
    # results saved before the bound existed still make a report, with the bound unknown
    for r in results:
        for k in KEYS:
            r["metrics"].pop(k)
    assert summary_table(results)[0]["metrics"]["lower_bound_avg_jct"] == {"mean": None, "std": None, "n": 0}
    write_report(results, tmp_path / "old")


def test_reproduce_tables_carry_the_ratio(monkeypatch: pytest.MonkeyPatch) -> None:
    def fake(pols: Any, seeds: Any, **kw: Any) -> list[dict[str, Any]]:
        metrics = {k: 100.0 for k in ("avg_jct", "p50_jct", "p99_jct", "avg_queue", "avg_exec", "jobs",
                                      "jobs_completed", "jobs_dropped", "scaling_efficiency", "avg_utilization")}
        metrics.update(lower_bound_avg_jct=40.0, avg_jct_over_lower_bound=2.5, worst_ftf=1.1, resizes_per_job=0.5)
        return [{"policy": p.shown, "seed": s, "workload": kw["workload"], "metrics": dict(metrics), "jobs": []}
                for s in seeds for p in pols]

    monkeypatch.setattr(papers, "run_comparison", fake)
    monkeypatch.setattr(papers, "fairness_section", lambda *a, **k: ([], []))
    text, _ = papers.reproduce([1], quick=True)
    # the ONES, its scalability (64 GPUs only when quick), the IBM tables, DL2's, and min-jct against every peer
    assert text.count("| ×LB |") == 5  # and DL2's table
    assert ("| ones-longhorn (64 GPUs) | 100 | 100 (dp) | 2.50x | 1.10 | 0.50 | 0.50 | yes | no | yes | no |"
            in text)
    assert "| ibm-categories-overload (queue) | " not in text  # only dp and dp-fixed ran there: no min-jct row
    assert "| ones | 100 | 40 | 2.50x |" in text
    assert "| ibm-categories | 40 | drop | dp | 100 | 100 | 100 | 100 | 40 | 2.50x |" in text
    assert "| ibm-categories-overload | 40 | queue | dp-fixed | 100 | 100 | 100 | 100 | 40 | 2.50x |" in text
    assert papers.LB_NOTE in text
