"""The simulator's whole-block physics (``sim/blocks.py``): a running launcher job gives GPUs back only
as Slurm frees them, a node of its own allocation but the batch host or a whole satellite.

Found by ``bench fidelity --seed 4`` (docs/reproduce-results.md): the real daemon started every job
on one node's 2 GPUs and resized none (it cannot shrink a job on its batch host alone), while the
simulated ``dp`` shrank 4 jobs 9 times on the same trace; with the physics the replay resizes 1."""

from __future__ import annotations

from slurm_elastic.core.actions import Action, ActionKind
from slurm_elastic.core.model import ElasticMode, JobId, NodeName, Placement
from slurm_elastic.sim import blocks
from slurm_elastic.sim.cluster import VirtualCluster
from slurm_elastic.sim.costs import ResizeCost
from slurm_elastic.sim.workload import SimJobSpec

A, B, C = NodeName("sim000"), NodeName("sim001"), NodeName("sim002")
SPEC = SimJobSpec("j", 0.0, "cifar10", 3, 1, 6, 96, 8, 128, 50_000, mode=ElasticMode.ENDO)


def _cluster(whole_blocks: bool) -> VirtualCluster:
    cluster = VirtualCluster(3, 2, ResizeCost.parse("0"), fit_progress=False, whole_blocks=whole_blocks)
    cluster.arrive(SPEC)
    return cluster


def _act(cluster: VirtualCluster, kind: ActionKind, after: Placement) -> Placement:
    before = cluster.jobs["j"].placement
    cluster.apply(cluster.observe(), (Action(kind, JobId("j"), before, after, 96, 96 // after.num_gpus, 1, 0.1),))
    return cluster.jobs["j"].placement


def _blocks_seen(cluster: VirtualCluster) -> tuple[tuple[NodeName, int], ...] | None:
    (job,) = cluster.observe().jobs
    return job.release_blocks


def test_a_job_on_its_batch_host_alone_cannot_shrink() -> None:
    cluster = _cluster(True)
    two = Placement(((A, (0, 1)),))
    assert _act(cluster, ActionKind.START, two) == two
    assert _blocks_seen(cluster) == ()  # the planner is told: no size below 2
    assert _act(cluster, ActionKind.SHRINK, Placement(((A, (0,)),))) == two  # Slurm frees none of it
    assert cluster.jobs["j"].local_batch == 48  # the batch follows the GPUs it really has


def test_without_the_physics_any_gpu_goes() -> None:
    cluster = _cluster(False)
    _act(cluster, ActionKind.START, Placement(((A, (0, 1)),)))
    assert _blocks_seen(cluster) is None
    assert _act(cluster, ActionKind.SHRINK, Placement(((A, (0,)),))) == Placement(((A, (0,)),))


def test_a_job_frees_its_other_nodes_and_its_satellites_whole() -> None:
    cluster = _cluster(True)
    _act(cluster, ActionKind.START, Placement(((A, (0, 1)), (B, (0, 1)))))
    assert _blocks_seen(cluster) == ((B, 2),)  # A is the batch host
    grown = _act(cluster, ActionKind.GROW, Placement(((A, (0, 1)), (B, (0, 1)), (C, (0, 1)))))
    assert grown.num_gpus == 6 and _blocks_seen(cluster) == ((B, 2), (C, 2))  # the satellite on C
    # The plan keeps one GPU of C and frees B: B goes whole, and one of C's cannot go alone.
    left = _act(cluster, ActionKind.SHRINK, Placement(((A, (0, 1)), (C, (0,)))))
    assert left == Placement(((A, (0, 1)), (C, (0, 1)))) and _blocks_seen(cluster) == ((C, 2),)
    assert _act(cluster, ActionKind.SHRINK, Placement(((A, (0, 1)),))) == Placement(((A, (0, 1)),))
    assert _blocks_seen(cluster) == ()


def test_a_shrink_frees_the_blocks_the_plan_leaves_out_then_the_latest() -> None:
    before = Placement(((A, (0, 1)), (B, (0, 1)), (C, (0, 1))))
    have = ((B, (0, 1)), (C, (0, 1)))
    left, rest = blocks.after_shrink(have, before, Placement(((A, (0, 1)), (C, (0, 1)))))
    assert left == Placement(((A, (0, 1)), (C, (0, 1)))) and rest == ((C, (0, 1)),)
    left, rest = blocks.after_shrink(have, before, Placement(((A, (0, 1)), (B, (0,)), (C, (0,)))))
    assert left == Placement(((A, (0, 1)), (B, (0, 1)))) and rest == ((B, (0, 1)),)  # neither left out: the latest
    assert blocks.after_shrink((), before, Placement(((A, (0,)),))) == (before, ())


def test_the_fewest_blocks_that_free_exactly_else_the_most_within() -> None:
    assert blocks._choose([1, 2, 3], 3) == (2,)  # one block of 3 before 1 + 2
    assert blocks._choose([2, 2], 3) == (0,)  # 3 cannot be freed: 2 is the most within it
    assert blocks._choose([4], 3) == ()
    assert blocks._choose([1] * 20, 5) == (0, 1, 2, 3, 4)  # beyond the exact search: in order


def test_a_grow_adds_one_block_per_node_it_adds_gpus_on() -> None:
    before = Placement(((A, (0,)),))
    after = Placement(((A, (0, 1)), (B, (0, 1))))
    assert blocks.after_grow((), before, after) == ((A, (1,)), (B, (0, 1)))
    assert blocks.after_start(after) == ((B, (0, 1)),)
