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
  host cannot leave: Slurm refuses those and the refusal is recorded).
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
from collections.abc import Callable, Sequence

from slurm_elastic.core.actions import Action, ActionKind
from slurm_elastic.core.model import ClusterSnapshot, JobState
from slurm_elastic.core.rounds import ActionOutcome
from slurm_elastic.errors import ElasticError
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

    def __init__(self, runner: Runner, store: Store, clock: Callable[[], float]) -> None:
        self.runner, self.store, self.clock = runner, store, clock

    def apply(self, snapshot: ClusterSnapshot, actions: tuple[Action, ...]) -> tuple[ActionOutcome, ...]:
        """Run each action's commands in order; one failure never stops the others."""
        out: list[ActionOutcome] = []
        for a in actions:
            aid = self.store.begin_action(a, self.clock())
            try:
                for argv in commands(snapshot, a):
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
