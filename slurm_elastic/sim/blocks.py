"""Whole-block releases: what Slurm can free of a running launcher job, as the simulator plays it.

This module owns the ``whole_blocks`` physics of :class:`~slurm_elastic.sim.cluster.VirtualCluster`
(off unless asked for; ``bench fidelity`` has it as a rung). On Slurm a running launcher job gives
GPUs back only in whole blocks (docs/slurm-acting.md, :func:`slurm_elastic.observe.snapshot.fold`):

* a node of its own allocation other than the batch host, whose GPUs go together when Slurm is
  told the job's new node list (the batch host's never go: Slurm refuses to take it);
* a whole satellite, the allocation a grow added on one node.

So a job started on one node cannot shrink at all, and one started on two nodes of 2 GPUs can go to
2 but not to 3. The daemon's snapshot says so (``Job.release_blocks``), and the site guards round
each planned shrink up to a size the job can reach; the simulator without this physics frees any
GPU, so it shrinks jobs that the real cluster keeps at their size.

How the simulator plays it (:func:`after_start`, :func:`after_grow`, :func:`after_shrink`): the
batch host is the first node of the placement a job starts on (Slurm's first node of the
allocation); every other node is a block; a grow adds one block per node it adds GPUs on (a
satellite each); a shrink frees whole blocks: the fewest, of those the plan's placement leaves out
first and then the latest added, whose GPUs add up to what the plan frees, or the most that stays
within it (the guards' rounding, should a planner without them ask for a size in between). A move
(the same count elsewhere) starts the blocks again from its new placement.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from slurm_elastic.core.model import NodeName, Placement

Block = tuple[NodeName, tuple[int, ...]]
"""GPUs Slurm frees together: a node's GPUs of the job's own allocation, or one satellite's."""

EXACT_SEARCH_BLOCKS = 12
"""Up to this many blocks a shrink searches every combination; beyond it, it takes blocks in order."""


def after_start(placement: Placement) -> tuple[Block, ...]:
    """The blocks of a job started on ``placement``: each node but the first (the batch host)."""
    return tuple((node, gpus) for node, gpus in placement.slots[1:])


def after_grow(blocks: Sequence[Block], before: Placement, after: Placement) -> tuple[Block, ...]:
    """The blocks after growing from ``before`` to ``after``: a new one per node with GPUs added."""
    held = before.gpu_set()
    added = tuple((node, tuple(g for g in gpus if (node, g) not in held)) for node, gpus in after.slots)
    return tuple(blocks) + tuple((node, gpus) for node, gpus in added if gpus)


def after_shrink(blocks: Sequence[Block], before: Placement, after: Placement) -> tuple[Placement, tuple[Block, ...]]:
    """The placement and blocks a shrink from ``before`` towards ``after`` really leaves (module
    docstring): ``before`` less the whole blocks freed, which may be fewer GPUs than the plan frees."""
    need = before.num_gpus - after.num_gpus
    kept = after.gpu_set()
    # Preference: blocks the plan leaves out entirely first, then the latest added (a satellite).
    order = sorted(range(len(blocks)), key=lambda i: (any((blocks[i][0], g) in kept for g in blocks[i][1]), -i))
    chosen = _choose([len(blocks[i][1]) for i in order], need)
    freed = {order[k] for k in chosen}
    gone = {(blocks[i][0], g) for i in freed for g in blocks[i][1]}
    left = Placement.of(gpu for gpu in sorted(before.gpu_set()) if gpu not in gone)
    return left, tuple(b for i, b in enumerate(blocks) if i not in freed)


def _choose(sizes: Sequence[int], need: int) -> tuple[int, ...]:
    """Indices into ``sizes`` (taken in their order of preference) whose sum is ``need`` with the fewest
    blocks, the earliest combination first; without one, the combination whose sum is the largest
    below ``need``."""
    if need <= 0 or not sizes:
        return ()
    if len(sizes) > EXACT_SEARCH_BLOCKS:
        out, total = [], 0
        for i, n in enumerate(sizes):
            if total + n <= need:
                out.append(i)
                total += n
        return tuple(out)
    best: tuple[int, ...] = ()
    best_sum = 0
    for r in range(1, len(sizes) + 1):
        for combo in itertools.combinations(range(len(sizes)), r):
            total = sum(sizes[i] for i in combo)
            if total == need:
                return combo
            if best_sum < total < need:
                best, best_sum = combo, total
    return best
