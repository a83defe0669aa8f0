"""Issue 37, item 2: no path a user can write is handed by name to a command, and a command the
user can stall holds the daemon's loop once, briefly, not every round.

The satellite's sbatch once got ``--export-file=<secret>.env`` and ``<secret>.join`` by name, after
the daemon had checked them by descriptor: a user who swapped either for a FIFO in between held
the grow for the command's 30 s timeout, every round. These tests run the real actuator and the
real :func:`~slurm_elastic.slurm.runner.run_command` on a stand-in ``sbatch`` that opens what it
is given the way Slurm's does (the script by name, ``--export-file`` by name or, for a number, by
descriptor), with the user's files swapped for FIFOs right before it runs.
"""

from __future__ import annotations

import errno
import getpass
import os
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from slurm_elastic.core.actions import Action, ActionKind
from slurm_elastic.core.model import ClusterSnapshot, JobId, JobState, NodeName, Placement
from slurm_elastic.slurm.actuator import SlurmActuator
from slurm_elastic.slurm.records import GpuRequest, JobRecord
from slurm_elastic.slurm.runner import run_command
from slurm_elastic.store import Store
from slurm_elastic.testing import make_job, make_nodes, make_snapshot

USER = getpass.getuser()
SECRET = b"s" * 32
SCRIPT = b"#!/bin/bash\necho joined\n"
ENV = b"JOB_MARK=checked\0HOME=/home/alice\0"

FAKE_SBATCH = """#!{python}
# Opens its inputs as Slurm's sbatch does: the batch script by name (open(2), O_RDONLY), the
# --export-file by descriptor when it is a number of an open descriptor >= 3, else by name.
import fcntl, os, sys, time
out = {out!r}
args = sys.argv[1:]
with open(os.path.join(out, "calls"), "a") as fh:
    fh.write(" ".join(args) + "\\n")
if os.path.exists(os.path.join(out, "hang")):
    time.sleep(60)  # a stopped sbatch, a hung working directory, a stalled slurmctld
def read(name):
    try:
        fd = int(name)
        fcntl.fcntl(fd, fcntl.F_GETFL)
        assert fd >= 3
    except (ValueError, OSError, AssertionError):
        fd = os.open(name, os.O_RDONLY)
    data = b""
    while chunk := os.read(fd, 65536):
        data += chunk
    return data
env = next(a.split("=", 1)[1] for a in args if a.startswith("--export-file="))
script = next(a for a in args if not a.startswith("-"))
open(os.path.join(out, "env"), "wb").write(read(env))
open(os.path.join(out, "script"), "wb").write(read(script))
print(4242 + sum(1 for _ in open(os.path.join(out, "calls"))))
"""


def rec(job_id: str, comment: str, work: Path, node: str = "n000") -> JobRecord:
    return JobRecord(JobId(job_id), int(job_id), "j", USER, "acct", "gpu", JobState.RUNNING, ("RUNNING",), 0, 0,
                     None, (NodeName(node),), 1, None, ((NodeName(node), (0, 1)),), GpuRequest(per_node=2),
                     "slurm-elastic gpus=1:16", comment, node, work_dir=str(work))


def place(gpus: dict[str, int]) -> Placement:
    return Placement.of((n, g) for n, c in gpus.items() for g in range(c))


def job_files(folder: Path, name: str = "job-1") -> Path:
    """The files ``slurm-elastic submit`` writes; returns the secret's path."""
    folder.mkdir(parents=True, exist_ok=True)
    base = folder / name
    for suffix, data, mode in (("", SECRET, 0o600), (".orders", b"", 0o600), (".reports", b"", 0o600),
                               (".join", SCRIPT, 0o700), (".env", ENV, 0o600)):
        path = Path(f"{base}{suffix}")
        path.write_bytes(data)
        path.chmod(mode)
    return base


