"""Allocation report tables and the what-if trace: recorded sacct fixtures and hand-computed synthetic records."""

from __future__ import annotations

import csv
import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from slurm_elastic.contract import satellite_parent
from slurm_elastic.core.actions import Action, ActionKind
from slurm_elastic.core.model import JobId, JobState, NodeName, Placement
from slurm_elastic.errors import ConfigError
from slurm_elastic.experiments.comparison import PolicySpec
from slurm_elastic.reports.allocation import (
    CSV_TABLES,
    PLOTS,
    ReportDataError,
    allocation_tables,
    group_jobs,
    job_scaling,
    write_csv,
    write_html,
    write_json,
)
from slurm_elastic.sim.workload import load_trace
from slurm_elastic.slurm.json_records import parse_sacct
from slurm_elastic.slurm.records import AccountingRecord
from slurm_elastic.slurm.satellites import mark_argv
from slurm_elastic.store import JournalEntry, ProgressRow
from slurm_elastic.whatif import (
    TRACE_COLUMNS,
    history_rows,
    history_to_trace,
    parse_when,
    read_accounting,
    skipped_jobs,
    what_if,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm-json"


def rec(job_id: int, *, gpus: int, start: int | None, elapsed: int, submit: int, account: str = "a",
        user: str = "u", partition: str = "gpu", state: str = "COMPLETED", comment: str = "") -> AccountingRecord:
    finished = state in ("COMPLETED", "RESIZING", "CANCELLED", "FAILED")
    return AccountingRecord(
        job_id=JobId(str(job_id)), slurm_job_id=job_id, name="j", user=user, account=account, partition=partition,
        state=JobState.FINISHED if finished else JobState.RUNNING, slurm_state=(state,), submit_time=submit,
        start_time=start, end_time=start + elapsed if finished and start is not None else None, elapsed=elapsed,
        allocated_gpus=gpus, nodes=(NodeName("n01"),), admin_comment=comment,
    )


def synthetic() -> list[AccountingRecord]:
    """Hand-computed scenario (seconds; GPU-hours in the comments)."""
    return [
        # job 10: rigid, 2 GPUs x 1800 s = 1.0 GPU-h, submit 0, start 100, end 1900
        rec(10, gpus=2, start=100, elapsed=1800, submit=0, account="A", user="alice"),
        # job 11: elastic, resized 4 -> 2 GPUs: 4 x 1800 + 2 x 3600 = 4.0 GPU-h (22.05: later segment's
        # submission is the resize time)
        rec(11, gpus=2, start=2000, elapsed=3600, submit=2000, account="A", user="bob",
            comment="slurm-elastic gpus=1:8 mode=exo"),
        rec(11, gpus=4, start=200, elapsed=1800, submit=100, account="A", user="bob", state="RESIZING",
            comment="slurm-elastic gpus=1:8 mode=exo"),
        # job 12: satellite of 11, 1 GPU x 1800 s = 0.5 GPU-h, in partition "big"
        rec(12, gpus=1, start=3000, elapsed=1800, submit=2900, account="A", user="bob", partition="big",
            comment="slurm-elastic satellite-of=11 gpus=1:1"),
        # job 13: no GPU (left out of the tables, skipped by the what-if)
        rec(13, gpus=0, start=0, elapsed=100, submit=0, account="B", user="carol"),
        # job 14: rigid, 1 GPU x 3600 s = 1.0 GPU-h, submit 1000, start 4000, end 7600
        rec(14, gpus=1, start=4000, elapsed=3600, submit=1000, account="B", user="carol"),
    ]


def rows_by(tables: dict[str, Any], name: str, key: str) -> dict[str, dict[str, Any]]:
    return {r[key]: r for r in tables[name]}


# --------------------------------------------------------------------------------------------------
# Recorded fixtures


def sacct_gpu_seconds(doc: dict[str, Any]) -> dict[str, float]:
    """Independent of the parser: elapsed x tres.allocated gres/gpu per record, by account."""
    out: dict[str, float] = {}
    for j in doc["jobs"]:
        gpus = 0
        for t in j["tres"]["allocated"]:
            if t["type"] == "gres" and t["name"] == "gpu":
                count = t["count"]
                gpus = count["number"] if isinstance(count, dict) else count
        elapsed = j["time"]["elapsed"]
        out[j["account"]] = out.get(j["account"], 0.0) + gpus * elapsed
    return out


@pytest.mark.parametrize("version", ["22.05", "25.11"])
def test_fixture_gpu_hours_match_sacct(version: str) -> None:
    doc = json.loads((FIXTURES / version / "sacct.json").read_text())
    tables = allocation_tables(parse_sacct(doc), total_gpus=16)
    expected = sacct_gpu_seconds(doc)
    got = {r["account"]: r["gpu_hours"] * 3600 for r in tables["by_account"]}
    assert got == pytest.approx(expected)
    assert tables["summary"]["gpu_hours"] * 3600 == pytest.approx(sum(expected.values()))


def test_fixture_2205_resized_job_is_one_job_with_its_segments() -> None:
    tables = allocation_tables(parse_sacct(json.loads((FIXTURES / "22.05" / "sacct.json").read_text())))
    jobs = rows_by(tables, "jobs", "job_id")
    # job 1 held no GPU; 2 (4 GPUs x 2 s), 3 (3 x 2), 4 (RESIZING 2 x 0, then 1 x 2)
    assert set(jobs) == {"2", "3", "4"}
    assert tables["summary"]["jobs_without_gpus"] == 1
    assert jobs["4"]["segments"] == 2 and jobs["4"]["resizes_slurm"] == 1
    assert jobs["4"]["gpus_first"] == 2 and jobs["4"]["elastic"] is True  # comment on the RESIZING record
    assert jobs["4"]["gpu_hours"] * 3600 == pytest.approx(2)
    assert tables["summary"]["gpu_hours"] * 3600 == pytest.approx(8 + 6 + 2)
    assert jobs["2"]["jct"] is None  # still running when recorded


# --------------------------------------------------------------------------------------------------
# Synthetic, hand-computed


def test_group_jobs_merges_segments_and_satellites() -> None:
    jobs = {j.job_id: j for j in group_jobs(synthetic())}
    assert set(jobs) == {"10", "11", "13", "14"}
    j11 = jobs["11"]
    assert [s.gpus for s in j11.segments] == [4, 2, 1]  # primary in time order, then the satellite
    assert j11.submit == 100 and j11.start == 200 and j11.end == 5600
    assert j11.gpu_seconds == 4 * 1800 + 2 * 3600 + 1800
    assert j11.exec_seconds == 5400 and j11.first_gpus == 4
    assert j11.resizes_slurm == 2 and j11.satellites == 1 and j11.elastic
    assert satellite_parent("slurm-elastic satellite-of=11 gpus=1:1") == "11"
    assert satellite_parent("slurm-elastic gpus=1:8") is None
    assert satellite_parent("satellite-of=11") is None


def test_gpu_hours_by_account_user_partition() -> None:
    t = allocation_tables(synthetic(), total_gpus=8)
    acc = rows_by(t, "by_account", "account")
    assert acc["A"]["gpu_hours"] == pytest.approx(5.5)
    assert acc["A"]["elastic_gpu_hours"] == pytest.approx(4.5)
    assert acc["A"]["rigid_gpu_hours"] == pytest.approx(1.0)
    assert acc["A"]["jobs"] == 2 and acc["A"]["elastic_jobs"] == 1
    assert acc["B"]["gpu_hours"] == pytest.approx(1.0) and acc["B"]["jobs"] == 1
    assert acc["A"]["share"] == pytest.approx(5.5 / 6.5)
    user = rows_by(t, "by_user", "user")
    assert {u: r["gpu_hours"] for u, r in user.items()} == pytest.approx({"bob": 4.5, "alice": 1.0, "carol": 1.0})
    part = rows_by(t, "by_partition", "partition")
    assert {p: r["gpu_hours"] for p, r in part.items()} == pytest.approx({"gpu": 6.0, "big": 0.5})
    s = t["summary"]
    assert s["gpu_hours"] == pytest.approx(6.5) and s["elastic_gpu_hours"] == pytest.approx(4.5)
    assert s["gpu_jobs"] == 3 and s["jobs"] == 4 and s["jobs_without_gpus"] == 1
    assert s["since"] == 100 and s["until"] == 7600  # first start, last end of the GPU jobs
    # GPU-seconds integral of the utilization step function equals the GPU-hours
    assert s["mean_gpus_held"] * 7500 == pytest.approx(6.5 * 3600)
    assert s["mean_utilization"] == pytest.approx(6.5 * 3600 / 7500 / 8)


def test_window_clips_gpu_hours() -> None:
    t = allocation_tables(synthetic(), since=1000, until=2000, total_gpus=8)
    # job 10: 2 GPUs x 900 s inside; job 11's first shape: 4 x 1000; nothing else inside
    assert t["summary"]["gpu_hours"] * 3600 == pytest.approx(2 * 900 + 4 * 1000)
    pts = [(p["t"], p["gpus_held"]) for p in t["utilization"]]
    assert pts == [(1000, 6), (1900, 4), (2000, 0)]
    with pytest.raises(ReportDataError, match="before it starts"):
        allocation_tables(synthetic(), since=2000, until=1000)


def test_distributions_and_fairness() -> None:
    t = allocation_tables(synthetic(), total_gpus=8)
    d = {(r["metric"], r["jobs"]): r for r in t["distributions"]}
    assert d["jct", "all"]["n"] == 3
    assert d["jct", "all"]["p50"] == pytest.approx(5500)
    assert d["jct", "all"]["p90"] == pytest.approx(5500 + 0.8 * 1100)
    assert d["jct", "all"]["max"] == 6600
    assert d["queue", "all"]["max"] == 3000 and d["queue", "elastic"]["n"] == 1
    jobs = rows_by(t, "jobs", "job_id")
    # job 10: in system [0, 1900] with jobs 11 (from 100) and 14 (from 1000): N_avg = 4600/1900;
    # fair = 1800 x max(1, N_avg x 2 / 8) = 1800; FTF = 1900 / 1800
    assert jobs["10"]["ftf"] == pytest.approx(1900 / 1800)
    fair = rows_by(t, "fairness", "account")
    assert fair["A"]["jobs_with_ftf"] == 2 and fair["A"]["max_ftf"] >= fair["A"]["mean_ftf"]
    unknown = allocation_tables(synthetic())
    assert all(r["mean_ftf"] is None and "unknown" in r["note"] for r in unknown["fairness"])
    assert any("GPU count unknown" in n for n in unknown["notes"])


def test_journal_resizes_and_cost() -> None:
    p = Placement(())
    entries = [
        JournalEntry(1, 1, Action(ActionKind.SHRINK, JobId("11"), p, p), "done", "", 1990.0, 2000.0),
        JournalEntry(2, 2, Action(ActionKind.GROW, JobId("11"), p, p), "done", "", 2990.0, 2994.0),
        JournalEntry(3, 3, Action(ActionKind.GROW, JobId("11"), p, p), "failed", "boom", 3500.0, 3501.0),
        JournalEntry(4, 1, Action(ActionKind.REBATCH, JobId("11"), p, p), "done", "", 1990.0, 1991.0),
    ]
    t = allocation_tables(synthetic(), journal={"11": entries})
    r = rows_by(t, "resizes", "job_id")["11"]
    assert r["resizes_slurm"] == 2 and r["satellites"] == 1
    assert r["resizes_journaled"] == 3 and r["journaled_failed"] == 1
    assert r["mean_cost_s"] == pytest.approx(7.0) and r["max_cost_s"] == pytest.approx(10.0)
    assert t["summary"]["resizes_journaled"] == 3
    assert rows_by(allocation_tables(synthetic()), "resizes", "job_id")["11"]["resizes_journaled"] is None


def row(t: float, kind: str, world: int, throughput: float | None = None,
        pause_s: float | None = None) -> ProgressRow:
    """A progress row as :meth:`Store.progress_of` returns it."""
    return ProgressRow(t=t, kind=kind, samples=0, world=world, global_batch=32 * world, throughput=throughput,
                       pause_s=pause_s, epoch_size=1000)


def progress() -> dict[str, list[ProgressRow]]:
    """Hand-computed launcher reports (throughput in samples/s, windows = time since the previous row)."""
    return {
        # job 11: X(2) = (200 x 100 + 230 x 200) / 300 = 220 over 300 s; X(4) = 352 over 100 s (the resize row's
        # 150 covers its pause and is not a measurement); X(8) = 528 over 100 s (the end row measures).
        # Per GPU 110, 88, 66 -> efficiency 1, 0.8, 0.6; weights 2 x 300, 4 x 100, 8 x 100 GPU-s -> 1400 / 1800.
        "11": [row(1000, "progress", 2), row(1100, "progress", 2, 200), row(1300, "progress", 2, 230),
               row(1310, "resize", 4, 150, 6.0), row(1410, "progress", 4, 352), row(1420, "resize", 8, 80, 10.0),
               row(1520, "end", 8, 528)],
        # job 10 (rigid in sacct, yet it reported): X(1) = 100 over 100 s, X(2) = 190 over 100 s -> 1, 0.95;
        # weights 100, 200 -> 290 / 300
        "10": [row(0, "progress", 1), row(100, "progress", 1, 100), row(110, "resize", 2, None, 2.0),
               row(210, "progress", 2, 190)],
        # job 14: one size only
        "14": [row(0, "progress", 1), row(50, "progress", 1, 40)],
    }


def test_job_scaling_by_hand() -> None:
    sc = job_scaling(list(reversed(progress()["11"])))  # any order: sorted by t
    assert [(m.gpus, m.seconds, m.throughput) for m in sc.measured] == [(2, 300, 220), (4, 100, 352), (8, 100, 528)]
    assert sc.efficiency == pytest.approx((1.0, 0.8, 0.6))
    assert sc.weight == pytest.approx(1800)
    assert sc.mean_efficiency == pytest.approx(1400 / 1800)
    assert sc.resizes == 2 and sc.pauses == (6.0, 10.0) and sc.note == ""
    one = job_scaling(progress()["14"])
    assert one.efficiency is None and one.mean_efficiency is None and "one measured size (1 GPU)" in one.note
    gap = job_scaling([*progress()["11"], row(1530, "resize", 16, None, 3.0)])
    assert gap.mean_efficiency == pytest.approx(1400 / 1800) and gap.note == "no throughput measured at 16 GPUs"
    silent = job_scaling([row(0, "progress", 2), row(10, "resize", 4, None, 1.0)])
    assert silent.measured == () and silent.mean_efficiency is None and "no throughput measured" in silent.note


def test_scaling_tables_and_reported_resizes() -> None:
    t = allocation_tables(synthetic(), total_gpus=8, progress=progress())
    sc = rows_by(t, "scaling", "job_id")
    assert set(sc) == {"10", "11", "14"}  # elastic jobs and jobs with reports
    assert sc["11"]["sizes"] == [2, 4, 8] and sc["11"]["throughput"] == pytest.approx([220, 352, 528])
    assert sc["11"]["throughput_per_gpu"] == pytest.approx([110, 88, 66])
    assert sc["11"]["efficiency"] == pytest.approx([1.0, 0.8, 0.6])
    assert sc["11"]["mean_efficiency"] == pytest.approx(1400 / 1800)
    assert sc["10"]["mean_efficiency"] == pytest.approx(290 / 300) and sc["10"]["elastic"] is False
    assert sc["14"]["efficiency"] is None and sc["14"]["mean_efficiency"] is None
    assert "one measured size" in sc["14"]["note"]
    jobs = rows_by(t, "jobs", "job_id")
    assert jobs["11"]["efficiency"] == pytest.approx(1400 / 1800) and jobs["11"]["resizes_reported"] == 2
    assert jobs["14"]["efficiency"] is None and jobs["14"]["resizes_reported"] == 0
    acc = rows_by(t, "scaling_by_account", "account")
    assert acc["A"]["mean_efficiency"] == pytest.approx((1400 + 290) / (1800 + 300))
    assert acc["A"]["min_efficiency"] == pytest.approx(1400 / 1800)
    assert (acc["A"]["jobs"], acc["A"]["jobs_reporting"], acc["A"]["jobs_scaled"]) == (2, 2, 2)
    assert acc["A"]["measured_gpu_hours"] == pytest.approx(2100 / 3600)
    assert acc["B"]["mean_efficiency"] is None and acc["B"]["note"] == "no job measured at two or more sizes"
    assert t["summary"]["mean_efficiency"] == pytest.approx(1690 / 2100)
    assert t["summary"]["resizes_reported"] == 3
    r = rows_by(t, "resizes", "job_id")
    assert r["11"]["resizes_reported"] == 2
    assert r["11"]["mean_pause_s"] == pytest.approx(8.0) and r["11"]["max_pause_s"] == pytest.approx(10.0)
    assert r["11"]["mean_cost_s"] is None  # journal-based cost: no journal given
    assert r["10"]["resizes_reported"] == 1 and r["10"]["resizes_slurm"] == 0  # only the job saw it


def test_jobs_without_reports_are_null_with_a_note() -> None:
    t = allocation_tables(synthetic(), progress={"11": []})  # the store has no rows of job 11
    sc = rows_by(t, "scaling", "job_id")
    assert set(sc) == {"11"}  # the elastic job; rigid jobs without reports are not listed
    assert sc["11"]["sizes"] is None and sc["11"]["efficiency"] is None and sc["11"]["mean_efficiency"] is None
    assert sc["11"]["note"] == "no launcher reports"
    assert rows_by(t, "jobs", "job_id")["11"]["efficiency"] is None
    r = rows_by(t, "resizes", "job_id")["11"]
    assert r["resizes_reported"] is None and r["mean_pause_s"] is None
    assert rows_by(t, "scaling_by_account", "account")["A"]["note"] == "no job with launcher reports"
    assert t["summary"]["mean_efficiency"] is None and t["summary"]["resizes_reported"] == 0
    assert any("1 elastic job(s) without launcher reports" in n for n in t["notes"])
    no_store = allocation_tables(synthetic())
    assert rows_by(no_store, "scaling", "job_id")["11"]["note"].startswith("no store given")
    assert no_store["summary"]["resizes_reported"] is None
    assert any("launcher reports" in n and "no store" in n for n in no_store["notes"])


def test_satellite_from_the_store_map_counts_as_its_parent() -> None:
    # satellite 21 of job 11 whose sacct record lost its AdminComment: 2 GPUs x 900 s = 0.5 GPU-h
    lost = rec(21, gpus=2, start=3000, elapsed=900, submit=2950, account="Z", user="zed")
    alone = allocation_tables([*synthetic(), lost])
    assert "21" in rows_by(alone, "jobs", "job_id") and "Z" in rows_by(alone, "by_account", "account")
    t = allocation_tables([*synthetic(), lost], satellites={"21": "11", "99": "11"})
    jobs = rows_by(t, "jobs", "job_id")
    assert set(jobs) == {"10", "11", "14"}
    assert jobs["11"]["gpu_hours"] == pytest.approx(4.5 + 0.5)
    assert jobs["11"]["satellites"] == 2 and jobs["11"]["resizes_slurm"] == 3
    acc = rows_by(t, "by_account", "account")
    assert set(acc) == {"A", "B"} and acc["A"]["gpu_hours"] == pytest.approx(6.0)
    assert acc["A"]["elastic_gpu_hours"] == pytest.approx(5.0)
    assert t["summary"]["gpu_hours"] == pytest.approx(7.0)


def test_satellite_mark_set_by_the_daemon_is_read_back() -> None:
    key, _, value = mark_argv("21", "11")[-1].partition("=")  # scontrol update ... AdminComment=<value>
    assert key == "AdminComment" and satellite_parent(value) == "11"
    marked = rec(21, gpus=2, start=3000, elapsed=900, submit=2950, comment=value)
    jobs = {j.job_id: j for j in group_jobs([*synthetic(), marked])}
    assert "21" not in jobs and jobs["11"].satellites == 2


def test_rendering_writes_every_format(tmp_path: Path) -> None:
    t = allocation_tables(synthetic(), total_gpus=8)
    paths = write_csv(t, tmp_path / "csv")
    assert [p.name for p in paths] == [f"{n}.csv" for n in CSV_TABLES]
    with (tmp_path / "csv" / "by_account.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [r["account"] for r in rows] == ["A", "B"] and float(rows[0]["gpu_hours"]) == pytest.approx(5.5)
    scaled = allocation_tables(synthetic(), total_gpus=8, progress=progress())
    write_csv(scaled, tmp_path / "csv2")
    with (tmp_path / "csv2" / "scaling.csv").open() as fh:
        sc = {r["job_id"]: r for r in csv.DictReader(fh)}
    assert json.loads(sc["11"]["sizes"]) == [2, 4, 8] and float(sc["11"]["mean_efficiency"]) == pytest.approx(7 / 9)
    assert sc["14"]["mean_efficiency"] == ""
    page = write_html(scaled, tmp_path / "html2")[-1].read_text()
    assert "2 / 4 / 8" in page and "1.00 / 0.80 / 0.60" in page
    (js,) = write_json(t, tmp_path / "json")
    assert json.loads(js.read_text())["summary"]["gpu_hours"] == pytest.approx(6.5)
    html_paths = write_html(t, tmp_path / "html", title="<report>")
    assert [p.name for p in html_paths] == [*PLOTS, "index.html"]
    page = (tmp_path / "html" / "index.html").read_text()
    assert "&lt;report&gt;" in page and "data:image/png;base64," in page
    assert "Scaled-job efficiency per job" in page and "no store given: launcher reports unknown" in page
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in html_paths[:-1])


# --------------------------------------------------------------------------------------------------
# What-if trace


def test_history_to_trace() -> None:
    specs = {s.job_id: s for s in history_to_trace(synthetic())}
    assert set(specs) == {"10", "11", "14"}
    assert skipped_jobs(synthetic()) == ["13"]
    assert specs["10"].submit_time == 0 and specs["11"].submit_time == 100 and specs["14"].submit_time == 1000
    assert specs["11"].requested_gpus == 4  # first segment
    assert (specs["11"].min_gpus, specs["11"].max_gpus) == (1, 8)  # from its contract
    assert (specs["10"].min_gpus, specs["10"].max_gpus) == (1, 8)  # 2 x elastic_range 4
    rows = {r["job_id"]: r for r in history_rows(synthetic())}
    assert rows["11"]["duration"] == "5400" and rows["10"]["duration"] == "1800"
    # GPU-time classes as load_trace, alternating by submit order within a class: 1-10 GPU-h for all three
    # (job 10: 2 x 1800 s = 1 GPU-h, job 11: 4 x 5400 s = 6, job 14: 1 x 3600 s = 1)
    assert [specs[j].model for j in ("10", "11", "14")] == ["deepspeech2", "bert", "deepspeech2"]


def test_history_trace_equals_load_trace(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=TRACE_COLUMNS)
        w.writeheader()
        w.writerows(history_rows(synthetic()))
    assert load_trace(path) == history_to_trace(synthetic())


def test_what_if_replays_every_job() -> None:
    results = what_if(synthetic(), [PolicySpec("fifo"), PolicySpec("dp")], [1], 8, 4)
    assert [r["policy"] for r in results] == ["fifo", "dp"]
    for r in results:
        assert r["workload"] == "slurm-history"
        assert r["metrics"]["jobs"] == 3 and r["metrics"]["jobs_completed"] == 3
    with pytest.raises(ConfigError, match="used 4 GPUs"):
        what_if(synthetic(), [PolicySpec("fifo")], [1], 2, 2)
    with pytest.raises(ConfigError, match="none of the 1"):
        what_if([rec(1, gpus=0, start=0, elapsed=5, submit=0)], [PolicySpec("fifo")], [1], 8, 4)


# --------------------------------------------------------------------------------------------------
# Reading history


def test_parse_when() -> None:
    now = dt.datetime(2026, 3, 10, 12, 30, 15, 999)
    assert parse_when("now", flag="--until", now=now) == dt.datetime(2026, 3, 10, 12, 30, 15)
    assert parse_when("now-2h", flag="--since", now=now) == dt.datetime(2026, 3, 10, 10, 30, 15)
    assert parse_when("now-3days", flag="--since", now=now) == dt.datetime(2026, 3, 7, 12, 30, 15)
    assert parse_when("now-90", flag="--since", now=now) == dt.datetime(2026, 3, 10, 12, 28, 45)
    assert parse_when("today", flag="--since", now=now) == dt.datetime(2026, 3, 10)
    assert parse_when("2026-03-01", flag="--since", now=now) == dt.datetime(2026, 3, 1)
    assert parse_when("2026-03-01T08:15", flag="--since", now=now) == dt.datetime(2026, 3, 1, 8, 15)
    for bad in ("yesterdayish", "now-2x", "2026-13-01", "2026-03-01T08:00+02:00"):
        with pytest.raises(ConfigError, match=r"--since .*must be a local date"):
            parse_when(bad, flag="--since", now=now)


def test_read_accounting_argv() -> None:
    seen: list[list[str]] = []
    doc = (FIXTURES / "22.05" / "sacct.json").read_text()

    def runner(argv: Any) -> str:
        seen.append(list(argv))
        return doc

    recs = read_accounting(dt.datetime(2026, 3, 1), dt.datetime(2026, 3, 2, 6), account="proj", runner=runner)
    assert len(recs) == 5
    assert seen == [["sacct", "--json", "-a", "-X", "-S", "2026-03-01T00:00:00", "-E", "2026-03-02T06:00:00",
                     "-A", "proj"]]
    with pytest.raises(ConfigError, match="before --since"):
        read_accounting(dt.datetime(2026, 3, 2), dt.datetime(2026, 3, 1), runner=runner)
