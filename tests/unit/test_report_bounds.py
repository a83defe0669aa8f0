"""The throughput bound on a job's reports is physics, not the default model (issue 13, item 3).

The daemon plans every real job as the site's ``default_model``, but a job may train any model: a
lighter one is legitimately faster (seen on the dev cluster: the example CNN on CPU reported 7,231
samples/s on one worker, above 4 x ResNet-18's V100 best, and the honest job was quarantined). The
bound is what no known model reaches; a claim above that is still refused."""

from __future__ import annotations

import pytest

from slurm_elastic.core.model import JobId, JobState, NodeName
from slurm_elastic.observe.bounds import THROUGHPUT_SLACK, ReportOutOfBounds, limits_of
from slurm_elastic.slurm.records import GpuRequest, JobRecord
from slurm_elastic.store import ProgressRow
from slurm_elastic.testing import shipped_profiles

NOW = 1_800_000_000.0


def _record() -> JobRecord:
    return JobRecord(JobId("7"), 7, "j", "alice", "acct", "gpu", JobState.RUNNING, ("RUNNING",), int(NOW - 500),
                     int(NOW - 400), None, (NodeName("n000"),), 1, None, ((NodeName("n000"), (0,)),),
                     GpuRequest(per_node=1), "slurm-elastic gpus=1:8", "", "n000")


def _row(throughput: float) -> ProgressRow:
    return ProgressRow(t=NOW - 10, kind="progress", samples=6400, world=1, global_batch=64, throughput=throughput)


def test_a_lighter_model_than_the_default_is_not_refused_for_being_fast() -> None:
    limits = limits_of(_record(), now=NOW, profiles=shipped_profiles())
    alone = limits_of(_record(), now=NOW, profiles={"cifar10": shipped_profiles()["cifar10"]})
    fast = 2 * alone.ceiling(1)  # twice what the default model's bound alone would allow
    limits.check(_row(fast), None)
    with pytest.raises(ReportOutOfBounds, match="fastest known model"):
        alone.check(_row(fast), None)


def test_a_claim_no_known_model_reaches_is_refused() -> None:
    limits = limits_of(_record(), now=NOW, profiles=shipped_profiles())
    assert limits.ceiling(1) == pytest.approx(THROUGHPUT_SLACK * max(
        limits_of(_record(), now=NOW, profiles={n: m}).ceiling(1) / THROUGHPUT_SLACK
        for n, m in shipped_profiles().items()))
    with pytest.raises(ReportOutOfBounds, match=r"throughput=.* on 1 worker\(s\)"):
        limits.check(_row(1.01 * limits.ceiling(1)), None)


def test_the_batch_bound_is_the_largest_any_profile_fits_not_the_default_models() -> None:
    """A site profile measured at small batches (``slurm-elastic profile --batches 32``) must not
    refuse the reports of a job of another model that trains at 512 per GPU (the bound was the
    default model's ``max_local_batch``)."""
    from dataclasses import replace

    shipped = shipped_profiles()
    small = replace(shipped["cifar10"], name="cnn", max_local_batch=32)
    limits = limits_of(_record(), now=NOW, profiles={**shipped, "cnn": small})
    assert limits.max_local_batch == max(m.max_local_batch for m in shipped.values())
    row = ProgressRow(t=NOW - 10, kind="progress", samples=6400, world=1, global_batch=512, throughput=100.0)
    limits.check(row, None)
    too_big = replace(row, global_batch=limits.max_local_batch + 1)
    with pytest.raises(ReportOutOfBounds, match="per worker, what fits in a GPU"):
        limits.check(too_big, None)


def test_a_requeued_jobs_first_report_may_count_fewer_samples_than_the_last_run() -> None:
    """Seen on the dev cluster: a job Slurm requeued trains again (from its checkpoint, or from zero
    without one), and its first report counted 16 samples after the last run's 14,320; the daemon
    refused it and quarantined an honest job. The run's start is Slurm's, not the job's word."""
    from dataclasses import replace

    before = ProgressRow(t=NOW - 300, kind="end", samples=14320, world=1, global_batch=16, throughput=100.0)
    again = ProgressRow(t=NOW - 100, kind="progress", samples=16, world=1, global_batch=16, throughput=100.0)
    requeued = replace(_record(), restart_count=1, start_time=int(NOW - 120))
    limits = limits_of(requeued, now=NOW, profiles=shipped_profiles())
    assert limits.run_start == NOW - 120
    limits.check(again, before)
    # within one run the count still never goes back, requeued or not
    later = replace(again, t=NOW - 50, samples=8)
    with pytest.raises(ReportOutOfBounds, match=r"samples=8 \(rule: never fewer than the last report's 16, in the "
                                                r"same run \(Slurm started this run at \d+\)\)"):
        limits.check(later, again)
    never = limits_of(_record(), now=NOW, profiles=shipped_profiles())  # never requeued
    assert never.run_start is None
    with pytest.raises(ReportOutOfBounds, match=r"samples=16 \(rule: never fewer than the last report's 14320\)"):
        never.check(again, before)
