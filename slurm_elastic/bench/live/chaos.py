"""``slurm-elastic bench chaos``: the acting daemon SIGKILLed at each journaled step, on a real dev cluster.

This module owns the crash benchmark. For each crash point
(:data:`~slurm_elastic.slurm.steps.CRASH_POINTS`, or those asked for) it runs, on a fresh queue, the
small workload that reaches that point (:data:`WORKLOADS`, :func:`workload_of`):

* ``mixed``: a launcher job (the demo's CNN, 1..4 GPUs) between two plain elastic jobs (``sleep``)
  arriving seconds apart, for starts, the launcher's grows and the requeue path of a plain job's
  shrink;
* ``launcher-grow``: ``mixed`` with a launcher job trained 8 times as long, for its grow onto a
  satellite (``order``, ``sbatch``, ``mark``): it still runs when the first plain job ends;
* ``launcher-shrink``: a launcher job that declares a batch range (so the planner rebatches it)
  alone on the cluster, then a plain job of 4 GPUs that makes the planner shrink it in place;
* ``plain-grow``: a plain job started on the 2 GPUs a 4-GPU job leaves, grown (by requeue) when
  that one ends;
* ``drain``: three plain jobs of 2 GPUs filling the cluster, then the node of the first drained
  (the planner preempts the last started and moves the first off the draining node);
* ``drop``: the policy's drop mode and a plain job of 6 GPUs arriving while another runs
  (dropped: its ``scancel``).

The daemon (policy ``dp``, no guards) runs
as its own process with ``SLURM_ELASTIC_CRASH_AT=<point>``; once it has killed itself there (or the
workload ended without reaching the point: not *reached*), a new daemon is started on the same
store without it and runs until the queue is empty. Then it counts:

* ``jobs_lost``: a submitted job that Slurm's accounting does not say COMPLETED (or CANCELLED, for
  the job the ``drop`` workload's policy may drop);
* ``duplicate_actions``: an order the launcher refused (its log says ``refused order``: duplicate
  or unknown workers) or a worker submitted in two satellites;
* ``orphan_satellites``: a satellite (its token in its comment) still in the queue when every job ended
  and the daemon had its satellite end grace (:data:`SATELLITE_SETTLE_S`) to see it end;
  ``satellite_wait_s`` says how long that took;
* ``stranded_jobs``: a submitted job still queued (held) when the run timed out;
* ``stranded_nodes``: a node not idle once the queue is empty;
* ``sample_mismatches``: a launcher job whose end report does not say every sample was trained once.

The JSON names the points no run reached (``unreached``): every step of every action kind is
meant to be reached.

Two faults other than a daemon crash (:data:`FAULTS`) run the ``mixed`` workload with one daemon that is
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

from slurm_elastic.act.satellite_upkeep import SATELLITE_END_GRACE_S
from slurm_elastic.contract import satellite_token
from slurm_elastic.dev import devcluster
from slurm_elastic.dev.demo import DemoJob, submit_job
from slurm_elastic.dev.processes import die_with_parent, worker_processes
from slurm_elastic.errors import ConfigError
from slurm_elastic.slurm.runner import run_command
from slurm_elastic.slurm.steps import CRASH_ENV, CRASH_POINTS
from slurm_elastic.store import Store

NODES, GPUS_PER_NODE = 3, 2
PLAIN_SLEEP_S = 15


@dataclasses.dataclass(frozen=True, slots=True)
class Submission:
    """One job of a workload: a launcher job (``launcher``) or a plain elastic ``sleep`` of ``gpus``."""

    name: str
    at: float  # seconds after the run began
    gpus: tuple[int, int] = (1, 4)
    launcher: DemoJob | None = None
    batch: str = ""  # the launcher job's batch range (``MIN:MAX``: the planner may rebatch it)
    may_drop: bool = False  # CANCELLED is a right end for it (the policy's drop mode)
    sleep_s: int = PLAIN_SLEEP_S  # a plain job's run time


@dataclasses.dataclass(frozen=True, slots=True)
class Workload:
    """What one run submits, and when; what the daemon's policy is told; whether a node is drained."""

    name: str
    jobs: tuple[Submission, ...]
    policy: str = ""  # extra ``[policy.dp]`` settings
    drain: bool = False  # drain the first job's node once every job of the workload runs


