"""The Slurm actuator: core actions carried out with Slurm's commands, journaled before and after.

This module owns what the daemon does to Slurm, found by experiment on 22.05 (docs/slurm-acting.md).
For every job:

* **START** a pending elastic job (held by ``job_submit.lua`` for a few seconds) at a size:
  ``scontrol update JobId=J NumNodes=N-N TresPerNode=gres:gpu:G NodeList=<nodes>`` then
  ``scontrol update JobId=J StartTime=now``. Slurm gives the same GPU count on every node of a
  job, so an unequal placement starts at the largest equal shape inside it (``N`` nodes x the
  smallest count); the next round sees the difference.
* **DROP** (the IBM autoscaler's drop mode): ``scancel J`` (and its satellites).
* **PREEMPT**: ``scontrol requeue J``; the job waits again and a later round starts it.

For a job that runs the launcher (its comment names an order channel, :mod:`slurm_elastic.orders`),
resizes happen in place, without a restart:

* **GROW**: one satellite allocation per node with new GPUs, submitted as the job's user with the
  job's own join script (:mod:`slurm_elastic.slurm.satellites`), then a signed order naming the
  new world; the old workers keep training until the joiners are ready.
* **SHRINK**: the workers on the GPUs to free are ordered out (a step boundary); once every
  leaver reported it left the group (plus ``EXIT_GRACE_S`` for its process to exit; without such
  reports ``SWITCH_GRACE_S`` after the job reports training in its new world; at most
  ``RELEASE_TIMEOUT_S`` after the order), Slurm is told: ``scontrol update JobId=J NodeList=<kept
  nodes>`` when the job's own allocation loses nodes (a durable, deferred release done by
  :meth:`SlurmActuator.tend`, so the daemon never blocks and a killed leaver never fails the
  job); satellites whose workers all left end by themselves.
* **REBATCH**: an order with the same workers and the new batch (only for jobs that declared a
  batch range; others keep their own batch policy).

For a job without the launcher, any resize (GROW, SHRINK, MOVE) is the checkpoint-restart
fallback: ``scontrol requeuehold J`` (then wait until ``squeue`` shows it PENDING),
``scontrol update JobId=J NumNodes=N-N TresPerNode=... NodeList=...``,
``scontrol release J``, ``scontrol update JobId=J StartTime=now`` (the job restarts from its own
checkpoint). MOVE of a launcher job is refused (the planner sees the reason next round). The
release waits ``CREDENTIAL_WAIT_S`` after the job is back in the queue: slurmd revokes the job's
credential when it kills the old run and refuses a launch whose credential was made in the same
second ("Job credential revoked", the job then FAILS); one second later it reissues it (seen on
Slurm 22.05, in 5 of 6 immediate restarts).

Each action is written to the store before its first command and again after its last, so a
daemon that dies in between finds it on restart (:func:`reconcile`). Commands are argv lists run
through an injected runner; no shell. Owed work is done at every poll of the daemon, between
rounds too (:meth:`SlurmActuator.tend`): node releases that fell due, and satellites (one whose
job ended is cancelled, one that did not start in time is cancelled and its workers are taken out
of the job's order). This is the only module that changes Slurm.
"""

from __future__ import annotations

import getpass
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence

from slurm_elastic.contract import parse_elastic_request
from slurm_elastic.core.actions import Action, ActionKind
from slurm_elastic.core.model import ClusterSnapshot, JobState, Placement
from slurm_elastic.core.rounds import ActionOutcome
from slurm_elastic.errors import ElasticError
from slurm_elastic.observe.progress import finished_training
from slurm_elastic.orders import Channel, ChannelError, NoChannel
from slurm_elastic.slurm.records import JobRecord
from slurm_elastic.slurm.satellites import (
    NotExpressible,
    as_user,
    client_settings,
    initial_workers,
    leaving,
    mark_argv,
    new_satellites,
    sbatch_argv,
)
from slurm_elastic.store import Store

log = logging.getLogger(__name__)

