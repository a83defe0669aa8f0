"""A site's start and end latencies from its own sacct records, and what-if applying them (issue 39,
item 3): recorded sacct fixtures and constructed records whose latencies are worked out by hand."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from slurm_elastic.cli import main
from slurm_elastic.core.model import JobId, JobState, NodeName
from slurm_elastic.errors import ConfigError
from slurm_elastic.experiments.comparison import PolicySpec
from slurm_elastic.reports.site_physics import NodeCountLatency, measure_site_physics
from slurm_elastic.sim.cluster import VirtualCluster
from slurm_elastic.sim.costs import ResizeCost, overhead_for
from slurm_elastic.slurm.json_records import parse_sacct
from slurm_elastic.slurm.records import AccountingRecord
from slurm_elastic.whatif import MIN_REPLAYED_S, apply_site_physics, history_rows, read_accounting, what_if

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm-json"


def rec(job_id: int, *, nodes: int = 1, start: int | None = 1000, end: int | None = 1100,
        steps: tuple[tuple[int | None, int | None], ...] = ((1002, 1097),), state: str = "COMPLETED",
        gpus: int = 2, submit: int = 900) -> AccountingRecord:
    return AccountingRecord(
        job_id=JobId(str(job_id)), slurm_job_id=job_id, name="j", user="u", account="a", partition="gpu",
        state=JobState.FINISHED if end is not None else JobState.RUNNING, slurm_state=(state,), submit_time=submit,
        start_time=start, end_time=end, elapsed=(end or 0) - (start or 0) if start else 0, allocated_gpus=gpus,
        nodes=tuple(NodeName(f"n{i:02d}") for i in range(nodes)), admin_comment="", steps=steps)


def test_latencies_are_the_medians_per_node_count_of_the_completed_jobs_with_a_work_step() -> None:
    records = [
        rec(1, start=1000, steps=((1002, 1097),), end=1100),  # 1 node: start 2, end 3
        rec(2, start=2000, steps=((2004, 2090),), end=2091),  # 1 node: start 4, end 1
        rec(3, start=3000, steps=((3001, 3050), (3050, 3095)), end=3100),  # 1 node, two steps: start 1, end 5
        rec(4, nodes=2, start=4000, steps=((4006, 4090),), end=4100),  # 2 nodes: start 6, end 10
        rec(5, start=5000, steps=((5009, 5050),), end=5060, state="CANCELLED"),  # not completed
        rec(6, start=6000, steps=(), end=6100),  # no work step (a batch script that runs its work itself)
        rec(7, start=7000, steps=((7001, None),), end=7100),  # a step whose end Slurm never wrote
        rec(8, start=None, end=None, steps=(), state="PENDING"),
        rec(9, start=9000, steps=((8999, 9090),), end=9089),  # whole seconds: clipped at 0
    ]
    physics = measure_site_physics(records)
    assert physics.by_nodes == (NodeCountLatency(1, 4, 1.5, 2.0), NodeCountLatency(2, 1, 6.0, 10.0))
    assert physics.records_jobs == 9 and physics.measured_jobs == 5
    assert physics.overhead_by_nodes() == {1: 3.5, 2: 16.0}
    assert "1 node: start 1.5 s + end 2 s (4 jobs)" in physics.describe()
    assert physics.as_dict()["by_nodes"][1] == {"nodes": 2, "jobs": 1, "start_s": 6.0, "end_s": 10.0}


def test_a_resized_job_counts_from_its_first_shape_to_its_last_at_its_first_node_count() -> None:
    first = rec(11, nodes=2, start=1000, end=1500, steps=((1003, 1500),), state="RESIZING")
    last = rec(11, nodes=1, start=1500, end=2000, steps=((1003, 1990),))
    assert measure_site_physics([last, first]).by_nodes == (NodeCountLatency(2, 1, 3.0, 10.0),)


def test_nothing_measured_says_so_and_costs_nothing() -> None:
    physics = measure_site_physics([rec(1, steps=())])
    assert physics.by_nodes == () and physics.overhead_by_nodes() == {}
    assert "none measured" in physics.describe()
    assert overhead_for({}, 3) == 0.0


@pytest.mark.parametrize(("release", "srun"), [("22.05", True), ("23.02", False), ("24.05", False), ("25.11", True)])
def test_the_recorded_sacct_of_every_dialect_gives_its_work_steps(release: str, srun: bool) -> None:
    """22.05's and 25.11's recorded jobs ran ``srun sleep``; the others' batch scripts ran ``sleep``
    (their only step, ``batch``, is not a work step)."""
    records = parse_sacct(json.loads((FIXTURES / release / "sacct.json").read_text()))
    assert any(r.steps for r in records) is srun
    for r in records:
        for start, end in r.steps:
            assert start is None or r.start_time is None or start >= r.start_time - 1
            assert end is None or r.end_time is None or end <= r.end_time + 1
    measure_site_physics(records)  # every record of every dialect is read


def test_a_node_count_not_measured_pays_the_nearest_measured_ones() -> None:
    by_nodes = {1: 2.0, 4: 8.0}
    assert [overhead_for(by_nodes, n) for n in (1, 2, 3, 4, 9)] == [2.0, 2.0, 8.0, 8.0, 8.0]
    assert overhead_for(5.0, 7) == 5.0
    with pytest.raises(ConfigError, match="on 0 node"):
        VirtualCluster(2, 2, ResizeCost.parse("in-place"), overhead_s={0: 1.0})
    with pytest.raises(ConfigError, match="job overhead -1"):
        VirtualCluster(2, 2, ResizeCost.parse("in-place"), overhead_s={1: -1.0})


def test_each_replayed_job_loses_its_node_counts_latency_from_its_work() -> None:
    records = [rec(1, gpus=2, start=1000, end=1100), rec(2, nodes=2, gpus=4, start=1000, end=1010),
               rec(3, gpus=1, start=1000, end=1002)]
    rows = apply_site_physics(history_rows(records), records, {1: 5.0, 2: 9.5})
    assert {r["job_id"]: r["duration"] for r in rows} == {"1": "95", "2": "1", "3": "1"}  # 10 - 9.5 s: MIN_REPLAYED_S
    assert MIN_REPLAYED_S == 1.0
    assert apply_site_physics(history_rows(records), records, {})[0]["duration"] == "100"
    assert overhead_for({1: 5.0, 2: 9.5}, 2) == 9.5


def test_what_if_applies_the_site_latencies_by_default_and_says_so() -> None:
    """A job replayed alone at its own size ends when it ended (its work less its latency, then the
    latency paid at its start); a policy that grows it speeds up its work, not its latency."""
    records = [rec(1, gpus=1, start=1000, steps=((1020, 1390),), end=1400)]  # start 20 s + end 10 s
    on = what_if(records, [PolicySpec("fifo"), PolicySpec("dp")], [1], 4, 4)
    off = what_if(records, [PolicySpec("fifo"), PolicySpec("dp")], [1], 4, 4, site_physics=False)
    assert on[0]["site_physics"]["applied"] and not off[0]["site_physics"]["applied"]
    assert on[0]["site_physics"]["by_nodes"] == [{"nodes": 1, "jobs": 1, "start_s": 20.0, "end_s": 10.0}]
    assert "start 20 s + end 10 s" in on[0]["site_physics"]["described"]
    fifo_on, dp_on = (r["jobs"][0]["jct"] for r in on)
    fifo_off, dp_off = (r["jobs"][0]["jct"] for r in off)
    assert fifo_on == pytest.approx(400.0) and fifo_off == pytest.approx(400.0)
    assert dp_off < 400.0 and dp_on > dp_off  # dp grows it: 370 s of work shrink, the 30 s do not
    speedup = 400.0 / dp_off
    assert dp_on == pytest.approx(30.0 + 370.0 / speedup, rel=0.02)


def test_what_ifs_read_keeps_the_steps_the_site_physics_are_measured_from() -> None:
    """``sacct --json -X`` lists no step (on the dev cluster's 22.05): the read for the site physics
    leaves ``-X`` out, the plain read keeps it."""
    seen: list[list[str]] = []
    doc = (FIXTURES / "22.05" / "sacct.json").read_text()

    def runner(argv: Sequence[str]) -> str:
        seen.append(list(argv))
        return doc

    since, until = dt.datetime(2026, 3, 1), dt.datetime(2026, 3, 2)
    assert any(r.steps for r in read_accounting(since, until, runner=runner, steps=True))
    read_accounting(since, until, runner=runner)
    assert seen == [["sacct", "--json", "-a", "-S", "2026-03-01T00:00:00", "-E", "2026-03-02T00:00:00"],
                    ["sacct", "--json", "-a", "-X", "-S", "2026-03-01T00:00:00", "-E", "2026-03-02T00:00:00"]]


def test_the_what_if_command_says_what_it_applied_in_its_summary_and_report(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    records = [rec(1, gpus=1, start=1000, steps=((1020, 1390),), end=1400)]
    asked: list[bool] = []

    def read(*args: object, steps: bool = False, **kw: object) -> list[AccountingRecord]:
        asked.append(steps)
        return records

    monkeypatch.setattr("slurm_elastic.whatif.read_accounting", read)
    argv = ["what-if", "--since", "2024-01-01", "--until", "2024-01-02", "--policy", "fifo", "--gpus", "4"]
    assert main([*argv, "--report", str(tmp_path / "r")]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["site_physics"]["applied"] and summary["site_physics"]["measured_jobs"] == 1
    assert "start 20 s + end 10 s" in (tmp_path / "r" / "index.html").read_text()
    assert main([*argv, "--no-site-physics"]) == 0
    assert json.loads(capsys.readouterr().out)["site_physics"]["applied"] is False
    assert asked == [True, False]  # the steps are read only for the site physics
