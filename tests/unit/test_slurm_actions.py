"""Translating actions into Slurm commands, the journal around them, and reconciliation."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from slurm_elastic.core.actions import Action, ActionKind
from slurm_elastic.core.model import JobId, JobState, Placement
from slurm_elastic.slurm.actuator import CREDENTIAL_WAIT_S, NotExpressible, SlurmActuator, commands, reconcile
from slurm_elastic.slurm.records import GpuRequest, JobRecord
from slurm_elastic.slurm.runner import SlurmCommandError
from slurm_elastic.store import Store
from slurm_elastic.testing import make_job, make_nodes, make_snapshot

SNAP = make_snapshot(make_nodes(3), [
    make_job("p", max_gpus=8),
    make_job("r", max_gpus=8, placement=[("n000", 0), ("n000", 1), ("n001", 0), ("n001", 1)]),
])


def _act(kind: ActionKind, job: str, before: list[tuple[str, int]], after: list[tuple[str, int]]) -> Action:
    return Action(kind, JobId(job), Placement.of(before), Placement.of(after), 128 * len(after), 128, 1, 0.1)


def test_start_sizes_and_releases_a_held_job_at_the_largest_equal_shape() -> None:
    a = _act(ActionKind.START, "p", [], [("n001", 2), ("n001", 3), ("n002", 0), ("n002", 1), ("n002", 2)])
    assert commands(SNAP, a) == [
        ["scontrol", "update", "JobId=p", "NumNodes=2-2", "TresPerNode=gres:gpu:2", "NodeList=n001,n002"],
        ["scontrol", "update", "JobId=p", "StartTime=now"],
    ]


def _pending(job: str, nodes: int, tasks: int | None) -> JobRecord:
    return JobRecord(JobId(job), 7, "j", "u", "acct", "gpu", JobState.PENDING, ("PENDING",), 0, None, None, (),
                     nodes, tasks, (), GpuRequest(per_node=1), "slurm-elastic gpus=2:6", "", None)


def test_a_job_started_on_fewer_or_more_nodes_than_it_asked_keeps_its_tasks_per_node() -> None:
    """Found by bench fidelity: a 2-node job of one task per node (the template's ``--elastic 2:6``
    with one GPU per node) started on one node with 2 GPUs by NumNodes alone stayed PENDING
    (BadConstraints) and was started again every round; its tasks and CPUs now follow its nodes."""
    one = _act(ActionKind.START, "p", [], [("n001", 0), ("n001", 1)])
    assert commands(SNAP, one, _pending("p", 2, 2))[0] == [
        "scontrol", "update", "JobId=p", "NumNodes=1-1", "TresPerNode=gres:gpu:2", "NodeList=n001",
        "NumTasks=1", "NumCPUs=1"]
    three = _act(ActionKind.START, "p", [], [("n000", 0), ("n001", 0), ("n002", 0)])
    assert commands(SNAP, three, _pending("p", 1, 4))[0][-2:] == ["NumTasks=12", "NumCPUs=12"]
    # the nodes it asked for, or a task count that does not split evenly over them: left as they are
    same = _act(ActionKind.START, "p", [], [("n001", 0), ("n002", 0)])
    assert commands(SNAP, same, _pending("p", 2, 2))[0][-1] == "NodeList=n001,n002"
    assert commands(SNAP, one, _pending("p", 2, 3))[0][-1] == "NodeList=n001"
    assert commands(SNAP, one, _pending("p", 2, None))[0][-1] == "NodeList=n001"


def test_jobs_without_the_launcher_are_requeued_at_the_new_size() -> None:
    before = [("n000", 0), ("n000", 1), ("n001", 0), ("n001", 1)]
    for kind, after in ((ActionKind.SHRINK, [("n000", 0), ("n001", 0)]),
                        (ActionKind.GROW, [*before, ("n002", 0), ("n002", 1)])):
        nodes = ",".join(sorted({n for n, _ in after}))
        per_node = len(after) // len({n for n, _ in after})
        assert commands(SNAP, _act(kind, "r", before, after)) == [
            ["scontrol", "requeuehold", "r"],
            ["scontrol", "update", "JobId=r", f"NumNodes={len(nodes.split(','))}-{len(nodes.split(','))}",
             f"TresPerNode=gres:gpu:{per_node}", f"NodeList={nodes}"],
            ["scontrol", "release", "r"],
            ["scontrol", "update", "JobId=r", "StartTime=now"],
        ]
    assert commands(SNAP, _act(ActionKind.PREEMPT, "r", before, [])) == [["scontrol", "requeue", "r"]]


def test_rebatch_without_the_launcher_is_refused_with_the_reason() -> None:
    with pytest.raises(NotExpressible, match="needs the in-job launcher"):
        commands(SNAP, _act(ActionKind.REBATCH, "r", [("n000", 0)], [("n000", 0)]))


def test_a_preempted_job_back_in_the_queue_is_started_like_a_pending_one() -> None:
    """A requeued job waits as PREEMPTED: refusing to start it left it to Slurm's own start
    (issue 14, finding 2: 62 "start job N refused: job N is preempted")."""
    from dataclasses import replace

    from slurm_elastic.core.model import JobState

    snap = replace(SNAP, jobs=tuple(replace(j, state=JobState.PREEMPTED) if j.job_id == "p" else j
                                    for j in SNAP.jobs))
    assert commands(snap, _act(ActionKind.START, "p", [], [("n002", 0)]))[-1] == [
        "scontrol", "update", "JobId=p", "StartTime=now"]


def test_start_of_a_running_job_is_refused() -> None:
    with pytest.raises(NotExpressible, match="only a waiting job can be started"):
        commands(SNAP, _act(ActionKind.START, "r", [], [("n002", 0)]))


def test_actuator_journals_each_action_and_a_failure_does_not_stop_the_rest(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    ran: list[list[str]] = []

    def runner(argv: Sequence[str]) -> str:
        ran.append(list(argv))
        if argv[0] == "scancel":
            raise SlurmCommandError("scancel p: exit 1: Invalid job id")
        return ""

    act = SlurmActuator(runner, store, clock=lambda: 5.0)
    drop = _act(ActionKind.DROP, "p", [], [])
    rebatch = _act(ActionKind.REBATCH, "r", [("n000", 0)], [("n000", 0)])
    preempt = _act(ActionKind.PREEMPT, "r", [("n000", 0), ("n000", 1), ("n001", 0), ("n001", 1)], [])
    outcomes = act.apply(SNAP, (drop, rebatch, preempt))
    assert [o.ok for o in outcomes] == [False, False, True]
    assert "Invalid job id" in outcomes[0].message and "launcher" in outcomes[1].message
    assert ran == [["scancel", "p"], ["scontrol", "requeue", "r"]]
    assert store.unfinished_actions() == []
    assert [e.state for e in store.actions_of("r")] == ["failed", "done"]


def test_reconcile_settles_unfinished_actions_by_what_slurm_shows(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    started = _act(ActionKind.START, "r", [], [("n000", 0), ("n000", 1), ("n001", 0), ("n001", 1)])
    not_started = _act(ActionKind.START, "p", [], [("n002", 0)])
    store.begin_action(started, 1.0)
    store.begin_action(not_started, 1.0)
    lines = reconcile(store, SNAP, clock=lambda: 2.0)
    assert lines == ["start job r: found done after a restart", "start job p: found not done after a restart"]
    assert store.unfinished_actions() == []
    assert SNAP.job(JobId("p")).state is JobState.PENDING


def test_a_requeued_job_is_resized_only_once_it_is_back_in_the_queue(tmp_path: Path) -> None:
    states = iter(["COMPLETING", "COMPLETING", "PENDING"])
    ran: list[list[str]] = []

    def runner(argv: Sequence[str]) -> str:
        ran.append(list(argv))
        return next(states) + "\n" if argv[0] == "squeue" else ""

    act = SlurmActuator(runner, Store(tmp_path / "s.db"), clock=lambda: 5.0,
                        sleep=lambda s: ran.append(["sleep", str(s)]))
    grow = _act(ActionKind.GROW, "r", [("n000", 0), ("n000", 1)], [("n000", 0), ("n000", 1), ("n000", 2)])
    (out,) = act.apply(SNAP, (grow,))
    assert out.ok and out.message == "requeued at the new size"
    assert [a[1] for a in ran] == ["requeuehold", "-h", "0.2", "-h", "0.2", "-h", str(CREDENTIAL_WAIT_S),
                                   "update", "release", "update"]
    assert CREDENTIAL_WAIT_S > 1.0  # the restart's credential must be made in a later second than the kill



def test_waiting_elastic_jobs_are_leased_in_one_command_but_not_one_being_started(tmp_path: Path) -> None:
    """The lease keeps Slurm from starting the jobs the daemon plans (issue 14, finding 2); a job
    whose START is on its way is left alone: a lease would undo its ``StartTime=now``."""
    from dataclasses import replace

    from slurm_elastic.core.model import InFlightResize
    from slurm_elastic.slurm.records import GpuRequest, JobRecord

    def rec(jid: str) -> JobRecord:
        return JobRecord(JobId(jid), int(jid), "j", "u", "a", "gpu", JobState.PENDING, ("PENDING",), 0, None, None,
                         (), 1, None, (), GpuRequest(per_node=1), "slurm-elastic gpus=1:4", "", None)

    snap = make_snapshot(make_nodes(1), [make_job("1"), make_job("2"), make_job("3")])
    records = {j: rec(j) for j in ("1", "2", "3")}
    ran: list[list[str]] = []
    now = [100.0]

    def runner(argv: Sequence[str]) -> str:
        ran.append(list(argv))
        return ""

    act = SlurmActuator(runner, Store(tmp_path / "s.db"), lambda: now[0], records=lambda: records)
    flying = replace(snap, in_flight=(InFlightResize(JobId("2"), 1, 99.0),))
    assert act.lease(flying, started={"3"}) == []
    assert ran == [["scontrol", "update", "JobId=1", "StartTime=now+60"]]
    now[0] = 120.0
    act.tend()
    assert len(ran) == 1  # 40 s of the lease left: not renewed yet
    now[0] = 131.0
    act.tend()
    assert ran[-1] == ["scontrol", "update", "JobId=1", "StartTime=now+60"]
    act.lease(snap, started=())
    assert ran[-1] == ["scontrol", "update", "JobId=2,3", "StartTime=now+60"]  # one command for both
    # Slurm started job 1 itself (the daemon was away past its lease): the daemon can tell, and says so
    running = replace(snap, jobs=tuple(make_job("1", state=JobState.RUNNING, placement=[("n000", 0)])
                                       if j.job_id == "1" else j for j in snap.jobs))
    assert act.lease(running, started=()) == [
        "job 1 was started by Slurm itself: its lease ran out (the daemon was away or slow)"]
    assert act.lease(running, started=()) == []  # said once
