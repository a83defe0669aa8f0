"""Unit tests of the plan diff and of run_round with in-memory ports."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from slurm_elastic.core.actions import Action, ActionKind, diff
from slurm_elastic.core.model import ClusterSnapshot, JobId, JobPlan, JobState, Placement, Plan, Unplaced
from slurm_elastic.core.planner import PlanResult
from slurm_elastic.core.rounds import ActionOutcome, run_round
from slurm_elastic.testing import make_job, make_nodes, make_snapshot


def _snap() -> ClusterSnapshot:
    jobs = [
        make_job("keep", placement=[("n000", 0)]),
        make_job("shrink", placement=[("n000", 1), ("n000", 2)]),
        make_job("grow", placement=[("n001", 0)]),
        make_job("stop", placement=[("n001", 1)]),
        make_job("start"),
        make_job("drop"),
        make_job("rebatch", placement=[("n001", 2)]),
    ]
    return make_snapshot(make_nodes(2), jobs)


def _jp(job: str, gpus: list[tuple[str, int]], local: int = 128) -> JobPlan:
    return JobPlan(JobId(job), Placement.of(gpus), local * len(gpus), local, 1, 0.1)


PLAN = Plan(
    "t",
    (
        _jp("grow", [("n001", 0), ("n001", 1)]),
        _jp("keep", [("n000", 0)]),
        _jp("rebatch", [("n001", 2)], local=256),
        _jp("shrink", [("n000", 1)]),
        _jp("start", [("n000", 2), ("n000", 3)]),
    ),
    (Unplaced(JobId("stop"), "waiting"), Unplaced(JobId("drop"), "too big", dropped=True)),
)


def test_diff_touches_only_changed_jobs_stops_and_shrinks_first() -> None:
    acts = diff(_snap(), PLAN)
    assert [(a.kind, a.job_id) for a in acts] == [
        (ActionKind.DROP, "drop"),
        (ActionKind.SHRINK, "shrink"),
        (ActionKind.PREEMPT, "stop"),
        (ActionKind.GROW, "grow"),
        (ActionKind.REBATCH, "rebatch"),
        (ActionKind.START, "start"),
    ]
    start = acts[-1]
    assert start.global_batch == 256 and start.after.num_gpus == 2


@dataclass
class _Fake:
    snapshot: ClusterSnapshot
    applied: list[Action] = field(default_factory=list)

    def observe(self) -> ClusterSnapshot:
        return self.snapshot

    def apply(self, snapshot: ClusterSnapshot, actions: tuple[Action, ...]) -> tuple[ActionOutcome, ...]:
        self.applied.extend(actions)
        return tuple(ActionOutcome(a, a.kind is not ActionKind.GROW, "no GPU") for a in actions)


@dataclass
class _Fixed:
    plan_: Plan
    name: str = "fixed"

    def plan(self, snapshot: ClusterSnapshot, memo: object, rng: np.random.Generator) -> PlanResult:
        return PlanResult(self.plan_, "new-memo")


def test_run_round_acts_and_records_failures() -> None:
    fake = _Fake(_snap())
    rec = run_round(fake, _Fixed(PLAN), fake, "old-memo", np.random.default_rng(0))
    assert len(fake.applied) == 6 and rec.memo == "new-memo"
    assert [o.action.job_id for o in rec.outcomes if not o.ok] == ["grow"]
    assert "failed=1" in rec.summary() and "plan=ok" in rec.summary()


def test_run_round_refuses_invalid_plan_and_keeps_memo() -> None:
    fake = _Fake(_snap())
    bad = Plan("t", (_jp("keep", [("n000", 1)]), _jp("shrink", [("n000", 1)])))
    rec = run_round(fake, _Fixed(bad), fake, "old-memo", np.random.default_rng(0))
    assert fake.applied == [] and rec.memo == "old-memo"
    assert any("given to jobs keep and shrink" in v for v in rec.violations)
    assert "REFUSED" in rec.summary()


def test_waiting_job_not_in_plan_gets_no_action() -> None:
    snap = make_snapshot(make_nodes(1), [make_job("w", state=JobState.PENDING)])
    assert diff(snap, Plan("t", (), (Unplaced(JobId("w"), "queued"),))) == ()


def test_no_action_for_a_job_already_on_its_way_to_the_planned_size() -> None:
    from dataclasses import replace

    from slurm_elastic.core.model import InFlightResize

    snap = replace(_snap(), in_flight=(InFlightResize(JobId("start"), 2, 0.0), InFlightResize(JobId("grow"), 9, 0.0)))
    kinds = {(a.kind, a.job_id) for a in diff(snap, PLAN)}
    assert (ActionKind.START, "start") not in kinds  # on its way to the planned 2 GPUs
    assert (ActionKind.GROW, "grow") in kinds  # in flight to another size: the plan changed its mind


def test_no_rebatch_for_a_fixed_batch_that_the_gpus_do_not_divide() -> None:
    """A fixed-batch plan of 20 samples on 3 GPUs runs 7 per GPU: the job already running 7 per GPU
    on those GPUs (its view says 21 in all) is left alone; it used to get a REBATCH every round."""
    job = replace(make_job("exo", placement=[("n000", 0), ("n000", 1), ("n000", 2)], local_batch=7),
                  base_batch=20, min_batch=1)
    snap = make_snapshot(make_nodes(1), [job])
    assert snap.jobs[0].global_batch == 21
    same = Plan("t", (JobPlan(JobId("exo"), job.placement, 20, 7, 1, 0.1),), ())
    assert diff(snap, same) == ()
    other = Plan("t", (JobPlan(JobId("exo"), job.placement, 24, 8, 1, 0.1),), ())
    assert [a.kind for a in diff(snap, other)] == [ActionKind.REBATCH]


def test_no_rebatch_for_an_endo_job_whose_gpus_do_not_divide_its_batch() -> None:
    """An endo-elastic job keeps its global batch; the launcher spreads it as round(B / k) per worker
    (100 on 3 GPUs: 33, reported so), where a plan says ceil(B / k) = 34. The same global batch on the
    same GPUs needs no REBATCH (it got one every round, which the job never reported done); another
    global batch still does."""
    from slurm_elastic.core.model import ElasticMode

    job = replace(make_job("endo", placement=[("n000", 0), ("n000", 1), ("n000", 2)], local_batch=33),
                  base_batch=100, min_batch=1, mode=ElasticMode.ENDO)
    snap = make_snapshot(make_nodes(1), [job])
    same = Plan("t", (JobPlan(JobId("endo"), job.placement, 100, 34, 1, 0.1),), ())
    assert diff(snap, same) == ()
    other = Plan("t", (JobPlan(JobId("endo"), job.placement, 120, 40, 1, 0.1),), ())
    assert [a.kind for a in diff(snap, other)] == [ActionKind.REBATCH]
