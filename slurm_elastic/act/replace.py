"""Lost workers started again in place: the idle GPU of a node that keeps others gets a new worker.

This module owns what becomes of a lost worker's GPU that Slurm cannot free (docs/slurm-acting.md:
the batch host, a node with other workers of the job, a satellite with other workers). After
:func:`~slurm_elastic.act.shrink.give_back_lost` ordered the lost workers out,
:meth:`Replacements.replace` plans the replacements (:mod:`slurm_elastic.slurm.replacements`),
records each new worker's node, writes one signed order naming the survivors and the new workers
(joiners, as a grow's: the survivors keep training until they are ready), and starts each new
worker as a one-task ``srun --overlap`` step of the allocation that holds the idle GPU, as the
job's user, detached (its own session: the daemon never waits for it, and a daemon that dies or
restarts leaves it running). It is journaled as a GROW whose placement does not change, steps
``replace:order`` and ``replace:srun`` (``started`` noted after each), so a restarted daemon
(:func:`settle`) keeps the joiners whose srun was journaled and withdraws the others.

A new worker that has not joined within :data:`JOIN_TIMEOUT_S` of its order, or whose srun ended
before it joined, is withdrawn from the job's order at a later poll (:meth:`Replacements.tend`),
and its srun, if this daemon started it, is stopped; its GPU then stays idle, as before (it is
tried once). A job whose join script predates ``--replace`` (rendered by an older slurm-elastic),
or that has no saved environment, is not replaced: the line says why.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, Protocol

from slurm_elastic.act.context import Hands
from slurm_elastic.act.launcher import withdraw
from slurm_elastic.channel import Channel, ChannelError
from slurm_elastic.core.actions import Action, ActionKind
from slurm_elastic.core.model import JobState
from slurm_elastic.errors import ElasticError
from slurm_elastic.slurm.records import JobRecord
from slurm_elastic.slurm.replacements import (
    JOIN_MARKER,
    Replacement,
    as_user_keeping_env,
    journaled_argv,
    plan,
    srun_argv,
    srun_path,
    step_env,
)
from slurm_elastic.slurm.satellites import NotExpressible, env_file, read_env_file
from slurm_elastic.slurm.steps import Steps

log = logging.getLogger(__name__)

JOIN_TIMEOUT_S = 180.0
"""Seconds a new worker has, from its order, to join the job's world before it is withdrawn (it
imports the training script's modules and warms up first: tens of seconds on a busy node)."""
STEPS_KIND = "replace"
"""The journal's steps are ``replace:order`` and ``replace:srun`` (crash points a test can inject)."""


class Started(Protocol):
    """A started srun, as :class:`subprocess.Popen` is one."""

    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None: ...

    def send_signal(self, sig: int) -> None: ...


Spawn = Callable[[Sequence[str], Mapping[str, str]], Started]
"""Starts one command (argv, never a shell string) with exactly the given environment, detached;
raises :class:`OSError` if it cannot."""


def spawn_detached(argv: Sequence[str], env: Mapping[str, str]) -> Started:
    """Start ``argv`` in its own session, with ``env`` only, no input and its output discarded (the
    step's worker writes to the job's log itself), and none of the daemon's descriptors (the store's
    lock among them: a restarted daemon must get it while the srun runs); it outlives the daemon."""
    return subprocess.Popen(list(argv), env=dict(env), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)


def _replaced(store_details: list[dict[str, Any]], job_id: str, run: int) -> dict[str, str]:
    """New worker id -> the worker it replaced, from this run's journaled replacement orders."""
    return {str(r["worker"]): str(r["lost"]) for d in store_details
            if d.get("job") == job_id and d.get("run") == run for r in d["replaces"]}


def _orders(hands: Hands) -> list[dict[str, Any]]:
    return [d for d in hands.store.step_details("order") if "replaces" in d]


