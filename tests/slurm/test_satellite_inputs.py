"""Issue 37, item 2, on the real dev cluster: a user who swaps their job's ``.env`` and ``.join`` for
FIFOs right after the daemon checked them neither holds the grow nor gets a FIFO opened, and the
satellite, submitted as that user, runs the join script and environment that were checked.

The job belongs to a user who is not root, so the satellite's sbatch runs through ``setpriv`` and
opens the daemon's sealed copies through ``/proc/self/fd`` with the user's rights.
"""

from __future__ import annotations

import errno
import os
import pwd
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from slurm_elastic.core.actions import Action, ActionKind
from slurm_elastic.core.model import JobId, Placement
from slurm_elastic.observe.view import ClusterView
from slurm_elastic.slurm.actuator import SlurmActuator
from slurm_elastic.slurm.cli_backend import SlurmCli
from slurm_elastic.slurm.runner import run_command
from slurm_elastic.store import Store
from slurm_elastic.testing import shipped_profiles

from .conftest import DevCluster

pytestmark = pytest.mark.slurm

SECRET = b"f" * 32
JOIN = b'#!/bin/bash\necho "mark=$JOB_MARK args=$*" > "$SLURM_SUBMIT_DIR/sat-$SLURM_JOB_ID.txt"\n'


def _own(path: Path, user: pwd.struct_passwd, data: bytes | None, mode: int) -> None:
    if data is not None:
        path.write_bytes(data)
    os.chown(path, user.pw_uid, user.pw_gid)
    path.chmod(mode)


class _Fifo:
    """The user's file swapped for a FIFO of theirs; ``opened`` once anything opened it to read."""

    def __init__(self, path: Path, user: pwd.struct_passwd) -> None:
        self.path, self.opened, self._done = path, threading.Event(), threading.Event()
        path.rename(path.with_name(path.name + ".checked"))
        os.mkfifo(path, 0o600)
        _own(path, user, None, 0o600)
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._done.is_set():
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)  # only while a reader holds it open
            except OSError as exc:
                if exc.errno != errno.ENXIO:
                    return
                time.sleep(0.005)
                continue
            self.opened.set()
            os.close(fd)
            return

    def stop(self) -> bool:
        self._done.set()
        self._thread.join(5)
        return self.opened.is_set()


def test_a_fifo_swapped_in_after_the_check_neither_holds_a_real_grow_nor_is_opened(
        cluster: DevCluster, test_user: pwd.struct_passwd, tmp_path: Path) -> None:
    cluster.cancel_all()
    work = Path(test_user.pw_dir) / f"fifo-{os.getpid()}-{int(time.time())}"
    work.mkdir()
    _own(work, test_user, None, 0o700)
    base = work / "job-f"
    for suffix, data, mode in (("", SECRET, 0o600), (".orders", b"", 0o600), (".reports", b"", 0o600),
                               (".join", JOIN, 0o700),
                               (".env", b"JOB_MARK=checked\0PATH=/usr/bin:/bin\0HOME=" + test_user.pw_dir.encode()
                                + b"\0", 0o600)):
        _own(Path(f"{base}{suffix}"), test_user, data, mode)
    submit = ["setpriv", f"--reuid={test_user.pw_uid}", f"--regid={test_user.pw_gid}", "--init-groups", "--",
              "env", "-i", f"SLURM_CONF={cluster.env['SLURM_CONF']}", f"PATH={cluster.env['PATH']}",
              "sbatch", "--parsable", "--elastic=1:8", "--gres=gpu:1", "-N1", f"--chdir={work}",
              f"--comment=slurm-elastic-orders={base}.orders", "--wrap", "sleep 300"]
    job = run_command(submit, env=cluster.env).strip().split(";")[0]
    cluster.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], check=True)
    assert cluster.wait_state(int(job), "RUNNING", timeout=40)["user_name"] == test_user.pw_name

    fifos: list[_Fifo] = []
    sbatch_s: list[float] = []

    def runner(argv: Sequence[str]) -> str:
        if "sbatch" not in argv:
            return run_command(argv, env=cluster.env)
        fifos.extend(_Fifo(Path(f"{base}{suffix}"), test_user) for suffix in (".env", ".join"))
        t0 = time.monotonic()
        try:
            return run_command(argv, env=cluster.env)
        finally:
            sbatch_s.append(time.monotonic() - t0)

    store = Store(tmp_path / "s.db")
    obs = ClusterView(SlurmCli(runner), shipped_profiles(), time.time, ("gpu",), store=store)
    act = SlurmActuator(runner, store, time.time, records=lambda: obs.records, client_env=cluster.env)
    snap = obs.observe()
    held = snap.job(JobId(job)).placement
    ((node, _),) = held.slots
    other = next(n.name for n in snap.nodes if n.name != node and n.free_gpus)
    grown = Placement.of([*((n, g) for n, gs in held.slots for g in gs), (other, 0)])
    t0 = time.monotonic()
    (outcome,) = act.apply(snap, (Action(ActionKind.GROW, JobId(job), held, grown, 64, 32, 1, 0.1),))
    elapsed = time.monotonic() - t0
    opened = [f.stop() for f in fifos]
    print(f"grow {elapsed:.2f} s, of which sbatch {sbatch_s}")
    assert outcome.ok, outcome.message
    assert opened == [False, False]  # no FIFO was opened, by root or by the user's sbatch
    assert elapsed < 10, elapsed

    (sat,) = store.satellites()
    rec = cluster.wait_state(int(sat), "COMPLETED", timeout=60)
    assert rec["user_name"] == test_user.pw_name and rec["name"] == "job-f.join", rec["name"]
    out = work / f"sat-{sat}.txt"
    deadline = time.monotonic() + 15
    while not out.exists() and time.monotonic() < deadline:
        time.sleep(0.3)
    # the checked script ran, with the checked environment and its arguments
    assert out.read_text() == f"mark=checked args={job} w1\n", cluster.log_of(int(sat))
    cluster.cancel_all()
