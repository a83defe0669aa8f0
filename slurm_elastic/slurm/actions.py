"""The Slurm actuator: core actions turned into ``scontrol`` argv lists, journaled before and after.

This module owns what the daemon may do to Slurm in this version, found by experiment on 22.05
(see docs/slurm-acting.md):

* **START** a pending elastic job (held by ``job_submit.lua`` for a few seconds) at a size:
  ``scontrol update JobId=J NumNodes=N-N TresPerNode=gres:gpu:G NodeList=<nodes>`` then
  ``scontrol update JobId=J StartTime=now``. Slurm gives the same GPU count on every node of a
  job, so a planned placement with unequal counts starts at the largest equal shape inside it
  (``N`` planned nodes x the smallest count among them); the next round sees the difference.
* **SHRINK** a running job by whole nodes: ``scontrol update JobId=J NodeList=<kept nodes>``
  (Slurm frees the other nodes' GPUs at once; a node's GPU count cannot change, and the batch
  host cannot leave: Slurm refuses those and the refusal is recorded). For a job that runs the
  launcher (its comment names an order channel, :mod:`slurm_elastic.orders`), the workers on the
  leaving nodes are first ordered to leave at a step boundary, and the node list is updated
  ``leave_grace_s`` later; a worker that has not left by then is stopped by Slurm and the others
  recover as from a lost worker. This version knows the worker-to-node map only from the job's
  start (one worker per GPU, nodes in order), so it orders the first shrink of a job; later ones
  of the same job fall back to the plain node update.
* **DROP** (the IBM autoscaler's drop mode): ``scancel J``.

Everything else (grow, move, re-batch, a shrink inside a node, preempting a job that cannot
checkpoint) needs the in-job launcher and its satellite allocations; such actions are refused
here with that reason, recorded as failed, and seen by the planner as last round's errors.

Each action is written to the store before its first command and again after its last, so a
daemon that dies in between finds it on restart (:func:`reconcile`). Commands are argv lists run
through an injected runner; no shell.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from slurm_elastic.core.actions import Action, ActionKind
from slurm_elastic.core.model import ClusterSnapshot, JobState
from slurm_elastic.core.rounds import ActionOutcome
from slurm_elastic.errors import ElasticError
from slurm_elastic.orders import Channel, ChannelError
from slurm_elastic.slurm.parse import JobRecord
from slurm_elastic.store import Store

log = logging.getLogger(__name__)

Runner = Callable[[Sequence[str]], str]
NEEDS_LAUNCHER = "needs the in-job launcher (satellite allocations), which this version does not have"


class NotExpressible(ElasticError):  # noqa: N818 (an outcome, not a failure of ours)
    """The action cannot be done with Slurm's commands alone (the message says why)."""


def commands(snapshot: ClusterSnapshot, action: Action) -> list[list[str]]:
    """The ``scontrol``/``scancel`` argv lists that carry out ``action`` (pure).

    Raises:
        NotExpressible: Slurm cannot do it without the launcher.
    """
    jid = action.job_id
    if action.kind is ActionKind.DROP:
        return [["scancel", jid]]
    if action.kind is ActionKind.START:
        job = snapshot.job(jid)
        if job.state is not JobState.PENDING:
            raise NotExpressible(f"job {jid} is {job.state.value}: restarting it {NEEDS_LAUNCHER}")
        counts = {node: len(gpus) for node, gpus in action.after.slots}
        if not counts:
            raise NotExpressible(f"job {jid}: START without GPUs")
        per_node = min(counts.values())
        nodes = sorted(counts)
        return [
            ["scontrol", "update", f"JobId={jid}", f"NumNodes={len(nodes)}-{len(nodes)}",
             f"TresPerNode=gres:gpu:{per_node}", f"NodeList={','.join(nodes)}"],
            ["scontrol", "update", f"JobId={jid}", "StartTime=now"],
        ]
    if action.kind is ActionKind.SHRINK:
        before = {node: len(gpus) for node, gpus in action.before.slots}
        after = {node: len(gpus) for node, gpus in action.after.slots}
        if not after or any(before.get(n) != c for n, c in after.items()):
            raise NotExpressible(f"job {jid}: shrinking inside a node {NEEDS_LAUNCHER}")
        return [["scontrol", "update", f"JobId={jid}", f"NodeList={','.join(sorted(after))}"]]
    raise NotExpressible(f"job {jid}: {action.kind.value} {NEEDS_LAUNCHER}")


