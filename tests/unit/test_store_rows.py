"""The store's rows come back typed (issue 38: "store rows are typed"): rounds as
:class:`~slurm_elastic.store.RoundRecord` with their :class:`~slurm_elastic.core.model.Plan`, owed
node releases as :class:`~slurm_elastic.store.Release`, an action's steps as
:class:`~slurm_elastic.store.Step`, the allocation report's inputs as
:class:`~slurm_elastic.store.ReportInputs`; a row the store cannot read back is a StoreError, never a dict
the caller trips on later."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from slurm_elastic.core.actions import Action, ActionKind
from slurm_elastic.core.model import JobId, JobPlan, Placement, Plan, Unplaced
from slurm_elastic.store import (
    ProgressRow,
    Release,
    ReportInputs,
    RoundRecord,
    Step,
    Store,
    StoreError,
    plan_from_json,
    plan_to_json,
)

PLAN = Plan("dp", (JobPlan(JobId("7"), Placement.of([("n001", 0), ("n001", 1), ("n000", 3)]), 96, 32, 1, 0.3),
                   JobPlan(JobId("9"), Placement.of([("n002", 2)]), 8, 4, 2, 0.05)),
            (Unplaced(JobId("8"), "waiting for 4 GPUs"), Unplaced(JobId("10"), "dropped", dropped=True)),
            score=-1.5, notes=("update gated: job 7 mid-epoch",))


def test_a_plan_reads_back_as_the_plan_recorded() -> None:
    assert plan_from_json(plan_to_json(PLAN)) == PLAN
    assert plan_from_json(plan_to_json(Plan("fifo", ()))) == Plan("fifo", ())


def test_rounds_are_round_records(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    first = store.record_round(5.0, PLAN, "round 1", ())
    second = store.record_round(9.0, Plan("dp", ()), "round 2", ("job 7: two GPUs twice",))
    rounds = store.rounds()
    assert rounds == [RoundRecord(first, 5.0, "dp", "round 1", PLAN, ()),
                      RoundRecord(second, 9.0, "dp", "round 2", Plan("dp", ()), ("job 7: two GPUs twice",))]
    assert store.rounds(since=6.0) == rounds[1:] and store.last_round() == rounds[1]
    assert rounds[0].plan.by_job()[JobId("7")].num_gpus == 3


def test_a_malformed_recorded_plan_is_a_store_error(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    Store(db).record_round(5.0, PLAN, "round 1", ())
    with sqlite3.connect(db) as raw:
        raw.execute("UPDATE rounds SET plan = ?", ('{"policy": "dp", "jobs": [{"job_id": "7"}]}',))
    with pytest.raises(StoreError, match="recorded plan is malformed"):
        Store(db).rounds()


def test_owed_releases_are_typed(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    store.add_release("7", ["n001", "n002"], 2, 1, 30.5)
    store.add_release("5", ["n000"], 1, 3, 12.0)
    assert store.releases() == [Release("5", ("n000",), 1, 3, 12.0), Release("7", ("n001", "n002"), 2, 1, 30.5)]
    store.drop_release("5")
    (owed,) = store.releases()
    assert (owed.job_id, owed.nodes, owed.world, owed.leaving, owed.ordered) == ("7", ("n001", "n002"), 2, 1, 30.5)


def test_an_actions_steps_are_typed(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    aid = store.begin_action(Action(ActionKind.DROP, JobId("3"), Placement(), Placement()), 1.0)
    store.add_step(aid, "scancel", {"argv": ["scancel", "3"]}, 2.0)
    store.add_step(aid, "done", {}, 3.5)
    steps = store.steps_of(aid)
    assert steps == [Step("scancel", {"argv": ["scancel", "3"]}, 2.0), Step("done", {}, 3.5)]
    assert [(s.name, s.t) for s in steps] == [("scancel", 2.0), ("done", 3.5)]


def test_the_report_inputs_are_typed(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    store.add_satellite("9", "7", 1.0, [("w1", "n1")])
    row = ProgressRow(2.0, "resize", 10, 2, 64, pause_s=0.1)
    store.add_progress("7", row)
    aid = store.begin_action(Action(ActionKind.DROP, JobId("8"), Placement(), Placement()), 1.0)
    got = store.report_inputs(["8"])
    assert got == ReportInputs({"7": [], "8": store.actions_of("8")}, {"7": [row], "8": []}, {"9": "7"})
    assert [e.id for e in got.journal["8"]] == [aid]
