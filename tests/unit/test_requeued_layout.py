"""The daemon's side of a requeued launcher job (finding of the seventh session): the orders and the
worker layout of an earlier run are history. Before, the workers of the first run's last order were
taken for the job's current ones, and their nodes from the first run's layout: a shrink of the new
run wrote an order naming gone workers and kept a node the job no longer held."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from slurm_elastic.channel import Channel
from slurm_elastic.core.actions import Action, ActionKind
from slurm_elastic.core.model import JobId, JobState
from slurm_elastic.slurm.actuator import SlurmActuator
from slurm_elastic.store import ProgressRow, Store
from slurm_elastic.testing import make_job, make_nodes, make_snapshot

from .test_crash_points import FakeSlurm, snapshot_of
from .test_satellites import _actuator, _job_files, _orders, place, rec


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
    assert [r.nodes for r in store.releases()] == [("n002",)]
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


def test_a_release_owed_by_an_earlier_run_is_dropped_not_done_to_the_new_run(tmp_path: Path) -> None:
    """Issue 38, item 1: a shrink's node release owed when the job was requeued (the daemon down, or
    the job requeued and started again between two polls) was done to the new run: ``NodeList=`` of
    the nodes the first run kept took the new run's other node, and its workers there with it."""
    comment, _ = _job_files(tmp_path)
    first = rec("7", {"n000": 2, "n001": 2}, comment=comment, batch_host="n000")
    ran: list[list[str]] = []
    records = {"7": first}
    act = _actuator(tmp_path, records, ran)
    shrink = Action(ActionKind.SHRINK, JobId("7"), place({"n000": 2, "n001": 2}), place({"n000": 2}), 64, 32, 1, 0.1)
    (out,) = act.apply(make_snapshot(make_nodes(2), [make_job("7", state=JobState.RUNNING, max_gpus=8, placement=[
        ("n000", 0), ("n000", 1), ("n001", 0), ("n001", 1)])]), (shrink,))
    assert out.ok and "keeps n000" in out.message, out.message
    # requeued before the release fell due; its second run started at t=30 on the same two nodes
    records["7"] = replace(first, restart_count=1, start_time=30)
    act.clock = lambda: 100.0  # past RELEASE_TIMEOUT_S: the release was due
    (line,) = act.tend()
    assert "release of its other nodes dropped: it was requeued" in line, line
    assert ran == [] and act.store.releases() == []  # before: scontrol update JobId=7 NodeList=n000


def test_workers_an_earlier_run_lost_are_not_taken_from_the_new_run(tmp_path: Path) -> None:
    """Issue 38, item 1: a recovery report of the first run named w2 and w3 lost; the requeued job
    started w0..w3 again, and the daemon ordered the new w2 and w3 out and gave their node back."""
    comment, secret = _job_files(tmp_path)
    first = rec("7", {"n0": 2, "n1": 2}, comment=comment, batch_host="n0")
    ran: list[list[str]] = []
    records = {"7": first}
    act = _actuator(tmp_path, records, ran)
    act.store.add_reports("7", [ProgressRow(4.0, "resize", 640, 2, 64, pause_s=0.1, lost=("w2", "w3"))], 100)
    records["7"] = replace(first, restart_count=1, start_time=10)  # requeued before the daemon settled it
    assert act.tend() == [] and ran == []
    assert Channel.open("7", first.user, comment, 1).history() == []  # no order for the new run
    # a loss in the new run is settled as before
    act.store.add_reports("7", [ProgressRow(12.0, "resize", 64, 3, 96, pause_s=0.1, lost=("w3",))], 200)
    line, why = act.tend()  # why: its join script predates replacements (issue 38, bug 2): w3's GPU stays idle
    assert "w3 not started again" in why, why
    assert "lost workers w3 out of the job's order" in line, line
    assert _orders(tmp_path / "job-1.orders", "7", secret)[-1].workers == ("w0", "w1", "w2")
