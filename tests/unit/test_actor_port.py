"""The acting step's port (issue 38): the Slurm actor is entered twice, each time with one observation
and nothing else. A round's ``apply`` carries out the actions and then leases the waiting elastic jobs
the round did not start; a poll's ``tend`` does the owed work, and the first observation with a
snapshot settles a previous daemon's journal first, once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from slurm_elastic.act.actor import SlurmActor
from slurm_elastic.core.actions import Action, ActionKind
from slurm_elastic.core.model import InFlightResize, JobId, JobState, Placement
from slurm_elastic.observe.observation import Observation
from slurm_elastic.slurm.records import GpuRequest, JobRecord
from slurm_elastic.store import Store
from slurm_elastic.testing import make_job, make_nodes, make_snapshot


def _pending(jid: str) -> JobRecord:
    return JobRecord(JobId(jid), int(jid), "j", "u", "a", "gpu", JobState.PENDING, ("PENDING",), 0, None, None,
                     (), 1, None, (), GpuRequest(per_node=1), "slurm-elastic gpus=1:4", "", None)


def _actor(tmp_path: Path, ran: list[list[str]]) -> SlurmActor:
    def runner(argv: Sequence[str]) -> str:
        ran.append(list(argv))
        return ""

    return SlurmActor(runner, Store(tmp_path / "s.db"), lambda: 100.0, me="u", client_env={})


def test_a_round_starts_what_it_planned_and_leases_the_other_waiting_jobs(tmp_path: Path) -> None:
    ran: list[list[str]] = []
    act = _actor(tmp_path, ran)
    snap = make_snapshot(make_nodes(1), [make_job("1"), make_job("2")], now=100.0)
    seen = Observation(100.0, {j: _pending(j) for j in ("1", "2")}, None, snap)
    start = Action(ActionKind.START, JobId("1"), Placement(), Placement.of([("n000", 0)]), 32, 32, 1, 0.1)
    (out,) = act.apply(seen, (start,))
    assert out.ok, out.message
    assert ran == [["scontrol", "update", "JobId=1", "NumNodes=1-1", "TresPerNode=gres:gpu:1", "NodeList=n000"],
                   ["scontrol", "update", "JobId=1", "StartTime=now"],
                   ["scontrol", "update", "JobId=2", "StartTime=now+60"]]  # job 2 waits: Slurm must not start it
    # the next round: job 1's start is on its way (not leased, that would undo it), job 2's lease not due yet
    flying = replace(snap, in_flight=(InFlightResize(JobId("1"), 1, 100.0),))
    assert act.apply(replace(seen, snapshot=flying), ()) == () and len(ran) == 3


def test_the_first_whole_observation_settles_the_journal_once(tmp_path: Path) -> None:
    ran: list[list[str]] = []
    act = _actor(tmp_path, ran)
    snap = make_snapshot(make_nodes(1), [make_job("1", state=JobState.RUNNING, placement=[("n000", 0)])], now=100.0)
    start = Action(ActionKind.START, JobId("1"), Placement(), Placement.of([("n000", 0)]), 32, 32, 1, 0.1)
    act.hands.store.begin_action(start, 50.0)  # a daemon died after it began, before any step
    assert act.tend(Observation(100.0, {})) == []  # a poll sees no snapshot: nothing is judged by it
    assert act.tend(Observation(100.0, {}, None, snap)) == ["reconciled: start job 1: found done after a restart"]
    assert act.tend(Observation(100.0, {}, None, snap)) == [] and act.hands.store.unfinished_actions() == []
    assert ran == []
