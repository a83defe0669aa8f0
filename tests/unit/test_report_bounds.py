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
    alone = limits_of(_record(), now=NOW, profiles={"cifar10": shipped_profiles()["cifar10"]},
                      default_model="cifar10")
    fast = 2 * alone.ceiling(1)  # twice what the default model's bound alone would allow
    limits.check(_row(fast), None)
    with pytest.raises(ReportOutOfBounds, match="fastest known model"):
        alone.check(_row(fast), None)


def test_a_claim_no_known_model_reaches_is_refused() -> None:
    limits = limits_of(_record(), now=NOW, profiles=shipped_profiles(), default_model="cifar10")
    assert limits.ceiling(1) == pytest.approx(THROUGHPUT_SLACK * max(
        limits_of(_record(), now=NOW, profiles={n: m}, default_model="cifar10").ceiling(1) / THROUGHPUT_SLACK
        for n, m in shipped_profiles().items()))
    with pytest.raises(ReportOutOfBounds, match=r"throughput=.* on 1 worker\(s\)"):
        limits.check(_row(1.01 * limits.ceiling(1)), None)