def fake_sbatch(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """A ``PATH`` holding the stand-in sbatch, and the folder it writes what it read to."""
    bin_dir, out = tmp_path / "bin", tmp_path / "out"
    bin_dir.mkdir()
    out.mkdir()
    sbatch = bin_dir / "sbatch"
    sbatch.write_text(FAKE_SBATCH.format(python=sys.executable, out=str(out)))
    sbatch.chmod(0o755)
    return {"PATH": str(bin_dir)}, out


def sbatch_only(argv: Sequence[str]) -> str:
    """Runs a satellite's sbatch for real (the stand-in), answers every other command with nothing."""
    return run_command(argv) if "sbatch" in argv else ""


def grow(job_id: str, node: str = "n000", onto: str = "n001") -> Action:
    return Action(ActionKind.GROW, JobId(job_id), place({node: 2}), place({node: 2, onto: 2}), 128, 32, 1, 0.1)


def snapshot(*jobs: tuple[str, str]) -> ClusterSnapshot:
    return make_snapshot(make_nodes(4), [make_job(j, state=JobState.RUNNING, max_gpus=8, placement=[(n, 0), (n, 1)])
                                         for j, n in jobs])


class FifoWatch:
    """Swaps a user's file for a FIFO and says whether anything opened that FIFO to read it."""

    def __init__(self, path: Path) -> None:
        self.path, self.opened = path, threading.Event()
        self._done = threading.Event()
        path.rename(path.with_name(path.name + ".checked"))
        os.mkfifo(path, 0o600)
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._done.is_set():
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)  # succeeds only while a reader has it open
            except OSError as exc:
                if exc.errno != errno.ENXIO:
                    return
                time.sleep(0.005)
                continue
            self.opened.set()
            os.close(fd)  # the reader sees end of file
            return

    def stop(self) -> bool:
        self._done.set()
        self._thread.join(5)
        return self.opened.is_set()


def test_a_fifo_swapped_in_after_the_check_neither_holds_the_grow_nor_is_opened(tmp_path: Path) -> None:
    base = job_files(tmp_path / "home")
    path, out = fake_sbatch(tmp_path)
    watches: list[FifoWatch] = []

    def runner(argv: Sequence[str]) -> str:
        if "sbatch" not in argv:
            return ""  # scontrol: no Slurm here
        watches.extend(FifoWatch(Path(f"{base}{suffix}")) for suffix in (".env", ".join"))  # right after the check
        return run_command(argv, timeout=5)

    records = {"7": rec("7", f"slurm-elastic-orders={base}.orders", tmp_path)}
    act = SlurmActuator(runner, Store(tmp_path / "s.db"), clock=lambda: 5.0, records=lambda: records, client_env=path)
    t0 = time.monotonic()
    (outcome,) = act.apply(snapshot(("7", "n000")), (grow("7"),))
    elapsed = time.monotonic() - t0
    assert [w.stop() for w in watches] == [False, False]  # no FIFO was ever opened
    assert outcome.ok, outcome.message
    assert elapsed < 4, elapsed
    # sbatch read the bytes the daemon checked, not what the names lead to now
    assert (out / "env").read_bytes() == ENV and (out / "script").read_bytes() == SCRIPT
    (call,) = (out / "calls").read_text().splitlines()
    assert str(tmp_path / "home") not in call  # no path of the user's reaches the command
    assert "--job-name=job-1.join" in call.split()  # the satellite keeps the name sbatch gave it from the path


def test_a_grow_whose_environment_grew_after_the_check_sends_only_what_was_checked(tmp_path: Path) -> None:
    base = job_files(tmp_path / "home")
    path, out = fake_sbatch(tmp_path)

    def runner(argv: Sequence[str]) -> str:
        if "sbatch" not in argv:
            return ""
        for suffix in (".env", ".join"):  # the user appends to both files after the check: sbatch must not see it
            with open(f"{base}{suffix}", "ab") as fh:
                fh.write(b"X=" + b"y" * 100_000 + b"\0")
        return run_command(argv, timeout=5)

    records = {"7": rec("7", f"slurm-elastic-orders={base}.orders", tmp_path)}
    act = SlurmActuator(runner, Store(tmp_path / "s.db"), clock=lambda: 5.0, records=lambda: records, client_env=path)
    (outcome,) = act.apply(snapshot(("7", "n000")), (grow("7"),))
    assert outcome.ok, outcome.message
    assert (out / "env").read_bytes() == ENV and (out / "script").read_bytes() == SCRIPT


