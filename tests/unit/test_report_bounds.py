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
    limits = limits_of(_record(), now=NOW, profiles=shipped_profiles(), default_model="cifar10")
    alone = limits_of(_record(), now=NOW, profiles={"cifar10": shipped_profiles()["cifar10"]}, default_model="cifar10")
    fast = 2 * alone.ceiling(1)  # twice what the default model's bound alone would allow
    limits.check(_row(fast), None)
    with pytest.raises(ReportOutOfBounds, match="fastest known model"):
        alone.check(_row(fast), None)


def test_a_claim_no_known_model_reaches_is_refused() -> None:
    limits = limits_of(_record(), now=NOW, profiles=shipped_profiles(), default_model="cifar10")
    assert limits.ceiling(1) == pytest.approx(THROUGHPUT_SLACK * max(
        limits_of(_record(), now=NOW, profiles={n: m}, default_model=n).ceiling(1) / THROUGHPUT_SLACK
        for n, m in shipped_profiles().items()))
    with pytest.raises(ReportOutOfBounds, match=r"throughput=.* on 1 worker\(s\)"):
        limits.check(_row(1.01 * limits.ceiling(1)), None)


def test_the_batch_bound_is_the_model_the_job_is_planned_with_not_the_largest_profile() -> None:
    """Issue 37, item 1: the bound was the largest ``max_local_batch`` of every profile (ncf's 32,768),
    so a job planned as cifar10 reported 16,384 on 4 workers in bounds, the planners extrapolated
    cifar10's profile to it, and dp, dp-fixed and min-jct requeued two other jobs. The bound is the
    planned model's: the default model's, or that of the profiled model the job's reports name."""
    from dataclasses import replace

    shipped = shipped_profiles()
    limits = limits_of(_record(), now=NOW, profiles=shipped, default_model="cifar10")
    assert limits.max_local_batch == shipped["cifar10"].max_local_batch < shipped["ncf"].max_local_batch
    row = ProgressRow(t=NOW - 10, kind="progress", samples=6400, world=4, global_batch=4 * 1024, throughput=100.0)
    limits.check(row, None)
    liar = replace(row, global_batch=16384)
    with pytest.raises(ReportOutOfBounds, match=r"at most 1024 per worker.*\(the default model\)"):
        limits.check(liar, None)
    limits.check(replace(liar, model="ncf"), None)  # planned as ncf, which the site profiles: ncf's bound
    with pytest.raises(ReportOutOfBounds, match=r"at most 1024 per worker"):  # a name the site has not profiled
        limits.check(replace(liar, model="my-net"), None)
    # a site profile of the default model measured at small batches bounds the jobs planned as it
    small = replace(shipped["cifar10"], name="cnn", max_local_batch=32)
    cnn = limits_of(_record(), now=NOW, profiles={**shipped, "cnn": small}, default_model="cnn")
    cnn.check(replace(row, world=1, global_batch=32), None)
    with pytest.raises(ReportOutOfBounds, match=r"at most 32 per worker"):
        cnn.check(replace(row, world=1, global_batch=33), None)


def test_a_report_after_the_jobs_end_report_is_refused() -> None:
    """Issue 37, item 3: a signed end report while the job trained on made every later shrink
    "nothing done: the job finished training"; a job that reports after its end lied once."""
    end = ProgressRow(t=NOW - 100, kind="end", samples=6400, world=2, global_batch=64, throughput=100.0)
    more = ProgressRow(t=NOW - 50, kind="progress", samples=6400, world=2, global_batch=64, throughput=100.0)
    limits = limits_of(_record(), now=NOW, profiles=shipped_profiles(), default_model="cifar10")
    with pytest.raises(ReportOutOfBounds, match="after the job's end report"):
        limits.check(more, end)
    from dataclasses import replace
    requeued = limits_of(replace(_record(), restart_count=1, start_time=int(NOW - 80)), now=NOW,
                         profiles=shipped_profiles(), default_model="cifar10")
    requeued.check(more, end)  # a new run of a requeued job trains again


def test_a_requeued_jobs_first_report_may_count_fewer_samples_than_the_last_run() -> None:
    """Seen on the dev cluster: a job Slurm requeued trains again (from its checkpoint, or from zero
    without one), and its first report counted 16 samples after the last run's 14,320; the daemon
    refused it and quarantined an honest job. The run's start is Slurm's, not the job's word."""
    from dataclasses import replace

    before = ProgressRow(t=NOW - 300, kind="end", samples=14320, world=1, global_batch=16, throughput=100.0)
    again = ProgressRow(t=NOW - 100, kind="progress", samples=16, world=1, global_batch=16, throughput=100.0)
    requeued = replace(_record(), restart_count=1, start_time=int(NOW - 120))
    limits = limits_of(requeued, now=NOW, profiles=shipped_profiles(), default_model="cifar10")
    assert limits.run_start == NOW - 120
    limits.check(again, before)
    # within one run the count still never goes back, requeued or not
    later = replace(again, t=NOW - 50, samples=8)
    with pytest.raises(ReportOutOfBounds, match=r"samples=8 \(rule: never fewer than the last report's 16, in the "
                                                r"same run \(Slurm started this run at \d+\)\)"):
        limits.check(later, again)
    never = limits_of(_record(), now=NOW, profiles=shipped_profiles(), default_model="cifar10")  # never requeued
    assert never.run_start is None
    with pytest.raises(ReportOutOfBounds, match=r"samples=16 \(rule: never fewer than the last report's 14320\)"):
        never.check(again, replace(before, kind="progress"))
    with pytest.raises(ReportOutOfBounds, match=r"after the job's end report"):
        never.check(again, before)