class SlurmActuator:
    """Carries out actions on Slurm, journaling each one (the daemon's acting mode).

    Args:
        runner: runs one command (argv), returns stdout, raises on failure.
        store: the action journal.
        clock: seconds since the epoch.
    """

    def __init__(self, runner: Runner, store: Store, clock: Callable[[], float],
                 records: Callable[[str], JobRecord | None] | None = None,
                 sleep: Callable[[float], None] = time.sleep, leave_grace_s: float = 3.0) -> None:
        self.runner, self.store, self.clock = runner, store, clock
        self.records = records or (lambda job_id: None)
        self.sleep, self.leave_grace_s = sleep, leave_grace_s

    def apply(self, snapshot: ClusterSnapshot, actions: tuple[Action, ...]) -> tuple[ActionOutcome, ...]:
        """Run each action's commands in order; one failure never stops the others."""
        out: list[ActionOutcome] = []
        for a in actions:
            aid = self.store.begin_action(a, self.clock())
            try:
                argvs = commands(snapshot, a)
                if a.kind is ActionKind.SHRINK and self._order_leave(a):
                    self.sleep(self.leave_grace_s)
                for argv in argvs:
                    self.runner(argv)
            except ElasticError as exc:
                log.warning("%s job %s refused: %s", a.kind.value, a.job_id, exc)
                self.store.finish_action(aid, False, self.clock(), str(exc))
                out.append(ActionOutcome(a, False, str(exc)))
                continue
            log.info("%s job %s: %d -> %d GPUs", a.kind.value, a.job_id, a.before.num_gpus, a.after.num_gpus)
            self.store.finish_action(aid, True, self.clock())
            out.append(ActionOutcome(a, True))
        return tuple(out)


    def _order_leave(self, a: Action) -> bool:
        """Order the workers on the leaving nodes out (launcher jobs, first shrink); True if ordered."""
        rec = self.records(a.job_id)
        if rec is None or not rec.comment:
            return False
        try:
            channel = Channel.open(a.job_id, rec.user, rec.comment)
        except ChannelError as exc:
            log.info("job %s: no order channel (%s); shrinking by node update only", a.job_id, exc)
            return False
        if channel.history():
            return False
        per_node = {n: len(g) for n, g in a.before.slots}
        width = max(per_node.values())
        if any(c != width for c in per_node.values()):
            return False
        nodes = sorted(per_node)
        kept = {n for n, _ in a.after.slots}
        workers = [f"w{i}" for i in range(len(nodes) * width)]
        stay = [w for i, w in enumerate(workers) if nodes[i // width] in kept]
        seq = channel.send("resize", stay)
        log.info("job %s: order %d: workers %s stay, %d leave", a.job_id, seq, ",".join(stay), len(workers) - len(stay))
        return True


def reconcile(store: Store, snapshot: ClusterSnapshot, clock: Callable[[], float]) -> list[str]:
    """Settle actions a previous daemon began and never finished, by what Slurm shows now.

    A START counts as done when the job runs, a SHRINK when the job holds exactly the kept nodes,
    a DROP when the job is gone; otherwise the action is recorded as failed (the next round plans
    again from what really is). Nothing is re-executed blindly.

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
        elif a.kind is ActionKind.START:
            ok = job is not None and job.state is JobState.RUNNING
        elif a.kind is ActionKind.SHRINK:
            ok = job is not None and {n for n, _ in job.placement.slots} == {n for n, _ in a.after.slots}
        else:
            ok = False
        msg = "found done after a restart" if ok else "found not done after a restart"
        store.finish_action(entry.id, ok, clock(), msg)
        lines.append(f"{a.kind.value} job {a.job_id}: {msg}")
    return lines