LAUNCHER_JOB = DemoJob("chaos-cnn", 1, 4, at=0.0, epochs=3, dataset_size=16384)
LONG_LAUNCHER_JOB = DemoJob("chaos-cnn-g", 1, 4, at=0.0, epochs=6, dataset_size=65536)
"""The launcher job of ``launcher-grow``: ``mixed``'s, trained 8 times as long, so that it still runs
when the first plain job ends and its GPUs let it grow onto a satellite (on an idle host ``mixed``'s
own launcher job trained its 3 epochs in about 4 s, before any grow: ``grow:mark`` was not reached)."""
WORKLOADS: dict[str, Workload] = {w.name: w for w in (
    Workload("mixed", (Submission("plain-1", 0.0), Submission("launcher", 3.0, launcher=LAUNCHER_JOB),
                       Submission("plain-2", 25.0))),
    Workload("launcher-grow", (Submission("plain-1", 0.0), Submission("launcher", 3.0, launcher=LONG_LAUNCHER_JOB),
                               Submission("plain-2", 25.0))),
    Workload("launcher-shrink",
             (Submission("launcher", 0.0, launcher=DemoJob("chaos-cnn-b", 1, 4, at=0.0, epochs=4, dataset_size=65536),
                         batch="32:1024"),
              Submission("plain-4", 15.0, gpus=(4, 4)))),
    Workload("plain-grow", (Submission("plain-4", 0.0, gpus=(4, 4), sleep_s=10),
                            Submission("plain-1", 2.0, gpus=(1, 4), sleep_s=30))),
    Workload("drain", tuple(Submission(f"plain-{i}", i - 1.0, gpus=(2, 2)) for i in (1, 2, 3)), drain=True),
    Workload("drop", (Submission("plain-1", 0.0), Submission("plain-6", 4.0, gpus=(6, 6), may_drop=True)),
             policy='mode = "drop"\n'),
)}
"""The workloads of the bench, by name (the module docstring says what each makes the planner do;
:func:`workload_of` says which one runs for a point)."""


def workload_of(point: str) -> Workload:
    """The workload that reaches ``point``: the launcher's own shrink steps and rebatch on
    ``launcher-shrink``, its grow onto a satellite on ``launcher-grow``, a plain job's grow (the
    requeue path) on ``plain-grow``, preempt and move
    on ``drain``, drop on ``drop``, the rest on ``mixed``."""
    kind, _, step = point.partition(":")
    step = step.rstrip("+")
    if kind == "grow" and step in ("order", "sbatch", "mark"):
        return WORKLOADS["launcher-grow"]
    if kind == "rebatch" or (kind == "shrink" and step in ("order", "owe-release")):
        return WORKLOADS["launcher-shrink"]
    if kind == "grow" and step in ("requeuehold", "shape", "release", "start"):
        return WORKLOADS["plain-grow"]
    if kind in ("preempt", "move"):
        return WORKLOADS["drain"]
    return WORKLOADS["drop"] if kind == "drop" else WORKLOADS["mixed"]


FAULTS = ("ctld:outage", "worker:kill")
POINTS = CRASH_POINTS + FAULTS
"""Every point ``bench chaos`` runs by default: each crash point, then each fault."""
CTLD_OUTAGE_S = 20.0
"""How long slurmctld stays stopped in ``ctld:outage``."""
FAULT_AFTER_S = {"ctld:outage": 4.0, "worker:kill": 1.0}
"""How long the launcher job runs (``ctld:outage``), or trains with every running worker a member of
a world of two or more (``worker:kill``: the job trains for seconds only), before the fault."""
DRAIN_AFTER_S = 2.0
"""How long every job of the ``drain`` workload runs before the first one's node is drained."""
SATELLITE_SETTLE_S = SATELLITE_END_GRACE_S + 10.0
"""How long the daemon has, once every job of a run left the queue, to see their satellites end:
its end grace and a few of its polls (:func:`_satellites_end`)."""
NODE_SETTLE_S = 15.0
"""How long a node may take to show idle once the queue is empty (else it is stranded)."""
COUNTS = ("jobs_lost", "duplicate_actions", "orphan_satellites", "stranded_nodes", "stranded_jobs",
          "sample_mismatches", "actions_while_ctld_down", "lost_workers_unnoticed")


