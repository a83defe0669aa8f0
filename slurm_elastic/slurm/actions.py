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
  new world; the old workers keep training until the joiners are ready. The join script and the
  environment file are read once, checked, before the order, and sbatch gets sealed copies of
  those bytes, never their paths.
* **SHRINK**: the workers on the GPUs to free are ordered out (a step boundary); once every
  leaver reported it left the group (plus ``EXIT_GRACE_S`` for its process to exit; without such
  reports ``SWITCH_GRACE_S`` after the job reports training in its new world; at most
  ``RELEASE_TIMEOUT_S`` after the order), Slurm is told: ``scontrol update JobId=J NodeList=<kept
  nodes>`` when the job's own allocation loses nodes (a durable, deferred release done by
  :meth:`SlurmActuator.tend`, so the daemon never blocks and a killed leaver never fails the
  job); satellites whose workers all left end by themselves. A release still owed when Slurm
  requeued the job and started it again is dropped: the new run's workers started again, on the
  nodes of its new allocation, and the nodes the earlier run kept are not the new run's to keep
  (so are the workers a recovery of an earlier run lost: the new run started them again).
* **REBATCH**: an order with the same workers and the new batch (only for jobs that declared a
  batch range; others keep their own batch policy).

For a job without the launcher, any resize (GROW, SHRINK, MOVE) is the checkpoint-restart
fallback: ``scontrol requeuehold J`` (then wait until ``squeue`` shows it PENDING),
``scontrol update JobId=J NumNodes=N-N TresPerNode=... NodeList=...``,
``scontrol release J``, ``scontrol update JobId=J StartTime=now`` (the job restarts from its own
checkpoint). MOVE of a launcher job is refused: the diff never asks for one (it shrinks such a job off
a draining node first, or leaves it there: :func:`slurm_elastic.core.actions.diff`). The
release waits ``CREDENTIAL_WAIT_S`` after the job is back in the queue: slurmd revokes the job's
credential when it kills the old run and refuses a launch whose credential was made in the same
second ("Job credential revoked", the job then FAILS); one second later it reissues it (seen on
Slurm 22.05, in 5 of 6 immediate restarts).

