"""``slurm-elastic bench chaos``: the acting daemon SIGKILLed at each journaled step, on a real dev cluster.

This module owns the crash benchmark of issue 14. For each crash point
(:data:`~slurm_elastic.slurm.steps.CRASH_POINTS`, or those asked for) it runs a small mixed
workload on a fresh queue: a launcher job (the demo's CNN, 1..4 GPUs) between two plain elastic
jobs (``sleep``) arriving seconds apart (:data:`SCHEDULE`), so the daemon (policy ``dp``, no
guards) starts, grows, shrinks and requeues. The daemon runs as its own process with
``SLURM_ELASTIC_CRASH_AT=<point>``; once it has killed itself there (or the workload ended
without reaching the point: not *reached*), a new daemon is started on the same store without it
and runs until the queue is empty. Then it counts what the issue asks for:

* ``jobs_lost``: a submitted job that Slurm's accounting does not say COMPLETED;
* ``duplicate_actions``: an order the launcher refused (its log says ``refused order``: duplicate
  or unknown workers) or a worker submitted in two satellites;
* ``orphan_satellites``: a satellite (its token in its comment) still in the queue when every job ended;
* ``stranded_jobs``: a submitted job still queued (held) when the run timed out;
* ``stranded_nodes``: a node not idle once the queue is empty;
* ``sample_mismatches``: a launcher job whose end report does not say every sample was trained once.

Two faults other than a daemon crash (:data:`FAULTS`) run the same workload with one daemon that is
never killed:

* ``ctld:outage``: slurmctld is stopped (SIGTERM, it saves its state) for :data:`CTLD_OUTAGE_S`
  seconds while the launcher job runs, then started again. ``actions_while_ctld_down`` counts the
  actions the daemon journaled while it was down (it must act on nothing it cannot observe), and the
  run says how long after the restart the daemon's next round came (``recovery_s``);
* ``worker:kill``: one worker of the launcher job (not ``w0``) is SIGKILLed once it trains beside
  another. The job must still complete with every sample once; ``lost_workers_unnoticed`` counts a
  killed worker the daemon's store does not name as lost.

It brings up its own dev cluster (3 nodes x 2 GPUs) under ``root`` and takes it down when done.
"""

from __future__ import annotations

import contextlib
import dataclasses
import getpass
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from slurm_elastic.demo import DemoJob, submit_job
from slurm_elastic.dev import devcluster
from slurm_elastic.dev.processes import die_with_parent, worker_processes
from slurm_elastic.errors import ConfigError
from slurm_elastic.slurm.commands import run_command
from slurm_elastic.slurm.steps import CRASH_ENV, CRASH_POINTS
from slurm_elastic.store import Store

NODES, GPUS_PER_NODE = 3, 2
LAUNCHER_JOB = DemoJob("chaos-cnn", 1, 4, at=0.0, epochs=3, dataset_size=16384)
PLAIN_SLEEP_S = 15
SCHEDULE = ((0.0, "plain-1"), (3.0, "launcher"), (25.0, "plain-2"))
"""When each job of the workload is submitted (seconds): the launcher job starts beside a plain one
and grows when it ends; the second plain job makes the planner shrink or requeue."""
FAULTS = ("ctld:outage", "worker:kill")
POINTS = CRASH_POINTS + FAULTS
"""Every point ``bench chaos`` runs by default: each crash point, then each fault."""
CTLD_OUTAGE_S = 20.0
"""How long slurmctld stays stopped in ``ctld:outage``."""
FAULT_AFTER_S = {"ctld:outage": 4.0, "worker:kill": 1.0}
"""How long the launcher job runs (``ctld:outage``), or trains with every running worker a member of
a world of two or more (``worker:kill``: the job trains for seconds only), before the fault."""
COUNTS = ("jobs_lost", "duplicate_actions", "orphan_satellites", "stranded_nodes", "stranded_jobs",
          "sample_mismatches", "actions_while_ctld_down", "lost_workers_unnoticed")


def bench_chaos(*, root: Path, points: Sequence[str] = (), run_timeout_s: float = 300.0,
                bring_up: bool = True) -> dict[str, Any]:
    """Run the workload once per crash point or fault (all of :data:`POINTS` when ``points`` is empty).

    ``bring_up=False`` uses the dev cluster already running under ``root`` (the tests').

    Raises:
        ConfigError: an unknown crash point, or no dev cluster at ``root`` (``bring_up=False``).
    """
    unknown = [p for p in points if p not in POINTS]
    if unknown:
        raise ConfigError(f"bench chaos: point {unknown[0]!r} is not one of {', '.join(POINTS)}")
    chosen = list(points) or list(POINTS)
    totals = dict.fromkeys(COUNTS, 0)
    runs = []
    if not bring_up and not devcluster.status(root).get("up"):
        raise ConfigError(f"bench chaos: no dev cluster is up at {root}")
    with contextlib.nullcontext() if not bring_up else devcluster.running(NODES, GPUS_PER_NODE, root):
        env = devcluster.slurm_env(root)
        for point in chosen:
            run = _run(root, env, point, run_timeout_s)
            runs.append(run)
            for key in COUNTS:
                totals[key] += run[key]
    return {"benchmark": "chaos", "crash_points": sum(1 for p in chosen if p in CRASH_POINTS),
            "faults": sum(1 for p in chosen if p in FAULTS), "runs": len(runs),
            "reached": sum(1 for r in runs if r["reached"]), **totals, "per_point": runs}


