"""A job configured twice (issue 36, item 3): a report whose script trains other epochs or batch than
the submit flags said is turned into one line for the daemon's log; a malformed one says nothing."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from slurm_elastic.observe.job_reports import configured_twice, ingest
from slurm_elastic.store import Store
from slurm_elastic.testing import report_limits
from slurm_elastic_launcher.reports import Reporter

from .test_hostile_job_input import SECRET, job_files
from .test_learning import _rec

REPORT = {"kind": "progress", "epochs": 5, "local_batch": 64, "submitted": {"epochs": 3, "local_batch": 32}}


def test_a_report_saying_what_submit_said_otherwise_is_one_line() -> None:
    said = configured_twice(REPORT)
    assert said is not None
    assert "trains 5 epochs at a per-worker batch of 64" in said and "--epochs 3 --local-batch 32" in said


@pytest.mark.parametrize("report", [
    {k: v for k, v in REPORT.items() if k != "submitted"},
    {**REPORT, "submitted": "epochs=3"},
    {**REPORT, "submitted": {"epochs": "3\\nfake log line", "local_batch": 32}},
    {**REPORT, "submitted": {"epochs": True, "local_batch": 32}},
    {**REPORT, "epochs": 0},
    {**REPORT, "submitted": {"epochs": 3, "local_batch": 2**70}},
    {**REPORT, "local_batch": None},
])
def test_a_report_that_does_not_say_it_in_the_wire_form_says_nothing(report: dict[str, Any]) -> None:
    assert configured_twice(report) is None


def test_the_daemon_says_it_in_its_log_once_and_still_reads_the_report(tmp_path: Path,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    comment = job_files(tmp_path, "job-7")
    reporter = Reporter(str(tmp_path / "job-7.reports"), "7", SECRET, 1.0, epochs=5,
                        submitted={"epochs": 3, "local_batch": 32})
    for t in (90.0, 95.0):
        reporter.write("progress", t, step=1, samples=64, epoch=0, epoch_size=640, world=1, local_batch=64)
    store = Store(tmp_path / "s.db")
    with caplog.at_level(logging.WARNING, logger="slurm_elastic.observe.job_reports"):
        assert ingest(store, [_rec("7", {"n7": 1}, comment)], report_limits(100.0), 100.0) == 2
    said = [r.getMessage() for r in caplog.records if "submitted with" in r.getMessage()]
    assert said == ["job 7: the script trains 5 epochs at a per-worker batch of 64, but the job was submitted with "
                    "--epochs 3 --local-batch 32: its reports (what runs) are what it is planned from"], said
    assert store.progress_of("7")[-1].global_batch == 64 and not store.quarantined()  # planned from what runs
