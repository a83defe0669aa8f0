"""The daemon's side of a requeued launcher job (finding of the seventh session): the orders and the
worker layout of an earlier run are history. Before, the workers of the first run's last order were
taken for the job's current ones, and their nodes from the first run's layout: a shrink of the new
run wrote an order naming gone workers and kept a node the job no longer held."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from slurm_elastic.core.actions import Action, ActionKind
from slurm_elastic.core.model import JobId
from slurm_elastic.orders import Channel
from slurm_elastic.slurm.actions import SlurmActuator
from slurm_elastic.store import Store

from .test_crash_points import FakeSlurm, snapshot_of
from .test_satellites import _job_files, place, rec


def test_a_requeued_job_is_shrunk_from_its_new_workers_on_its_new_nodes(tmp_path: Path) -> None:
    comment, _ = _job_files(tmp_path)
    first = rec("7", {"n000": 2, "n001": 2}, comment=comment)
    slurm = FakeSlurm({"7": first})
    store = Store(tmp_path / "s.db")
    act = SlurmActuator(slurm, store, clock=lambda: 5.0, records=lambda: slurm.records)
    shrink = Action(ActionKind.SHRINK, JobId("7"), place({"n000": 2, "n001": 2}), place({"n000": 2}), 64, 32, 1, 0.1)
    (out,) = act.apply(snapshot_of(slurm), (shrink,))
    assert out.ok, out.message
    channel = Channel.open("7", first.user, comment)
    assert channel.history()[-1].workers == ("w0", "w1") and channel.history()[-1].run == 0
    store.drop_release("7")

    # Slurm requeued it; its second run holds n002 and n001, its workers started again as w0..w3
    second = replace(rec("7", {"n002": 2, "n001": 2}, comment=comment), restart_count=1)
    slurm.records["7"] = second
    again = Action(ActionKind.SHRINK, JobId("7"), place({"n002": 2, "n001": 2}), place({"n002": 2}), 64, 32, 1, 0.1)
    (out,) = act.apply(snapshot_of(slurm), (again,))
    assert out.ok, out.message
    order = Channel.open("7", second.user, comment, 1).history()[-1]
    assert order.run == 1 and order.workers == ("w0", "w1"), order
    assert [r["nodes"] for r in store.releases()] == [["n002"]]
    assert store.workers_run("7") == 1
    assert {w: n for w, (n, _) in store.workers_of("7").items()} == {"w0": "n002", "w1": "n002", "w2": "n001",
                                                                      "w3": "n001"}
    assert Channel.open("7", second.user, comment, 1).workers([]) == ["w0", "w1"]
    assert Channel.open("7", second.user, comment, 2).workers(["w0"]) == ["w0"]  # a third run: its initial ones


def test_a_store_keeps_one_runs_layout_per_job(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    assert store.workers_run("7") is None
    store.add_workers("7", [("w0", "n0", "7"), ("w1", "n1", "7")])
    store.add_workers("7", [("w1", "n9", "7")])  # within a run, a known worker is kept
    assert store.workers_run("7") == 0 and store.workers_of("7") == {"w0": ("n0", "7"), "w1": ("n1", "7")}
    store.add_workers("7", [("w0", "n5", "7")], run=1)
    assert store.workers_run("7") == 1 and store.workers_of("7") == {"w0": ("n5", "7")}


def test_a_shrink_cut_short_then_requeued_owes_no_release_of_the_new_run(tmp_path: Path) -> None:
    """The daemon died after a shrink's order and before its owed release; Slurm requeued the job
    before the daemon came back. The order named the first run's workers: it is moot, and no node
    of the new allocation is given back by it."""
    import pytest

    from .test_crash_points import Killed, crash_at, restart

    comment, _ = _job_files(tmp_path)
    slurm = FakeSlurm({"7": rec("7", {"n000": 2, "n001": 2}, comment=comment)})
    store = Store(tmp_path / "s.db")
    first = SlurmActuator(slurm, store, clock=lambda: 5.0, records=lambda: slurm.records,
                          crash=crash_at("shrink:order+"))
    shrink = Action(ActionKind.SHRINK, JobId("7"), place({"n000": 2, "n001": 2}), place({"n000": 2}), 64, 32, 1, 0.1)
    with pytest.raises(Killed):
        first.apply(snapshot_of(slurm), (shrink,))
    slurm.records["7"] = replace(rec("7", {"n002": 2, "n001": 2}, comment=comment), restart_count=1)
    _, lines = restart(tmp_path, slurm, store)
    (entry,) = store.actions_of("7")
    assert entry.state != "done" and "never got the order" in entry.message, lines
    assert store.releases() == []
