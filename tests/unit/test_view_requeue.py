"""The observer tells a requeue under way from a job that ends (the load benchmark's flake: a job
being requeued was taken for ended, and the benchmark stopped while it still had to run)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from slurm_elastic.core.model import JobState
from slurm_elastic.slurm.dialects import has_settled, is_bare_completing, map_job_state

from .test_hostile_job_input import Source, nodes, record, view


def test_25_11_prints_a_requeue_under_way_as_pending_and_completing() -> None:
    assert map_job_state(["PENDING", "COMPLETING"], restart_count=1) is JobState.PREEMPTED
    assert map_job_state(["COMPLETED", "COMPLETING"]) is JobState.FINISHED


@pytest.mark.parametrize(("states", "settled"), [
    (["COMPLETED"], True), (["FAILED"], True), (["CANCELLED"], True), (["NODE_FAIL"], True),
    (["COMPLETING"], False), (["COMPLETED", "COMPLETING"], False), (["PENDING", "COMPLETING"], False),
    (["PENDING"], False), (["RUNNING"], False), (["REQUEUED"], False), (["CANCELLED", "STAGE_OUT"], False),
])
def test_a_job_has_settled_once_terminal_and_no_longer_completing(states: list[str], settled: bool) -> None:
    assert has_settled(states) is settled


def _completing(rec, restarts: int):  # type: ignore[no-untyped-def]
    """The record 22.05 prints while a job's processes are killed (one word)."""
    return replace(rec, state=JobState.FINISHED, slurm_state=("COMPLETING",), restart_count=restarts)


def test_22_05_a_completing_job_whose_restart_count_rose_waits_again(tmp_path: Path) -> None:
    running = record("7", {"n000": 1})
    source = Source(nodes(2), [running])
    v = view(tmp_path, source)
    assert v.observe().job("7").state is JobState.RUNNING
    for _ in range(2):  # still completing at the next read: still a requeue
        source.records = [_completing(running, 1)]
        snap = v.observe()
        assert v.records["7"].state is JobState.PREEMPTED and snap.job("7").is_waiting
    source.records = [replace(running, state=JobState.PREEMPTED, slurm_state=("PENDING",), restart_count=1,
                              nodes=(), gpus=(), start_time=None)]
    assert v.observe().job("7").is_waiting
    source.records = [replace(running, restart_count=1)]
    assert v.observe().job("7").state is JobState.RUNNING
    source.records = [_completing(running, 1)]  # the same count: it ends
    v.poll()
    assert v.records["7"].state is JobState.FINISHED
    assert "7" not in {j.job_id for j in v.observe().jobs}


def test_22_05_a_job_first_read_completing_has_ended(tmp_path: Path) -> None:
    """Without an earlier read the count cannot have risen: a job first seen completing ends."""
    source = Source(nodes(1), [_completing(record("8", {"n000": 1}), 2)])
    v = view(tmp_path, source)
    v.poll()
    assert v.records["8"].state is JobState.FINISHED


@pytest.mark.parametrize("states", [("PENDING", "COMPLETING"), ("COMPLETING",)])
def test_a_job_still_completing_its_requeue_is_started_next_round(tmp_path: Path, states: tuple[str, ...]) -> None:
    """25.11: a start sent while the requeue completes was undone (the job waited out a 2-minute
    begin time); now the start is refused, journaled, and the next round starts it."""
    from slurm_elastic.core.actions import Action, ActionKind
    from slurm_elastic.core.model import JobId
    from slurm_elastic.slurm.actuator import SlurmActuator
    from slurm_elastic.store import Store

    from .test_crash_points import FakeSlurm, snapshot_of
    from .test_satellites import place, rec

    requeued = replace(rec("8", {}, state=JobState.PREEMPTED), slurm_state=states, restart_count=1)
    slurm = FakeSlurm({"8": requeued})
    act = SlurmActuator(slurm, Store(tmp_path / "s.db"), clock=lambda: 5.0, records=lambda: slurm.records)
    start = Action(ActionKind.START, JobId("8"), place({}), place({"n000": 2}), 64, 32, 1, 0.1)
    (out,) = act.apply(snapshot_of(slurm), (start,))
    assert not out.ok and "completing" in out.message and slurm.ran == []
    slurm.records["8"] = replace(requeued, slurm_state=("PENDING",))
    (out,) = act.apply(snapshot_of(slurm), (start,))
    assert out.ok, out.message


@pytest.mark.parametrize(("states", "bare"), [
    (["COMPLETING"], True),  # 22.05: ending or being requeued, the state does not say
    (["PENDING", "COMPLETING"], False),  # 25.11: a requeue under way
    (["COMPLETED", "COMPLETING"], False),  # 25.11: an end
    (["COMPLETED"], False), (["RUNNING"], False),
])
def test_only_the_one_word_completing_leaves_an_end_and_a_requeue_apart(states: list[str], bare: bool) -> None:
    assert is_bare_completing(states) is bare
