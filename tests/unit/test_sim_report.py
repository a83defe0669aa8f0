"""Unit tests of the simulation report renderer (tables, CSVs, PNGs, HTML, input checks) and the shared rendering."""

from __future__ import annotations

import copy
import csv
import html
import re
import statistics
from pathlib import Path
from typing import Any

import pytest

from slurm_elastic.errors import ElasticError
from slurm_elastic.reports import render
from slurm_elastic.reports.simulation import FILES, ReportInputError, summary_table, write_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
EVIL = "<b>ones</b>"


def _job(job_id: str, submit: float, queue: float, exec_: float, ftf: float, *, resizes: int = 1) -> dict[str, Any]:
    return {
        "job_id": job_id, "model": "cifar10", "user": "u&1", "submit": submit, "start": submit + queue,
        "end": submit + queue + exec_, "queue": queue, "exec": exec_, "jct": queue + exec_,
        "gpu_seconds": 4 * exec_, "resizes": resizes, "ftf": ftf, "dropped": False,
    }  # fmt: skip


def _dropped(job_id: str, submit: float) -> dict[str, Any]:
    return {
        "job_id": job_id, "model": "bert", "user": "u2", "submit": submit, "start": None, "end": None,
        "queue": 30.0, "exec": None, "jct": None, "gpu_seconds": 0.0, "resizes": 0, "ftf": None, "dropped": True,
    }  # fmt: skip


def _metrics(**values: float | None) -> dict[str, float | None]:
    base: dict[str, float | None] = {
        "jobs": 3, "jobs_completed": 3, "jobs_dropped": 0, "drop_ratio": 0.0, "avg_jct": 1000.0,
        "p50_jct": 900.0, "p99_jct": 3000.0, "avg_queue": 100.0, "avg_exec": 900.0, "makespan": 7200.0,
        "gpu_hours": 10.0, "avg_utilization": 0.8, "scaling_efficiency": 0.7, "unfair_fraction": 0.1,
        "worst_ftf": 1.5, "resizes_per_job": 1.0,
    }  # fmt: skip
    base.update(values)
    return base


def _run(policy: str, seed: int, metrics: dict[str, float | None], jobs: list[dict[str, Any]],
         timeline: dict[str, list[float]]) -> dict[str, Any]:
    return {"workload": "w&<x>", "policy": policy, "seed": seed, "gpus": 8, "resize_cost": "in-place",
            "metrics": metrics, "jobs": jobs, "timeline": timeline}


def _results() -> list[dict[str, Any]]:
    tl: dict[str, list[float]] = {"t": [0.0, 60.0, 600.0, 3600.0], "busy_gpus": [0, 8, 4, 0], "completed": [0, 0, 1, 3]}
    a_jobs = [_job("1", 0, 10, 50, 0.9), _job("2", 5, 100, 900, 1.2), _job("3", 9, 600, 3000, 2.0)]
    b_jobs = [_job("1", 0, 5, 45, 0.8), _job("2", 5, 60, 700, 1.1, resizes=3)]
    return [
        _run(EVIL, 1, _metrics(avg_jct=1000.0, avg_utilization=0.8), a_jobs, tl),
        _run(EVIL, 2, _metrics(avg_jct=1200.0, avg_utilization=0.6), copy.deepcopy(a_jobs), tl),
        _run(EVIL, 3, _metrics(avg_jct=1700.0, avg_utilization=0.7), copy.deepcopy(a_jobs), {}),
        _run("dp", 1, _metrics(jobs=2, jobs_completed=2, avg_jct=500.0, avg_utilization=0.9), b_jobs,
             {"t": [0.0, 30.0, 800.0], "busy_gpus": [4, 8, 0], "completed": [0, 1, 2]}),
    ]


def test_write_report_writes_every_file(tmp_path: Path) -> None:
    results = _results()
    out = tmp_path / "report"
    paths = write_report(results, out, title="Compare <policies> & seeds")
    assert [p.name for p in paths] == list(FILES)
    assert all(p.parent == out and p.is_file() for p in paths)
    for p in paths:
        if p.suffix == ".png":
            data = p.read_bytes()
            assert data.startswith(PNG_MAGIC) and len(data) > 10_000, p.name

    with (out / "jobs.csv").open(newline="") as fh:
        jobs = list(csv.DictReader(fh))
    assert len(jobs) == sum(len(r["jobs"]) for r in results)
    assert list(jobs[0])[:3] == ["workload", "policy", "seed"]
    assert jobs[0]["policy"] == EVIL and jobs[0]["dropped"] == "false" and float(jobs[0]["jct"]) == 60.0

    with (out / "summary.csv").open(newline="") as fh:
        summary = list(csv.DictReader(fh))
    assert [(r["policy"], r["seed"]) for r in summary] == [(EVIL, "1"), (EVIL, "2"), (EVIL, "3"), ("dp", "1")]
    assert float(summary[1]["avg_jct"]) == 1200.0

    page = (out / "index.html").read_text()
    assert EVIL not in page and "w&<x>" not in page and "<policies>" not in page
    assert "&lt;b&gt;ones&lt;/b&gt;" in page and "Compare &lt;policies&gt; &amp; seeds" in page
    for name in FILES:
        if name != "index.html":
            assert f'href="{name}"' in page
    assert page.count('src="data:image/png;base64,') == 5
    assert "<script" not in page and "http" not in page
    assert "Avg JCT (min)" in page  # JCTs of ~17–28 minutes are shown in minutes