class Replacements:
    """Starts lost workers again in place and withdraws those that never joined (module docstring).

    Args:
        hands: the acting step's means.
        spawn: starts an srun detached (:func:`spawn_detached`; tests pass their own).
    """

    def __init__(self, hands: Hands, spawn: Spawn = spawn_detached) -> None:
        self.hands = hands
        self.spawn = spawn
        self._started: dict[tuple[str, str], Started] = {}  # (job, worker) -> its srun, while it may join
        self._settled: set[tuple[str, str]] = set()  # (job, worker) joined or withdrawn: not looked at again
        self._orders: list[dict[str, Any]] | None = None  # the journaled replacement orders not all settled

    def replace(self, rec: JobRecord, channel: Channel, stay: Sequence[str], gone: Sequence[str],
                freed: Sequence[str], records: Mapping[str, JobRecord]) -> str | None:
        """Start again the lost workers ``gone`` of ``rec`` whose GPU stays idle (``stay``: the
        survivors the job's latest order names; ``freed``: its nodes given back); the line, or
        ``None`` when there is none to replace."""
        hands, jid = self.hands, rec.job_id
        layout = hands.store.workers_of(jid)
        replaced = _replaced(_orders(hands), jid, rec.restart_count)
        held: dict[str, dict[str, int]] = {str(jid): {str(n): len(g) for n, g in rec.gpus}}
        for sat_id, parent in hands.store.satellites().items():
            sat = records.get(sat_id)
            if parent == jid and sat is not None and sat.state is JobState.RUNNING:
                held[sat_id] = {str(n): len(g) for n, g in sat.gpus}
        try:
            todo = plan(jid, stay, gone, layout, replaced, held, freed)
            if not todo:
                return None
            script, env = self._inputs(rec, channel)
            prefix = as_user_keeping_env(rec.user, hands.me)
            srun = srun_path(hands.client)
            argvs = [srun_argv(jid, r, rec.work_dir, script, srun=srun, as_user=prefix) for r in todo]
        except (NotExpressible, ChannelError) as exc:
            return f"job {jid}: lost workers {','.join(gone)} not started again: {exc}"
        return self._start(rec, channel, stay, todo, argvs, script, env)

    def _inputs(self, rec: JobRecord, channel: Channel) -> tuple[str, dict[str, str]]:
        """The join script's text and the step's environment.

        Raises:
            NotExpressible: the script predates ``--replace``, is not text, or the job has no usable
                saved environment.
            ChannelError: the join script breaks a rule.
        """
        data = channel.read_join_script()
        if JOIN_MARKER not in data:
            raise NotExpressible("its join script cannot start a worker in place of a lost one (rendered by an "
                                 "older slurm-elastic submit): the GPU stays idle until the job ends")
        try:
            script = data.decode("utf-8")
        except UnicodeDecodeError:
            raise NotExpressible("its join script is not UTF-8 text") from None
        return script, step_env(read_env_file(rec, env_file(channel.join_path)), self.hands.client)

    def _start(self, rec: JobRecord, channel: Channel, stay: Sequence[str], todo: list[Replacement],
               argvs: list[list[str]], script: str, env: Mapping[str, str]) -> str:
        hands, jid = self.hands, rec.job_id
        store = hands.store
        lost, new = [r.lost for r in todo], [r.worker for r in todo]
        action = Action(ActionKind.GROW, jid, rec.placement, rec.placement,
                        reason=f"workers {','.join(lost)} lost: started again as {','.join(new)}")
        aid = store.begin_action(action, hands.clock())
        steps = Steps(store, aid, STEPS_KIND, hands.clock, hands.crash)
        workers = [*stay, *new]
        try:
            store.add_workers(jid, [(r.worker, r.node, r.alloc) for r in todo], rec.restart_count)
            detail: dict[str, Any] = {"job": jid, "run": rec.restart_count, "t": hands.clock(), "workers": workers,
                                      "replaces": [r.detail() for r in todo]}
            seq = steps.run("order", partial(channel.send, "resize", workers), **detail)
            if self._orders is not None:
                self._orders.append(detail)
        except ElasticError as exc:
            store.finish_action(aid, False, hands.clock(), f"not started again: {exc}")
            return f"job {jid}: lost workers {','.join(lost)} not started again: {exc}"
        failed: list[str] = []
        for r, argv in zip(todo, argvs, strict=True):
            try:
                proc = steps.run("srun", partial(self.spawn, argv, env), worker=r.worker,
                                 argv=journaled_argv(argv, script))
            except OSError as exc:
                log.warning("job %s: srun for %s could not be started: %s", jid, r.worker, exc)
                failed.append(r.worker)
                continue
            steps.note("started", worker=r.worker, pid=proc.pid)
            self._started[(jid, r.worker)] = proc
        placed = ", ".join(f"{r.worker} for {r.lost} on {r.node} slot {r.slot} of {r.alloc}" for r in todo
                           if r.worker not in failed)
        note = f"order {seq}: {placed}" if placed else f"order {seq}"
        if failed:
            note += f"; {','.join(failed)} not started ({withdraw(hands, rec, set(failed))})"
        store.finish_action(aid, len(failed) < len(todo), hands.clock(), note)
        return f"job {jid}: lost workers started again: {note}"

    def tend(self, records: Mapping[str, JobRecord], now: float) -> list[str]:
        """Withdraw the new workers that have not joined within :data:`JOIN_TIMEOUT_S`, or whose srun
        ended before they joined (module docstring); one line per job."""
        if self._orders is None:  # read from the journal once; this daemon alone adds to it since
            self._orders = _orders(self.hands)
        lines = []
        for d in self._orders:
            jid = str(d["job"])
            rec = records.get(jid)
            waiting = [str(r["worker"]) for r in d["replaces"] if (jid, str(r["worker"])) not in self._settled]
            if not waiting:
                continue
            if rec is None or rec.state is not JobState.RUNNING or rec.restart_count != d["run"]:
                self._forget(jid, waiting)
                continue
            if self._joined(jid, float(d["t"]), len(d["workers"])):
                self._forget(jid, waiting)
                continue
            ended = [w for w in waiting if (p := self._started.get((jid, w))) is not None and p.poll() is not None]
            due = waiting if now - float(d["t"]) >= JOIN_TIMEOUT_S else ended
            if due:
                lines.append(self._withdraw(rec, due, "its srun ended" if due == ended else
                                            f"it did not join within {JOIN_TIMEOUT_S:.0f} s"))
        self._orders = [d for d in self._orders
                        if any((str(d["job"]), str(r["worker"])) not in self._settled for r in d["replaces"])]
        return lines

    def _joined(self, jid: str, t: float, world: int) -> bool:
        """The job reported a world of the order's size since the order."""
        return any(r.t >= t and r.kind in ("resize", "progress") and r.world >= world
                   for r in self.hands.store.progress_of(jid))

    def _withdraw(self, rec: JobRecord, workers: list[str], why: str) -> str:
        for w in workers:
            proc = self._started.get((rec.job_id, w))
            if proc is not None and proc.poll() is None:
                with contextlib.suppress(OSError):
                    proc.send_signal(signal.SIGTERM)  # srun ends its step
        self._forget(rec.job_id, workers)
        done = withdraw(self.hands, rec, set(workers))
        return f"job {rec.job_id}: new workers {','.join(workers)} withdrawn ({why}): {done}"

    def _forget(self, jid: str, workers: list[str]) -> None:
        for w in workers:
            self._settled.add((jid, w))
            proc = self._started.pop((jid, w), None)
            if proc is not None:
                proc.poll()  # reaped if it ended


def settle(hands: Hands, a: Action, steps: Sequence[tuple[str, dict[str, Any], float]],
           records: Mapping[str, JobRecord]) -> tuple[bool, str]:
    """A replacement a previous daemon began: the new workers whose srun was journaled are left to
    join (a later :meth:`Replacements.tend` withdraws one that does not), the others are withdrawn
    from the job's order (their srun never ran)."""
    order = next(d for n, d, _ in steps if n == "order")
    new = [str(r["worker"]) for r in order["replaces"]]
    ran = {str(d["worker"]) for n, d, _ in steps if n == "srun"}
    never = [w for w in new if w not in ran]
    job = records.get(a.job_id)
    if not never:
        return True, f"resumed after a restart: new workers {','.join(new)} left to join"
    done = withdraw(hands, job, set(never)) if job is not None else "job gone"
    return bool(ran), (f"undone after a restart: new workers {','.join(never)} never started ({done})"
                       + (f"; {','.join(sorted(ran))} left to join" if ran else ""))

