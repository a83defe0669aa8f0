"""Jobs without the launcher: started, dropped, preempted, and resized by a requeue.

This module owns the Slurm commands of every action on a job that cannot be resized in place
(found by experiment on 22.05, docs/slurm-acting.md):

* **START** a pending elastic job (held by ``job_submit.lua`` for a few seconds) at a size:
  ``scontrol update JobId=J NumNodes=N-N TresPerNode=gres:gpu:G NodeList=<nodes>`` then
  ``scontrol update JobId=J StartTime=now``. Slurm gives the same GPU count on every node of a
  job, so an unequal placement starts at the largest equal shape inside it (``N`` nodes x the
  smallest count); the next round sees the difference.
* **DROP** (the IBM autoscaler's drop mode): ``scancel J`` (and its satellites).
* **PREEMPT**: ``scontrol requeue J``; the job waits again and a later round starts it.
* **GROW, SHRINK, MOVE** of a job without the launcher, the checkpoint-restart fallback:
  ``scontrol requeuehold J`` (then wait until ``squeue`` shows it PENDING),
  ``scontrol update JobId=J NumNodes=N-N TresPerNode=... NodeList=...``, ``scontrol release J``,
  ``scontrol update JobId=J StartTime=now`` (the job restarts from its own checkpoint). The
  release waits ``CREDENTIAL_WAIT_S`` after the job is back in the queue: slurmd revokes the
  job's credential when it kills the old run and refuses a launch whose credential was made in
  the same second ("Job credential revoked", the job then FAILS); one second later it reissues it
  (seen on Slurm 22.05, in 5 of 6 immediate restarts).

Each command is a journaled step (:class:`~slurm_elastic.slurm.steps.Steps`), so a daemon that
dies in between resumes the requeue path (:mod:`slurm_elastic.act.journal`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import partial

from slurm_elastic.act.context import Hands
from slurm_elastic.core.actions import Action, ActionKind
from slurm_elastic.core.model import ClusterSnapshot, Placement
from slurm_elastic.slurm.records import JobRecord
from slurm_elastic.slurm.satellites import NotExpressible
from slurm_elastic.slurm.steps import Steps, step_of

NEEDS_LAUNCHER = "needs the in-job launcher"
UNSTARTABLE = frozenset({"SUSPENDED", "REQUEUE_HOLD", "COMPLETING"})
"""Slurm states of a waiting job that ``StartTime=now`` does not start. A requeued job still
completing (25.11: ``PENDING`` with the flag; 22.05: ``COMPLETING``) gets its begin time set two
minutes ahead when the requeue completes, undoing a start sent before: it is started next round."""
REQUEUE_WAIT_S = 30.0
CREDENTIAL_WAIT_S = 1.1


def shape(jid: str, after: Placement, rec: JobRecord | None = None) -> list[str]:
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


def shape_argv(jid: str, after: Placement, rec: JobRecord | None = None) -> list[str]:
    """The ``scontrol update`` that sizes job ``jid`` to ``after`` (:func:`shape`)."""
    return ["scontrol", "update", f"JobId={jid}", *shape(jid, after, rec)]


def commands(snapshot: ClusterSnapshot, action: Action, rec: JobRecord | None = None) -> list[list[str]]:
    """The argv lists that carry out ``action`` on a job *without* the launcher (pure); ``rec``, the
    job's record, sizes its tasks with its nodes (:func:`shape`).

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
        return [shape_argv(jid, action.after, rec), ["scontrol", "update", f"JobId={jid}", "StartTime=now"]]
    if kind in (ActionKind.GROW, ActionKind.SHRINK, ActionKind.MOVE):
        return requeue_path(jid, shape_argv(jid, action.after, rec))
    raise NotExpressible(f"job {jid}: {kind.value} {NEEDS_LAUNCHER} (a restart only to change the batch is refused)")


def requeue_path(jid: str, shaped: list[str]) -> list[list[str]]:
    """The four commands that resize job ``jid`` by a requeue, ``shaped`` its ``scontrol update``."""
    return [["scontrol", "requeuehold", jid], shaped, ["scontrol", "release", jid],
            ["scontrol", "update", f"JobId={jid}", "StartTime=now"]]


def refuse_unstartable(a: Action, rec: JobRecord | None) -> None:
    """Refuse a START of a job Slurm would not start now.

    Raises:
        NotExpressible: the job is suspended, held or still completing.
    """
    if a.kind is ActionKind.START and rec is not None and set(rec.slurm_state) & UNSTARTABLE:
        raise NotExpressible(f"job {a.job_id} is {'+'.join(rec.slurm_state)}: a suspended, held or still "
                             "completing job is not started (it waits until it is resumed, released or done "
                             "completing)")


def carry_out(hands: Hands, snapshot: ClusterSnapshot, a: Action, rec: JobRecord | None, steps: Steps) -> str:
    """Carry out ``a`` on a job without the launcher by its commands, each a journaled step; the note."""
    for argv in commands(snapshot, a, rec):
        steps.run(step_of(argv), partial(run, hands, argv), argv=list(argv))
    if a.kind is ActionKind.DROP:
        hands.cancel_satellites(a.job_id)
    return "requeued at the new size" if a.kind in (ActionKind.GROW, ActionKind.SHRINK, ActionKind.MOVE) else ""


def run(hands: Hands, argv: Sequence[str]) -> None:
    """Run one command of the requeue path, a start, a preemption or a drop."""
    hands.runner(argv)
    if argv[:2] == ["scontrol", "requeuehold"]:
        wait_requeued(hands, argv[2])


def wait_requeued(hands: Hands, jid: str) -> None:
    """Wait until a requeued job is back in the queue (``squeue -h -j J -o %T`` shows PENDING),
    then ``CREDENTIAL_WAIT_S`` more (module docstring).

    Its update, release and start are ignored while it is still COMPLETING.
    """
    deadline = time.monotonic() + REQUEUE_WAIT_S
    while (state := hands.runner(["squeue", "-h", "-j", jid, "-o", "%T"]).strip()) != "PENDING":
        if time.monotonic() > deadline:
            raise NotExpressible(f"job {jid}: still {state or 'gone'} {REQUEUE_WAIT_S:.0f} s after requeuehold")
        hands.sleep(0.2)
    hands.sleep(CREDENTIAL_WAIT_S)