def test_summary_table_means_and_stds_over_seeds() -> None:
    rows = summary_table(_results())
    assert [(r["policy"], r["label"], r["n_seeds"], r["seeds"]) for r in rows] == [
        (EVIL, EVIL, 3, [1, 2, 3]),
        ("dp", "dp", 1, [1]),
    ]
    jct = rows[0]["metrics"]["avg_jct"]
    assert jct["mean"] == pytest.approx(1300.0)
    assert jct["std"] == pytest.approx(statistics.stdev([1000.0, 1200.0, 1700.0]))
    assert jct["std"] == pytest.approx(((300**2 + 100**2 + 400**2) / 2) ** 0.5)
    assert jct["n"] == 3
    util = rows[0]["metrics"]["avg_utilization"]
    assert util["mean"] == pytest.approx(0.7) and util["std"] == pytest.approx(0.1)
    single = rows[1]["metrics"]
    assert single["avg_jct"] == {"mean": 500.0, "std": None, "n": 1}
    assert single["jobs"]["mean"] == 2.0


def test_all_dropped_run_and_single_run(tmp_path: Path) -> None:
    dropped = _run(
        "greedy", 7,
        _metrics(jobs=2, jobs_completed=0, jobs_dropped=2, drop_ratio=1.0, avg_jct=None, p50_jct=None, p99_jct=None,
                 avg_exec=None, scaling_efficiency=None, unfair_fraction=None, worst_ftf=None, makespan=None),
        [_dropped("1", 0.0), _dropped("2", 10.0)],
        {"t": [], "busy_gpus": [], "completed": []},
    )  # fmt: skip
    paths = write_report([dropped], tmp_path / "one")
    assert all(p.is_file() for p in paths)
    row = summary_table([dropped])[0]
    assert row["metrics"]["avg_jct"] == {"mean": None, "std": None, "n": 0}
    assert row["metrics"]["drop_ratio"]["mean"] == 1.0
    page = (tmp_path / "one" / "index.html").read_text()
    assert "greedy" in page and "Simulation report: w&amp;&lt;x&gt;" in page

    # mixed with healthy runs, and a second resize cost: labels name the differing attribute
    other = _results()[3]
    other["resize_cost"] = "restart"
    rows = summary_table([dropped, other])
    assert [r["label"] for r in rows] == ["greedy (in-place)", "dp (restart)"]
    write_report([dropped, other], tmp_path / "two")


@pytest.mark.parametrize(
    ("mutate", "key"),
    [
        (lambda r: r["metrics"].pop("p99_jct"), "metrics.p99_jct"),
        (lambda r: r.pop("policy"), "policy"),
        (lambda r: r["jobs"][1].pop("jct"), "jobs[1].jct"),
        (lambda r: r["jobs"][0].__setitem__("queue", "10"), "jobs[0].queue"),
        (lambda r: r.__setitem__("seed", 1.5), "seed"),
        (lambda r: r["timeline"]["busy_gpus"].pop(), "timeline"),
        (lambda r: r.__setitem__("jobs", "nope"), "jobs"),
    ],
)
def test_bad_input_names_run_and_key(tmp_path: Path, mutate: Any, key: str) -> None:
    results = _results()
    mutate(results[3])
    with pytest.raises(ReportInputError, match=re.escape(f"run 3: key {key!r}")):
        write_report(results, tmp_path / "bad")
    assert not (tmp_path / "bad").exists()
    assert issubclass(ReportInputError, ElasticError)


def test_empty_and_duplicate_runs_rejected() -> None:
    with pytest.raises(ReportInputError, match="no runs"):
        summary_table([])
    results = _results()
    results.append(copy.deepcopy(results[0]))
    with pytest.raises(ReportInputError, match="run 4: key 'seed' repeats run 0"):
        summary_table(results)


def test_shared_rendering_helpers(tmp_path: Path) -> None:
    assert [render.time_unit(s)[0] for s in (119, 120, 7199, 7200)] == ["s", "min", "min", "h"]
    assert [render.decimals(v) for v in ([1.0, 2.0], [150.5], [12.5], [1.5], [0.25])] == [0, 0, 1, 2, 3]
    assert render.format_value([2_000, 1.25, None, True], 1) == "2,000 / 1.2 / – / yes"
    assert render.mpl_label("_a$b") == " _a\\$b"
    render.write_csv(tmp_path / "t.csv", ("a", "b", "c"), [{"a": None, "b": False, "c": [1, 2], "extra": 9}])
    assert (tmp_path / "t.csv").read_text().splitlines() == ["a,b,c", ',false,"[1, 2]"']
    table = "".join(render.html_table([{"name": EVIL, "h": 7200, "f": 0.25}], ("name", "h", "f"), {"h": 3600.0}))
    assert '<tr><td class="label">&lt;b&gt;ones&lt;/b&gt;</td><td>2</td><td>0.250</td></tr>' in table
    figure = render.html_figure("a&b.png", PNG_MAGIC, EVIL, link_in_caption=True)
    assert 'href="a&amp;b.png"' in figure and "&lt;b&gt;ones&lt;/b&gt; (<a " in figure
    page = render.html_page(EVIL, [figure])
    assert page.startswith("<!DOCTYPE html>") and page.endswith("</body>\n</html>\n")
    assert f"<title>{html.escape(EVIL)}</title>" in page and EVIL not in page
