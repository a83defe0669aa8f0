"""The satellite end grace holds only a satellite whose workers had joined the job (issue 38, item 7).

A satellite still running when its job left the queue is let be for ``SATELLITE_END_GRACE_S`` after
the job's end report: its workers exit with the job's. Joiners that had not joined when training
ended (the grow was ordered seconds before the end) wait to join a job that is gone: ``bench chaos``
found such a satellite in the queue after its job (an orphan at the bench's count) and the daemon
cancelled it only 30 s after the end. It is cancelled at once now.
"""

from __future__ import annotations

import getpass
from collections.abc import Sequence
from pathlib import Path

import pytest

from slurm_elastic.core.actions import Action, ActionKind
from slurm_elastic.core.model import JobId, JobState, NodeName, Placement
from slurm_elastic.slurm.actuator import SlurmActuator
from slurm_elastic.slurm.records import GpuRequest, JobRecord
from slurm_elastic.store import ProgressRow, Store
from slurm_elastic.testing import make_job, make_nodes, make_snapshot

USER = getpass.getuser()


def _rec(job_id: str, gpus: dict[str, int], *, state: JobState = JobState.RUNNING, comment: str = "") -> JobRecord:
    slots = tuple((NodeName(n), tuple(range(c))) for n, c in gpus.items())
    return JobRecord(JobId(job_id), int(job_id), "j", USER, "acct", "gpu", state, (state.value.upper(),), 0, 0, None,
                     tuple(NodeName(n) for n in gpus), len(gpus), None, slots, GpuRequest(per_node=2),
                     "slurm-elastic gpus=1:16", comment, next(iter(gpus)), work_dir="/home/u")


def _place(gpus: dict[str, int]) -> Placement:
    return Placement.of((n, g) for n, c in gpus.items() for g in range(c))


def _grown(tmp_path: Path) -> tuple[SlurmActuator, dict[str, JobRecord], list[list[str]]]:
    """Job 7 trains at 2 workers on n000 (a report at t=4), grown at t=5 by satellite 100 on n001 (w2, w3)."""
    base = tmp_path / "job-1"
    for suffix, data, mode in (("", b"s" * 32, 0o600), (".orders", b"", 0o600), (".reports", b"", 0o600),
                               (".join", b"#!/bin/bash\n", 0o700), (".env", b"A=1\0", 0o600)):
        Path(f"{base}{suffix}").write_bytes(data)
        Path(f"{base}{suffix}").chmod(mode)
    comment = f"slurm-elastic-orders={base}.orders"
    records = {"7": _rec("7", {"n000": 2}, comment=comment)}
    ran: list[list[str]] = []

    def runner(argv: Sequence[str]) -> str:
        ran.append(list(argv))
        return "100\n" if "sbatch" in argv else ""

    clock = {"now": 5.0}
    act = SlurmActuator(runner, Store(tmp_path / "s.db"), clock=lambda: clock["now"], records=lambda: records)
    act.store.add_progress("7", ProgressRow(4.0, "progress", 2048, 2, 64, None, None, None, None))
    snap = make_snapshot(make_nodes(2), [make_job("7", state=JobState.RUNNING, max_gpus=8,
                                                  placement=[("n000", 0), ("n000", 1)])])
    grow = Action(ActionKind.GROW, JobId("7"), _place({"n000": 2}), _place({"n000": 2, "n001": 2}), 128, 32, 1, 0.1)
    assert act.apply(snap, (grow,))[0].ok
    records["100"] = _rec("100", {"n001": 2})
    records["7"] = _rec("7", {"n000": 2}, state=JobState.FINISHED, comment=comment)
    act.clock = lambda: 15.0
    ran.clear()
    return act, records, ran


@pytest.mark.parametrize("joined", [True, False])
def test_a_satellite_whose_joiners_never_joined_is_cancelled_with_its_job(tmp_path: Path, joined: bool) -> None:
    act, _, ran = _grown(tmp_path)
    if joined:  # the joiners joined at t=8: the job trained at 4 workers, then ended
        act.store.add_progress("7", ProgressRow(8.0, "resize", 3072, 4, 128, None, None, None, 0.1))
    act.store.add_progress("7", ProgressRow(10.0, "end", 4096, 4 if joined else 2, 128, None, None, None, None))
    if joined:  # its workers exit with the job's: it is let end by itself
        assert act.tend() == [] and ran == [] and act.store.satellites() == {"100": "7"}
    else:  # before: left running for 30 s after the end (its joiners waiting for a job that is gone)
        assert act.tend() == ["satellite 100 cancelled: job 7 is not running (its workers had not joined it "
                              "when its training ended)"]
        assert ran == [["scancel", "100"]] and act.store.satellites() == {}