Each action is written to the store before its first command and again after its last, and each
of its steps (a command, an order, a satellite's submission with its token, the id it produced)
before it runs (:mod:`slurm_elastic.slurm.steps`), so a daemon that dies in between finds it on
restart and resumes or undoes exactly the steps that ran (:meth:`SlurmActuator.reconcile`): a
requeue interrupted after ``requeuehold`` is carried on (the job is never left held); a grow whose
satellites were all submitted (found by id, or in Slurm by their token) adopts them, else it
cancels the ones found and withdraws their workers from the job's order; a shrink whose order
the job holds is done, with its node release owed again if that was not written. Commands are argv lists run
through an injected runner; no shell. Owed work is done at every poll of the daemon, between
rounds too (:meth:`SlurmActuator.tend`): node releases that fell due, and satellites (one whose
job ended is cancelled, one that did not start in time is cancelled and its workers are taken out
of the job's order). This is the only module that changes Slurm.

Commands are bounded so that no job holds the loop (issue 37, item 2). A command run as root on
Slurm's own records (``scontrol``, ``scancel``) has the runner's limit
(:data:`~slurm_elastic.slurm.commands.COMMAND_TIMEOUT_S`). A satellite's sbatch runs as the job's
user, who can stall it (stop their own process, make its working directory hang), so it has
:data:`USER_COMMAND_TIMEOUT_S`, and a grow stops at its first satellite that times out. After such
a timeout the grows of every job of that user are refused at once, without a command, for
:data:`USER_BACKOFF_S` (doubling at each further timeout, at most :data:`USER_BACKOFF_MAX_S`; an
sbatch of theirs that answers ends it): the refusal names the job, the command and until when,
and is journaled and logged like any failed action. Keyed by user, not job: a user with many
jobs stalls the loop once per back-off, not once per job. The other jobs are planned and acted on
meanwhile; a timed-out sbatch that reached slurmctld leaves a satellite carrying its journaled
token, which :meth:`SlurmActuator.tend` cancels as an orphan.
"""

from __future__ import annotations

import contextlib
import getpass
import logging
import os
import secrets
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from functools import partial
from typing import Any

from slurm_elastic.contract import parse_elastic_request, satellite_marker, satellite_token
from slurm_elastic.core.actions import Action, ActionKind
from slurm_elastic.core.model import ClusterSnapshot, Job, JobState, Placement
from slurm_elastic.core.rounds import ActionOutcome
from slurm_elastic.errors import ElasticError
from slurm_elastic.observe.progress import finished_training
from slurm_elastic.orders import Channel, ChannelError, NoChannel
from slurm_elastic.slurm.commands import Command, CommandTimeout, sealed_copy
from slurm_elastic.slurm.records import JobRecord, initial_workers, run_start_of
from slurm_elastic.slurm.satellites import (
    Inputs,
    NotExpressible,
    as_user,
    client_settings,
    env_file,
    leaving,
    mark_argv,
    new_satellites,
    read_env_file,
    sbatch_argv,
)
from slurm_elastic.slurm.steps import Steps, crash_from_env, step_of
from slurm_elastic.store import JournalEntry, ProgressRow, Store

log = logging.getLogger(__name__)

Runner = Callable[[Sequence[str]], str]
NEEDS_LAUNCHER = "needs the in-job launcher"
LEASE_S = 60
"""While the daemon runs it alone starts elastic jobs: every waiting elastic job it plans has its
begin time pushed this many seconds ahead (``StartTime=now+LEASE_S``), renewed when half of it is
left. A daemon that is gone renews nothing, and Slurm starts the job itself when the lease runs out:
the fallback (``job_submit.lua`` holds a new job for its first seconds the same way)."""
LEASE_BATCH = 200
"""Job ids per lease command."""
UNSTARTABLE = frozenset({"SUSPENDED", "REQUEUE_HOLD", "COMPLETING"})
"""Slurm states of a waiting job that ``StartTime=now`` does not start. A requeued job still
completing (25.11: ``PENDING`` with the flag; 22.05: ``COMPLETING``) gets its begin time set two
minutes ahead when the requeue completes, undoing a start sent before: it is started next round."""
SATELLITE_START_TIMEOUT_S = 120.0
SATELLITE_END_GRACE_S = 30.0
"""How long a running satellite may outlive its job whose last report says training ended: its
workers are exiting with the job's, and a satellite that ends by itself stays COMPLETED in the
accounting. Counted from that end report, by the daemon's clock: one dated ahead gets none. Only
a satellite whose workers had joined the job gets it (:meth:`SlurmActuator._joined`): joiners still
starting when the training ended wait for a job that is gone, and are cancelled with it."""
EXIT_GRACE_S = 3.0
SWITCH_GRACE_S = 20.0
RELEASE_TIMEOUT_S = 60.0
REQUEUE_WAIT_S = 30.0
CREDENTIAL_WAIT_S = 1.1
USER_COMMAND_TIMEOUT_S = 10.0
"""Seconds a command run as a job's user (a satellite's sbatch) may take before it is killed. An
sbatch answers in well under a second on an idle controller; one retrying a busy slurmctld is
stopped here rather than at the 30 s of root's commands (see the module docstring)."""
USER_BACKOFF_S = 60.0
"""Seconds a user's grows are refused after a command of theirs timed out (the first time)."""
USER_BACKOFF_MAX_S = 3600.0
"""The longest back-off: it doubles at each timeout in a row, up to this."""

__all__ = ["NotExpressible", "SlurmActuator", "commands", "reconcile"]


def _job_id_of(sbatch_out: str) -> str:
    """The job id ``sbatch --parsable`` printed (``ID`` or ``ID;CLUSTER``).

    Raises:
        NotExpressible: it printed something else.
    """
    head = sbatch_out.strip().split(";")[0]
    if not head.isascii() or not head.isdigit() or len(head) > 18:
        raise NotExpressible(f"sbatch printed {sbatch_out[:80]!r}, not a job id")
    return head


def _shape(jid: str, after: Placement, rec: JobRecord | None = None) -> list[str]:
    """The ``scontrol update`` fields that size job ``jid`` to ``after``.

    A job's tasks and CPUs follow its nodes at its tasks per node (``rec``: its record, whose tasks
    and node count give them): a 2-node job of one task per node put on one node by ``NumNodes``
    alone stays PENDING (BadConstraints, found on the dev cluster, 22.05), its 2 tasks and 2 CPUs no
    longer fitting one node. ``NumCPUs`` is the least: Slurm raises it to tasks x CPUs per task.
    """
    counts = {node: len(gpus) for node, gpus in after.slots}
    if not counts:
        raise NotExpressible(f"job {jid}: no GPUs in the target placement")
    nodes = sorted(counts)
    out = [f"NumNodes={len(nodes)}-{len(nodes)}", f"TresPerNode=gres:gpu:{min(counts.values())}",
           f"NodeList={','.join(nodes)}"]
    if rec is not None and rec.tasks and rec.node_count and rec.tasks % rec.node_count == 0 \
            and rec.node_count != len(nodes):
        tasks = rec.tasks // rec.node_count * len(nodes)
        out += [f"NumTasks={tasks}", f"NumCPUs={tasks}"]
    return out


def commands(snapshot: ClusterSnapshot, action: Action, rec: JobRecord | None = None) -> list[list[str]]:
    """The argv lists that carry out ``action`` on a job *without* the launcher (pure); ``rec``, the
    job's record, sizes its tasks with its nodes (:func:`_shape`).

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
        if not snapshot.job(jid).is_waiting:  # pending, or requeued and back in the queue (preempted)
            raise NotExpressible(f"job {jid} is {snapshot.job(jid).state.value}: only a waiting job can be started")
        return [["scontrol", "update", f"JobId={jid}", *_shape(jid, action.after, rec)],
                ["scontrol", "update", f"JobId={jid}", "StartTime=now"]]
    if kind in (ActionKind.GROW, ActionKind.SHRINK, ActionKind.MOVE):
        return [["scontrol", "requeuehold", jid],
                ["scontrol", "update", f"JobId={jid}", *_shape(jid, action.after, rec)],
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
        crash: called at each crash point (:mod:`slurm_elastic.slurm.steps`; default: what
            ``SLURM_ELASTIC_CRASH_AT`` asks for, nothing when it is unset).
    """

    def __init__(self, runner: Runner, store: Store, clock: Callable[[], float],
                 records: Callable[[], Mapping[str, JobRecord]] | None = None, me: str = "",
                 sleep: Callable[[float], None] = time.sleep, client_env: Mapping[str, str] | None = None,
                 crash: Callable[[str], None] | None = None) -> None:
        self.runner, self.store, self.clock, self.sleep = runner, store, clock, sleep
        self.client = client_settings(os.environ if client_env is None else client_env)
        self.records: Callable[[], Mapping[str, JobRecord]] = records or dict
        self.me = me or getpass.getuser()
        self.crash = crash if crash is not None else crash_from_env()
        self.lease_s = LEASE_S
        self.user_command_timeout_s = USER_COMMAND_TIMEOUT_S
        self._backoff: dict[str, tuple[float, float, str]] = {}  # user -> (until, its length in s, why)
        self._leasing: set[str] = set()  # the waiting elastic jobs of the last round
        self._leased: dict[str, float] = {}  # job id -> until when Slurm will not start it

    def apply(self, snapshot: ClusterSnapshot, actions: tuple[Action, ...]) -> tuple[ActionOutcome, ...]:
        """Carry out each action; one failure never stops the others."""
        out: list[ActionOutcome] = []
        records = self.records()
        for a in actions:
            aid = self.store.begin_action(a, self.clock())
            steps = Steps(self.store, aid, a.kind.value, self.clock, self.crash)
            try:
                note = self._carry_out(snapshot, a, records.get(a.job_id), steps)
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

    def _carry_out(self, snapshot: ClusterSnapshot, a: Action, rec: JobRecord | None, steps: Steps) -> str:
        channel = self._channel(rec) if a.kind in (ActionKind.GROW, ActionKind.SHRINK, ActionKind.REBATCH,
                                                   ActionKind.MOVE) else None
        if a.kind is ActionKind.START and rec is not None and set(rec.slurm_state) & UNSTARTABLE:
            raise NotExpressible(f"job {a.job_id} is {'+'.join(rec.slurm_state)}: a suspended, held or still "
                                 "completing job is not started (it waits until it is resumed, released or done "
                                 "completing)")
        if channel is None or rec is None:
            for argv in commands(snapshot, a, rec):
                steps.run(step_of(argv), partial(self._command, argv), argv=list(argv))
            if a.kind is ActionKind.DROP:
                self._cancel_satellites(a.job_id)
            return "requeued at the new size" if a.kind in (ActionKind.GROW, ActionKind.SHRINK, ActionKind.MOVE) else ""
        if finished_training(self.store.progress_of(a.job_id), snapshot.now, run_start_of(rec)):
            return "nothing done: the job finished training, its workers are exiting"
        if a.kind is ActionKind.GROW:
            return self._grow(a, rec, channel, steps)
        if a.kind is ActionKind.SHRINK:
            return self._shrink(a, rec, channel, steps)
        if a.kind is ActionKind.REBATCH:
            batch = self._batch(a, rec)
            if not batch:
                return "nothing sent: the job declared no batch range, it keeps its own batch policy"
            workers = channel.workers(self._initial(rec, channel))
            seq = steps.run("order", partial(channel.send, "resize", workers, batch), workers=workers, batch=batch)
            return f"order {seq}"
        raise NotExpressible(f"job {a.job_id}: moving a launcher job is a shrink then a grow; plan them apart")

    # -- leases: the daemon alone starts elastic jobs ---------------------------------------------

    def lease(self, snapshot: ClusterSnapshot, started: Collection[str]) -> list[str]:
        """Keep Slurm from starting the waiting elastic jobs of ``snapshot`` for :data:`LEASE_S` more
        seconds; renewed by :meth:`tend`. One line per failure. A job the round just started, or one
        with an action on its way (``snapshot.in_flight``: a START whose job is not running yet), is
        not leased: that would undo its ``StartTime=now``."""
        flying = {str(f.job_id) for f in snapshot.in_flight}
        lapsed = [f"job {j.job_id} was started by Slurm itself: its lease ran out (the daemon was away or slow)"
                  for j in snapshot.elastic_jobs() if j.state is JobState.RUNNING and j.job_id in self._leased]
        self._leasing = {str(j.job_id) for j in snapshot.elastic_jobs() if j.is_waiting} - {str(j) for j in started} \
            - flying
        return lapsed + self._renew_leases()

    def _renew_leases(self) -> list[str]:
        now = self.clock()
        records = self.records()
        self._leased = {j: t for j, t in self._leased.items() if j in self._leasing}
        due = sorted(j for j in self._leasing if self._leased.get(j, 0.0) - now < self.lease_s / 2
                     and (r := records.get(j)) is not None and r.state in (JobState.PENDING, JobState.PREEMPTED)
                     and not set(r.slurm_state) & UNSTARTABLE)
        lines = []
        for i in range(0, len(due), LEASE_BATCH):
            chunk = due[i:i + LEASE_BATCH]
            try:
                self.runner(["scontrol", "update", f"JobId={','.join(chunk)}", f"StartTime=now+{self.lease_s}"])
            except ElasticError as exc:  # one job that just started or ended: the others next poll
                lines.append(f"lease of waiting jobs {','.join(chunk[:5])}{'...' if len(chunk) > 5 else ''} "
                             f"failed: {exc}")
                continue
            self._leased.update({j: now + self.lease_s for j in chunk})
        return lines

    def _command(self, argv: Sequence[str]) -> None:
        """Run one command of the requeue path, a start, a preemption or a drop."""
        self.runner(argv)
        if argv[:2] == ["scontrol", "requeuehold"]:
            self._wait_requeued(argv[2])

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
            return Channel.open(rec.job_id, rec.user, rec.comment, rec.restart_count)
        except NoChannel:
            return None
        except ChannelError as exc:
            raise NotExpressible(f"{exc}: its launcher cannot be reached, so it is not resized "
                                 "(a launcher job is never requeued instead)") from None

    def _initial(self, rec: JobRecord, channel: Channel) -> list[str]:
        """The initial worker ids of the job's run; records the run's worker layout the first time it
        is needed (a requeued job's earlier layout is replaced: its workers started again)."""
        layout = self.store.workers_of(rec.job_id)
        if not layout or self.store.workers_run(rec.job_id) != rec.restart_count:
            if channel.orders_of_run():
                raise NotExpressible(f"job {rec.job_id}: orders were sent but its workers' nodes are unknown")
            self.store.add_workers(rec.job_id, initial_workers(rec), rec.restart_count)
            layout = self.store.workers_of(rec.job_id)
        return sorted((w for w, (_, alloc) in layout.items() if alloc == rec.job_id), key=lambda w: int(w[1:]))

    def _batch(self, a: Action, rec: JobRecord) -> int:
        """The batch an order carries: 0 (keep the job's policy) unless the job declared a batch range."""
        req = parse_elastic_request(rec.admin_comment, job_id=rec.job_id)
        if req is None or req.min_batch is None:
            return 0
        return a.global_batch if req.mode.value == "endo" else a.local_batch * a.accumulation

    def _grow(self, a: Action, rec: JobRecord, channel: Channel, steps: Steps) -> str:
        self._backing_off(a.job_id, rec.user)
        try:
            script = channel.read_join_script()
        except ChannelError as exc:
            raise NotExpressible(f"job {a.job_id}: cannot grow in place: {exc}") from exc
        env = read_env_file(rec, env_file(channel.join_path))
        current = channel.workers(self._initial(rec, channel))
        sats = new_satellites(a.before, a.after, self.store.workers_of(a.job_id))
        joiners = [w for sat in sats for w in sat.workers]
        tokens = [secrets.token_hex(16) for _ in sats]
        # The order first: the job keeps training until the joiners are ready, so a daemon that dies
        # before the satellites are submitted leaves no allocation behind, only an order the next
        # one withdraws (reconcile). Each satellite's token is journaled before its sbatch.
        seq = steps.run("order", partial(channel.send, "resize", [*current, *joiners], self._batch(a, rec)),
                        current=current, joiners=joiners,
                        satellites=[{"node": s.node, "workers": list(s.workers), "token": t}
                                    for s, t in zip(sats, tokens, strict=True)])
        submitted: list[str] = []
        try:
            with contextlib.ExitStack() as fds:
                inputs = Inputs(_sealed(fds, script, "join"), _sealed(fds, env, "env"), channel.join_path.name)
                for sat, token in zip(sats, tokens, strict=True):
                    argv = Command(sbatch_argv(rec, sat, inputs, as_user=as_user(rec.user, self.me),
                                               client=self.client, token=token),
                                   pass_fds=inputs.fds, timeout=self.user_command_timeout_s)
                    out = self._as_user(a.job_id, rec.user, partial(steps.run, "sbatch", partial(self.runner, argv),
                                                                    token=token, node=sat.node,
                                                                    workers=list(sat.workers)))
                    sat_id = _job_id_of(out)
                    steps.note("submitted", token=token, sat_id=sat_id)
                    self.store.add_satellite(sat_id, a.job_id, self.clock(), [(w, sat.node) for w in sat.workers])
                    submitted.append(sat_id)
                    steps.run("mark", partial(self.runner, mark_argv(sat_id, a.job_id)), sat_id=sat_id)
        except ElasticError:
            for sat_id in submitted:
                self._cancel(sat_id)
            channel.send("resize", current)  # withdraw the joiners
            raise
        return f"order {seq}; satellites {','.join(submitted)} with workers {','.join(joiners)}"

    def _backing_off(self, job_id: str, user: str) -> None:
        """Refuse a grow of ``user``'s job while a command of theirs that timed out backs them off.

        Raises:
            NotExpressible: they are backing off (the message says why and until when).
        """
        until, _, why = self._backoff.get(user, (0.0, 0.0, ""))
        if self.clock() < until:
            raise NotExpressible(f"job {job_id}: not grown in place: the grows of user {user} are not tried for "
                                 f"{until - self.clock():.0f} s more (user {user} backs off: {why})")

    def _as_user(self, job_id: str, user: str, run: Callable[[], str]) -> str:
        """Run a command that runs as ``user`` (``run``); a timeout starts or doubles their back-off
        (module docstring), an answer ends it.

        Raises:
            NotExpressible: it timed out (the message names the back-off).
            ElasticError: it failed otherwise.
        """
        try:
            out = run()
        except CommandTimeout as exc:
            _, last, _ = self._backoff.get(user, (0.0, 0.0, ""))
            length = min(USER_BACKOFF_MAX_S, 2 * last) if last else USER_BACKOFF_S
            why = f"job {job_id}'s satellite sbatch gave no answer within {self.user_command_timeout_s:g} s"
            self._backoff[user] = (self.clock() + length, length, why)
            raise NotExpressible(f"job {job_id}: {exc}; the grows of user {user} are not tried for the next "
                                 f"{length:.0f} s") from exc
        self._backoff.pop(user, None)
        return out

    def _shrink(self, a: Action, rec: JobRecord, channel: Channel, steps: Steps) -> str:
        current = channel.workers(self._initial(rec, channel))
        plan = leaving(rec, current, self.store.workers_of(a.job_id), a.before, a.after)
        stay = [w for w in current if w not in plan.workers]
        keep = list(plan.parent_nodes) if tuple(sorted(n for n, _ in rec.gpus)) != plan.parent_nodes else None
        seq = steps.run("order", partial(channel.send, "resize", stay, self._batch(a, rec)), stay=stay,
                        leaving=list(plan.workers), keep=keep)
        note = f"order {seq}: {','.join(plan.workers)} leave"
        if keep is not None:
            ordered = self.clock()
            steps.run("owe-release", partial(self.store.add_release, a.job_id, keep, len(stay), len(plan.workers),
                                             ordered), keep=keep, world=len(stay), leaving=len(plan.workers),
                      ordered=ordered)
            note += f"; the job keeps {','.join(keep)} once they have left"
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
            start = run_start_of(rec)
            if start is not None and start > r["ordered"]:  # requeued and started again since the order
                self.store.drop_release(jid)
                lines.append(f"job {jid}: release of its other nodes dropped: it was requeued and started again "
                             f"since (keeping {','.join(r['nodes'])} would shrink its new run)")
                continue
            rows = [p for p in self.store.progress_of(jid) if p.t >= r["ordered"]]
            left = [p.t for p in rows if p.kind == "left"]
            switched = [p.t for p in rows if p.kind in ("resize", "progress") and p.world == r["world"]]
            due = ((len(left) >= r["leaving"] and now >= max(left, default=r["ordered"]) + EXIT_GRACE_S)
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
        A satellite gone from the queue is recorded as ended (its workers are taken out of its
        running job's order if it still names them: a satellite that started and then failed); one
        whose job is gone or not running is cancelled, unless that job's training ended less than
        ``SATELLITE_END_GRACE_S`` ago and the satellite's workers had joined it (they are exiting
        with the job's; joiners that had not joined are not); one still waiting after
        ``SATELLITE_START_TIMEOUT_S`` is cancelled and its workers are taken out of its job's world
        by a new order (the latest order wins). A job in Slurm carrying the token of a satellite
        this daemon submitted, but not recorded as one (the daemon died before it learnt the id,
        and no unfinished action claims it), is an orphan: cancelled.
        """
        records = self.records()
        now = self.clock()
        lines = self._release(records, now)
        lines += self._cancel_orphans(records)
        lines += self._settle_lost(records)
        lines += self._renew_leases()
        submitted = self.store.satellite_times()
        for sat_id, parent in self.store.satellites().items():
            sat, job = records.get(sat_id), records.get(parent)
            if sat is None or sat.state is JobState.FINISHED:
                self.store.end_satellite(sat_id, now)
                withdrawn = ""
                if job is not None and not finished_training(self.store.progress_of(parent), now, run_start_of(job)):
                    what = self._withdraw(job, sat_id)
                    withdrawn = f" ({what})" if what == "its workers withdrawn" else ""
                lines.append(f"satellite {sat_id} of job {parent} ended{withdrawn}")
            elif job is None or job.state is not JobState.RUNNING:
                exiting = self._exiting(parent, now) if sat.state is JobState.RUNNING else None
                if exiting is not None and self._joined(parent, submitted.get(sat_id, now), exiting):
                    continue
                self._cancel(sat_id)
                lines.append(f"satellite {sat_id} cancelled: job {parent} is not running"
                             + (" (its workers had not joined it when its training ended)" if exiting else ""))
            elif sat.state is JobState.PENDING and now - submitted.get(sat_id, now) > SATELLITE_START_TIMEOUT_S:
                self._cancel(sat_id)
                lines.append(f"satellite {sat_id} of job {parent} did not start in "
                             f"{SATELLITE_START_TIMEOUT_S:.0f} s: cancelled, " + self._withdraw(job, sat_id))
        return lines

    def _exiting(self, job_id: str, now: float) -> ProgressRow | None:
        """The job's end report if its training ended within the satellite end grace, else ``None``."""
        last = self.store.latest_progress(job_id)
        ok = last is not None and last.kind == "end" and 0.0 <= now - last.t < SATELLITE_END_GRACE_S
        return last if ok else None

    def _joined(self, job_id: str, submitted: float, end: ProgressRow) -> bool:
        """Whether a satellite submitted at ``submitted`` had its workers in the job's world: a report
        of the job since then names a larger world than its last report before (the joiners joined).

        Only such a satellite's workers exit with the job's. Joiners that had not joined when the
        training ended (a grow ordered seconds before the end: they were still starting) wait to
        join a job that is gone and do not end by themselves; the end grace kept such a satellite
        30 s past its job (seen in ``bench chaos``: its GPUs held, then cancelled all the same).
        """
        rows = [r for r in self.store.progress_of(job_id) if r.t <= end.t]
        before = next((r.world for r in reversed(rows) if r.t < submitted and r.kind in ("progress", "resize")), 0)
        return any(r.world > before for r in rows if r.t >= submitted and r.kind in ("progress", "resize", "end"))

    def _cancel_orphans(self, records: Mapping[str, JobRecord]) -> list[str]:
        """Cancel the jobs carrying a satellite token this daemon journaled, unknown as satellites."""
        marked = {rec.job_id: token for rec in records.values()
                  if rec.state is not JobState.FINISHED and (token := satellite_token(rec.comment))}
        known = self.store.satellites(include_ended=True)
        suspects = {jid: token for jid, token in marked.items() if jid not in known}
        if not suspects:
            return []
        claimed = {str(s["token"]) for e in self.store.unfinished_actions()
                   for n, d, _ in self.store.steps_of(e.id) if n == "order" for s in d.get("satellites", [])}
        ours = {str(d["token"]) for d in self.store.step_details("sbatch")}
        lines = []
        for jid, token in sorted(suspects.items()):
            if token in ours and token not in claimed:
                try:
                    self.runner(["scancel", jid])
                    lines.append(f"orphan satellite {jid} (submitted, its id never journaled) cancelled")
                except ElasticError as exc:
                    lines.append(f"orphan satellite {jid}: scancel failed: {exc}")
        return lines

    def _withdraw(self, job: JobRecord, sat_id: str) -> str:
        """Order a satellite's workers out of its job's world (the latest order wins); what was done."""
        return self._withdraw_workers(job, {w for w, (_, alloc) in self.store.workers_of(job.job_id).items()
                                            if alloc == sat_id})

    def _settle_lost(self, records: Mapping[str, JobRecord]) -> list[str]:
        """Give back what workers lost by a running launcher job held (the job's recovery report
        names them, :attr:`~slurm_elastic.store.ProgressRow.lost`).

        The survivors already train without them: an order naming the survivors makes the job's
        order say so (the next grow or shrink starts from it), and each node of the job's own
        allocation (never the batch host) whose workers were all lost is released like a shrink's
        (journaled as a SHRINK with its order and owed release). A satellite whose workers were
        lost ends by itself (its batch script ends with its task) and is settled as one that ended.
        A GPU of a node that keeps other workers stays idle until the job ends: Slurm frees none
        of a node but the whole node. One line per job settled.
        """
        lines = []
        for jid, rec in records.items():
            if rec.state is not JobState.RUNNING or not rec.comment:
                continue
            lost = self.store.lost_workers(jid, run_start_of(rec))
            if not lost or finished_training(self.store.progress_of(jid), self.clock(), run_start_of(rec)):
                continue
            try:
                channel = self._channel(rec)
                if channel is None:
                    continue
                current = channel.workers(self._initial(rec, channel))
                gone = [w for w in current if w in lost]
                if not gone:
                    continue
                lines.append(self._give_back(rec, channel, current, gone))
            except ElasticError as exc:
                lines.append(f"job {jid}: lost workers {','.join(sorted(lost))} not settled: {exc}")
        return lines

    def _give_back(self, rec: JobRecord, channel: Channel, current: list[str], gone: list[str]) -> str:
        layout = self.store.workers_of(rec.job_id)
        stay = [w for w in current if w not in gone]
        own = sorted({layout[w][0] for w in current if w in layout and layout[w][1] == rec.job_id})
        kept = sorted({layout[w][0] for w in stay if w in layout and layout[w][1] == rec.job_id}
                      | ({rec.batch_host} if rec.batch_host else set()))
        freed = [n for n in own if n not in kept]
        after = Placement.of((n, g) for n, gs in rec.gpus if n not in freed for g in gs)
        action = Action(ActionKind.SHRINK, rec.job_id, rec.placement, after, reason=f"workers {','.join(gone)} lost")
        aid = self.store.begin_action(action, self.clock())
        steps = Steps(self.store, aid, ActionKind.SHRINK.value, self.clock, self.crash)
        keep = kept if freed else None
        seq = steps.run("order", partial(channel.send, "resize", stay), stay=stay, leaving=gone, keep=keep)
        note = f"order {seq}: lost workers {','.join(gone)} out of the job's order"
        if keep is not None:
            ordered = self.clock()
            steps.run("owe-release", partial(self.store.add_release, rec.job_id, keep, len(stay), 0, ordered),
                      keep=keep, world=len(stay), leaving=0, ordered=ordered)
            note += f"; node {','.join(freed)} given back"
        self.store.finish_action(aid, True, self.clock(), note)
        return f"job {rec.job_id}: {note}"

    def _withdraw_workers(self, job: JobRecord, gone: set[str]) -> str:
        """Order ``gone`` out of the running job's world if its latest order names any; what was done."""
        if job.state is not JobState.RUNNING:
            return "the job does not run: nothing to withdraw"
        try:
            channel = self._channel(job)
            if channel is None:
                return "the job has no launcher"
            current = channel.workers(self._initial(job, channel))
            if not gone & set(current):
                return "its workers were not in the job's order"
            channel.send("resize", [w for w in current if w not in gone])
        except ElasticError as exc:
            return f"its workers could not be withdrawn: {exc}"
        return "its workers withdrawn"

    def reconcile(self, snapshot: ClusterSnapshot) -> list[str]:
        """Settle the actions a previous daemon began and never finished; one line each.

        Each is judged by its journaled steps and what the job and Slurm say now (module
        docstring): resumed where the steps that ran can be carried on, undone where they cannot,
        and judged by Slurm alone (:func:`reconcile`) where no step was journaled.
        """
        records = self.records()
        jobs = {j.job_id: j for j in snapshot.jobs}
        lines = []
        for entry in self.store.unfinished_actions():
            a = entry.action
            steps = self.store.steps_of(entry.id)
            names = [n for n, _, _ in steps]
            try:
                if not steps:
                    ok, msg = _judged(a, jobs.get(a.job_id))
                elif "order" in names and a.kind is ActionKind.GROW:
                    ok, msg = self._settle_grow(a, steps, records)
                elif "order" in names:
                    ok, msg = self._settle_order(a, steps, records)
                else:
                    ok, msg = self._settle_commands(entry, steps, jobs.get(a.job_id), records.get(a.job_id))
            except ElasticError as exc:
                ok, msg = False, f"could not be settled: {exc}"
            self.store.finish_action(entry.id, ok, self.clock(), msg)
            lines.append(f"{a.kind.value} job {a.job_id}: {msg}")
        return lines

    def _settle_commands(self, entry: JournalEntry, steps: list[tuple[str, dict[str, Any], float]],
                         job: Job | None, rec: JobRecord | None) -> tuple[bool, str]:
        """A start, preemption, drop, or a resize by requeue: a requeue interrupted after ``requeuehold``
        is carried on from its last journaled command (each after ``requeuehold`` is safe to
        repeat), so the job is never left held; anything else is judged by Slurm."""
        a = entry.action
        names = [n for n, _, _ in steps]
        if "requeuehold" not in names or rec is None or rec.state is JobState.RUNNING:
            return _judged(a, job)
        last = list(steps[-1][1]["argv"])
        if step_of(last) == "requeuehold":
            self._wait_requeued(a.job_id)  # it ran (the job no longer runs): wait until it is back in the queue
            todo = self._commands_after(entry, last, rec)
        else:
            todo = [last, *self._commands_after(entry, last, rec)]
        run = Steps(self.store, entry.id, a.kind.value, self.clock, self.crash)
        for argv in todo:
            try:
                run.run(step_of(argv), partial(self._command, argv), argv=argv)
            except ElasticError as exc:
                if step_of(argv) != "release":  # releasing a job that is no longer held fails harmlessly
                    raise
                log.info("job %s: %s", a.job_id, exc)
        return True, f"resumed after a restart: {', '.join(step_of(v) for v in todo)} done"

    def _commands_after(self, entry: JournalEntry, argv: Sequence[str], rec: JobRecord | None) -> list[list[str]]:
        """The commands of the requeue path that follow ``argv`` (its journaled shape is reused)."""
        a = entry.action
        shape = next((list(d["argv"]) for n, d, _ in self.store.steps_of(entry.id) if n == "shape"), None)
        if shape is None:
            shape = ["scontrol", "update", f"JobId={a.job_id}", *_shape(a.job_id, a.after, rec)]
        path = [["scontrol", "requeuehold", a.job_id], shape, ["scontrol", "release", a.job_id],
                ["scontrol", "update", f"JobId={a.job_id}", "StartTime=now"]]
        names = [step_of(v) for v in path]
        return path[names.index(step_of(argv)) + 1:]

    def _settle_grow(self, a: Action, steps: list[tuple[str, dict[str, Any], float]],
                     records: Mapping[str, JobRecord]) -> tuple[bool, str]:
        """An in-place grow: adopt its satellites when every one was submitted (by journaled id or by
        its token in Slurm), else cancel those found and withdraw the joiners from the job's order."""
        order = next(d for n, d, _ in steps if n == "order")
        planned = {str(s["token"]): s for s in order["satellites"]}
        found = {str(d["token"]): str(d["sat_id"]) for n, d, _ in steps if n == "submitted"}
        job = records.get(a.job_id)
        for other in records.values():  # submitted, but the daemon died before it learnt the id
            token = satellite_token(other.comment)
            if token in planned and token not in found and job is not None and other.user == job.user:
                found[token] = other.job_id
        known = self.store.satellites(include_ended=True)
        if job is not None and job.state is JobState.RUNNING and set(found) == set(planned):
            for token, sat_id in found.items():
                sat = planned[token]
                if sat_id not in known:
                    self.store.add_satellite(sat_id, a.job_id, self.clock(),
                                             [(str(w), str(sat["node"])) for w in sat["workers"]])
                sat_rec = records.get(sat_id)
                if sat_rec is None or sat_rec.admin_comment != satellite_marker(a.job_id):
                    self.runner(mark_argv(sat_id, a.job_id))
            return True, f"resumed after a restart: satellites {','.join(sorted(found.values()))} adopted"
        for sat_id in sorted(found.values()):
            self._cancel(sat_id)
        withdrawn = self._withdraw_workers(job, set(map(str, order["joiners"]))) if job is not None else "job gone"

        return False, (f"undone after a restart: {len(found)} of {len(planned)} satellites submitted"
                       f"{' (cancelled: ' + ','.join(sorted(found.values())) + ')' if found else ''}; {withdrawn}")

    def _settle_order(self, a: Action, steps: list[tuple[str, dict[str, Any], float]],
                      records: Mapping[str, JobRecord]) -> tuple[bool, str]:
        """A shrink or a rebatch: done when the job holds its order (the latest signed one of its
        run names the journaled workers), with a shrink's node release owed again if that step did
        not run. An order of an earlier run is moot: the requeue ended the workers it named."""
        order = next(d for n, d, _ in steps if n == "order")
        workers = list(order.get("stay", order.get("workers", [])))
        job = records.get(a.job_id)
        channel = self._channel(job)
        history = channel.orders_of_run() if channel is not None else []
        if not history or list(history[-1].workers) != workers:
            return False, "not done after a restart: the job never got the order"
        keep = order.get("keep")
        if keep and a.job_id not in {r["job_id"] for r in self.store.releases()}:
            self.store.add_release(a.job_id, list(keep), len(workers), len(order["leaving"]),
                                   next(t for n, _, t in steps if n == "order"))
            return True, (f"done after a restart: the job holds order {history[-1].seq}; it keeps "
                          f"{','.join(keep)} once the leavers have left (release owed again)")
        return True, f"done after a restart: the job holds order {history[-1].seq}"


def _sealed(stack: contextlib.ExitStack, data: bytes, name: str) -> int:
    """A :func:`~slurm_elastic.slurm.commands.sealed_copy` of ``data``, closed when ``stack`` closes.

    Raises:
        NotExpressible: the copy cannot be made.
    """
    try:
        fd = sealed_copy(data, name)
    except OSError as exc:
        raise NotExpressible(f"cannot copy the job's {name} file for sbatch: {exc}") from exc
    stack.callback(os.close, fd)
    return fd


def _judged(a: Action, job: Job | None) -> tuple[bool, str]:
    """Whether Slurm shows ``a`` done: a START or a resize when the job runs at the target GPU count,
    a PREEMPT when it waits, a DROP when it is gone."""
    if a.kind is ActionKind.DROP:
        ok = job is None
    elif a.kind is ActionKind.PREEMPT:
        ok = job is not None and job.state is JobState.PENDING
    else:
        ok = job is not None and job.state is JobState.RUNNING and job.num_gpus == a.after.num_gpus
    return ok, "found done after a restart" if ok else "found not done after a restart"


def reconcile(store: Store, snapshot: ClusterSnapshot, clock: Callable[[], float]) -> list[str]:
    """Settle unfinished actions by what Slurm shows now, alone (no step is resumed or undone; the
    acting daemon uses :meth:`SlurmActuator.reconcile`). Nothing is re-executed.

    Returns:
        One line per settled action.
    """
    jobs = {j.job_id: j for j in snapshot.jobs}
    lines = []
    for entry in store.unfinished_actions():
        ok, msg = _judged(entry.action, jobs.get(entry.action.job_id))
        store.finish_action(entry.id, ok, clock(), msg)
        lines.append(f"{entry.action.kind.value} job {entry.action.job_id}: {msg}")
    return lines
