"""A daemon killed at any journaled step is resumed or undone by the next one (issue 14, finding 1).

Each crash point of :data:`~slurm_elastic.slurm.steps.CRASH_POINTS` reachable by a grow or shrink
of a launcher job, a resize of a job without it (the requeue path), a start, a preemption and a
drop is tried against a small fake Slurm: the first daemon dies there (nothing of ours catches
it), a second one on the same store reconciles and tends, and then nothing is stranded: no action
left running, no job held, no satellite that no one will cancel, no worker in an order without an
allocation, no node release forgotten, and planning the same grow again orders no worker twice.
Before the step journal, a grow killed after ``sbatch`` left an orphan satellite, one killed after
the order made the next grow order duplicate workers, a shrink killed before its release was
recorded never gave the node back, and a requeue killed after ``requeuehold`` left the job held.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from slurm_elastic.channel import Channel
from slurm_elastic.contract import satellite_token
from slurm_elastic.core.actions import Action, ActionKind
from slurm_elastic.core.model import ClusterSnapshot, JobId, JobState, NodeName
from slurm_elastic.errors import ConfigError
from slurm_elastic.slurm.actuator import SlurmActuator
from slurm_elastic.slurm.records import JobRecord
from slurm_elastic.slurm.steps import CRASH_ENV, CRASH_POINTS, STEPS, crash_from_env
from slurm_elastic.store import Store, StoreError
from slurm_elastic.testing import make_job, make_nodes, make_snapshot

from .test_satellites import _job_files, place, rec


class Killed(BaseException):
    """The daemon process dies here."""


@dataclass
class FakeSlurm:
    """Just enough of Slurm for the actuator: jobs by id, sbatch, scancel, requeue, update, release."""

    records: dict[str, JobRecord]
    held: set[str] = field(default_factory=set)
    ran: list[list[str]] = field(default_factory=list)
    shapes: dict[str, list[str]] = field(default_factory=dict)
    per_node: dict[str, int] = field(default_factory=dict)
    ids: itertools.count = field(default_factory=lambda: itertools.count(100))

    def __call__(self, argv: Sequence[str]) -> str:
        argv = list(argv)
        self.ran.append(argv)
        if "sbatch" in argv:
            cmd = argv[argv.index("sbatch"):]
            sid = str(next(self.ids))
            node = next(a for a in cmd if a.startswith("--nodelist=")).split("=", 1)[1]
            comment = next((a.split("=", 1)[1] for a in cmd if a.startswith("--comment=")), "")
            self.records[sid] = replace(rec(sid, {node: 1}, admin="", state=JobState.PENDING), comment=comment,
                                        gpus=(), nodes=())
            return f"{sid}\n"
        if argv[0] == "scancel":
            self._state(argv[1], JobState.FINISHED)
        elif argv[:2] == ["scontrol", "requeue"]:
            self._state(argv[2], JobState.PENDING)
        elif argv[:2] == ["scontrol", "requeuehold"]:
            self._state(argv[2], JobState.PENDING)
            self.held.add(argv[2])
        elif argv[:2] == ["scontrol", "release"]:
            self.held.discard(argv[2])
        elif argv[:2] == ["squeue", "-h"]:
            return self.records[argv[3]].state.value.upper()
        elif argv[:2] == ["scontrol", "update"]:
            jid = argv[2].split("=", 1)[1]
            for a in argv[3:]:
                if a.startswith("AdminComment="):
                    self.records[jid] = replace(self.records[jid], admin_comment=a.split("=", 1)[1])
                if a.startswith("NodeList="):
                    self.shapes[jid] = a.split("=", 1)[1].split(",")
                if a.startswith("TresPerNode=gres:gpu:"):
                    self.per_node[jid] = int(a.rsplit(":", 1)[1])
                if a == "StartTime=now" and jid not in self.held:
                    self._state(jid, JobState.RUNNING)
                    gpus = tuple((NodeName(n), tuple(range(self.per_node[jid]))) for n in self.shapes[jid])
                    self.records[jid] = replace(self.records[jid], gpus=gpus, nodes=tuple(n for n, _ in gpus))
        return ""

    def _state(self, jid: str, state: JobState) -> None:
        self.records[jid] = replace(self.records[jid], state=state, slurm_state=(state.value.upper(),))


def crash_at(point: str):  # type: ignore[no-untyped-def]
    def crash(at: str) -> None:
        if at == point:
            raise Killed(at)
    return crash


def snapshot_of(slurm: FakeSlurm) -> ClusterSnapshot:
    jobs = []
    for r in slurm.records.values():
        if r.job_id in ("7", "8") and r.state is not JobState.FINISHED:
            slots = [(n, g) for n, gs in r.gpus for g in gs]
            jobs.append(make_job(r.job_id, state=r.state, max_gpus=8, placement=slots if r.state is JobState.RUNNING
                                 else ()))
    return make_snapshot(make_nodes(3), jobs)


GROW = Action(ActionKind.GROW, JobId("7"), place({"n000": 2}), place({"n000": 2, "n001": 1, "n002": 1}),
              128, 32, 1, 0.1)
GROW_ONE = Action(ActionKind.GROW, JobId("7"), place({"n000": 2}), place({"n000": 2, "n001": 2}), 128, 32, 1, 0.1)
SHRINK = Action(ActionKind.SHRINK, JobId("7"), place({"n000": 2, "n001": 2}), place({"n000": 2}), 64, 32, 1, 0.1)
LAUNCHER_GROW = [p for p in CRASH_POINTS if p.startswith("grow:") and p.split(":")[1].rstrip("+") in
                 ("order", "sbatch", "mark")]
LAUNCHER_SHRINK = [p for p in CRASH_POINTS if p.startswith("shrink:") and p.split(":")[1].rstrip("+") in
                   ("order", "owe-release")]
REQUEUE_PATH = [p for p in CRASH_POINTS if p.startswith("grow:") and p not in LAUNCHER_GROW]
START = [p for p in CRASH_POINTS if p.startswith("start:")]


def restart(tmp_path: Path, slurm: FakeSlurm, store: Store) -> tuple[SlurmActuator, list[str]]:
    act = SlurmActuator(slurm, store, clock=lambda: 10.0, records=lambda: slurm.records, sleep=lambda s: None)
    lines = act.reconcile(snapshot_of(slurm)) + act.tend()
    assert store.unfinished_actions() == []
    return act, lines


def no_orphans(slurm: FakeSlurm, store: Store) -> None:
    """Every live job carrying a satellite token is a recorded, marked satellite of a running job."""
    live = store.satellites()
    for r in slurm.records.values():
        if satellite_token(r.comment) and r.state is not JobState.FINISHED:
            assert r.job_id in live, f"orphan satellite {r.job_id}"
            assert r.admin_comment == f"slurm-elastic satellite-of={live[r.job_id]}", r
    assert slurm.held == set()


@pytest.mark.parametrize("grow", [GROW_ONE, GROW], ids=["one satellite", "two satellites"])
@pytest.mark.parametrize("point", LAUNCHER_GROW)
def test_a_grow_killed_at_any_step_is_resumed_or_undone(tmp_path: Path, point: str, grow: Action) -> None:
    comment, _ = _job_files(tmp_path)
    slurm = FakeSlurm({"7": rec("7", {"n000": 2}, comment=comment)})
    store = Store(tmp_path / "s.db")
    first = SlurmActuator(slurm, store, clock=lambda: 5.0, records=lambda: slurm.records, crash=crash_at(point))
    with pytest.raises(Killed):
        first.apply(snapshot_of(slurm), (grow,))
    act, lines = restart(tmp_path, slurm, store)
    no_orphans(slurm, store)
    channel = Channel.open("7", rec("7", {}).user, comment)
    workers = channel.workers(["w0", "w1"])  # the latest order's, else the initial ones
    allocated = {w for w, (_, alloc) in store.workers_of("7").items() if alloc == "7" or alloc in store.satellites()}
    assert len(set(workers)) == len(workers) and set(workers) <= allocated, (workers, allocated, lines)
    resumed = "resumed" in lines[0]
    # adopted when every satellite was submitted (found by its journaled id, or in Slurm by its token
    # when the daemon died before it learnt the id: sbatch+), else undone; the crash is at the first
    # satellite's steps
    assert resumed == (point in ("grow:sbatch+", "grow:mark", "grow:mark+") and grow is GROW_ONE), lines
    if not resumed:  # the next round plans the same grow again: fresh workers, none ordered twice
        (out,) = act.apply(snapshot_of(slurm), (grow,))
        assert out.ok, out.message
        workers = channel.history()[-1].workers
        assert len(set(workers)) == len(workers) == 4, workers
        no_orphans(slurm, store)


@pytest.mark.parametrize("point", LAUNCHER_SHRINK)
def test_a_shrink_killed_at_any_step_still_gives_its_node_back(tmp_path: Path, point: str) -> None:
    comment, _ = _job_files(tmp_path)
    slurm = FakeSlurm({"7": rec("7", {"n000": 2, "n001": 2}, comment=comment)})
    store = Store(tmp_path / "s.db")
    first = SlurmActuator(slurm, store, clock=lambda: 5.0, records=lambda: slurm.records, crash=crash_at(point))
    with pytest.raises(Killed):
        first.apply(snapshot_of(slurm), (SHRINK,))
    _, lines = restart(tmp_path, slurm, store)
    sent = point not in ("shrink:order",)
    (entry,) = store.actions_of("7")
    assert (entry.state == "done") == sent, lines
    assert [r.nodes for r in store.releases()] == ([("n000",)] if sent else []), lines
    if sent:
        assert "done after a restart" in entry.message  # judged by the order the job holds, not by GPUs


@pytest.mark.parametrize("point", REQUEUE_PATH + START)
def test_a_requeue_or_start_killed_at_any_step_never_leaves_the_job_held(tmp_path: Path, point: str) -> None:
    state = JobState.PENDING if point.startswith("start:") else JobState.RUNNING
    slurm = FakeSlurm({"8": rec("8", {"n000": 2} if state is JobState.RUNNING else {}, state=state)})
    store = Store(tmp_path / "s.db")
    action = (Action(ActionKind.START, JobId("8"), place({}), place({"n000": 2}), 64, 32, 1, 0.1)
              if state is JobState.PENDING else replace(GROW, job_id=JobId("8")))
    first = SlurmActuator(slurm, store, clock=lambda: 5.0, records=lambda: slurm.records, crash=crash_at(point),
                          sleep=lambda s: None)
    with pytest.raises(Killed):
        first.apply(snapshot_of(slurm), (action,))
    _, lines = restart(tmp_path, slurm, store)
    assert slurm.held == set(), lines
    if point.startswith("grow:") and point != "grow:requeuehold":  # requeuehold ran: carried on
        assert slurm.records["8"].state is JobState.RUNNING, lines  # resumed: started at its new size
        shapes = [a for a in slurm.ran if a[:2] == ["scontrol", "update"] and any(x.startswith("NumNodes") for x in a)]
        assert shapes and "NumNodes=3-3" in shapes[-1], slurm.ran


def test_every_crash_point_names_a_step_that_is_journaled() -> None:
    assert len(CRASH_POINTS) == 2 * sum(len(s) for s in STEPS.values())
    assert {p.split(":")[0] for p in CRASH_POINTS} == {k.value for k in ActionKind}
    covered = set(LAUNCHER_GROW + LAUNCHER_SHRINK + REQUEUE_PATH + START)
    assert {p for p in CRASH_POINTS if p.split(":")[0] in ("grow", "start")} <= covered


def test_the_crash_variable_is_checked_and_off_by_default() -> None:
    crash_from_env({})("grow:sbatch")  # unset: nothing happens
    with pytest.raises(ConfigError, match=f"{CRASH_ENV}='grow:nowhere': not a crash point"):
        crash_from_env({CRASH_ENV: "grow:nowhere"})


def test_an_orphan_satellite_found_by_its_token_is_cancelled(tmp_path: Path) -> None:
    """A grow whose action was settled but whose satellite's id never reached the store: found in
    Slurm by the token the journal holds, and cancelled; a job carrying a token we never issued is
    left alone (a user can write any comment)."""
    comment, _ = _job_files(tmp_path)
    slurm = FakeSlurm({"7": rec("7", {"n000": 2}, comment=comment)})
    store = Store(tmp_path / "s.db")
    first = SlurmActuator(slurm, store, clock=lambda: 5.0, records=lambda: slurm.records,
                          crash=crash_at("grow:sbatch+"))
    with pytest.raises(Killed):
        first.apply(snapshot_of(slurm), (GROW,))
    entry = store.unfinished_actions()[0]
    store.finish_action(entry.id, False, 6.0, "settled by an older daemon that did not look for satellites")
    slurm.records["555"] = replace(rec("555", {"n002": 1}, admin=""), comment="slurm-elastic-satellite=" + "ab" * 16)
    act = SlurmActuator(slurm, store, clock=lambda: 10.0, records=lambda: slurm.records)
    lines = act.tend()
    assert lines == ["orphan satellite 100 (submitted, its id never journaled) cancelled"], lines
    assert slurm.records["100"].state is JobState.FINISHED and slurm.records["555"].state is JobState.RUNNING


def test_a_satellite_that_starts_and_fails_has_its_workers_withdrawn(tmp_path: Path) -> None:
    comment, _ = _job_files(tmp_path)
    slurm = FakeSlurm({"7": rec("7", {"n000": 2}, comment=comment)})
    store = Store(tmp_path / "s.db")
    act = SlurmActuator(slurm, store, clock=lambda: 5.0, records=lambda: slurm.records)
    assert act.apply(snapshot_of(slurm), (GROW,))[0].ok
    channel = Channel.open("7", rec("7", {}).user, comment)
    assert channel.history()[-1].workers == ("w0", "w1", "w2", "w3")
    slurm._state("101", JobState.FINISHED)  # the satellite on n002 started, then failed
    assert "satellite 101 of job 7 ended (its workers withdrawn)" in act.tend()
    assert channel.history()[-1].workers == ("w0", "w1", "w2")


def test_two_acting_daemons_cannot_share_a_store(tmp_path: Path) -> None:
    first = Store(tmp_path / "s.db")
    first.hold()
    first.hold()  # again on the same store: nothing
    second = Store(tmp_path / "s.db")
    with pytest.raises(StoreError, match=r"another daemon \(pid \d+\) acts on it \(rule: one acting daemon"):
        second.hold()
    first.close()
    second.hold()  # the first one is gone (a killed process's lock goes with it)
    (tmp_path / "t.db.lock").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(StoreError, match="never a link"):
        Store(tmp_path / "t.db").hold()



def test_bench_chaos_has_a_workload_for_every_crash_point() -> None:
    """``bench chaos`` runs each point on the small workload that reaches it: the full run found
    18 of 44 points never reached by its one workload (preempt, drop, move, rebatch, the launcher's
    own shrink steps), then the requeue path of a plain job's grow reached only when timing allowed."""
    from slurm_elastic.bench.live.chaos import FAULTS, WORKLOADS, workload_of

    chosen = {p: workload_of(p).name for p in (*CRASH_POINTS, *FAULTS)}
    assert set(chosen.values()) == set(WORKLOADS)  # every workload serves some point
    assert {chosen[f"{k}:{s}"] for k in ("preempt", "move") for s in STEPS[k]} == {"drain"}
    assert chosen["drop:cancel+"] == "drop" and chosen["rebatch:order"] == "launcher-shrink"
    assert chosen["shrink:owe-release"] == chosen["shrink:order+"] == "launcher-shrink"
    assert chosen["shrink:requeuehold"] == chosen["ctld:outage"] == "mixed"
    # the launcher's grow onto a satellite: a job that outlasts the first plain one (mixed's trained
    # for 4 s on an idle host, and grow:mark was never reached)
    assert {chosen[f"grow:{s}"] for s in ("order", "sbatch", "mark")} == {"launcher-grow"}
    assert {chosen[f"grow:{s}"] for s in ("requeuehold", "shape", "release", "start")} == {"plain-grow"}
    for w in WORKLOADS.values():  # each job of a workload has a unique name; drop only where dropped
        assert len({j.name for j in w.jobs}) == len(w.jobs)
        assert any(j.may_drop for j in w.jobs) == ('mode = "drop"' in w.policy)
