"""The rehearsal's driver: the user's command as N local workers, and the daemon's role around them.

This module owns the processes of a rehearsal. It hosts the job's TCPStore, starts each worker as a
subprocess (an argv list, never a shell; each in a session of its own, so a signal reaches the
worker and its ``DataLoader`` processes, as Slurm signals every process of a task), publishes signed
resize orders as the daemon does (``slurm_elastic_launcher.orders``), kills a worker or requeues the
job as the sequence says, and waits for each step of it with a bound. Every worker is killed when it
ends, however it ends (Ctrl-C included). It judges nothing: it returns what happened
(:class:`RunRecord`), and :mod:`.checks` reads the verdicts from it and the event logs.

Like ``tests/launcher/harness.py`` (whose approach it copies), it imports the launcher's public
pieces and torch, lazily, when a rehearsal starts.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurm_elastic.errors import ElasticError
from slurm_elastic.rehearse.sequence import Action, Sequence

PROBE = Path(__file__).with_name("probe.py")
"""The probe each worker runs the script under (:mod:`.probe`), when the command is ``python SCRIPT``."""

JOB_ID = "rehearsal"


class RehearsalError(ElasticError):
    """The rehearsal could not go on (a worker failed, a wait ran out); the message says where."""


@dataclass
class Options:
    """How to rehearse.

    Attributes:
        timeout_s: the longest wait for any one phase (a start, an action taking effect, the end), seconds.
        settle_steps: steps every worker must train in a new world before the next action.
        pace_s: least seconds per step, slept by the probe before each step boundary (0: none).
        seed: the sampler's seed (``SLURM_ELASTIC_SEED``).
        device: ``cpu`` (no GPU is visible to the workers) or ``gpu`` (the local GPUs).
        group_timeout_s: ``SLURM_ELASTIC_GROUP_TIMEOUT_S`` (how soon a lost worker is declared).
        cpus_per_task: ``SLURM_CPUS_PER_TASK`` and ``OMP_NUM_THREADS`` of each worker, as in a job of
            ``slurm-elastic submit --cpus-per-task`` (None: unset, as Slurm leaves it without).
    """

    timeout_s: float = 120.0
    settle_steps: int = 3
    pace_s: float = 0.0
    seed: int = 0
    device: str = "cpu"
    group_timeout_s: float = 10.0
    cpus_per_task: int | None = None


@dataclass
class Worker:
    """One worker process of the rehearsal."""

    id: str
    run: int
    proc: subprocess.Popen[bytes]
    log: Path
    out: Path
    probe: Path
    joiner: bool
    signalled: str = ""  # "kill" or "term": what the driver sent it

    @property
    def key(self) -> str:
        """Unique over the rehearsal: ``r<run>.<id>``."""
        return f"r{self.run}.{self.id}"


@dataclass
class ActionRecord:
    """What the driver did for one action, and what it waited for.

    Attributes:
        action: the sequence's action.
        run: the job's run it happened in.
        seq: the resize order's number (grow, shrink), else 0.
        t: when the driver acted (seconds since the epoch).
        before: the members before it, rank order.
        after: the members after it (for a requeue: the new run's).
        gen_before: the generation before it.
        gen_after: the generation trained in after it (empty if it never came).
        done: the action took effect and every member trained ``settle_steps`` after it.
    """

    action: Action
    run: int
    seq: int
    t: float
    before: tuple[str, ...]
    after: tuple[str, ...]
    gen_before: str
    gen_after: str = ""
    done: bool = False


@dataclass
class RunRecord:
    """Everything a rehearsal (or its fixed-size baseline) did.

    Attributes:
        workers: every worker started, by :attr:`Worker.key`.
        actions: one record per action attempted.
        failure: why it stopped early, or empty.
        ended: the last run's members all exited.
        reports: the progress report files, one per run.
        checkpoint: the launcher's checkpoint path (``SLURM_ELASTIC_CHECKPOINT``).
        probed: the workers ran under the probe.
        wall_s: seconds from the first start to the end.
    """

    workers: dict[str, Worker] = field(default_factory=dict)
    actions: list[ActionRecord] = field(default_factory=list)
    failure: str = ""
    ended: bool = False
    reports: list[Path] = field(default_factory=list)
    checkpoint: Path = Path()
    probed: bool = False
    wall_s: float = 0.0


def probed_command(command: list[str]) -> list[str] | None:
    """``command`` run under :data:`PROBE`, when it is ``PYTHON SCRIPT.py ...`` or ``PYTHON -m MODULE ...``
    (``PYTHON``'s name starts with ``python``); None for any other command."""
    if len(command) < 2 or not Path(command[0]).name.startswith("python"):
        return None
    if (command[1] == "-m" and len(command) > 2) or command[1].endswith(".py"):
        return [command[0], str(PROBE), *command[1:]]
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out: list[dict[str, Any]] = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            break  # a line being written
        if isinstance(rec, dict):
            out.append(rec)
    return out


class Job:
    """The store, the workers and the orders of one rehearsal (or baseline) in ``work``.

    Args:
        command: the user's command, an argv list.
        work: the folder for the event logs, outputs, reports and checkpoint (created).
        options: see :class:`Options`.
    """

    def __init__(self, command: list[str], work: Path, options: Options) -> None:
        from slurm_elastic_launcher.signed_store import SignedStore, make_store
        from slurm_elastic_launcher.torch_backend import TorchBackend

        self.command = probed_command(command) or list(command)
        self.work = work
        self.options = options
        work.mkdir(parents=True, exist_ok=True)
        self.secret = secrets.token_hex(16)
        self.port = _free_port()
        self.store = make_store("127.0.0.1", self.port, serve=True)
        self.kv = TorchBackend(SignedStore(self.store, JOB_ID, self.secret.encode()), options.group_timeout_s)
        self.record = RunRecord(probed=self.command[1:2] == [str(PROBE)], checkpoint=work / "launcher.ckpt")
        self.seq = 0
        self.run = 0
        self.t0 = time.time()
        self._gpus = 0
        if options.device == "gpu":
            import torch

            self._gpus = torch.cuda.device_count()

    # -- processes ------------------------------------------------------------------------------
    def environ(self, worker: str, workers: list[str] | None, slot: int, most: int,
                task: tuple[int, int] = (0, 1)) -> dict[str, str]:
        """A worker's environment: this one's, less Slurm's own variables (a rehearsal runs outside
        Slurm, even from inside an allocation), plus srun's task variables as in a job of
        ``slurm-elastic submit`` (:func:`srun_task_variables`; ``task`` is the worker's task index and
        the task count of its srun) and the launcher's."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        gpus = 0 if self.options.device == "cpu" else self._gpus
        env.update(srun_task_variables(task[0], task[1], gpus, self.options.cpus_per_task))
        env.update(
            SLURM_ELASTIC_JOB_ID=JOB_ID,
            SLURM_ELASTIC_SECRET=self.secret,
            SLURM_ELASTIC_WORKER_ID=worker,
            SLURM_ELASTIC_WORKERS=",".join(workers or []),
            SLURM_ELASTIC_JOIN="0" if workers else "1",
            SLURM_ELASTIC_STORE_HOST="127.0.0.1",
            SLURM_ELASTIC_STORE_PORT=str(self.port),
            SLURM_ELASTIC_SEED=str(self.options.seed),
            SLURM_ELASTIC_GROUP_TIMEOUT_S=str(self.options.group_timeout_s),
            SLURM_ELASTIC_JOIN_TIMEOUT_S=str(max(60.0, self.options.timeout_s * 10)),
            SLURM_ELASTIC_EVENT_LOG=str(self.work / f"r{self.run}.{worker}.jsonl"),
            SLURM_ELASTIC_LOG_INDICES="1",
            SLURM_ELASTIC_CHECKPOINT=str(self.record.checkpoint),
            SLURM_ELASTIC_REPORTS=str(self.work / f"r{self.run}.reports"),
            SLURM_ELASTIC_REPORT_EVERY_S="0.001",
            SLURM_ELASTIC_REHEARSE_PROBE=str(self.work / f"r{self.run}.{worker}.probe"),
            SLURM_ELASTIC_REHEARSE_PACE_S=str(self.options.pace_s),
            GLOO_SOCKET_IFNAME="lo",
            PYTHONUNBUFFERED="1",
        )
        if self.run:
            env["SLURM_RESTART_COUNT"] = str(self.run)
        if self.options.device == "cpu" or self._gpus == 0:
            env["CUDA_VISIBLE_DEVICES"] = ""
            env["SLURM_ELASTIC_DIST_BACKEND"] = "gloo"
        else:
            env["LOCAL_RANK"] = str(slot)
            if most > self._gpus:  # workers share GPUs: only gloo allows it
                env["SLURM_ELASTIC_DIST_BACKEND"] = "gloo"
        return env

    def spawn(self, worker: str, workers: list[str] | None, slot: int, most: int,
              task: tuple[int, int] | None = None) -> Worker:
        """Start one worker (an initial one if ``workers`` lists the world, else a joiner); ``task``:
        its srun task index and count (an initial worker's default: its rank in ``workers``)."""
        if task is None:
            task = (workers.index(worker), len(workers)) if workers else (0, 1)
        out = self.work / f"r{self.run}.{worker}.out"
        with open(out, "ab") as sink:
            proc = subprocess.Popen(self.command, env=self.environ(worker, workers, slot, most, task), stdout=sink,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        rec = Worker(worker, self.run, proc, self.work / f"r{self.run}.{worker}.jsonl", out,
                     self.work / f"r{self.run}.{worker}.probe", joiner=workers is None)
        self.record.workers[rec.key] = rec
        reports = self.work / f"r{self.run}.reports"
        if reports not in self.record.reports:
            self.record.reports.append(reports)
        return rec

    def signal(self, worker: Worker, sig: int) -> None:
        """Send ``sig`` to the worker and every process of its session (its DataLoader workers)."""
        worker.signalled = "kill" if sig == signal.SIGKILL else "term"
        with contextlib.suppress(ProcessLookupError):
            os.killpg(worker.proc.pid, sig)

    def order(self, kind: str, workers: list[str]) -> int:
        """Publish the next signed order of this run; its number."""
        from slurm_elastic_launcher.order_sources import StoreOrderSource
        from slurm_elastic_launcher.orders import Order

        self.seq += 1
        order = Order(JOB_ID, self.seq, kind, tuple(workers), 0, run=self.run).signed(self.secret.encode())
        StoreOrderSource.publish(self.kv, order)
        return self.seq

    def close(self) -> None:
        """Kill every worker still running (and its session), and wait for each."""
        for w in self.record.workers.values():
            if w.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(w.proc.pid, signal.SIGKILL)
        for w in self.record.workers.values():
            try:
                w.proc.wait(10)
            except subprocess.TimeoutExpired:
                w.proc.kill()
        self.record.wall_s = round(time.time() - self.t0, 2)

    # -- reading --------------------------------------------------------------------------------
    def events(self, worker: Worker) -> list[dict[str, Any]]:
        """The worker's event log so far."""
        return _read_jsonl(worker.log)

    def steps_in(self, worker: Worker, gen: str | Callable[[str], bool]) -> int:
        """Steps the worker logged in a generation (a name, or a test of names)."""
        test = gen if callable(gen) else gen.__eq__
        return sum(1 for e in self.events(worker) if e.get("ev") == "step" and test(str(e.get("gen"))))

    def tail(self, worker: Worker, chars: int = 1500) -> str:
        """The end of the worker's output."""
        try:
            return worker.out.read_text(encoding="utf-8", errors="replace")[-chars:]
        except OSError:
            return ""

    def wait_until(self, what: str, pred: Callable[[], bool], training: list[Worker]) -> None:
        """Wait for ``pred``, at most :attr:`Options.timeout_s`.

        Raises:
            RehearsalError: a worker of ``training`` exited first (failed, or the script ended), a
                worker the driver did not signal failed, or the time ran out.
        """
        deadline = time.monotonic() + self.options.timeout_s
        while not pred():
            for w in self.record.workers.values():
                rc = w.proc.poll()
                if rc is None or w.signalled:
                    continue
                if rc != 0:
                    raise RehearsalError(f"worker {w.id} (run {w.run}) exited rc={rc} while waiting for {what}; "
                                         f"its output ends:\n{self.tail(w)}")
                if w in training:
                    raise RehearsalError(f"worker {w.id} (run {w.run}) ended (rc=0) while waiting for {what}: "
                                         "the script finished its training before the sequence did; give it "
                                         "more work (epochs, data) or slow its steps with --pace")
            if time.monotonic() > deadline:
                tails = "\n".join(f"--- {w.id} (run {w.run})\n{self.tail(w, 600)}" for w in training)
                raise RehearsalError(f"timed out after {self.options.timeout_s:g} s waiting for {what}\n{tails}")
            time.sleep(0.05)


def rehearse(command: list[str], sequence: Sequence, work: Path, options: Options) -> RunRecord:
    """Run ``command`` through ``sequence``, then to its end; what happened (never raises for a
    failing script: :attr:`RunRecord.failure` says why it stopped).

    Args:
        command: the user's command (argv).
        sequence: the actions (:mod:`.sequence`); a sequence without actions is a fixed-size run.
        work: the folder for logs, reports and the launcher's checkpoint.
        options: see :class:`Options`.
    """
    job = Job(command, work, options)
    most = sequence.most_workers
    try:
        _drive(job, sequence, most)
    except RehearsalError as exc:
        job.record.failure = str(exc)
    finally:
        job.close()
    return job.record


def _joiner_tasks(actions: tuple[Action, ...]) -> list[tuple[int, int]]:
    """The joiners the grows before the next requeue will name, in order, each as its srun task
    index and count: the joiners of one grow are the tasks of one satellite's srun."""
    tasks: list[tuple[int, int]] = []
    for a in actions:
        if a.kind == "requeue":
            break
        if a.kind == "grow":
            tasks += [(k, a.count) for k in range(a.count)]
    return tasks


def srun_task_variables(task: int, tasks: int, gpus: int, cpus_per_task: int | None = None) -> dict[str, str]:
    """What ``srun`` sets for each task of a job that ``slurm-elastic submit`` made, on one node:
    the task's index (``SLURM_PROCID``, ``SLURM_LOCALID``), the step's task and node counts, and the
    node's GPUs (``SLURM_GPUS_ON_NODE``: those the rehearsal gives the workers, 0 on the CPU).
    An initial worker is task k of the job's srun; the joiners of one grow are the tasks of one
    satellite's. ``SLURM_CPUS_PER_TASK`` (and the template's ``OMP_NUM_THREADS``) only with
    ``cpus_per_task``, as Slurm sets it only for a job of ``submit --cpus-per-task``."""
    env = {"SLURM_PROCID": str(task), "SLURM_LOCALID": str(task), "SLURM_NODEID": "0",
           "SLURM_NTASKS": str(tasks), "SLURM_NPROCS": str(tasks), "SLURM_NNODES": "1",
           "SLURM_JOB_NUM_NODES": "1", "SLURM_GPUS_ON_NODE": str(gpus)}
    if cpus_per_task is not None:
        env["SLURM_CPUS_PER_TASK"] = env["OMP_NUM_THREADS"] = str(cpus_per_task)
    return env


def _exited(workers: list[Worker]) -> Callable[[], bool]:
    return lambda: all(w.proc.poll() is not None for w in workers)


def _trained(job: Job, workers: list[Worker], gen: str | Callable[[str], bool]) -> Callable[[], bool]:
    return lambda: all(job.steps_in(w, gen) >= job.options.settle_steps for w in workers)


def _drive(job: Job, sequence: Sequence, most: int) -> None:
    opts = job.options
    names = iter(f"w{k}" for k in range(sequence.start, 10_000))
    workers = [f"w{k}" for k in range(sequence.start)]
    members = [job.spawn(w, workers, k, most) for k, w in enumerate(workers)]
    # Joiners are started ahead (they wait for the order that names them), so a grow costs the
    # script's steps no start-up time; the pause the verdicts give is the switch's, as in a real grow.
    waiting = [job.spawn(next(names), None, sequence.start + k, most, task)
               for k, task in enumerate(_joiner_tasks(sequence.actions))]
    gen = "o0"
    job.wait_until(f"{len(members)} workers to train {opts.settle_steps} steps",
                   lambda: all(job.steps_in(w, gen) >= opts.settle_steps for w in members), members)
    for i, action in enumerate(sequence.actions):
        rec = ActionRecord(action, job.run, 0, time.time(), tuple(w.id for w in members), (), gen)
        job.record.actions.append(rec)
        if action.kind == "grow":
            joiners, waiting = waiting[:action.count], waiting[action.count:]
            members = members + joiners
            rec.seq = job.order("resize", [w.id for w in members])
            gen = f"o{rec.seq}"
        elif action.kind == "shrink":
            leaving, members = members[action.after:], members[:action.after]
            rec.seq = job.order("resize", [w.id for w in members])
            gen = f"o{rec.seq}"
            job.wait_until(f"{action.label}: the leavers to exit", _exited(leaving), members)
        elif action.kind == "kill":
            victim, members = members[-1], members[:-1]
            rec.t = time.time()
            job.signal(victim, signal.SIGKILL)
            gen = f"{gen}.r"
        else:  # requeue: Slurm's SIGTERM to every process of every task, then a new run of as many
            rec.t = time.time()
            for w in members:
                job.signal(w, signal.SIGTERM)
            for w in waiting:  # joiners of this run that no order named (none, if the sequence is whole)
                job.signal(w, signal.SIGKILL)
            stopping = list(members)
            job.wait_until(f"{action.label}: every worker to stop at a step boundary",
                           _exited(stopping), [])
            bad = {w.id: w.proc.returncode for w in stopping if w.proc.returncode != 0}
            if bad:
                raise RehearsalError(f"{action.label}: workers exited with {bad} on SIGTERM (0 expected: a stop at "
                                     "the next step boundary, with a checkpoint)")
            job.run += 1
            workers = [f"w{k}" for k in range(action.after)]
            names = iter(f"w{k}" for k in range(action.after, 10_000))
            members = [job.spawn(w, workers, k, most) for k, w in enumerate(workers)]
            waiting = [job.spawn(next(names), None, action.after + k, most, task)
                       for k, task in enumerate(_joiner_tasks(sequence.actions[i + 1:]))]
            gen = ""
        rec.after = tuple(w.id for w in members)
        current = list(members)
        if gen:
            job.wait_until(f"{action.label}: {opts.settle_steps} steps of every worker in the new world",
                           _trained(job, current, gen), current)
        else:
            job.wait_until(f"{action.label}: {opts.settle_steps} steps of every worker after the restart",
                           _trained(job, current, lambda g: g.startswith("resume")), current)
            gen = next(str(e["gen"]) for e in job.events(current[0]) if e.get("ev") == "formed")
        rec.gen_after = gen
        rec.done = True
    final = list(members)
    job.wait_until("the script to finish its training", _exited(final), [])
    for w in waiting:
        job.signal(w, signal.SIGKILL)
    job.record.ended = True


def fixed_size(command: list[str], workers: int, work: Path, options: Options) -> RunRecord:
    """The baseline: ``command`` at ``workers`` workers from start to end, no action."""
    return rehearse(command, Sequence(workers, (), str(workers)), work, options)