Runner = Callable[[Sequence[str]], str]
NEEDS_LAUNCHER = "needs the in-job launcher"
SATELLITE_START_TIMEOUT_S = 120.0
EXIT_GRACE_S = 3.0
SWITCH_GRACE_S = 20.0
RELEASE_TIMEOUT_S = 60.0
REQUEUE_WAIT_S = 30.0
CREDENTIAL_WAIT_S = 1.1

__all__ = ["NotExpressible", "SlurmActuator", "commands", "reconcile"]


def _shape(jid: str, after: Placement) -> list[str]:
    counts = {node: len(gpus) for node, gpus in after.slots}
    if not counts:
        raise NotExpressible(f"job {jid}: no GPUs in the target placement")
    nodes = sorted(counts)
    return [f"NumNodes={len(nodes)}-{len(nodes)}", f"TresPerNode=gres:gpu:{min(counts.values())}",
            f"NodeList={','.join(nodes)}"]


def commands(snapshot: ClusterSnapshot, action: Action) -> list[list[str]]:
    """The argv lists that carry out ``action`` on a job *without* the launcher (pure).

    Raises:
        NotExpressible: Slurm cannot do it for such a job.
    """
    jid = action.job_id
    kind = action.kind
    if kind is ActionKind.DROP:
        return [["scancel", jid]]
    if kind is ActionKind.PREEMPT:
        return [["scontrol", "requeue", jid]]
    if kind is ActionKind.START:
        if snapshot.job(jid).state is not JobState.PENDING:
            raise NotExpressible(f"job {jid} is {snapshot.job(jid).state.value}: only a waiting job can be started")
        return [["scontrol", "update", f"JobId={jid}", *_shape(jid, action.after)],
                ["scontrol", "update", f"JobId={jid}", "StartTime=now"]]
    if kind in (ActionKind.GROW, ActionKind.SHRINK, ActionKind.MOVE):
        return [["scontrol", "requeuehold", jid],
                ["scontrol", "update", f"JobId={jid}", *_shape(jid, action.after)],
                ["scontrol", "release", jid],
                ["scontrol", "update", f"JobId={jid}", "StartTime=now"]]
    raise NotExpressible(f"job {jid}: {kind.value} {NEEDS_LAUNCHER} (a restart only to change the batch is refused)")


