"""Issue 38, bug 2: a worker lost on a node that keeps others left its GPU idle until the job ended.
The pure parts (which GPU, the new id, the srun argv and its environment) and the acting step with a
fake spawner: the order naming the new worker, the journal, the withdrawal of one that never
joins, and a restarted daemon settling a replacement it was killed in."""

from __future__ import annotations

import pwd
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from slurm_elastic.act.actor import SlurmActor
from slurm_elastic.act.replace import JOIN_TIMEOUT_S
from slurm_elastic.core.actions import ActionKind
from slurm_elastic.slurm.records import JobRecord
from slurm_elastic.slurm.replacements import (
    JOIN_MARKER,
    Replacement,
    as_user_keeping_env,
    plan,
    slot_of,
    srun_argv,
    srun_path,
    step_env,
)
from slurm_elastic.slurm.satellites import NotExpressible
from slurm_elastic.store import ProgressRow, Store
from slurm_elastic.testing import make_nodes, make_snapshot
from slurm_elastic_launcher.orders import Order

from .test_satellites import WORK, rec

LAYOUT = {"w0": ("n0", "7"), "w1": ("n0", "7"), "w2": ("n1", "7"), "w3": ("n1", "7"),
          "w4": ("n2", "9"), "w5": ("n2", "9")}
HELD = {"7": {"n0": 2, "n1": 2}, "9": {"n2": 2}}


# -- the pure parts -------------------------------------------------------------------------------


def test_a_lost_worker_on_the_batch_host_is_replaced_on_its_slot_under_a_new_id() -> None:
    (r,) = plan("7", ["w0", "w2", "w3", "w4", "w5"], ["w1"], LAYOUT, {}, HELD, freed=[])
    assert r == Replacement("w6", "w1", "n0", "7", 1, 2)


def test_a_node_given_back_or_no_longer_held_gets_no_replacement() -> None:
    assert plan("7", ["w0", "w1", "w4", "w5"], ["w2", "w3"], LAYOUT, {}, HELD, freed=["n1"]) == []
    assert plan("7", ["w0", "w2", "w3", "w4"], ["w5"], LAYOUT, {}, {"7": HELD["7"]}, freed=[]) == []  # sat ended


def test_a_satellite_keeps_its_worker_only_while_another_of_its_workers_stays() -> None:
    (r,) = plan("7", ["w0", "w1", "w2", "w3", "w4"], ["w5"], LAYOUT, {}, HELD, freed=[])
    assert (r.alloc, r.node, r.slot, r.gpus) == ("9", "n2", 1, 2)
    assert plan("7", ["w0", "w1", "w2", "w3"], ["w4", "w5"], LAYOUT, {}, HELD, freed=[]) == []  # it ends


def test_a_replacement_inherits_the_slot_of_the_worker_it_replaced() -> None:
    layout = {**LAYOUT, "w6": ("n0", "7")}  # w6 replaced w0 earlier: slot 0, not a third slot of n0
    assert slot_of("w6", layout, {"w6": "w0"}) == 0
    assert slot_of("w1", layout, {"w6": "w0"}) == 1  # the first workers' slots do not move
    (r,) = plan("7", ["w1", "w2", "w3"], ["w6"], layout, {"w6": "w0"}, HELD, freed=[])
    assert (r.worker, r.slot) == ("w7", 0)
    with pytest.raises(NotExpressible, match="no known node"):
        plan("7", [], ["w9"], layout, {}, HELD, freed=[])


def test_the_step_environment_is_the_jobs_without_slurm_options_and_with_the_client_settings() -> None:
    saved = (b"HOME=/home/a\0PATH=/usr/bin\0SLURM_OVERLAP=0\0SRUN_CPUS_PER_TASK=9\0BASH_FUNC_f%%=() {\0junk\0"
             b"=x\0A=b=c\0SLURM_ELASTIC_EVENT_LOG=/tmp/e\0")
    env = step_env(saved, ["PATH=/opt/slurm/bin", "SLURM_CONF=/etc/slurm/x.conf"])
    assert env == {"HOME": "/home/a", "PATH": "/usr/bin", "A": "b=c", "SLURM_ELASTIC_EVENT_LOG": "/tmp/e",
                   "SLURM_CONF": "/etc/slurm/x.conf"}
    assert srun_path(["PATH=/opt/slurm/bin"]) == "/opt/slurm/bin/srun"
    with pytest.raises(NotExpressible, match="no Slurm client folder"):
        srun_path(["SLURM_CONF=/x"])


