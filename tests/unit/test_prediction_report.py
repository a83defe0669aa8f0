"""The allocation report's predictor error (issue 15, part 4): each configuration a launcher job
measured in the window, predicted by its profile alone and by its own model fitted from the
configurations it measured before, as the daemon plans it."""

from __future__ import annotations

import pytest

from slurm_elastic.reports.allocation import allocation_tables
from slurm_elastic.reports.prediction import job_errors, prediction_rows, prediction_summary
from slurm_elastic.store import ProgressRow
from slurm_elastic.testing import shipped_profiles
from slurm_elastic_predictor.throughput import ThroughputModel

from .test_allocation_report import synthetic


def _rows(truth: ThroughputModel, configs: list[tuple[int, int, int]], t0: float = 1000.0,
          model: str | None = "cifar10") -> list[ProgressRow]:
    """Reports of a job running ``truth`` at each (world, nodes, per-GPU batch) in turn: a resize
    report, then three clean progress windows."""
    out, t, samples = [], t0, 0
    for world, nodes, local in configs:
        batch = world * local
        speed = batch / float(truth.t_iter(batch, world, nodes))
        for kind in ("resize", "progress", "progress", "progress"):
            t += 10.0
            samples += int(speed * 10)
            out.append(ProgressRow(t, kind, samples, world, batch, speed, nodes=nodes, model=model,
                                   pause_s=0.1 if kind == "resize" else None))
    return out


CONFIGS = [(1, 1, 128), (2, 1, 128), (4, 2, 128), (8, 2, 128)]


def test_a_job_slower_than_its_profile_is_predicted_better_by_its_own_model() -> None:
    profiles = shipped_profiles()
    truth = profiles["cifar10"].scaled(compute=1 / 1.6, inter=1 / 1.3)  # 60 % slower compute, slower network
    row = job_errors("5", _rows(truth, CONFIGS), profiles, "cifar10")
    assert row is not None
    assert row["model"] == "cifar10" and row["configurations"] == 4 and row["online_points"] == 3
    assert row["prior_median_ape"] > 0.3  # the profile alone: the job is 1.6x slower than it says
    assert row["online_median_ape"] < row["prior_median_ape"] / 2  # learned from what it measured before
    assert row["note"] == ""


def test_a_job_that_matches_its_profile_has_no_error() -> None:
    profiles = shipped_profiles()
    row = job_errors("5", _rows(profiles["cifar10"], CONFIGS), profiles, "cifar10")
    assert row is not None and row["prior_median_ape"] == pytest.approx(0, abs=1e-3)
    assert row["online_median_ape"] == pytest.approx(0, abs=0.02)


def test_one_configuration_has_no_prediction_before_the_fact() -> None:
    profiles = shipped_profiles()
    row = job_errors("5", _rows(profiles["cifar10"], CONFIGS[:1]), profiles, "cifar10")
    assert row is not None and row["online_points"] == 0 and row["online_median_ape"] is None
    assert "nothing predicted before the fact" in row["note"]
    assert job_errors("5", [], profiles, "cifar10") is None  # nothing measured: no row


def test_only_the_window_counts_and_the_summary_pools_every_configuration() -> None:
    profiles = shipped_profiles()
    truth = profiles["cifar10"].scaled(compute=1 / 1.6)
    early = _rows(truth, CONFIGS[:2], t0=0.0)
    late = _rows(truth, CONFIGS, t0=5000.0)
    rows = prediction_rows({"5": early, "6": late}, profiles, "cifar10", since=4000.0, until=10_000.0)
    assert [r["job_id"] for r in rows] == ["6"]
    summary = prediction_summary(rows)
    assert summary["predicted_jobs"] == 1 and summary["prior_predictions"] == 4
    assert summary["online_predictions"] == 3 and summary["online_median_ape"] < summary["prior_median_ape"]
    assert summary["prior_p90_ape"] >= summary["prior_median_ape"]
    assert prediction_summary([])["prior_median_ape"] is None


def test_a_job_naming_no_profiled_model_is_judged_with_the_default_model() -> None:
    profiles = shipped_profiles()
    row = job_errors("5", _rows(profiles["cifar10"], CONFIGS, model="my-net"), profiles, "cifar10")
    assert row is not None and row["model"] == "cifar10"
    bad = job_errors("5", _rows(profiles["cifar10"], CONFIGS, model=None), profiles, "no-such-model")
    assert bad is not None and "has no throughput profile" in bad["note"] and bad["prior_median_ape"] is None


def test_the_allocation_report_has_the_prediction_table_and_figures() -> None:
    profiles = shipped_profiles()
    records = synthetic()
    job = str(records[0].job_id)
    since = allocation_tables(records)["summary"]["since"]  # the window: the records' own
    progress = {job: _rows(profiles["cifar10"].scaled(compute=1 / 1.6), CONFIGS, t0=since)}
    t = allocation_tables(records, total_gpus=8, progress=progress, profiles=profiles, since=since,
                          until=since + 10_000.0)
    assert [r["job_id"] for r in t["prediction"]] == [job]
    assert not any(k.startswith("_") for r in t["prediction"] for k in r)
    assert t["summary"]["online_predictions"] == 3 and t["summary"]["prior_median_ape"] > 0.3
    plain = allocation_tables(records, total_gpus=8, progress=progress)
    assert plain["prediction"] == [] and plain["summary"]["prior_median_ape"] is None
    assert any("the predictor's error is not computed" in n for n in plain["notes"])