def test_a_stalled_user_command_holds_the_loop_once_then_that_users_grows_back_off(tmp_path: Path) -> None:
    """A user's sbatch that never answers is stopped after the user-command limit; that user's
    grows are then refused at once, with the reason, until the back-off ends; another job of the
    same user does not buy a second stall."""
    first, second = job_files(tmp_path / "home", "job-1"), job_files(tmp_path / "home", "job-2")
    path, out = fake_sbatch(tmp_path)
    (out / "hang").touch()
    records = {"7": rec("7", f"slurm-elastic-orders={first}.orders", tmp_path),
               "8": rec("8", f"slurm-elastic-orders={second}.orders", tmp_path, node="n002")}
    now = [5.0]
    act = SlurmActuator(sbatch_only, Store(tmp_path / "s.db"), clock=lambda: now[0],
                        records=lambda: records, client_env=path)
    act.user_command_timeout_s = 1.0
    snap = snapshot(("7", "n000"), ("8", "n002"))
    t0 = time.monotonic()
    out7, out8 = act.apply(snap, (grow("7"), grow("8", "n002", "n003")))
    elapsed = time.monotonic() - t0
    assert elapsed < 4, elapsed  # one stall of the user-command limit, not 30 s per job
    assert not out7.ok and "no answer within 1 s" in out7.message and f"grows of user {USER}" in out7.message, \
        out7.message
    assert not out8.ok and "backs off" in out8.message and "job 7" in out8.message, out8.message
    assert len((out / "calls").read_text().splitlines()) == 1  # job 8's sbatch never ran
    journal = act.store.actions_of("8")
    assert journal[-1].message == out8.message  # the reason is journaled (and logged)

    (out / "hang").unlink()
    now[0] += 30.0  # still backing off: refused at once
    (again,) = act.apply(snap, (grow("8", "n002", "n003"),))
    assert not again.ok and "backs off" in again.message
    now[0] += 60.0  # the back-off is over: tried again, and an answer ends it
    t0 = time.monotonic()
    assert all(o.ok for o in act.apply(snap, (grow("7"), grow("8", "n002", "n003"))))
    assert time.monotonic() - t0 < 4


def test_sealed_copies_are_read_only_and_reach_a_command_as_another_user_only_through_its_descriptor(
        tmp_path: Path) -> None:
    from slurm_elastic.slurm.runner import Command, CommandTimeout, sealed_copy

    fd = sealed_copy(b"A=1\0", "env")
    try:
        with pytest.raises(OSError):
            os.write(fd, b"more")
        with pytest.raises(OSError):
            os.ftruncate(fd, 0)
        argv = Command(["cat", f"/proc/self/fd/{fd}"], pass_fds=(fd,), timeout=5)
        assert run_command(argv) == "A=1\0"
        assert run_command(argv) == "A=1\0"  # each reopen starts at the beginning
        with pytest.raises(Exception, match="No such file"):
            run_command(["cat", f"/proc/self/fd/{fd}"])  # not passed: not there
        if os.geteuid() == 0:  # as another user, the way a satellite's sbatch runs
            nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
            assert run_command(Command([*nobody, "cat", f"/proc/self/fd/{fd}"], pass_fds=(fd,))) == "A=1\0"
    finally:
        os.close(fd)
    t0 = time.monotonic()
    with pytest.raises(CommandTimeout, match=r"no answer within 0\.5 s"):
        run_command(Command(["sleep", "30"], timeout=0.5))  # the command's own limit, below the runner's
    assert time.monotonic() - t0 < 5
    assert run_command(["cat"]) == ""  # a command that reads its standard input gets nothing, never waits
