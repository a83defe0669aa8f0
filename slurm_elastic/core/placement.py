"""Turning planned GPU counts into concrete GPUs, with as little movement as possible.

This module owns :func:`place`: given how many GPUs each job should have, pick which GPUs. Rules,
in order of importance:

1. a running job keeps the schedulable GPUs it holds (a worker that stays never moves; workers on
   draining or down nodes must move); a shrinking job gives up GPUs on the nodes where it has the
   fewest first, so what remains spans as few nodes as possible, and a job whose GPUs are freed
   only in whole blocks (``Job.release_blocks``) gives up whole blocks, so the GPUs the plan frees
   (and gives to others) are those Slurm frees;
2. a growing job takes free GPUs on the nodes it already uses first;
3. everything else is packed best-fit: a request that fits in one node goes to the UP node whose
   free GPUs fit it most tightly; larger requests take whole free nodes first.

Placing never fails when the counts fit the schedulable GPUs: packing is a preference, not a rule
(see :func:`slurm_elastic.core.constraints.placement_score`). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from slurm_elastic.core.model import ClusterSnapshot, Job, JobId, NodeName, NodeState, Placement
from slurm_elastic.errors import InvalidPlanError

T = TypeVar("T")


class _FreePool:
    """Free GPUs per node, with nodes bucketed by free count for O(gpus-per-node) best fit."""

    def __init__(self, free: dict[NodeName, list[int]], width: int) -> None:
        self.free = free
        self.buckets: list[dict[NodeName, None]] = [{} for _ in range(width + 1)]
        for node, gpus in free.items():
            self.buckets[len(gpus)][node] = None
        self.total = sum(len(g) for g in free.values())

    def take(self, node: NodeName, n: int) -> list[int]:
        gpus = self.free[node]
        got, rest = gpus[:n], gpus[n:]
        del self.buckets[len(gpus)][node]
        self.free[node] = rest
        self.buckets[len(rest)][node] = None
        self.total -= len(got)
        return got

    def best_fit(self, n: int) -> NodeName | None:
        """The node with the fewest free GPUs that still has ``n`` (or the fullest node if none)."""
        for size in range(n, len(self.buckets)):
            if self.buckets[size]:
                return next(iter(self.buckets[size]))
        for size in range(min(n, len(self.buckets)) - 1, 0, -1):
            if self.buckets[size]:
                return next(iter(self.buckets[size]))
        return None


def _blocks_to_free(job: Job, per_node: Mapping[NodeName, list[int]], free: int,
                    order: Mapping[NodeName, int]) -> list[tuple[NodeName, int]] | None:
    """Whole ``Job.release_blocks`` totalling ``free`` GPUs, those on the nodes where the job has
    the fewest GPUs (then the last nodes) first; ``None`` when the job has no blocks or none add up."""
    if job.release_blocks is None or free <= 0:
        return None
    ranked = sorted(job.release_blocks, key=lambda b: (len(per_node.get(b[0], ())), -order.get(b[0], 0)))
    return subset_summing(ranked, lambda b: b[1], free)


def subset_summing(items: Sequence[T], size: Callable[[T], int], total: int) -> list[T] | None:
    """Items (preferring earlier ones) whose sizes sum to exactly ``total`` > 0; a subset-sum search."""
    reach: dict[int, list[T]] = {0: []}
    for item in items:
        n = size(item)
        for got in sorted(reach, reverse=True):
            if got + n <= total and got + n not in reach:
                reach[got + n] = [*reach[got], item]
    return reach.get(total) if total > 0 else None


def place(snapshot: ClusterSnapshot, counts: Mapping[JobId, int]) -> dict[JobId, Placement]:
    """Choose concrete GPUs for planned GPU counts.

    Args:
        snapshot: the cluster now.
        counts: GPUs wanted per elastic job (jobs absent or at 0 get nothing).

    Returns:
        Placement per job with a positive count.

    Raises:
        InvalidPlanError: the counts exceed the schedulable GPUs.
    """
    order = {n.name: i for i, n in enumerate(snapshot.nodes)}
    width = max((len(n.gpus) for n in snapshot.nodes), default=0)
    wanted = {j: c for j, c in counts.items() if c > 0}
    sched = snapshot.schedulable_set()
    held: dict[JobId, dict[NodeName, list[int]]] = {}
    kept: dict[JobId, Placement] = {}  # jobs planned at their size on GPUs all still schedulable: unchanged
    taken: set[tuple[NodeName, int]] = set()
    for job in snapshot.jobs:
        k = wanted.get(job.job_id, 0)
        if not k:
            continue
        if not job.placement.slots:  # a waiting job holds nothing to keep or shrink
            held[job.job_id] = {}
            continue
        owned = job.placement.gpu_set()
        if k == len(owned) and owned <= sched:
            kept[job.job_id] = job.placement
            taken |= owned
            continue
        per_node: dict[NodeName, list[int]] = {}
        for node, gpus in job.placement.slots:
            keep = [g for g in gpus if (node, g) in sched]
            if keep:
                per_node[node] = keep
        have = sum(len(g) for g in per_node.values())
        blocks = _blocks_to_free(job, per_node, have - k, order) if have == job.num_gpus else None
        for node, n in blocks or ():  # whole release blocks: what the plan frees is what Slurm frees
            per_node[node] = per_node[node][: len(per_node[node]) - n]
            have -= n
        # Shrink: leave the nodes where the job has fewest GPUs first.
        for node in sorted(per_node, key=lambda n: (len(per_node[n]), -order[n])):
            if have <= k:
                break
            drop = min(have - k, len(per_node[node]))
            per_node[node] = per_node[node][: len(per_node[node]) - drop]
            have -= drop
        held[job.job_id] = {n: g for n, g in per_node.items() if g}
        taken.update((n, g) for n, gs in held[job.job_id].items() for g in gs)

    free: dict[NodeName, list[int]] = {}
    for nd in snapshot.nodes:
        if nd.state is NodeState.UP:
            free[nd.name] = [gpu[1] for gpu in nd.gpu_pairs() if gpu in sched and gpu not in taken]
    pool = _FreePool(free, width)
    need = {j: wanted[j] - sum(map(len, held.get(j, {}).values())) for j in wanted if j not in kept}
    if sum(n for n in need.values() if n > 0) > pool.total:
        raise InvalidPlanError(
            (f"planned {sum(wanted.values())} GPUs but only {len(sched)} are schedulable",)
        )
    # Grow in place first: free GPUs on nodes the job already uses.
    for job_id, per_node in held.items():
        if not per_node:
            continue
        for node in sorted(per_node, key=lambda n: -len(per_node[n])):
            if need[job_id] <= 0:
                break
            if pool.free.get(node):
                got = pool.take(node, min(need[job_id], len(pool.free[node])))
                per_node[node] = per_node[node] + got
                need[job_id] -= len(got)
    # Pack the rest, largest request first.
    for job_id in sorted((j for j in need if need[j] > 0), key=lambda j: (-need[j], j)):
        per_node = held.setdefault(job_id, {})
        while need[job_id] > 0:
            n = need[job_id]
            fit = pool.best_fit(min(n, width))
            if fit is None:
                raise InvalidPlanError((f"no free GPU left for job {job_id}",))
            node = fit
            got = pool.take(node, min(n, len(pool.free[node])))
            per_node[node] = per_node.get(node, []) + got
            need[job_id] -= len(got)
    current = {j.job_id: j.placement for j in snapshot.jobs if j.job_id in held}
    out: dict[JobId, Placement] = dict(kept)
    for j, per_node in held.items():
        if not per_node:
            continue
        now = current.get(j)
        if now is not None and sum(map(len, per_node.values())) == now.num_gpus and all(
            (n, g) in now.gpu_set() for n, gs in per_node.items() for g in gs
        ):
            out[j] = now  # unchanged: keep the very same value
        else:
            out[j] = Placement.of_nodes(per_node)
    return out
