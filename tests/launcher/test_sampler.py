"""Elastic sampler: exact accounting across random resize schedules, chunking, validation."""

from __future__ import annotations

import random

import pytest

from slurm_elastic_launcher.sampler import ElasticSampler, SamplerState


def test_two_thousand_random_resize_schedules_lose_and_repeat_nothing() -> None:
    rng = random.Random(7)
    resizes = 0
    for _ in range(2000):
        n = rng.randint(1, 120)
        sampler = ElasticSampler(n, SamplerState(seed=rng.randint(0, 10**6)))
        world, batch = rng.randint(1, 8), rng.randint(1, 16)
        epochs: dict[int, list[int]] = {}
        while sampler.state.epoch < 3:
            if rng.random() < 0.3:  # a resize changes only (W, b); the sampler state is untouched
                world, batch = rng.randint(1, 8), rng.randint(1, 16)
                resizes += 1
            epoch = sampler.state.epoch
            chunks = [sampler.indices(world, r, batch) for r in range(world)]
            sizes = [len(c) for c in chunks]
            assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
            assert sum(sizes) == sampler.step_size(world, batch) == sampler.advance(world, batch)
            epochs.setdefault(epoch, []).extend(i for c in chunks for i in c)
        assert all(sorted(v) == list(range(n)) for v in epochs.values())
    assert resizes > 4000


def test_chunks_are_contiguous_slices_of_the_seeded_permutation() -> None:
    a = ElasticSampler(100, SamplerState(seed=3))
    b = ElasticSampler(100, SamplerState(seed=3))
    flat = [i for r in range(4) for i in a.indices(4, r, 5)]
    assert flat == b.indices(1, 0, 20)
    assert ElasticSampler(100, SamplerState(seed=4)).indices(1, 0, 20) != flat


def test_a_rank_may_get_nothing_near_the_epoch_end() -> None:
    s = ElasticSampler(10, SamplerState(seed=0, epoch=0, consumed=8))
    assert [len(s.indices(4, r, 3)) for r in range(4)] == [1, 1, 0, 0]
    assert s.advance(4, 3) == 2 and s.state == SamplerState(0, 1, 0)


def test_position_survives_a_restart_from_state() -> None:
    s = ElasticSampler(50, SamplerState(seed=1))
    s.advance(3, 4)
    resumed = ElasticSampler(50, s.state)
    assert resumed.indices(2, 1, 7) == s.indices(2, 1, 7)


@pytest.mark.parametrize(
    ("size", "state"), [(0, SamplerState(0)), (5, SamplerState(0, 0, 5)), (5, SamplerState(0, -1, 0))]
)
def test_invalid_sampler_is_refused(size: int, state: SamplerState) -> None:
    with pytest.raises(ValueError, match="must be"):
        ElasticSampler(size, state)


def test_invalid_rank_or_batch_is_refused() -> None:
    s = ElasticSampler(5, SamplerState(0))
    with pytest.raises(ValueError, match="rank=2"):
        s.indices(2, 2, 1)
    with pytest.raises(ValueError, match="≥ 1"):
        s.step_size(0, 1)
