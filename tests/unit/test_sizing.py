"""Unit tests of batch/LR sizing and the b_opt search."""

from __future__ import annotations

import numpy as np

from slurm_elastic.core import sizing
from slurm_elastic.core.model import ElasticMode
from slurm_elastic.testing import make_job, shipped_profiles


def test_exo_batch_follows_gpus_and_lr_scales_linearly() -> None:
    job = make_job(1, max_gpus=8, requested_gpus=2)
    model = shipped_profiles()["cifar10"]
    s = sizing.size_for(job, 4, model)
    assert s is not None
    assert (s.global_batch, s.local_batch, s.accumulation) == (512, 128, 1)
    assert s.lr == job.base_lr * 512 / 256


def test_exo_batch_capped_by_limit() -> None:
    job = make_job(1, max_gpus=8)
    s = sizing.size_for(job, 4, shipped_profiles()["cifar10"], batch_limit=300)
    assert s is not None and s.global_batch == 300 and s.local_batch == 75


def test_endo_uses_accumulation_when_batch_does_not_fit() -> None:
    job = make_job(1, model="imagenet", mode=ElasticMode.ENDO, requested_gpus=8, max_gpus=8, max_local_batch=64)
    s = sizing.size_for(job, 2, shipped_profiles()["imagenet"])
    assert s is not None
    assert s.global_batch == 512 and s.accumulation == 4 and s.local_batch * 2 * 4 >= 512
    assert s.lr == job.base_lr


def test_best_exo_batch_matches_brute_force() -> None:
    model = shipped_profiles()["cifar10"]
    job = make_job(1, max_gpus=16, requested_gpus=4)
    for k in (1, 3, 4, 5, 8):
        s = sizing.best_exo_batch(job, k, model)
        assert s is not None
        bs = np.arange(max(job.min_batch, k), min(job.max_batch, k * model.max_local_batch) + 1)
        brute = model.throughput(bs, k).max()
        got = float(model.throughput(s.global_batch, k))
        assert got >= 0.995 * brute


def test_grid_zero_where_infeasible_and_spread_is_slower() -> None:
    job = make_job(1, max_gpus=8)
    grid = sizing.throughput_grid(job, shipped_profiles()["cifar10"], 8)
    assert grid[0, 0] == 0.0
    assert (grid[1:, 0] > 0).all()
    assert grid[4, 1] < grid[4, 0]


def test_fixed_batch_sizes_any_job_as_its_endo_elastic_twin() -> None:
    from dataclasses import replace

    from slurm_elastic.testing import random_snapshot

    snap = random_snapshot(np.random.default_rng(3), 4, 4, 30)
    for job in snap.jobs:
        twin = replace(job, mode=ElasticMode.ENDO)
        model = snap.profiles[job.model]
        assert sizing.shape_key(job, fixed_batch=True) == sizing.shape_key(twin)
        for k in range(1, 17):
            assert sizing.size_for(job, k, model, fixed_batch=True) == sizing.size_for(twin, k, model)
        np.testing.assert_array_equal(sizing.throughput_grid(job, model, 16, fixed_batch=True),
                                      sizing.throughput_grid(twin, model, 16))
    assert any(j.mode is not ElasticMode.ENDO for j in snap.jobs)