def _daemon(conf: Path, env: dict[str, str], out: Path, crash: str = "") -> subprocess.Popen[bytes]:
    full = {**os.environ, **env}
    full.pop(CRASH_ENV, None)
    if crash:
        full[CRASH_ENV] = crash
    with open(out, "ab") as log:
        return subprocess.Popen([sys.executable, "-m", "slurm_elastic.cli", "daemon", "--config", str(conf)],
                                env=full, stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)


def _queue(env: dict[str, str]) -> dict[str, tuple[str, str]]:
    """Every job in the queue: id -> (state, comment)."""
    out = run_command(["squeue", "-h", "-o", "%i|%T|%k"], env=env)
    rows = (line.split("|", 2) for line in out.splitlines() if line.count("|") >= 2)
    return {jid: (state, comment) for jid, state, comment in rows}


@dataclasses.dataclass
class _Fault:
    """The fault of one run (none for a crash point), injected from the bench's loop."""

    point: str
    root: Path
    tmp: Path
    ctld_down: tuple[float, float] | None = None  # wall-clock times slurmctld went down and came back
    killed: str = ""  # the worker SIGKILLed
    _since: float | None = None  # when the fault's precondition first held (monotonic)

    @property
    def reached(self) -> bool:
        return (self.ctld_down is not None and self.ctld_down[1] > 0) or bool(self.killed)

    @property
    def down(self) -> bool:
        return self.ctld_down is not None and self.ctld_down[1] == 0

    def tick(self, launcher: str | None, queue: dict[str, tuple[str, str]]) -> None:
        """Inject the fault once its precondition held for :data:`FAULT_AFTER_S` seconds."""
        if self.point not in FAULTS or self.reached or launcher is None:
            return
        if self.down:
            if time.time() - self.ctld_down[0] >= CTLD_OUTAGE_S:  # type: ignore[index]
                devcluster.start_controller(self.root)
                self.ctld_down = (self.ctld_down[0], time.time())  # type: ignore[index]
            return
        workers = worker_processes(launcher)
        ready = (queue.get(launcher, ("",))[0] == "RUNNING" if self.point == "ctld:outage"
                 else len(workers) >= 2 and len(workers) == self._world(launcher))
        if not ready:
            self._since = None
            return
        self._since = self._since or time.monotonic()
        if time.monotonic() - self._since < FAULT_AFTER_S[self.point]:
            return
        if self.point == "ctld:outage":
            devcluster.stop_controller(self.root)
            self.ctld_down = (time.time(), 0.0)
            return
        self.killed = max((w for w in workers if w != "w0"), key=lambda w: int(w[1:]))
        for pid in workers[self.killed]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def _world(self, launcher: str) -> int:
        """The launcher job's world now, by its last report (0 before one): a worker is killed only
        when every running worker is a member (not one still joining, which the daemon withdraws)."""
        found = list(self.tmp.glob("secrets/*.reports"))
        if len(found) != 1:
            return 0
        lines = found[0].read_bytes().splitlines()
        try:
            last = json.loads(lines[-1]) if lines else {}
        except ValueError:
            return 0
        training = last.get("job_id") == launcher and last.get("kind") in ("progress", "resize")
        return int(last.get("world", 0)) if training else 0

    def end(self) -> None:
        """slurmctld is up again however the run ended."""
        if self.down:
            devcluster.start_controller(self.root)
            self.ctld_down = (self.ctld_down[0], time.time())  # type: ignore[index]


