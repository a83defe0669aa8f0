"""Load as a knob (issue 16, part 2): ``simulate --load`` sizes the cluster from the workload's
offered GPU demand, so a comparison can be shown where rigid schedulers queue; ``--policy all``."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_elastic import policies
from slurm_elastic.cli import main
from slurm_elastic.experiments.comparison import PolicySpec, run_comparison
from slurm_elastic.sim.workload import TraceError, requested_time
from slurm_elastic.workloads.offered_load import gpus_for_load, offered_gpus
from slurm_elastic.workloads.philly import philly_like


def test_offered_gpus_is_gpu_time_over_the_arrival_span() -> None:
    jobs = philly_like(40, 64, seed=3, load=0.9)
    times = [requested_time(j) for j in jobs]
    work = sum(j.requested_gpus * t for j, t in zip(jobs, times, strict=True))
    span = jobs[-1].submit_time - jobs[0].submit_time + sum(times) / len(times)
    assert offered_gpus(jobs) == pytest.approx(work / span)
    at_once = [replace(j, submit_time=0.0) for j in jobs]  # arriving together: one mean job length
    assert offered_gpus(at_once) == pytest.approx(work / (sum(times) / len(times)))


def test_a_higher_load_is_a_smaller_cluster_of_whole_nodes() -> None:
    jobs = philly_like(60, 64, seed=1, load=0.9)
    sizes = [gpus_for_load(jobs, load, 4) for load in (0.6, 0.9, 1.2)]
    assert sizes[0] > sizes[1] > sizes[2] and all(g % 4 == 0 for g in sizes)
    assert sizes[1] == pytest.approx(offered_gpus(jobs) / 0.9, abs=4)
    assert gpus_for_load(jobs, 1000.0, 4) >= max(j.min_gpus for j in jobs)  # the largest job still fits
    with pytest.raises(TraceError, match="must be a finite number > 0"):
        gpus_for_load(jobs, 0.0, 4)
    with pytest.raises(TraceError, match="no jobs"):
        offered_gpus([])


def test_the_same_trace_queues_more_at_a_higher_load(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    jobs = philly_like(30, 32, seed=2, load=0.9)
    trace.write_text("job_id,submit_time,num_gpus,duration\n" + "".join(
        f"{j.job_id},{j.submit_time},{j.requested_gpus},{requested_time(j):.3f}\n" for j in jobs))
    out = run_comparison([PolicySpec("fifo", {})], [1], trace=trace, gpus_per_node=4, loads=(0.5, 1.5))
    assert [r["load"] for r in out] == [0.5, 1.5] and out[0]["gpus"] > out[1]["gpus"]
    assert out[1]["metrics"]["avg_queue"] > out[0]["metrics"]["avg_queue"]


def test_simulate_cli_load_and_policy_all(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--workload", "philly-like", "--load", "0.9", "--gpus", "32", "--quiet"]) == 2
    assert "give one" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--workload", "philly-like", "--load", "0.9,-1", "--quiet"])
    assert exc.value.code == 2 and "each load must be a number in (0, 10]" in capsys.readouterr().err
    out_file = tmp_path / "r.json"
    assert main(["simulate", "--workload", "ibm-categories-low", "--load", "0.8", "--policy", "all", "--quiet",
                 "--json", str(out_file)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert sorted({r["policy"] for r in summary}) == sorted(policies.available())
    assert {r["load"] for r in summary} == {0.8} and len({r["gpus"] for r in summary}) == 1
