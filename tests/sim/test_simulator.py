"""Simulator tests on tiny traces with answers worked out by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_elastic import policies
from slurm_elastic.errors import ConfigError, TraceError
from slurm_elastic.sim.engine import simulate
from slurm_elastic.sim.workload import load_trace
from slurm_elastic.workloads.catalog import builtin
from slurm_elastic.workloads.ibm import ibm_categories
from slurm_elastic.workloads.ones import ones_longhorn_50
from slurm_elastic.workloads.philly import philly_like


def _trace(tmp_path: Path, rows: list[str], header: str = "job_id,submit_time,num_gpus,duration,model") -> Path:
    path = tmp_path / "trace.csv"
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def _run(jobs, policy: str = "fifo", gpus: int = 4, **kw):  # type: ignore[no-untyped-def]
    return simulate(jobs, policies.create(policy, **kw), gpus=gpus, round_gap=0.0)


def test_one_job_alone_takes_its_duration(tmp_path: Path) -> None:
    jobs = load_trace(_trace(tmp_path, ["a,0,2,100,cifar10"]))
    res = _run(jobs)
    (job,) = res["jobs"]
    assert job["jct"] == pytest.approx(100.0, rel=1e-6)
    assert job["queue"] == 0.0
    assert job["gpu_seconds"] == pytest.approx(200.0, rel=1e-6)
    assert job["ftf"] == pytest.approx(1.0, rel=1e-6)
    assert res["metrics"]["avg_utilization"] == pytest.approx(0.5, rel=1e-6)


def test_fifo_serialises_two_full_cluster_jobs(tmp_path: Path) -> None:
    jobs = load_trace(_trace(tmp_path, ["a,0,4,100,imagenet", "b,0,4,50,bert"]))
    m = _run(jobs)["metrics"]
    assert m["avg_jct"] == pytest.approx((100 + 150) / 2, rel=1e-6)
    assert m["makespan"] == pytest.approx(150.0, rel=1e-6)
    assert m["avg_queue"] == pytest.approx(50.0, rel=1e-6)
    assert m["jobs_completed"] == 2 and m["drop_ratio"] == 0.0


def test_elastic_policy_uses_idle_gpus_and_beats_fifo(tmp_path: Path) -> None:
    jobs = load_trace(_trace(tmp_path, ["a,0,1,600,imagenet"]))
    fifo = _run(jobs, gpus=8)["metrics"]
    dp = _run(jobs, "dp", gpus=8)["metrics"]
    assert fifo["avg_jct"] == pytest.approx(600.0, rel=1e-6)
    assert dp["avg_jct"] < 0.5 * fifo["avg_jct"]  # ImageNet scales well on 4-8 GPUs
    assert dp["jobs_completed"] == 1


def test_checkpoint_resize_cost_is_paid(tmp_path: Path) -> None:
    jobs = load_trace(_trace(tmp_path, ["a,0,1,600,imagenet", "b,60,1,600,imagenet"]))
    cheap = simulate(jobs, policies.create("dp"), gpus=4, round_gap=0.0, resize_cost="0")["metrics"]
    costly = simulate(jobs, policies.create("dp"), gpus=4, round_gap=0.0, resize_cost="checkpoint")["metrics"]
    assert costly["resizes_per_job"] >= 1
    assert costly["avg_jct"] > cheap["avg_jct"] + 10


def test_same_seed_same_result() -> None:
    jobs = ones_longhorn_50(3)[:12]
    a = _run(jobs, "ones", gpus=16)
    b = _run(jobs, "ones", gpus=16)
    assert a["metrics"] == b["metrics"]


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (["a,0,2,abc,cifar10"], "trace.csv:2: duration = 'abc' is not a number"),
        (["a,0,0,100,cifar10"], "trace.csv:2: num_gpus = '0' must be an integer >= 1"),
        (["a,0,1,100,cifar10", "a,5,1,100,cifar10"], "trace.csv:3: job_id 'a' appears twice"),
        (["a,0,1,100,resnet152"], "trace.csv:2: model 'resnet152' has no profile"),
    ],
)
def test_malformed_rows_are_refused_with_line(tmp_path: Path, rows: list[str], message: str) -> None:
    with pytest.raises(TraceError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_trace(_trace(tmp_path, rows))


def test_missing_column_and_unknown_columns(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="lacks required column"):
        load_trace(_trace(tmp_path, ["a,0,1"], header="job_id,submit_time,num_gpus"))
    jobs = load_trace(_trace(tmp_path, ["a,0,1,100,x"], header="job_id,submit_time,num_gpus,duration,colour"))
    assert jobs[0].model in ("cifar10", "ncf")  # no model: chosen from its GPU-time class


def test_builtin_workloads_have_their_papers_shapes() -> None:
    ones = ones_longhorn_50(1)
    assert len(ones) == 50
    assert {j.model for j in ones} == {"imagenet", "cifar10", "bert"}
    ibm = ibm_categories(1, gpus=40)
    assert 40 <= len(ibm) <= 140
    assert {j.category for j in ibm} == {"1-compute-bound", "2-communication-bound", "3-balanced", "4-not-elastic"}
    assert all(j.max_gpus == 1 for j in ibm if j.category == "4-not-elastic")
    assert len(philly_like(100, 64, 1)) == 100
    with pytest.raises(TraceError, match="unknown workload 'nope'"):
        builtin("nope", 1, 64)


def test_bad_cluster_shape_is_refused() -> None:
    with pytest.raises(ConfigError, match="multiple of --gpus-per-node"):
        simulate([], policies.create("fifo"), gpus=6, gpus_per_node=4)


@pytest.mark.parametrize("policy", ["fifo", "tiresias", "optimus", "dp", "dp-fixed", "ones"])
def test_every_policy_finishes_a_small_workload(policy: str) -> None:
    jobs = ones_longhorn_50(2)[:10]
    m = simulate(jobs, policies.create(policy), gpus=16, round_gap=30.0)["metrics"]
    assert m["jobs_completed"] == 10 and m["jobs_unfinished"] == 0


def test_simulate_command_writes_json_and_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from slurm_elastic.cli import main

    trace = _trace(tmp_path, ["a,0,2,300,cifar10", "b,10,1,200,bert", "c,20,4,100,imagenet"])
    out, report = tmp_path / "r.json", tmp_path / "report"
    assert main(["simulate", "--trace", str(trace), "--gpus", "8", "--policy", "fifo,dp", "--seeds", "1-2",
                 "--json", str(out), "--report", str(report), "--quiet"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert [(s["policy"], s["seed"]) for s in summary] == [("fifo", 1), ("dp", 1), ("fifo", 2), ("dp", 2)]
    assert all(s["jobs_completed"] == 3 for s in summary)
    assert len(json.loads(out.read_text())) == 4
    assert (report / "index.html").is_file() and (report / "jct_cdf.png").stat().st_size > 1000


def test_simulate_command_rejects_bad_param(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from slurm_elastic.cli import main

    trace = _trace(tmp_path, ["a,0,2,300,cifar10"])
    assert main(["simulate", "--trace", str(trace), "--policy", "fifo", "--param", "dp.mode=drop"]) == 2
    assert "must be POLICY.KEY=VALUE with POLICY one of fifo" in capsys.readouterr().err
