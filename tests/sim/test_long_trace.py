"""Any length of history (issue 39, item 2): the horizon follows the trace.

A trace that spans more than 30 days is read and replayed whole (every job arrives and ends); a
``horizon`` the user sets cuts the run there and the result names the jobs that did not end; a bad
``--horizon`` is refused on the command line (exit 2, one line naming the value and the rule).
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

from slurm_elastic import policies
from slurm_elastic.errors import ConfigError, TraceError
from slurm_elastic.sim.engine import simulate
from slurm_elastic.sim.workload import MAX_SUBMIT_S, load_trace
from slurm_elastic.workloads.philly import philly_like

DAY = 86_400.0


@pytest.fixture(autouse=True)
def _no_hang() -> Iterator[None]:
    """A simulation that loops for ever fails the test instead of hanging the suite."""

    def hung(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError("the simulation did not end within 60 s")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _trace(tmp_path: Path, rows: list[str], header: str = "job_id,submit_time,num_gpus,duration,model") -> Path:
    path = tmp_path / "trace.csv"
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


@pytest.mark.parametrize("policy", ["fifo", "dp", "min-jct", "optimus"])
def test_a_sixty_day_trace_is_replayed_whole(tmp_path: Path, policy: str) -> None:
    # The production trace: a job submitted at 2,604,901 s, past the old 30-day horizon.
    rows = ["a,0,2,100,cifar10", "b,2604901,1,200,bert", f"c,{60 * DAY:.0f},4,300,imagenet"]
    jobs = load_trace(_trace(tmp_path, rows))
    res = simulate(jobs, policies.create(policy), gpus=8, seed=1)
    m = res["metrics"]
    assert m["jobs"] == 3 and m["jobs_completed"] == 3 and m["jobs_unfinished"] == 0
    assert res["unfinished"] == []
    ends = {j["job_id"]: j["end"] for j in res["jobs"]}
    assert ends["c"] is not None and ends["c"] > 60 * DAY
    if policy == "fifo":  # alone on the cluster: each takes its duration from the first 2-s poll after it arrives
        assert ends["b"] == pytest.approx(2604902 + 200, rel=1e-12)
        assert ends["c"] == pytest.approx(60 * DAY + 300, rel=1e-12)
    assert m["makespan"] == pytest.approx(ends["c"], rel=1e-9)


def test_a_job_longer_than_thirty_days_ends(tmp_path: Path) -> None:
    jobs = load_trace(_trace(tmp_path, ["a,0,1,4000000,cifar10"]))
    res = simulate(jobs, policies.create("fifo"), gpus=4)
    (job,) = res["jobs"]
    assert job["finished"] and job["jct"] == pytest.approx(4_000_000, rel=1e-9)


def test_horizon_cuts_the_run_and_names_the_jobs_that_did_not_end(tmp_path: Path) -> None:
    jobs = load_trace(_trace(tmp_path, ["a,0,1,100,cifar10", "b,50,1,5000,bert", f"c,{40 * DAY:.0f},1,100,ncf"]))
    res = simulate(jobs, policies.create("fifo"), gpus=4, horizon=1000.0)
    assert res["horizon"] == 1000.0
    assert res["unfinished"] == ["b", "c"]  # b runs past 1000 s; c would arrive after it
    assert res["metrics"]["jobs_completed"] == 1
    assert {j["job_id"]: j["finished"] for j in res["jobs"]} == {"a": True, "b": False}
    whole = simulate(jobs, policies.create("fifo"), gpus=4)
    assert whole["horizon"] is None and whole["unfinished"] == []


@pytest.mark.parametrize("horizon", [0.0, -1.0, float("nan"), float("inf"), 1e300])
def test_a_bad_horizon_is_refused(horizon: float) -> None:
    with pytest.raises(ConfigError, match="horizon"):
        simulate(philly_like(3, 4, 1), policies.create("fifo"), gpus=4, horizon=horizon)


def test_a_round_gap_beyond_the_horizon_bound_is_refused() -> None:
    with pytest.raises(ConfigError, match="round gap"):
        simulate(philly_like(3, 4, 1), policies.create("fifo"), gpus=4, round_gap=1e308)


@pytest.mark.parametrize("duration", ["1e-9", "0.01", "0.3"])
def test_short_jobs_late_in_a_long_trace_end(tmp_path: Path, duration: str) -> None:
    # Late in a long trace the clock's resolution (its last bit) is coarser than a short job's work
    # tolerance: the job must still end when its finish time comes, not loop for ever.
    rows = [f"a{k},{2_500_000 + k * 7_000_000},1,{duration},cifar10" for k in range(3)]
    jobs = load_trace(_trace(tmp_path, [*rows, "b,9000000,2,0.02,bert"]))
    for policy in ("fifo", "dp", "min-jct"):
        res = simulate(jobs, policies.create(policy), gpus=8)
        assert res["metrics"]["jobs_completed"] == 4, policy


def test_a_job_no_policy_can_place_does_not_run_for_ever(tmp_path: Path) -> None:
    # min_gpus 16 on an 8-GPU cluster: it waits for ever; the run stops, naming it.
    path = _trace(tmp_path, ["a,0,16,100,16,32", "b,10,1,100,1,4"],
                  header="job_id,submit_time,num_gpus,duration,min_gpus,max_gpus")
    for policy in ("fifo", "optimus"):
        res = simulate(load_trace(path), policies.create(policy), gpus=8)
        assert res["unfinished"] == ["a"], policy
        assert res["metrics"]["jobs_completed"] == 1


def test_trace_submit_time_bound(tmp_path: Path) -> None:
    assert MAX_SUBMIT_S >= 366 * DAY  # a year of history, and more
    jobs = load_trace(_trace(tmp_path, [f"a,{366 * DAY:.0f},1,60,ncf"]))
    assert jobs[0].submit_time == 366 * DAY
    with pytest.raises(TraceError, match=f"submit_time = '{MAX_SUBMIT_S:.0f}' must be .* < {MAX_SUBMIT_S:.0f}"):
        load_trace(_trace(tmp_path, [f"a,{MAX_SUBMIT_S:.0f},1,60,ncf"]))


def test_simulate_command_horizon(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from slurm_elastic.cli import main

    trace = _trace(tmp_path, ["a,0,1,100,cifar10", "b,50,1,5000,bert", f"c,{61 * DAY:.0f},1,100,ncf"])
    out = tmp_path / "r.json"
    assert main(["simulate", "--trace", str(trace), "--gpus", "4", "--policy", "fifo", "--quiet",
                 "--json", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary[0]["jobs_completed"] == 3
    assert main(["simulate", "--trace", str(trace), "--gpus", "4", "--policy", "fifo", "--quiet",
                 "--horizon", "1000", "--json", str(out)]) == 0
    cap = capsys.readouterr()
    assert json.loads(cap.out)[0]["jobs_completed"] == 1
    assert "horizon 1000 s" in cap.err and "2 job(s) did not end: b, c" in cap.err
    assert json.loads(out.read_text())[0]["unfinished"] == ["b", "c"]


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "1e400", "x", "2e9", "٣"])
def test_simulate_command_refuses_a_bad_horizon(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                value: str) -> None:
    from slurm_elastic.cli import main

    trace = _trace(tmp_path, ["a,0,1,100,cifar10"])
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--trace", str(trace), "--policy", "fifo", "--quiet", f"--horizon={value}"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "argument --horizon" in err
    assert value in err or (value == "2e9" and "2e+09" in err)  # the value as given (or as a number)
    assert "> 0 and <= 1e+09" in err
