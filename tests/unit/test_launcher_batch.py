"""The simulator trains the batch the launcher makes of a plan (issue 39, item 5): on a GPU count that
does not divide the plan's global batch, an exo-elastic job's workers each train the order's
per-worker batch (``local_batch x accumulation``) and an endo-elastic job's ``round(B / k)``, so the
batch trained is ``k`` times that, not the plan's global batch."""

from __future__ import annotations

import pytest

from slurm_elastic.core.actions import Action, ActionKind
from slurm_elastic.core.model import ElasticMode, JobId, NodeName, Placement
from slurm_elastic.sim.cluster import VirtualCluster
from slurm_elastic.sim.costs import ResizeCost
from slurm_elastic.sim.job import launcher_batch
from slurm_elastic.sim.workload import SimJobSpec

NODE = NodeName("sim000")


def started(spec: SimJobSpec, gpus: int, global_batch: int, local_batch: int, accumulation: int = 1) -> VirtualCluster:
    cluster = VirtualCluster(1, 4, ResizeCost.parse("0"), fit_progress=False)
    cluster.arrive(spec)
    after = Placement(((NODE, tuple(range(gpus))),))
    cluster.apply(cluster.observe(), (Action(ActionKind.START, JobId(spec.job_id), Placement(), after, global_batch,
                                              local_batch, accumulation, 0.1),))
    return cluster


def test_an_exo_job_on_three_gpus_trains_three_times_its_per_gpu_batch() -> None:
    spec = SimJobSpec("e", 0.0, "cifar10", 3, 1, 4, 96, 8, 128, 50_000)
    job = started(spec, 3, 100, 34).jobs["e"]  # a plan's 100 on 3 GPUs: 34 per GPU, 102 trained
    speed = spec.model_truth.speed
    assert job.speed == pytest.approx(speed.throughput(102, 34, (3,), 1), rel=1e-12)
    assert job.rate == pytest.approx(job.speed / (spec.epoch_size * spec.epochs_needed(102)), rel=1e-12)


def test_an_endo_job_trains_the_launchers_rounded_share_on_each_worker() -> None:
    spec = SimJobSpec("n", 0.0, "cifar10", 4, 1, 4, 10, 10, 10, 50_000, mode=ElasticMode.ENDO)
    cluster = started(spec, 4, 10, 3)  # the plan: 3 per GPU; the launcher: round(10 / 4) = 2, so 8 trained
    job = cluster.jobs["n"]
    speed = spec.model_truth.speed
    assert job.speed == pytest.approx(speed.throughput(8, 2, (4,), 1), rel=1e-12)
    assert job.rate == pytest.approx(job.speed / (spec.epoch_size * spec.epochs_needed(8)), rel=1e-12)
    view = cluster.observe().jobs[0]  # the planner goes on seeing its plan's batch
    assert (view.local_batch, view.global_batch) == (3, 10)


def test_launcher_batch_rounds_and_splits_as_the_launcher() -> None:
    assert launcher_batch(ElasticMode.EXO, 3, 100, 34, 1, 64) == (102, 34, 1)
    assert launcher_batch(ElasticMode.EXO, 2, 100, 25, 2, 32) == (100, 25, 2)  # 50 per worker, 2 steps of 25
    assert launcher_batch(ElasticMode.EXO, 2, 90, 23, 2, 64) == (92, 46, 1)  # 46 per worker fits in one step
    assert launcher_batch(ElasticMode.ENDO, 4, 10, 3, 1, 64) == (8, 2, 1)  # round(2.5) is 2 (half to even)
    assert launcher_batch(ElasticMode.ENDO, 4, 14, 4, 1, 64) == (16, 4, 1)  # round(3.5) is 4
    assert launcher_batch(ElasticMode.ENDO, 3, 200, 23, 3, 30) == (201, 23, 3)  # 67 per worker: 3 steps of 23
    assert launcher_batch(ElasticMode.ENDO, 8, 3, 1, 1, 64) == (8, 1, 1)  # at least 1 per worker
