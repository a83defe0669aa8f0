"""The simulator plans when the daemon would (issue 39, item 1): at the poll after an arrival, a
completion or an owed epoch end, every ``max_idle``, never closer than the poll; ``round_gap`` keeps
fixed rounds; ``--config`` gives the site's poll and ``max_idle``."""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from slurm_elastic import policies
from slurm_elastic.cli import main
from slurm_elastic.core.model import ClusterSnapshot
from slurm_elastic.core.planner import Planner, PlannerWrapper, PlanResult
from slurm_elastic.drl.weights import DEFAULT_MODEL, DL2_MODEL, load
from slurm_elastic.errors import ConfigError
from slurm_elastic.experiments.comparison import PolicySpec, run_comparison
from slurm_elastic.experiments.papers import DRL_ROUND_GAP, fairness_policies
from slurm_elastic.sim.engine import EPOCH_GROUP_S, Cadence, simulate
from slurm_elastic.sim.workload import load_trace
from slurm_elastic.workloads.philly import philly_like


class Recorder(PlannerWrapper):
    """The inner planner, noting the time of every round."""

    def __init__(self, inner: Planner) -> None:
        super().__init__(inner)
        self.times: list[float] = []

    def plan(self, snapshot: ClusterSnapshot, memo: Any, rng: np.random.Generator) -> PlanResult:
        self.times.append(snapshot.now)
        return self.inner.plan(snapshot, memo, rng)


def _trace(tmp_path: Path, *rows: str) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text("\n".join(["job_id,submit_time,num_gpus,duration,model", *rows]) + "\n")
    return path


def _rounds(tmp_path: Path, *rows: str, policy: str = "fifo", **kw: Any) -> tuple[list[float], dict[str, Any]]:
    rec = Recorder(policies.create(policy))
    res = simulate(load_trace(_trace(tmp_path, *rows)), rec, gpus=4, **kw)
    return rec.times, res


def test_a_job_starts_at_the_first_poll_after_it_arrives(tmp_path: Path) -> None:
    times, res = _rounds(tmp_path, "a,1,1,100,cifar10")
    assert times[0] == 2.0  # the daemon's 2-s poll, not the arrival itself
    assert res["jobs"][0]["start"] == 2.0
    assert res["cadence"] == "daemon (poll 2 s, max_idle 60 s)"


def test_events_closer_than_the_poll_share_a_round_and_later_ones_do_not_wait_30_s(tmp_path: Path) -> None:
    times, res = _rounds(tmp_path, "a,10,1,500,cifar10", "b,10.5,1,500,cifar10", "c,13,1,500,cifar10")
    starts = {j["job_id"]: j["start"] for j in res["jobs"]}
    assert starts == {"a": 10.0, "b": 12.0, "c": 14.0}  # at the polls, each as soon as the poll allows
    assert all(b - a >= 2.0 for a, b in pairwise(times))


def test_a_round_every_max_idle_while_a_job_runs_and_none_when_the_cluster_is_empty(tmp_path: Path) -> None:
    times, res = _rounds(tmp_path, "a,0,1,300,cifar10", "b,1000,1,100,cifar10")
    end_a = res["jobs"][0]["end"]
    assert end_a == pytest.approx(300.0)
    assert [t for t in times if t < end_a] == [0.0, 60.0, 120.0, 180.0, 240.0, 300.0][: 5 + (end_a > 300.0)]
    assert not [t for t in times if end_a < t < 1000.0]  # nothing to plan for: no round
    assert all(t % 2.0 == 0.0 for t in times)
    gaps = [b - a for a, b in pairwise(times) if a >= 1000.0]
    assert gaps and max(gaps) <= 60.0


def test_the_round_gap_keeps_fixed_rounds(tmp_path: Path) -> None:
    times, res = _rounds(tmp_path, "a,10,1,500,cifar10", "b,10.5,1,500,cifar10", round_gap=30.0)
    assert times == [10.0, 40.0, 510.0]  # the second arrival waits for the gap; then a's end; no max_idle round
    assert res["cadence"] == "fixed 30 s"
    times, _ = _rounds(tmp_path, "a,10,1,500,cifar10", "b,10.5,1,500,cifar10", round_gap=0.0)
    assert times == [10.0, 10.5, 510.0]


