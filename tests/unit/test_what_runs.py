"""One source of truth for a job's epochs and batch (issue 36, item 3): what the job's reports say
it runs is what the store keeps, what the daemon plans from (through the trust guard, like every
reported field) and what ``status`` shows beside the submit flags when the two differ."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from slurm_elastic import policies
from slurm_elastic.core.model import JobId, JobState
from slurm_elastic.core.trust import ReportGuard, fair_shares, without_reports
from slurm_elastic.observe.bounds import MAX_EPOCHS, ReportOutOfBounds
from slurm_elastic.observe.job_reports import ReportRefused, WhatRuns, row_of, runtime_of, what_runs
from slurm_elastic.observe.snapshot import snapshot_of
from slurm_elastic.store import ProgressRow, Store
from slurm_elastic.testing import report_limits, shipped_profiles
from slurm_elastic_launcher.reports import Reporter

from .test_hostile_job_input import NOW, SECRET, Source, job_files, nodes, record, report, view

SAID = {"epochs": 3, "local_batch": 32}


def test_a_report_row_keeps_the_epochs_the_job_trains_and_what_submit_said(tmp_path: Path) -> None:
    row = row_of(report("7", epochs=20, local_batch=128, submitted=SAID))
    assert (row.epochs, row.submitted_epochs, row.submitted_local_batch) == (20.0, 3, 32)
    assert row_of(report("7")).epochs is None and row_of(report("7", epochs=20)).submitted_epochs is None
    store = Store(tmp_path / "s.db")
    store.add_reports("7", [row], 10)
    assert store.progress_of("7") == [row]  # stored and read back whole


@pytest.mark.parametrize("epochs", ["20", True, -1, math.inf, math.nan, 2**70, [20], {"n": 20}])
def test_epochs_that_break_the_wire_rule_refuse_the_report(epochs: Any) -> None:
    with pytest.raises(ReportRefused, match="epochs="):
        row_of(report("7", epochs=epochs))


@pytest.mark.parametrize("submitted", ["epochs=3", {"epochs": "3\nfake log line", "local_batch": 32},
                                       {"epochs": True, "local_batch": 32}, {"epochs": 3}, [3, 32],
                                       {"epochs": 3, "local_batch": 2**70}, {"epochs": 0, "local_batch": 32}])
def test_a_malformed_submitted_is_left_out_and_the_report_kept(submitted: Any) -> None:
    row = row_of(report("7", epochs=20, submitted=submitted))  # only ever shown, never planned from
    assert (row.epochs, row.submitted_epochs, row.submitted_local_batch) == (20.0, None, None)


def test_epochs_beyond_the_bound_are_out_of_bounds() -> None:
    limits = report_limits(NOW)(record("7", {"n000": 2}))
    limits.check(row_of(report("7", epochs=MAX_EPOCHS)), None)
    with pytest.raises(ReportOutOfBounds, match=r"epochs=1000001\.0 \(rule: at most 1,000,000\)"):
        limits.check(row_of(report("7", epochs=MAX_EPOCHS + 1)), None)


def test_the_runtime_plans_the_epochs_of_the_latest_report_that_gives_them() -> None:
    rows = [row_of(report("7", t=NOW - 30, epochs=20, submitted=SAID)), row_of(report("7", t=NOW - 20)),
            row_of(report("7", t=NOW - 10, epochs=25))]
    rt = runtime_of(rows)
    assert rt is not None and rt.target_epochs == 25.0 and rt.local_batch == 128
    assert runtime_of(rows[1:2]) is not None and runtime_of(rows[1:2]).target_epochs is None  # type: ignore[union-attr]


def test_what_runs_says_the_mismatch_of_the_current_run_only() -> None:
    first = row_of(report("7", t=NOW - 300, epochs=20, submitted=SAID))
    later = row_of(report("7", t=NOW - 100, epochs=20, global_batch=64, world=2))
    runs = what_runs([first, later])
    assert runs == WhatRuns(20.0, 32, 3, 32)
    said = runs.configured_twice() if runs is not None else None
    assert said == ("the script trains 20 epochs at a per-worker batch of 32, but the job was submitted with "
                    "--epochs 3 --local-batch 32: its reports (what runs) are what it is planned from")
    requeued = what_runs([first, later], run_start=NOW - 200)  # the flags were said in an earlier run
    assert requeued == WhatRuns(20.0, 32) and requeued.configured_twice() is None
    assert what_runs([]) is None and what_runs([ProgressRow(NOW, "left", 0, 1, 32)]) is None


def test_the_daemon_plans_the_epochs_the_job_reports_and_its_prior_does_not_have_them(tmp_path: Path) -> None:
    comment = job_files(tmp_path, "job-7")
    reporter = Reporter(str(tmp_path / "job-7.reports"), "7", SECRET, 1.0, epochs=20, submitted=dict(SAID))
    for t in (NOW - 60, NOW - 50):
        reporter.write("progress", t, step=10, samples=640, epoch=0, epoch_size=6400, world=2, local_batch=32)
    v = view(tmp_path, Source(nodes(2), [record("7", {"n000": 2}, comment=comment)]))
    job = v.observe().job(JobId("7"))
    assert job.target_epochs == 20.0 and job.local_batch == 32  # what runs, not --epochs 3
    assert job.prior is not None and job.prior.target_epochs is None and without_reports(job).target_epochs is None
    assert not v.quarantined()


def test_a_job_claiming_long_training_cannot_take_a_gpu_from_another_past_the_guard() -> None:
    """Under optimus, a job that says it trains 1,000 epochs is given a GPU the prior plan (and its
    fair share) gives the waiting job 9; the trust guard gives it back."""
    recs = [record("7", {"n000": 4}), record("8", {"n001": 4}), record("9", {}, state=JobState.PENDING)]
    rows = [row_of(report("7", t=NOW - 100 + i, samples=6400 + 100 * i, world=4, global_batch=128, epochs=1000))
            for i in range(3)]
    runtime = runtime_of(rows)
    assert runtime is not None
    snap = snapshot_of(nodes(2), recs, now=NOW, profiles=shipped_profiles(), runtimes={"7": runtime})
    assert snap.job(JobId("7")).target_epochs == 1000.0
    optimus = policies.create("optimus")

    def counts(s: Any, planner: Any) -> dict[str, int]:
        return {p.job_id: p.num_gpus for p in planner.plan(s, None, np.random.default_rng(0)).plan.jobs}

    bare = counts(snap, optimus)
    prior = counts(replace(snap, jobs=tuple(without_reports(j) for j in snap.jobs)), optimus)
    assert bare["9"] < min(prior["9"], fair_shares(snap)[JobId("9")]), (bare, prior)  # the claim costs job 9
    guarded = counts(snap, ReportGuard(optimus))
    assert guarded["9"] >= min(prior["9"], fair_shares(snap)[JobId("9")]), guarded
    assert guarded["7"] <= max(prior["7"], fair_shares(snap)[JobId("7")]), guarded


def test_status_shows_what_runs_beside_what_submit_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from slurm_elastic.cli import main
    from slurm_elastic.slurm import pyslurm_backend

    comment, agreed = job_files(tmp_path, "job-7"), job_files(tmp_path, "job-8")
    for name, job, said in (("job-7", "7", dict(SAID)), ("job-8", "8", None)):
        reporter = Reporter(str(tmp_path / f"{name}.reports"), job, SECRET, 1.0, epochs=20, submitted=said)
        reporter.write("progress", NOW - 60, step=10, samples=640, epoch=0, epoch_size=6400, world=2, local_batch=32)
    source = Source(nodes(2), [record("7", {"n000": 2}, comment=comment), record("8", {"n001": 2}, comment=agreed)])
    view(tmp_path, source).observe()  # the daemon's view: it stores the reports
    conf = tmp_path / "elastic.toml"
    conf.write_text(f'[daemon]\nstore = "{tmp_path / "s.db"}"\n')
    monkeypatch.setattr(pyslurm_backend, "choose_source", lambda *a, **k: source)
    assert main(["status", "--config", str(conf), "--json"]) == 0
    rows = {r["job_id"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["7"]["epochs"] == 20.0 and rows["7"]["submitted"] == SAID
    assert "trains 20 epochs at a per-worker batch of 32, but the job was submitted with --epochs 3 " \
           "--local-batch 32" in rows["7"]["configured_twice"]
    assert (rows["8"]["epochs"], rows["8"]["submitted"], rows["8"]["configured_twice"]) == (20.0, None, "")
    assert main(["status", "--config", str(conf)]) == 0
    text = capsys.readouterr().out
    assert text.count("configured twice:") == 1 and "--epochs 3 --local-batch 32" in text, text
