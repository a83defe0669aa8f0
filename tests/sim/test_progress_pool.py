"""The completed jobs' progress points the ONES fit draws from (issue 39, item 2, a million jobs): the
simulator keeps them as the jobs (spec, samples), not as points, so what it keeps per finished job is
bounded whatever the jobs' epochs, and the fit draws the very points the pooled list gave it."""

from __future__ import annotations

import gc
import math
import tracemalloc

import numpy as np
import pytest

import slurm_elastic.sim.progress_pool as progress_pool_module
from slurm_elastic.core.actions import Action, ActionKind
from slurm_elastic.core.model import JobId, Placement
from slurm_elastic.sim.cluster import VirtualCluster
from slurm_elastic.sim.costs import ResizeCost
from slurm_elastic.sim.progress_pool import ProgressPool
from slurm_elastic.workloads.philly import philly_like
from slurm_elastic_predictor.progress import JobHistory, bounded_uniform_sample


def _histories(samples: list[float]) -> tuple[ProgressPool, list[JobHistory]]:
    pool = ProgressPool()
    kept = []
    for spec, epochs in zip(philly_like(len(samples), 64, 3), samples, strict=True):
        history = pool.add(spec, epochs * spec.epoch_size)
        if history is not None:
            kept.append(history)
    return pool, kept


@pytest.mark.parametrize("max_points", [1, 7, 2000, 10**6])
@pytest.mark.parametrize("seed", [0, 5])
def test_the_pool_draws_the_points_the_pooled_histories_gave(max_points: int, seed: int) -> None:
    # whole epochs, epochs and a bit, less than one (no point), exactly one (no point: its end)
    samples = [float(x) for x in np.random.default_rng(seed).uniform(0.2, 60.0, 120)] + [1.0, 3.0, 0.5, 40.0]
    pool, histories = _histories(samples)
    assert pool.histories == len(histories) < len(samples)
    assert len(pool) == sum(len(h.points) for h in histories) > 2000
    want = bounded_uniform_sample(histories, max_points, np.random.default_rng(seed))
    assert pool.sample(max_points, np.random.default_rng(seed)) == want


def test_a_history_the_fit_refuses_marks_the_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    pool = ProgressPool()
    spec = philly_like(1, 64, 3)[0]
    pool.add(spec, 5.5 * spec.epoch_size)
    assert not pool.malformed
    monkeypatch.setattr(progress_pool_module, "job_reports", lambda spec, processed, batch: (1.0, math.nan))
    assert pool.add(spec, 5.5 * spec.epoch_size) is not None
    assert pool.malformed


def _run_to_end(cluster: VirtualCluster, specs: list) -> None:  # type: ignore[type-arg]
    node = cluster.node_names[0]
    for spec in specs:
        cluster.arrive(spec)
        cluster.observe()  # the planner's view of it
        job = cluster.active[spec.job_id]
        k = spec.requested_gpus if spec.requested_gpus <= cluster.gpus_per_node else 1
        cluster.apply(cluster.observe(), (Action(ActionKind.START, JobId(spec.job_id), Placement(),
                                                 Placement(((node, tuple(range(k))),)), spec.base_batch,
                                                 -(-spec.base_batch // k), 1, 0.1),))
        cluster.observe()
        cluster.advance(job.finish_at)
        assert cluster.complete_finished() == [job]


def test_what_the_simulator_keeps_per_finished_job_is_bounded_whatever_its_epochs() -> None:
    """A finished job of a trace that learns the progress model keeps at most a few KiB (its record),
    however many epochs it trained (130 on average here): its history's points (about 350 bytes
    each: 45 KiB a job here before, 0.9 KiB now) and its last view are not kept."""
    specs = philly_like(120, 64, 11)
    warm = VirtualCluster(16, 4, ResizeCost.parse("in-place"), fit_progress=True)
    _run_to_end(warm, specs[:20])  # imports, caches of the models' curves
    cluster = VirtualCluster(16, 4, ResizeCost.parse("in-place"), fit_progress=True)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        _run_to_end(cluster, specs)
        cluster.observe()
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    epochs = sum(j.samples / j.spec.epoch_size for j in cluster.finished)
    assert cluster.histories.histories > 90 and epochs / len(specs) > 20  # the jobs trained many epochs
    assert cluster.progress_model is not None  # the model was learned from them
    assert kept / len(specs) < 4096, f"{kept / len(specs):.0f} bytes kept per finished job"