def bench_chaos(*, root: Path, points: Sequence[str] = (), run_timeout_s: float = 300.0,
                bring_up: bool = True) -> dict[str, Any]:
    """Run the point's workload once per crash point or fault (all of :data:`POINTS` when ``points`` is empty).

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
            run = _run(root, env, point, workload_of(point), run_timeout_s)
            runs.append(run)
            for key in COUNTS:
                totals[key] += run[key]
    return {"benchmark": "chaos", "crash_points": sum(1 for p in chosen if p in CRASH_POINTS),
            "faults": sum(1 for p in chosen if p in FAULTS), "runs": len(runs),
            "reached": sum(1 for r in runs if r["reached"]),
            "unreached": [r["point"] for r in runs if not r["reached"]], **totals, "per_point": runs}


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


def _run(root: Path, env: dict[str, str], point: str, workload: Workload, timeout_s: float) -> dict[str, Any]:
    run_command(["scancel", "--user", getpass.getuser()], env=env)
    with tempfile.TemporaryDirectory(prefix="chaos-", dir=root) as tmp_dir:
        tmp = Path(tmp_dir)
        conf = tmp / "elastic.toml"
        conf.write_text(f'[daemon]\npartitions = ["gpu"]\npolicy = "dp"\ndry_run = false\nstore = "{tmp / "s.db"}"\n'
                        'poll_interval = 0.5\nmax_idle = 2.0\nmetrics_address = ""\n'
                        "[guards]\nmin_run_s = 0\nmax_preemptions = 0\n"
                        f"[policy.dp]\n{workload.policy}")
        crash = point if point in CRASH_POINTS else ""
        fault = _Fault(point, root, tmp)
        drain = _Drain(workload, env)
        first = _daemon(conf, env, tmp / "daemon-1.log", crash=crash)
        t0 = time.monotonic()
        submitted: dict[str, str] = {}  # job name -> job id
        try:
            try:
                while first.poll() is None and time.monotonic() - t0 < timeout_s:
                    queue = {} if fault.down else _queue(env)
                    fault.tick(submitted.get("launcher"), queue)
                    if not fault.down:
                        drain.tick(submitted, queue)
                        _submit_due(workload, submitted, time.monotonic() - t0, env, tmp)
                        if len(submitted) == len(workload.jobs) and not set(queue) & set(submitted.values()):
                            break
                    time.sleep(0.5)
            finally:
                fault.end()
            reached = first.poll() == -signal.SIGKILL if crash else fault.reached
            if first.poll() is None:
                first.terminate()
                first.wait(30)
            _submit_due(workload, submitted, float("inf"), env, tmp)
            second = _daemon(conf, env, tmp / "daemon-2.log")
            mine = set(submitted.values())
            deadline = time.monotonic() + timeout_s
            while set(_queue(env)) & mine and time.monotonic() < deadline:
                time.sleep(1.0)
            time.sleep(3.0)  # the daemon's next polls: satellites of ended jobs, owed releases
            satellite_wait_s = _satellites_end(env)
            second.terminate()
            second.wait(30)
        finally:
            drain.end()
        judged = _judge(env, tmp, workload, submitted, fault)
        return {"point": point, "workload": workload.name, "reached": reached, **judged,
                "satellite_wait_s": satellite_wait_s, **({"drained": drain.node} if drain.node else {})}


def _satellites_end(env: dict[str, str]) -> float:
    """Wait, with the daemon still running, until no satellite is in the queue, at most
    :data:`SATELLITE_SETTLE_S`; the seconds waited.

    A satellite still running when its job has left the queue is not an orphan yet: the daemon
    lets it end by itself for up to :data:`~slurm_elastic.act.satellite_upkeep.SATELLITE_END_GRACE_S`
    after the job's end report (its workers are exiting, slowly on busy cores) and cancels it
    after that. Counted 3 s after the jobs ended, such a satellite was counted an orphan.
    """
    t0 = time.monotonic()
    while any(satellite_token(comment) for _, comment in _queue(env).values()):
        if time.monotonic() - t0 >= SATELLITE_SETTLE_S:
            break
        time.sleep(1.0)
    return round(time.monotonic() - t0, 1)


@dataclasses.dataclass
class _Drain:
    """The ``drain`` workload's event: the first job's node drained once every job has run
    :data:`DRAIN_AFTER_S` seconds; resumed when the run ends."""

    workload: Workload
    env: dict[str, str]
    node: str = ""
    _since: float | None = None

    def tick(self, submitted: dict[str, str], queue: dict[str, tuple[str, str]]) -> None:
        if not self.workload.drain or self.node or len(submitted) < len(self.workload.jobs):
            return
        if not all(queue.get(jid, ("",))[0] == "RUNNING" for jid in submitted.values()):
            self._since = None
            return
        self._since = self._since or time.monotonic()
        if time.monotonic() - self._since < DRAIN_AFTER_S:
            return
        first = submitted[self.workload.jobs[0].name]
        node = run_command(["squeue", "-h", "-j", first, "-o", "%N"], env=self.env).strip()
        if node and "," not in node and "[" not in node:  # one node (a 2-GPU job fits one)
            run_command(["scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=bench-chaos"],
                        env=self.env)
            self.node = node

    def end(self) -> None:
        if self.node:
            run_command(["scontrol", "update", f"NodeName={self.node}", "State=RESUME"], env=self.env)


def _submit_due(workload: Workload, submitted: dict[str, str], elapsed: float, env: dict[str, str],
                tmp: Path) -> None:
    """Submit the workload's jobs whose time has come."""
    for job in workload.jobs:
        if job.name not in submitted and elapsed >= job.at:
            submitted[job.name] = (submit_job(job.launcher, tmp, env, batch=job.batch) if job.launcher
                                   else _sbatch(env, tmp, job.gpus, job.sleep_s))