def test_the_srun_argv_runs_the_join_script_as_one_element_as_the_user_on_the_idle_gpu() -> None:
    r = Replacement("w6", "w1", "n0", "7", 1, 2)
    script = "#!/bin/bash\necho $(rm -rf ~) 'x'\n"
    root = pwd.getpwuid(0).pw_name
    prefix = as_user_keeping_env(root, "someone-else")
    assert prefix == ["setpriv", "--reuid=0", "--regid=0", "--init-groups", "--"]  # no --reset-env: srun's env
    assert as_user_keeping_env(root, root) == []
    argv = srun_argv("7", r, WORK, script, srun="/opt/slurm/bin/srun", as_user=prefix)
    assert argv == [*prefix, "/opt/slurm/bin/srun", "--jobid=7", "--overlap", "--nodelist=n0", "--nodes=1",
                    "--ntasks=1", "--gres=gpu:2", "--kill-on-bad-exit=0", "--job-name=slurm-elastic-replace-w6",
                    f"--chdir={WORK}", "bash", "-c", script, "slurm-elastic-replace", "--replace", "1", "7", "w6"]
    with pytest.raises(NotExpressible, match="working directory"):
        srun_argv("7", r, "relative", script)
    with pytest.raises(NotExpressible, match="unknown"):
        as_user_keeping_env("no-such-user-here", root)


def test_the_shipped_join_script_can_start_a_replacement() -> None:
    from slurm_elastic.resources import SBATCH_TEMPLATES

    assert JOIN_MARKER in (SBATCH_TEMPLATES / "pytorch.join.j2").read_bytes()


# -- the acting step --------------------------------------------------------------------------------


class FakeProc:
    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.rc: int | None = None
        self.signals: list[int] = []

    def poll(self) -> int | None:
        return self.rc

    def send_signal(self, sig: int) -> None:
        self.signals.append(sig)


class Died(BaseException):
    """The daemon killed at a crash point."""


def _files(tmp_path: Path, join: bytes) -> tuple[str, bytes]:
    secret = b"s" * 32
    base = tmp_path / "job-1"
    for suffix, data in (("", secret), (".orders", b""), (".reports", b""), (".join", join),
                         (".env", b"HOME=/h\0SLURM_OVERLAP=0\0")):
        path = Path(f"{base}{suffix}")
        path.write_bytes(data)
        path.chmod(0o600)
    return f"slurm-elastic-orders={base}.orders", secret


def _orders(tmp_path: Path, secret: bytes) -> list[tuple[str, ...]]:
    return [Order.parse(line, "7", secret).workers for line in (tmp_path / "job-1.orders").read_text().splitlines()]


class Setup:
    def __init__(self, tmp_path: Path, join: bytes = b"#!/bin/bash\n# SLURM_ELASTIC_SLOT\n",
                 crash: Any = None) -> None:
        self.tmp_path = tmp_path
        comment, self.secret = _files(tmp_path, join)
        self.records: dict[str, JobRecord] = {"7": rec("7", {"n0": 2}, comment=comment, batch_host="n0")}
        self.spawned: list[tuple[list[str], dict[str, str]]] = []
        self.procs: list[FakeProc] = []
        self.ran: list[list[str]] = []
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir(exist_ok=True)
        (bin_dir / "sbatch").write_text("#!/bin/sh\n")
        (bin_dir / "sbatch").chmod(0o755)
        self.env = {"PATH": str(bin_dir), "SLURM_CONF": "/etc/slurm/x.conf"}
        self.store = Store(tmp_path / "s.db")
        self.now = 10.0
        self.actor = self.new_actor(crash)

    def new_actor(self, crash: Any = None) -> SlurmActor:
        def runner(argv: Sequence[str]) -> str:
            self.ran.append(list(argv))
            return ""

        def spawn(argv: Sequence[str], env: Any) -> FakeProc:
            self.spawned.append((list(argv), dict(env)))
            self.procs.append(FakeProc(4000 + len(self.procs)))
            return self.procs[-1]

        return SlurmActor(runner, self.store, lambda: self.now, client_env=self.env, spawn=spawn,
                          crash=crash or (lambda at: None))

    def lose(self, *workers: str, t: float = 9.0) -> None:
        self.store.add_reports("7", [ProgressRow(t, "resize", 640, 2 - len(workers), 64, pause_s=0.1,
                                                 lost=tuple(workers))], 100)

    def owed(self) -> list[str]:
        return self.actor.owed(self.records, frozenset(), self.now)