def test_a_site_cadence_sets_the_poll_and_max_idle(tmp_path: Path) -> None:
    times, res = _rounds(tmp_path, "a,1,1,300,cifar10", cadence=Cadence(5.0, 100.0))
    assert times[:3] == [5.0, 105.0, 205.0]
    assert res["cadence"] == "daemon (poll 5 s, max_idle 100 s)"


def test_epoch_ends_owe_rounds_to_a_planner_that_reads_them_at_most_every_epoch_group() -> None:
    jobs = philly_like(12, 16, 1)
    rec = Recorder(policies.create("ones"))
    simulate(jobs, rec, gpus=16, seed=1)
    arrivals_ends = 2 * len(jobs)
    assert len(rec.times) > arrivals_ends  # epoch ends and max_idle add rounds ...
    closer = [b - a for a, b in pairwise(rec.times) if b - a < EPOCH_GROUP_S]
    assert all(g >= 2.0 for g in closer)  # ... never closer than the poll
    fifo = Recorder(policies.create("fifo"))  # reads no epoch: its rounds are its events' and max_idle's
    res = simulate(jobs, fifo, gpus=16, seed=1)
    assert res["rounds"] == len(fifo.times)


@pytest.mark.parametrize("kw", [{"poll": 0.1}, {"poll": float("nan")}, {"poll": 10.0, "max_idle": 5.0},
                                {"max_idle": 1e9}, {"fixed": -1.0}, {"fixed": float("inf")},
                                {"epoch_group": -1.0}])
def test_a_bad_cadence_is_refused(kw: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        Cadence(**kw)


def test_simulate_reads_the_cadence_from_the_site_config(tmp_path: Path) -> None:
    trace, out, config = _trace(tmp_path, "a,0,1,600,cifar10"), tmp_path / "out.json", tmp_path / "elastic.toml"
    config.write_text("[daemon]\npoll_interval = 4.0\nmax_idle = 120.0\n")
    assert main(["simulate", "--trace", str(trace), "--gpus", "4", "--policy", "fifo", "--quiet", "--json", str(out),
                 "--config", str(config)]) == 0
    site = json.loads(out.read_text())[0]
    assert site["cadence"] == "daemon (poll 4 s, max_idle 120 s)"
    assert main(["simulate", "--trace", str(trace), "--gpus", "4", "--policy", "fifo", "--quiet", "--json", str(out),
                 "--no-guards"]) == 0
    assert json.loads(out.read_text())[0]["cadence"] == "daemon (poll 2 s, max_idle 60 s)"
    assert main(["simulate", "--trace", str(trace), "--gpus", "4", "--policy", "fifo", "--quiet", "--json", str(out),
                 "--round-gap", "30"]) == 0
    assert json.loads(out.read_text())[0]["cadence"] == "fixed 30 s"
    assert site["rounds"] > json.loads(out.read_text())[0]["rounds"]  # its max_idle rounds


def test_a_policy_spec_round_gap_overrides_the_cadence(tmp_path: Path) -> None:
    runs = run_comparison([PolicySpec("fifo"), PolicySpec("fifo", round_gap=30.0, label="slotted")], [1],
                          trace=_trace(tmp_path, "a,1,1,100,cifar10"), gpus=4)
    assert [r["cadence"] for r in runs] == ["daemon (poll 2 s, max_idle 60 s)", "fixed 30 s"]


def test_drl_plans_at_the_round_gap_its_shipped_models_learned_at() -> None:
    for path in (DL2_MODEL, DEFAULT_MODEL):
        assert json.loads(load(path).meta["config"])["round_gap"] == DRL_ROUND_GAP
    assert all(p.round_gap == DRL_ROUND_GAP for p in fairness_policies() if p.name == "drl")
