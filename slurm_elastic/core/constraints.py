"""Hard rules every plan must obey, and the placement score.

This module owns :func:`plan_violations` / :func:`validate_plan` (the rules a plan is refused for)
and :func:`placement_score` (how well a plan packs jobs onto nodes, a score and never a rule). The
actuator refuses a plan that fails :func:`validate_plan`; property tests assert every planner's
output passes it. Pure: no I/O.

Rules:

1. every planned job exists in the snapshot, is elastic and active, and is planned once;
2. every GPU exists and is schedulable: on an UP node, and free or held by an elastic job;
3. no GPU is given to two jobs;
4. the GPU count lies in the job's ``min_gpus..max_gpus``;
5. the global batch lies in the job's ``min_batch..max_batch`` (exo) or equals its base batch
   (endo), and a GPU gets at least one sample (``global_batch >= k``);
6. the per-GPU batch fits: ``local_batch <= max_local_batch`` and
   ``local_batch * k * accumulation >= global_batch`` (every sample of the batch has a slot);
7. the learning rate is positive.
"""

from __future__ import annotations

import math

from slurm_elastic.core.model import (
    ClusterSnapshot,
    ElasticMode,
    JobId,
    JobPlan,
    NodeName,
    NodeState,
    Plan,
)
from slurm_elastic.errors import InvalidPlanError


def plan_violations(snapshot: ClusterSnapshot, plan: Plan) -> tuple[str, ...]:
    """Every hard rule the plan breaks, as readable sentences (empty when valid).

    Args:
        snapshot: the snapshot the plan was made from.
        plan: the plan to check.

    Returns:
        One message per violation, naming the job, the value and the rule.
    """
    out: list[str] = []
    jobs = {j.job_id: j for j in snapshot.jobs}
    states = {n.name: n.state for n in snapshot.nodes}
    schedulable = snapshot.schedulable_set()
    used: dict[tuple[NodeName, int], JobId] = {}
    seen: set[JobId] = set()
    for jp in plan.jobs:
        job = jobs.get(jp.job_id)
        if job is None:
            out.append(f"job {jp.job_id}: not in the snapshot")
            continue
        if jp.job_id in seen:
            out.append(f"job {jp.job_id}: planned twice")
        seen.add(jp.job_id)
        if not job.elastic or not job.is_active:
            what = "rigid" if not job.elastic else job.state.value
            out.append(f"job {jp.job_id}: is {what}, the planner may not place it")
            continue
        gpus = jp.placement.gpu_set()
        if gpus <= schedulable and used.keys().isdisjoint(gpus):  # the usual case, checked by whole sets
            used.update(dict.fromkeys(gpus, jp.job_id))
        else:
            out.extend(_gpu_violations(jp, states, schedulable, used))
        out.extend(_sizing_violations(job.job_id, jp, job.min_gpus, job.max_gpus,
                                      job.min_batch, job.max_batch, job.max_local_batch,
                                      job.base_batch if job.mode is ElasticMode.ENDO else None))
    return tuple(out)


def _gpu_violations(jp: JobPlan, states: dict[NodeName, NodeState], schedulable: frozenset[tuple[NodeName, int]],
                    used: dict[tuple[NodeName, int], JobId]) -> list[str]:
    """Each of the plan's GPUs that is not schedulable or is given twice, in GPU order (``used`` gains them)."""
    out = []
    for gpu in sorted(jp.placement.gpu_set()):
        node, idx = gpu
        if gpu not in schedulable:
            state = states.get(node)
            why = "unknown" if state is None else (
                f"node is {state.value}" if state is not NodeState.UP else "held by a rigid job")
            out.append(f"job {jp.job_id}: GPU {node}:{idx} is not schedulable ({why})")
        other = used.get(gpu)
        if other is not None:
            out.append(f"GPU {node}:{idx} is given to jobs {other} and {jp.job_id}")
        used[gpu] = jp.job_id
    return out


def _sizing_violations(
    job_id: JobId,
    jp: JobPlan,
    min_gpus: int,
    max_gpus: int,
    min_batch: int,
    max_batch: int,
    max_local: int,
    fixed_batch: int | None,
) -> list[str]:
    out: list[str] = []
    k = jp.num_gpus
    if not min_gpus <= k <= max_gpus:
        out.append(f"job {job_id}: {k} GPUs outside its range {min_gpus}:{max_gpus}")
    if fixed_batch is not None and jp.global_batch != fixed_batch:
        out.append(f"job {job_id}: endo-elastic global batch {jp.global_batch} must stay {fixed_batch}")
    if not min_batch <= jp.global_batch <= max_batch:
        out.append(f"job {job_id}: global batch {jp.global_batch} outside its range {min_batch}:{max_batch}")
    if k > 0 and jp.global_batch < k:
        out.append(f"job {job_id}: global batch {jp.global_batch} leaves some of its {k} GPUs without a sample")
    if not 1 <= jp.local_batch <= max_local:
        out.append(f"job {job_id}: per-GPU batch {jp.local_batch} outside 1:{max_local} (GPU memory limit)")
    if jp.accumulation < 1:
        out.append(f"job {job_id}: accumulation {jp.accumulation} must be >= 1")
    elif k > 0 and jp.local_batch * k * jp.accumulation < jp.global_batch:
        out.append(
            f"job {job_id}: {k} GPUs x per-GPU batch {jp.local_batch} x accumulation {jp.accumulation} "
            f"cannot hold global batch {jp.global_batch}"
        )
    if not (jp.lr > 0 and math.isfinite(jp.lr)):
        out.append(f"job {job_id}: learning rate {jp.lr} must be a positive number")
    return out


def validate_plan(snapshot: ClusterSnapshot, plan: Plan) -> None:
    """Raise :class:`InvalidPlanError` listing every rule the plan breaks.

    Args:
        snapshot: the snapshot the plan was made from.
        plan: the plan to check.

    Raises:
        InvalidPlanError: the plan breaks at least one rule.
    """
    violations = plan_violations(snapshot, plan)
    if violations:
        raise InvalidPlanError(violations)


def placement_score(plan: Plan, gpus_per_node: int) -> float:
    """Extra nodes spanned beyond the minimum, summed over jobs (0 is perfectly packed).

    A job on ``k`` GPUs needs at least ``ceil(k / gpus_per_node)`` nodes; every node more adds
    inter-node synchronisation. This is a score to report and compare, never a rule.
    """
    if gpus_per_node < 1:
        raise ValueError(f"gpus_per_node {gpus_per_node} must be >= 1")
    return float(
        sum(
            jp.placement.num_nodes - math.ceil(jp.num_gpus / gpus_per_node)
            for jp in plan.jobs
            if jp.num_gpus
        )
    )