def _sbatch(env: dict[str, str], cwd: Path, gpus: tuple[int, int], sleep_s: int) -> str:
    out = run_command(["sbatch", "--parsable", f"--elastic={gpus[0]}:{gpus[1]}", "--gres=gpu:1",
                       "--output=/dev/null", "--chdir", str(cwd), "--wrap", f"sleep {sleep_s}"], env=env)
    return out.strip().split(";")[0]


def _judge(env: dict[str, str], tmp: Path, workload: Workload, submitted: dict[str, str],
           fault: _Fault) -> dict[str, Any]:
    mine = set(submitted.values())
    queue = _queue(env)
    stranded_jobs = len(set(queue) & mine)
    orphans = sum(1 for jid, (_, comment) in queue.items() if satellite_token(comment))
    for jid in queue:
        run_command(["scancel", jid], env=env)
    # every record of each job (-D: a requeued job has one per run, and without -D sacct may show
    # an older one); a job is done when one of its runs COMPLETED (a completed job never runs again)
    acct = run_command(["sacct", "-n", "-P", "-X", "-D", "-o", "JobID,State", "-j", ",".join(sorted(mine))],
                       env=env)
    ended: dict[str, set[str]] = {}
    for jid, state in (line.split("|", 1) for line in acct.splitlines() if "|" in line):
        ended.setdefault(jid, set()).add(state.split()[0] if state else "")
    right = {submitted[j.name]: {"COMPLETED", "CANCELLED"} if j.may_drop else {"COMPLETED"}
             for j in workload.jobs if j.name in submitted}
    not_completed = sum(1 for jid in mine if not ended.get(jid, set()) & right[jid])
    logs = "".join(p.read_text(errors="replace") for p in (tmp / "jobs").glob("*.out"))
    mismatches, duplicates, lost = 0, logs.count("refused order"), set()
    store = Store(tmp / "s.db", read_only=True)
    try:
        sats = store.satellites(include_ended=True)
        for job in workload.jobs:
            if job.launcher is None or job.name not in submitted:
                continue
            jid = submitted[job.name]
            ends = [r for r in store.progress_of(jid) if r.kind == "end"]
            mismatches += not (ends and ends[-1].samples == job.launcher.epochs * job.launcher.dataset_size)
            workers = [w for s in sats if sats[s] == jid for w in _satellite_workers(store, jid, s)]
            duplicates += len(workers) - len(set(workers))
            lost |= store.lost_workers(jid)
        actions = store.actions_between(*fault.ctld_down) if fault.ctld_down else []
        after = [r.t for r in store.rounds(since=fault.ctld_down[1])] if fault.ctld_down else []
    finally:
        store.close()
    busy = _busy_nodes(env) if not queue else set()
    judged: dict[str, Any] = {
        "jobs_lost": not_completed, "duplicate_actions": duplicates, "orphan_satellites": orphans,
        "stranded_nodes": len(busy), "stranded_jobs": stranded_jobs,
        "sample_mismatches": mismatches, "actions_while_ctld_down": len(actions),
        "lost_workers_unnoticed": int(bool(fault.killed) and fault.killed not in lost)}
    if fault.ctld_down:
        judged["recovery_s"] = round(min(after) - fault.ctld_down[1], 2) if after else None
    if fault.killed:
        judged["killed_worker"] = fault.killed
    return judged


def _busy_nodes(env: dict[str, str], settle_s: float = NODE_SETTLE_S) -> set[str]:
    """The nodes not idle once the queue is empty, after :data:`NODE_SETTLE_S` seconds for the last
    job's epilog and a resumed node to show idle."""
    deadline = time.monotonic() + settle_s
    while True:
        nodes = run_command(["sinfo", "-h", "-N", "-o", "%N|%T"], env=env)
        busy = {n for n, state in (line.split("|", 1) for line in nodes.splitlines() if "|" in line)
                if state.strip().lower() != "idle"}
        if not busy or time.monotonic() >= deadline:
            return busy
        time.sleep(1.0)


def _satellite_workers(store: Store, job: str, sat: str) -> list[str]:
    return [w for w, (_, alloc) in store.workers_of(job).items() if alloc == sat]