class SlurmActuator:
    """Carries out actions on Slurm, journaling each one (the daemon's acting mode).

    Args:
        runner: runs one command (argv), returns stdout, raises on failure.
        store: the action journal, and the jobs' workers and satellites.
        clock: seconds since the epoch.
        records: the raw Slurm records of the last observation, by job id (satellites not folded).
        me: the user the daemon runs as (satellites of other users' jobs go through ``setpriv``).
        client_env: the environment ``runner`` runs Slurm commands with (``None``: this process's);
            a satellite's sbatch keeps only its Slurm client settings (:func:`client_settings`).
        sleep: waits that many seconds (the requeue path's polls).
    """

    def __init__(self, runner: Runner, store: Store, clock: Callable[[], float],
                 records: Callable[[], Mapping[str, JobRecord]] | None = None, me: str = "",
                 sleep: Callable[[float], None] = time.sleep, client_env: Mapping[str, str] | None = None) -> None:
        self.runner, self.store, self.clock, self.sleep = runner, store, clock, sleep
        self.client = client_settings(os.environ if client_env is None else client_env)
        self.records: Callable[[], Mapping[str, JobRecord]] = records or dict
        self.me = me or getpass.getuser()

    def apply(self, snapshot: ClusterSnapshot, actions: tuple[Action, ...]) -> tuple[ActionOutcome, ...]:
        """Carry out each action; one failure never stops the others."""
        out: list[ActionOutcome] = []
        records = self.records()
        for a in actions:
            aid = self.store.begin_action(a, self.clock())
            try:
                note = self._carry_out(snapshot, a, records.get(a.job_id))
            except Exception as exc:  # one job's action, whatever it met, never stops the others'
                reason = str(exc) if isinstance(exc, ElasticError) else f"failed: {type(exc).__name__}: {exc}"
                if isinstance(exc, ElasticError):
                    log.warning("%s job %s refused: %s", a.kind.value, a.job_id, reason)
                else:
                    log.exception("%s job %s %s", a.kind.value, a.job_id, reason)
                self.store.finish_action(aid, False, self.clock(), reason)
                out.append(ActionOutcome(a, False, reason))
                continue
            log.info("%s job %s: %d -> %d GPUs%s", a.kind.value, a.job_id, a.before.num_gpus, a.after.num_gpus,
                     f" ({note})" if note else "")
            self.store.finish_action(aid, True, self.clock(), note)
            out.append(ActionOutcome(a, True, note))
        return tuple(out)

    def _carry_out(self, snapshot: ClusterSnapshot, a: Action, rec: JobRecord | None) -> str:
        channel = self._channel(rec) if a.kind in (ActionKind.GROW, ActionKind.SHRINK, ActionKind.REBATCH,
                                                   ActionKind.MOVE) else None
        if channel is None or rec is None:
            for argv in commands(snapshot, a):
                self.runner(argv)
                if argv[:2] == ["scontrol", "requeuehold"]:
                    self._wait_requeued(a.job_id)
            if a.kind is ActionKind.DROP:
                self._cancel_satellites(a.job_id)
            return "requeued at the new size" if a.kind in (ActionKind.GROW, ActionKind.SHRINK, ActionKind.MOVE) else ""
        if finished_training(self.store.progress_of(a.job_id)):
            return "nothing done: the job finished training, its workers are exiting"
        if a.kind is ActionKind.GROW:
            return self._grow(a, rec, channel)
        if a.kind is ActionKind.SHRINK:
            return self._shrink(a, rec, channel)
        if a.kind is ActionKind.REBATCH:
            batch = self._batch(a, rec)
            if not batch:
                return "nothing sent: the job declared no batch range, it keeps its own batch policy"
            seq = channel.send("resize", channel.workers(self._initial(rec, channel)), batch)
            return f"order {seq}"
        raise NotExpressible(f"job {a.job_id}: moving a launcher job is a shrink then a grow; plan them apart")

    def _wait_requeued(self, jid: str) -> None:
        """Wait until a requeued job is back in the queue (``squeue -h -j J -o %T`` shows PENDING),
        then ``CREDENTIAL_WAIT_S`` more (module docstring).

        Its update, release and start are ignored while it is still COMPLETING.
        """
        deadline = time.monotonic() + REQUEUE_WAIT_S
        while (state := self.runner(["squeue", "-h", "-j", jid, "-o", "%T"]).strip()) != "PENDING":
            if time.monotonic() > deadline:
                raise NotExpressible(f"job {jid}: still {state or 'gone'} {REQUEUE_WAIT_S:.0f} s after requeuehold")
            self.sleep(0.2)
        self.sleep(CREDENTIAL_WAIT_S)

    # -- launcher jobs ----------------------------------------------------------------------------

    def _channel(self, rec: JobRecord | None) -> Channel | None:
        """The job's order channel; ``None`` for a job that never had the launcher.

        Raises:
            NotExpressible: the job was submitted for the launcher but its channel breaks a rule or
                cannot be read now: it is not resized at all (never requeued in its stead).
        """
        if rec is None or not rec.comment:
            return None
        try:
            return Channel.open(rec.job_id, rec.user, rec.comment)
        except NoChannel:
            return None
        except ChannelError as exc:
            raise NotExpressible(f"{exc}: its launcher cannot be reached, so it is not resized "
                                 "(a launcher job is never requeued instead)") from None

    def _initial(self, rec: JobRecord, channel: Channel) -> list[str]:
        """The job's initial worker ids; records the worker layout the first time it is needed."""
        layout = self.store.workers_of(rec.job_id)
        if not layout:
            if channel.history():
                raise NotExpressible(f"job {rec.job_id}: orders were sent but its workers' nodes are unknown")
            self.store.add_workers(rec.job_id, initial_workers(rec))
            layout = self.store.workers_of(rec.job_id)
        return sorted((w for w, (_, alloc) in layout.items() if alloc == rec.job_id), key=lambda w: int(w[1:]))

    def _batch(self, a: Action, rec: JobRecord) -> int:
        """The batch an order carries: 0 (keep the job's policy) unless the job declared a batch range."""
        req = parse_elastic_request(rec.admin_comment, job_id=rec.job_id)
        if req is None or req.min_batch is None:
            return 0
        return a.global_batch if req.mode.value == "endo" else a.local_batch * a.accumulation

    def _grow(self, a: Action, rec: JobRecord, channel: Channel) -> str:
        try:
            script = channel.join_script()
        except ChannelError as exc:
            raise NotExpressible(f"job {a.job_id}: cannot grow in place: {exc}") from exc
        current = channel.workers(self._initial(rec, channel))
        sats = new_satellites(a.before, a.after, self.store.workers_of(a.job_id))
        joiners = [w for sat in sats for w in sat.workers]
        # The order first: the job keeps training until the joiners are ready, so a daemon that dies
        # before the satellites are submitted leaves no allocation behind, only an order a later
        # one supersedes.
        seq = channel.send("resize", [*current, *joiners], self._batch(a, rec))
        submitted: list[str] = []
        try:
            for sat in sats:
                out = self.runner(sbatch_argv(rec, sat, script, as_user=as_user(rec.user, self.me), client=self.client))
                sat_id = out.strip().split(";")[0]
                self.store.add_satellite(sat_id, a.job_id, self.clock(), [(w, sat.node) for w in sat.workers])
                submitted.append(sat_id)
                self.runner(mark_argv(sat_id, a.job_id))
        except ElasticError:
            for sat_id in submitted:
                self._cancel(sat_id)
            channel.send("resize", current)  # withdraw the joiners
            raise
        return f"order {seq}; satellites {','.join(submitted)} with workers {','.join(joiners)}"

    def _shrink(self, a: Action, rec: JobRecord, channel: Channel) -> str:
        current = channel.workers(self._initial(rec, channel))
        plan = leaving(rec, current, self.store.workers_of(a.job_id), a.before, a.after)
        stay = [w for w in current if w not in plan.workers]
        seq = channel.send("resize", stay, self._batch(a, rec))
        note = f"order {seq}: {','.join(plan.workers)} leave"
        if tuple(sorted(n for n, _ in rec.gpus)) != plan.parent_nodes:
            self.store.add_release(a.job_id, list(plan.parent_nodes), len(stay), len(plan.workers), self.clock())
            note += f"; the job keeps {','.join(plan.parent_nodes)} once they have left"
        return note + (f"; satellites {','.join(plan.satellites)} end" if plan.satellites else "")

    # -- satellites -------------------------------------------------------------------------------

    def _cancel(self, sat_id: str) -> None:
        try:
            self.runner(["scancel", sat_id])
        except ElasticError as exc:
            log.warning("satellite %s: scancel failed: %s", sat_id, exc)
        self.store.end_satellite(sat_id, self.clock())

    def _cancel_satellites(self, parent: str) -> None:
        for sat_id, p in self.store.satellites().items():
            if p == parent:
                self._cancel(sat_id)

    def _release(self, records: Mapping[str, JobRecord], now: float) -> list[str]:
        """Give Slurm back the nodes of finished shrinks (see the module docstring)."""
        lines = []
        for r in self.store.releases():
            jid = r["job_id"]
            rec = records.get(jid)
            if rec is None or rec.state is not JobState.RUNNING:
                self.store.drop_release(jid)
                continue
            rows = [p for p in self.store.progress_of(jid) if p.t >= r["ordered"]]
            left = [p.t for p in rows if p.kind == "left"]
            switched = [p.t for p in rows if p.kind in ("resize", "progress") and p.world == r["world"]]
            due = ((len(left) >= r["leaving"] and now >= max(left) + EXIT_GRACE_S)
                   or (switched and now >= switched[0] + SWITCH_GRACE_S)
                   or now - r["ordered"] >= RELEASE_TIMEOUT_S)
            if not due:
                continue
            try:
                self.runner(["scontrol", "update", f"JobId={jid}", f"NodeList={','.join(r['nodes'])}"])
                lines.append(f"job {jid} released its other nodes: keeps {','.join(r['nodes'])}")
            except ElasticError as exc:
                lines.append(f"job {jid}: releasing nodes failed: {exc}")
            self.store.drop_release(jid)
        return lines

    def tend(self) -> list[str]:
        """Settle releases and satellites by what the last observation shows; one line per change.

        A shrink's node release is done once the job trains in its new world (see the module
        docstring).
        A satellite gone from the queue is recorded as ended; one whose job is gone or not
        running is cancelled; one still waiting after ``SATELLITE_START_TIMEOUT_S`` is cancelled
        and its workers are taken out of its job's world by a new order (the latest order wins).
        """
        records = self.records()
        now = self.clock()
        lines = self._release(records, now)
        submitted = self.store.satellite_times()
        for sat_id, parent in self.store.satellites().items():
            sat, job = records.get(sat_id), records.get(parent)
            if sat is None or sat.state is JobState.FINISHED:
                self.store.end_satellite(sat_id, now)
                lines.append(f"satellite {sat_id} of job {parent} ended")
            elif job is None or job.state is not JobState.RUNNING:
                self._cancel(sat_id)
                lines.append(f"satellite {sat_id} cancelled: job {parent} is not running")
            elif sat.state is JobState.PENDING and now - submitted.get(sat_id, now) > SATELLITE_START_TIMEOUT_S:
                self._cancel(sat_id)
                lines.append(f"satellite {sat_id} of job {parent} did not start in "
                             f"{SATELLITE_START_TIMEOUT_S:.0f} s: cancelled, " + self._withdraw(job, sat_id))
        return lines

    def _withdraw(self, job: JobRecord, sat_id: str) -> str:
        """Order a satellite's workers out of its job's world (the latest order wins); what was done."""
        try:
            channel = self._channel(job)
            if channel is None:
                return "the job has no launcher"
            gone = {w for w, (_, alloc) in self.store.workers_of(job.job_id).items() if alloc == sat_id}
            current = channel.workers(self._initial(job, channel))
            if gone & set(current):
                channel.send("resize", [w for w in current if w not in gone])
        except ElasticError as exc:
            return f"its workers could not be withdrawn: {exc}"
        return "its workers withdrawn"


    def reconcile(self, snapshot: ClusterSnapshot) -> list[str]:
        """Settle the journal's unfinished actions by ``snapshot`` (:func:`reconcile`); one line each."""
        return reconcile(self.store, snapshot, self.clock)


def reconcile(store: Store, snapshot: ClusterSnapshot, clock: Callable[[], float]) -> list[str]:
    """Settle actions a previous daemon began and never finished, by what Slurm shows now.

    A START or a resize counts as done when the job runs at the target GPU count, a PREEMPT when
    it waits, a DROP when the job is gone; otherwise the action is recorded as failed (the next
    round plans again from what really is). Nothing is re-executed blindly.

    Returns:
        One line per settled action.
    """
    jobs = {j.job_id: j for j in snapshot.jobs}
    lines = []
    for entry in store.unfinished_actions():
        a = entry.action
        job = jobs.get(a.job_id)
        if a.kind is ActionKind.DROP:
            ok = job is None
        elif a.kind is ActionKind.PREEMPT:
            ok = job is not None and job.state is JobState.PENDING
        else:
            ok = job is not None and job.state is JobState.RUNNING and job.num_gpus == a.after.num_gpus
        msg = "found done after a restart" if ok else "found not done after a restart"
        store.finish_action(entry.id, ok, clock(), msg)
        lines.append(f"{a.kind.value} job {a.job_id}: {msg}")
    return lines
