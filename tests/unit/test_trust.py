"""The trust guard's rules on a planner whose plans are given (core/trust.py; issue 37, item 1).

The inner planner here plans one set of counts when it sees the reporting job as its reports make
it, and another when it sees the job as it would be without them (the prior plan), so each rule of
the band is checked on its own: fair shares, a stop or requeue only where the prior plan does it,
a waiting job the prior plan starts, overbooking given back by the largest gainer first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from slurm_elastic.core.model import ClusterSnapshot, Job, JobId
from slurm_elastic.core.planner import PlanResult, build_plan
from slurm_elastic.core.trust import ReportGuard, fair_shares, without_reports
from slurm_elastic.testing import make_job, make_nodes, make_snapshot

NODES = make_nodes(2, 4)


class Given:
    """A planner that plans ``reported`` counts when job 7 carries its reports, else ``prior``."""

    name, interval, epoch_events, uses_progress = "given", 0.0, False, False

    def __init__(self, reported: Mapping[str, int], prior: Mapping[str, int]) -> None:
        self.reported, self.prior, self.calls = reported, prior, 0

    def plan(self, snapshot: ClusterSnapshot, memo: Any, rng: np.random.Generator) -> PlanResult:
        self.calls += 1
        seven = snapshot.job(JobId("7"))
        counts = self.reported if seven.prior is not None else self.prior
        return PlanResult(build_plan(snapshot, "given", {JobId(j): k for j, k in counts.items()}), memo)


def _jobs(throughput: float | None = 5e4) -> list[Job]:
    prior = make_job("7", placement=[("n000", 0), ("n000", 1)], requested_gpus=2, submit_time=3.0, user="mallory")
    seven = replace(prior, observed_throughput=throughput, samples_processed=10, prior=prior)
    return [seven,
            make_job("8", placement=[("n000", 2), ("n000", 3)], requested_gpus=2, submit_time=1.0, user="bob"),
            make_job("9", placement=[("n001", 0), ("n001", 1)], requested_gpus=2, submit_time=2.0, user="carol"),
            make_job("10", submit_time=4.0, user="dave", min_gpus=2, requested_gpus=2)]


def _counts(inner: Given, jobs: list[Job]) -> dict[str, int]:
    plan = ReportGuard(inner).plan(make_snapshot(NODES, jobs), None, np.random.default_rng(0)).plan  # type: ignore[arg-type]
    return {p.job_id: p.num_gpus for p in plan.jobs}


def test_fair_shares_are_water_filled_up_to_each_jobs_maximum_and_at_least_its_minimum() -> None:
    jobs = [make_job("1", max_gpus=1), make_job("2", max_gpus=8), make_job("3", max_gpus=8),
            make_job("4", min_gpus=5, max_gpus=8)]
    assert fair_shares(make_snapshot(NODES, jobs)) == {"1": 1, "2": 2, "3": 2, "4": 5}


def test_without_reports_takes_the_reported_fields_from_the_prior_and_keeps_the_rest() -> None:
    seven = _jobs()[0]
    pinned = replace(seven, max_gpus=2)  # as a site guard's view changes it
    back = without_reports(pinned)
    assert back.prior is None and back.observed_throughput is None and back.samples_processed == 0
    assert back.max_gpus == 2 and back.placement == seven.placement
    honest = _jobs()[1]
    assert without_reports(honest) is honest


def test_a_snapshot_without_priors_is_planned_with_one_call_as_the_policy_plans_it() -> None:
    inner = Given({"7": 8}, {"7": 8})
    jobs = [without_reports(j) for j in _jobs()]
    assert _counts(inner, jobs) == {"7": 8} and inner.calls == 1


def test_another_job_is_stopped_only_when_the_prior_plan_stops_it() -> None:
    # with the reports the policy stops 8 and 9 for job 7; from priors it keeps everyone
    counts = _counts(Given({"7": 6, "10": 2}, {"7": 2, "8": 2, "9": 2, "10": 2}), _jobs())
    assert counts["8"] >= 2 and counts["9"] >= 2 and counts["10"] == 2 and counts["7"] <= 2, counts


def test_a_job_gains_from_its_reports_at_most_its_fair_share() -> None:
    # idle GPUs: from priors 7 keeps 2; with its reports the policy gives it all 4 free ones
    counts = _counts(Given({"7": 4, "8": 2, "9": 2}, {"7": 2, "8": 2, "9": 2}), _jobs()[:3])
    assert counts["7"] == fair_shares(make_snapshot(NODES, _jobs()[:3]))["7"] == 2, counts


def test_a_job_without_the_launcher_keeps_its_gpus_unless_the_prior_plan_resizes_it() -> None:
    jobs = _jobs()
    jobs[1] = replace(jobs[1], can_rebatch=False)  # resized only by a requeue
    kept = _counts(Given({"7": 3, "8": 1, "9": 2, "10": 2}, {"7": 2, "8": 2, "9": 2, "10": 2}), jobs)
    assert kept["8"] == 2, kept
    resized = _counts(Given({"7": 3, "8": 1, "9": 2, "10": 2}, {"7": 3, "8": 1, "9": 2, "10": 2}), jobs)
    assert resized["8"] == 1, resized


def test_a_waiting_job_the_prior_plan_starts_is_started() -> None:
    counts = _counts(Given({"7": 4, "8": 2, "9": 2}, {"7": 2, "8": 2, "9": 2, "10": 2}), _jobs())
    assert counts.get("10") == 2 and counts["7"] == 2, counts



def test_every_field_a_report_sets_is_one_the_guard_takes_back() -> None:
    """A job built with every runtime field its reports can give differs from its prior only in
    ``REPORTED_FIELDS`` (and ``can_grow``, the job's own loss): a new reported field that the guard
    does not know would let a report past it."""
    from dataclasses import fields

    from slurm_elastic.core.model import JobState, ProgressReport
    from slurm_elastic.core.trust import REPORTED_FIELDS
    from slurm_elastic.observe.job_reports import JobRuntime
    from slurm_elastic.observe.snapshot import snapshot_of
    from slurm_elastic.testing import shipped_profiles
    from slurm_elastic_predictor.calibrate import StepPoint

    from .test_hostile_job_input import NOW, nodes, record

    rec = record("7", {"n000": 4}, admin="slurm-elastic gpus=1:8")
    runtime = JobRuntime(model="imagenet", params=10**7, epoch_size=1234, samples_processed=5000, local_batch=48,
                         base_lr=0.3, target_epochs=7.0, observed_throughput=321.0, last_change_time=NOW - 30,
                         samples_at_last_change=4000, run_time=77.0,
                         progress=ProgressReport(initial_loss=2.0, current_loss=1.0, val_metric=0.5),
                         can_grow=False, step_points=(StepPoint(4, 1, 48, 0.2), StepPoint(2, 1, 48, 0.12)))
    snap = snapshot_of(nodes(1), [rec], now=NOW, profiles=shipped_profiles(), runtimes={"7": runtime})
    job = snap.job(JobId("7"))
    assert job.state is JobState.RUNNING and job.prior is not None
    differ = {f.name for f in fields(job) if getattr(job, f.name) != getattr(job.prior, f.name)}
    assert differ - {"prior", "can_grow"} <= set(REPORTED_FIELDS), differ - set(REPORTED_FIELDS)
    assert {"model", "observed_throughput", "samples_processed", "local_batch"} <= differ


def test_a_job_that_reported_nothing_keeps_what_the_policy_gives_it_beyond_its_fair_share() -> None:
    # 9 reported nothing: its gain comes from 7's reports, and capping it would leave a GPU idle
    counts = _counts(Given({"7": 2, "8": 2, "9": 4}, {"7": 2, "8": 2, "9": 2}), _jobs()[:3])
    assert counts == {"7": 2, "8": 2, "9": 4}, counts


def test_gpus_a_capped_gain_had_taken_go_back_to_the_jobs_the_prior_plan_gave_them_to() -> None:
    # fair shares 2 (job 7), 3, 3; 7's reports took one GPU from 8 and one from 9
    counts = _counts(Given({"7": 4, "8": 3, "9": 1}, {"7": 1, "8": 5, "9": 2}), _jobs()[:3])
    assert counts == {"7": 2, "8": 4, "9": 2}, counts  # none idle: 8 gets back toward its prior 5