def test_a_lost_worker_on_the_batch_host_is_started_again_by_an_srun_step(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    assert s.owed() == [] and s.spawned == []  # nothing lost: nothing done
    s.lose("w1")
    lines = s.owed()
    assert len(lines) == 2 and "lost workers w1 out of the job's order" in lines[0], lines
    assert "started again" in lines[1] and "w2 for w1 on n0 slot 1 of 7" in lines[1], lines
    assert _orders(tmp_path, s.secret) == [("w0",), ("w0", "w2")]  # the survivor, then the new worker joins
    ((argv, env),) = s.spawned
    assert argv[0] == str(tmp_path / "bin" / "srun") and argv[1:4] == ["--jobid=7", "--overlap", "--nodelist=n0"]
    assert argv[-5:] == ["slurm-elastic-replace", "--replace", "1", "7", "w2"]
    assert argv[argv.index("-c") + 1] == "#!/bin/bash\n# SLURM_ELASTIC_SLOT\n"  # the checked bytes, no path
    assert env == {"HOME": "/h", "SLURM_CONF": "/etc/slurm/x.conf"}
    assert s.store.workers_of("7")["w2"] == ("n0", "7")
    entry = next(e for e in s.store.actions_of("7") if e.action.kind is ActionKind.GROW)
    assert entry.state == "done" and entry.action.before == entry.action.after
    assert [n for n, _, _ in s.store.steps_of(entry.id)] == ["order", "srun", "started"]
    srun = next(d for n, d, _ in s.store.steps_of(entry.id) if n == "srun")
    assert "<join script>" in srun["argv"]  # named in the journal, not copied
    assert s.owed() == []  # the lost worker is out of the order: nothing more


def test_a_new_worker_that_never_joins_is_withdrawn_and_its_srun_stopped(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    s.lose("w1")
    s.owed()
    s.now += JOIN_TIMEOUT_S - 1
    assert s.owed() == []
    s.now += 2
    (line,) = s.owed()
    assert "new workers w2 withdrawn (it did not join within" in line and "its workers withdrawn" in line, line
    assert _orders(tmp_path, s.secret)[-1] == ("w0",) and s.procs[0].signals == [signal.SIGTERM]
    assert s.owed() == []  # once


def test_a_new_worker_whose_srun_ended_is_withdrawn_at_once_and_one_that_joined_is_left(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    s.lose("w1")
    s.owed()
    s.procs[0].rc = 1
    (line,) = s.owed()
    assert "withdrawn (its srun ended)" in line and _orders(tmp_path, s.secret)[-1] == ("w0",), line
    sub = tmp_path / "b"
    sub.mkdir()
    s2 = Setup(sub)
    s2.lose("w1")
    s2.owed()
    s2.store.add_reports("7", [ProgressRow(s2.now + 1, "resize", 900, 2, 64, pause_s=0.1)], 200)
    s2.now += JOIN_TIMEOUT_S * 2
    assert s2.owed() == [] and _orders(s2.tmp_path, s2.secret)[-1] == ("w0", "w2")


def test_a_job_whose_join_script_predates_replacement_keeps_its_idle_gpu_and_says_why(tmp_path: Path) -> None:
    s = Setup(tmp_path, join=b"#!/bin/bash\n")
    s.lose("w1")
    lines = s.owed()
    assert "not started again" in lines[1] and "older slurm-elastic" in lines[1], lines
    assert _orders(tmp_path, s.secret) == [("w0",)] and s.spawned == []


def test_a_failing_spawn_withdraws_its_worker(tmp_path: Path) -> None:
    s = Setup(tmp_path)

    def fail(argv: Sequence[str], env: Any) -> FakeProc:
        raise OSError("no srun")

    s.actor.replacements.spawn = fail
    s.lose("w1")
    lines = s.owed()
    assert "w2 not started (its workers withdrawn)" in lines[1], lines
    assert _orders(tmp_path, s.secret) == [("w0",), ("w0", "w2"), ("w0",)]
    entry = next(e for e in s.store.actions_of("7") if e.action.kind is ActionKind.GROW)
    assert entry.state == "failed"


@pytest.mark.parametrize(("point", "withdrawn"), [("replace:order+", True), ("replace:srun", False),
                                                  ("replace:srun+", False)])
def test_a_daemon_killed_mid_replacement_is_settled_by_the_next(tmp_path: Path, point: str, withdrawn: bool) -> None:
    """Killed after the order: the new worker's srun never ran, it is withdrawn at once. Killed once its
    srun was journaled (it may have started): it is left to join, and withdrawn by the next daemon's
    polls if it does not join in time (a joiner that started but is no longer named exits on its own
    join timeout)."""
    def crash(at: str) -> None:
        if at == point:
            raise Died(at)

    s = Setup(tmp_path, crash=crash)
    s.lose("w1")
    with pytest.raises(Died):
        s.owed()
    assert _orders(tmp_path, s.secret) == [("w0",), ("w0", "w2")]
    assert len(s.store.unfinished_actions()) == 1
    actor = s.new_actor()
    snap = make_snapshot(make_nodes(1), [])
    (line,) = actor.reconcile(snap, s.records)
    assert s.store.unfinished_actions() == []
    if withdrawn:  # its srun never ran: the joiner is withdrawn
        assert "never started" in line and _orders(tmp_path, s.secret)[-1] == ("w0",), line
        return
    assert "left to join" in line and _orders(tmp_path, s.secret)[-1] == ("w0", "w2"), line
    s.actor = actor
    assert s.owed() == []
    s.now += JOIN_TIMEOUT_S + 1
    (line,) = s.owed()
    assert "new workers w2 withdrawn (it did not join" in line and _orders(tmp_path, s.secret)[-1] == ("w0",), line