def _run(root: Path, env: dict[str, str], point: str, timeout_s: float) -> dict[str, Any]:
    run_command(["scancel", "--user", getpass.getuser()], env=env)
    with tempfile.TemporaryDirectory(prefix="chaos-", dir=root) as tmp_dir:
        tmp = Path(tmp_dir)
        conf = tmp / "elastic.toml"
        conf.write_text(f'[daemon]\npartitions = ["gpu"]\npolicy = "dp"\ndry_run = false\nstore = "{tmp / "s.db"}"\n'
                        'poll_interval = 0.5\nmax_idle = 2.0\nmetrics_address = ""\n'
                        "[guards]\nmin_run_s = 0\nmax_preemptions = 0\n")
        crash = point if point in CRASH_POINTS else ""
        fault = _Fault(point, root, tmp)
        first = _daemon(conf, env, tmp / "daemon-1.log", crash=crash)
        t0 = time.monotonic()
        submitted: dict[str, str] = {}  # what -> job id
        try:
            while first.poll() is None and time.monotonic() - t0 < timeout_s:
                queue = {} if fault.down else _queue(env)
                fault.tick(submitted.get("launcher"), queue)
                if not fault.down:
                    _submit_due(submitted, time.monotonic() - t0, env, tmp)
                    if len(submitted) == len(SCHEDULE) and not set(queue) & set(submitted.values()):
                        break
                time.sleep(0.5)
        finally:
            fault.end()
        reached = first.poll() == -signal.SIGKILL if crash else fault.reached
        if first.poll() is None:
            first.terminate()
            first.wait(30)
        _submit_due(submitted, float("inf"), env, tmp)
        second = _daemon(conf, env, tmp / "daemon-2.log")
        launcher = submitted["launcher"]
        mine = set(submitted.values())
        deadline = time.monotonic() + timeout_s
        while set(_queue(env)) & mine and time.monotonic() < deadline:
            time.sleep(1.0)
        time.sleep(3.0)  # the daemon's next polls: satellites of ended jobs, owed releases
        second.terminate()
        second.wait(30)
        return {"point": point, "reached": reached, **_judge(env, tmp, launcher, mine, fault)}


def _submit_due(submitted: dict[str, str], elapsed: float, env: dict[str, str], tmp: Path) -> None:
    """Submit the workload's jobs whose time has come (a plain job, the launcher job, a plain job)."""
    for at, what in SCHEDULE:
        if what not in submitted and elapsed >= at:
            submitted[what] = submit_job(LAUNCHER_JOB, tmp, env) if what == "launcher" else _sbatch(env, tmp)


def _sbatch(env: dict[str, str], cwd: Path) -> str:
    out = run_command(["sbatch", "--parsable", "--elastic=1:4", "--gres=gpu:1", "--output=/dev/null", "--chdir",
                       str(cwd), "--wrap", f"sleep {PLAIN_SLEEP_S}"], env=env)
    return out.strip().split(";")[0]


def _judge(env: dict[str, str], tmp: Path, launcher: str, mine: set[str], fault: _Fault) -> dict[str, Any]:
    queue = _queue(env)
    stranded_jobs = len(set(queue) & mine)
    orphans = sum(1 for jid, (_, comment) in queue.items() if "slurm-elastic-satellite=" in comment)
    for jid in queue:
        run_command(["scancel", jid], env=env)
    # every record of each job (-D: a requeued job has one per run, and without -D sacct may show
    # an older one); a job is done when one of its runs COMPLETED (a completed job never runs again)
    acct = run_command(["sacct", "-n", "-P", "-X", "-D", "-o", "JobID,State", "-j", ",".join(sorted(mine))],
                       env=env)
    completed = {jid for jid, state in (line.split("|", 1) for line in acct.splitlines() if "|" in line)
                 if state.startswith("COMPLETED")}
    not_completed = len(mine - completed)
    logs = "".join(p.read_text(errors="replace") for p in (tmp / "jobs").glob("*.out"))
    store = Store(tmp / "s.db", read_only=True)
    try:
        ends = [r for r in store.progress_of(launcher) if r.kind == "end"]
        sats = store.satellites(include_ended=True)
        workers = [w for s in sats if sats[s] == launcher for w in _satellite_workers(store, launcher, s)]
        lost = store.lost_workers(launcher)
        actions = store.actions_between(*fault.ctld_down) if fault.ctld_down else []
        after = [r["t"] for r in store.rounds(since=fault.ctld_down[1])] if fault.ctld_down else []
    finally:
        store.close()
    samples_ok = bool(ends) and ends[-1].samples == LAUNCHER_JOB.epochs * LAUNCHER_JOB.dataset_size
    duplicates = logs.count("refused order") + (len(workers) - len(set(workers)))
    nodes = run_command(["sinfo", "-h", "-N", "-o", "%N|%T"], env=env)
    busy = {n for n, state in (line.split("|", 1) for line in nodes.splitlines() if "|" in line)
            if state.strip().lower() not in ("idle",)}
    judged: dict[str, Any] = {
        "jobs_lost": not_completed, "duplicate_actions": duplicates, "orphan_satellites": orphans,
        "stranded_nodes": len(busy) if not queue else 0, "stranded_jobs": stranded_jobs,
        "sample_mismatches": 0 if samples_ok else 1, "actions_while_ctld_down": len(actions),
        "lost_workers_unnoticed": int(bool(fault.killed) and fault.killed not in lost)}
    if fault.ctld_down:
        judged["recovery_s"] = round(min(after) - fault.ctld_down[1], 2) if after else None
    if fault.killed:
        judged["killed_worker"] = fault.killed
    return judged


def _satellite_workers(store: Store, job: str, sat: str) -> list[str]:
    return [w for w, (_, alloc) in store.workers_of(job).items() if alloc == sat]
