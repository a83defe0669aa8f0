"""The daemon's store: actions journaled before and after, survivable crashes, progress."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from slurm_elastic.core.actions import Action, ActionKind
from slurm_elastic.core.model import JobId, JobPlan, Placement, Plan, Unplaced
from slurm_elastic.store import ProgressRow, Store, StoreError, action_from_json, action_to_json

GROW = Action(ActionKind.GROW, JobId("7"), Placement.of([("n01", 0)]), Placement.of([("n01", 0), ("n02", 1)]),
              256, 128, 1, 0.2, "faster")


def test_action_round_trips_through_json() -> None:
    assert action_from_json(action_to_json(GROW)) == GROW


def test_action_survives_a_crash_between_begin_and_finish(tmp_path: Path) -> None:
    db = tmp_path / "state" / "elastic.db"
    store = Store(db)
    rid = store.record_round(10.0, Plan("ones", (JobPlan(JobId("7"), GROW.after, 256, 128, 1, 0.2),),
                                        (Unplaced(JobId("8"), "waiting"),)), "round ok", ())
    done = store.begin_action(GROW, 10.0, rid)
    store.finish_action(done, True, 11.0)
    store.begin_action(GROW, 12.0, rid)  # the daemon dies here
    store.close()

    reopened = Store(db)
    (pending,) = reopened.unfinished_actions()
    assert pending.action == GROW and pending.state == "running" and pending.round_id == rid
    reopened.finish_action(pending.id, False, 20.0, "job left the queue")
    assert reopened.unfinished_actions() == []
    states = [(e.state, e.message) for e in reopened.actions_of("7")]
    assert states == [("done", ""), ("failed", "job left the queue")]
    (rnd,) = reopened.rounds()
    assert rnd.plan == Plan("ones", (JobPlan(JobId("7"), GROW.after, 256, 128, 1, 0.2),),
                            (Unplaced(JobId("8"), "waiting"),))
    assert (rnd.id, rnd.t, rnd.policy, rnd.summary, rnd.violations) == (rid, 10.0, "ones", "round ok", ())


def test_outcome_cannot_be_recorded_twice(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    aid = store.begin_action(GROW, 1.0)
    store.finish_action(aid, True, 2.0)
    with pytest.raises(StoreError, match=f"action {aid} is not running"):
        store.finish_action(aid, True, 3.0)


def test_progress_is_appended_and_validated(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    assert store.latest_progress("7") is None
    store.add_progress("7", ProgressRow(t=1.0, kind="progress", samples=100, world=2, global_batch=256,
                                        throughput=900.0))
    store.add_progress("7", ProgressRow(t=2.0, samples=300, world=4, global_batch=512, loss=1.5, kind="progress"))
    latest = store.latest_progress("7")
    assert latest is not None and latest.samples == 300 and latest.world == 4
    with pytest.raises(StoreError, match="samples=-1"):
        store.add_progress("7", ProgressRow(t=3.0, samples=-1, world=1, global_batch=1, kind="progress"))


def test_refuses_a_database_of_another_schema_version(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    Store(db).close()
    con = sqlite3.connect(db)
    con.execute("UPDATE meta SET value='99' WHERE key='schema'")
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="schema version 99"):
        Store(db)


def test_report_inputs_cover_the_jobs_and_the_jobs_their_satellites_belong_to(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    store.add_satellite("9", "7", 1.0, [("w2", "n1")])
    store.add_progress("7", ProgressRow(t=2.0, samples=10, world=2, global_batch=64, kind="resize", pause_s=0.1))
    got = store.report_inputs(["9", "8"])
    assert got.satellites == {"9": "7"}
    assert set(got.journal) == set(got.progress) == {"7", "8", "9"}
    assert [r.kind for r in got.progress["7"]] == ["resize"] and got.progress["8"] == []


def test_a_version_2_store_is_migrated_and_its_rows_keep_their_world(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    con = sqlite3.connect(db)
    con.executescript(
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
        "INSERT INTO meta VALUES ('schema', '2');"
        "CREATE TABLE progress (id INTEGER PRIMARY KEY, job_id TEXT NOT NULL, t REAL NOT NULL,"
        " samples INTEGER NOT NULL, gpus INTEGER NOT NULL, global_batch INTEGER NOT NULL, throughput REAL,"
        " loss REAL, metric REAL,"
        " kind TEXT NOT NULL DEFAULT 'progress', pause_s REAL, epoch_size INTEGER);"
        "INSERT INTO progress(job_id, t, samples, gpus, global_batch, kind)"
        " VALUES ('7', 1.0, 64, 3, 96, 'resize');")
    con.close()
    rows = Store(db).progress_of("7")
    assert rows == [ProgressRow(t=1.0, kind="resize", samples=64, world=3, global_batch=96)]


def test_a_reader_beside_the_daemon_sees_the_store_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with pytest.raises(StoreError, match="no such file"):
        Store(path, read_only=True)
    daemon = Store(path)
    daemon.add_satellite("9", "7", 1.0, [("w1", "n1")])
    reader = Store(path, read_only=True)
    assert reader.satellites() == {"9": "7"} and reader.last_round() is None
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        reader.add_satellite("10", "7", 2.0, [("w2", "n2")])
    daemon.hold()  # the reader takes no lock: the daemon still acts
    reader.close()
    daemon.close()
