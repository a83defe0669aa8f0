"""Acting is a diff: the actions that take the cluster from a snapshot to a plan.

This module owns :class:`Action` (one thing to do to one job) and :func:`diff`, which touches only
jobs whose configuration changed. Translating an action into Slurm commands is the adapters' job
(``slurm_elastic.slurm``); the simulator applies the same actions to its virtual cluster. Pure.

Action kinds (the state machine of one job across rounds)::

    waiting --START--> running --SHRINK/GROW/MOVE/REBATCH--> running --PREEMPT--> waiting
    waiting --DROP--> finished (rejected)
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from slurm_elastic.core.model import (
    ClusterSnapshot,
    ElasticMode,
    Job,
    JobId,
    JobPlan,
    JobState,
    NodeName,
    Placement,
    Plan,
)


class ActionKind(enum.Enum):
    """What to do to a job (see the module docstring for the transitions)."""

    START = "start"
    SHRINK = "shrink"
    GROW = "grow"
    MOVE = "move"
    REBATCH = "rebatch"
    PREEMPT = "preempt"
    DROP = "drop"


@dataclass(frozen=True, slots=True)
class Action:
    """One change to one job.

    Attributes:
        kind: what to do.
        job_id: the job.
        before: GPUs held now.
        after: GPUs it should hold (empty for PREEMPT/DROP).
        global_batch, local_batch, accumulation, lr: the new configuration (0 when stopping).
        reason: why (for the log and for a dropped job's user).
    """

    kind: ActionKind
    job_id: JobId
    before: Placement
    after: Placement
    global_batch: int = 0
    local_batch: int = 0
    accumulation: int = 1
    lr: float = 0.0
    reason: str = ""


def _to(kind: ActionKind, before: Placement, jp: JobPlan) -> Action:
    return Action(kind, jp.job_id, before, jp.placement, jp.global_batch, jp.local_batch, jp.accumulation, jp.lr)


def _config_changed(job: Job, jp: JobPlan) -> bool:
    """Whether a running job kept on its GPUs must change its batch to follow the plan.

    An exo-elastic job trains ``local_batch`` per GPU on every GPU, so its per-GPU batch is its whole
    configuration: a plan's global batch that its GPUs do not divide (a fixed batch of 20 on 3 GPUs
    runs 7 per GPU) is the batch the job already runs. An endo-elastic job keeps its user's batch, so
    a plan that names another one changes it; its per-GPU batch is the launcher's split of that
    batch over its workers (``round(B / k)``, which a plan's ``ceil(B / k)`` need not match), never
    a change on its own.
    """
    if job.mode is ElasticMode.ENDO:
        return job.base_batch != jp.global_batch
    return job.local_batch != jp.local_batch


def _in_place(job: Job, jp: JobPlan, sched: frozenset[tuple[NodeName, int]]) -> JobPlan | None:
    """What can be done now of ``jp`` to a running job resized only in place (``job.release_blocks``
    set: a launcher job, which frees GPUs only in whole blocks and is never moved in one step).

    * a grow, or a shrink that frees whole blocks or only GPUs the job may keep (on UP nodes): ``jp``;
    * a move (GPUs given up and others taken, as when the job holds GPUs on a draining node, which
      are not schedulable): its shrink part, the GPUs it keeps of ``jp``'s, when the GPUs it gives
      up are whole blocks; the planner grows it next round, once the shrink shows in Slurm;
    * a shrink or a move that would give up GPUs it cannot free (the batch host's node, a
      satellite spanning nodes) on a node that is not UP: ``None``, no action: the job stays
      there until it ends, as a rigid job does (refused, such an action came back every round).
    """
    now, new = job.placement.gpu_set(), jp.placement.gpu_set()
    gone = now - new
    if not gone:
        return jp
    held: dict[NodeName, int] = {n: len(g) for n, g in job.placement.slots}
    blocks: dict[NodeName, int] = {}
    for node, n in job.release_blocks or ():
        blocks[node] = blocks.get(node, 0) + n
    shed: dict[NodeName, int] = {}
    for node, _ in gone:
        shed[node] = shed.get(node, 0) + 1
    whole = all(n == held[node] == blocks.get(node, 0) for node, n in shed.items())
    if new < now:
        return jp if whole or gone <= sched else None
    kept = now & new
    if not whole or not kept:
        return None
    share = len(kept) / len(new)
    return JobPlan(jp.job_id, Placement.of(sorted(kept)),
                   jp.global_batch if job.mode is ElasticMode.ENDO else jp.local_batch * jp.accumulation * len(kept),
                   jp.local_batch, jp.accumulation, jp.lr if job.mode is ElasticMode.ENDO else jp.lr * share)


def diff(snapshot: ClusterSnapshot, plan: Plan) -> tuple[Action, ...]:
    """Actions turning ``snapshot`` into ``plan``, in a safe order.

    Stops (PREEMPT, DROP) and SHRINKs come first so that the GPUs they free exist before STARTs,
    GROWs and MOVEs claim them. Jobs whose GPUs and batch are unchanged get no action, and neither
    does a job with an in-flight action (``snapshot.in_flight``) towards the planned GPU count:
    it is already on its way there. A job resized only in place (``Job.release_blocks`` set) is
    never moved: it gets what can be done of its plan now (:func:`_in_place`), compared with what
    is in flight in the same way.

    Args:
        snapshot: the cluster now.
        plan: the validated plan.

    Returns:
        The actions, stops and shrinks first, then the rest, each group by job id.
    """
    planned = plan.by_job()
    dropped = {u.job_id: u.reason for u in plan.unplaced if u.dropped}
    waiting_reason = {u.job_id: u.reason for u in plan.unplaced}
    first: list[Action] = []
    then: list[Action] = []
    sched = snapshot.schedulable_set()
    for job in snapshot.elastic_jobs():
        jp = planned.get(job.job_id)
        if jp is not None and job.release_blocks is not None and job.state is JobState.RUNNING:
            jp = _in_place(job, jp, sched)
            if jp is None:  # it cannot leave GPUs the plan takes from it: left where it is
                continue
        flying = snapshot.in_flight_for(job.job_id)
        if flying is not None and flying.target_gpus == (jp.num_gpus if jp is not None else 0):
            continue
        if jp is None:
            if job.job_id in dropped and job.is_waiting:
                first.append(Action(ActionKind.DROP, job.job_id, job.placement, Placement(),
                                    reason=dropped[job.job_id]))
            elif job.state is JobState.RUNNING:
                first.append(Action(ActionKind.PREEMPT, job.job_id, job.placement, Placement(),
                                    reason=waiting_reason.get(job.job_id, "")))
            continue
        if job.state is not JobState.RUNNING:
            then.append(_to(ActionKind.START, job.placement, jp))
            continue
        now_gpus, new_gpus = job.placement.gpu_set(), jp.placement.gpu_set()
        if now_gpus == new_gpus:
            if _config_changed(job, jp):
                then.append(_to(ActionKind.REBATCH, job.placement, jp))
            continue
        if new_gpus < now_gpus:
            first.append(_to(ActionKind.SHRINK, job.placement, jp))
        elif new_gpus > now_gpus:
            then.append(_to(ActionKind.GROW, job.placement, jp))
        else:
            then.append(_to(ActionKind.MOVE, job.placement, jp))
    first.sort(key=lambda a: a.job_id)
    then.sort(key=lambda a: a.job_id)
    return tuple(first + then)
