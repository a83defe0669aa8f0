"""Elastic sampler: which samples each rank trains on, across resizes, with exact accounting.

This module owns the sampler position. Its whole state is ``(seed, epoch, consumed)``; the world size,
rank and per-rank batch are arguments of each step, so a resize changes nothing here. Each step takes
the next ``min(W·b, remaining)`` indices of the seeded permutation of the epoch and splits them into
near-equal contiguous chunks by rank (a rank may get none near an epoch end; it must still join the
all-reduce with zero gradients). Pure numpy: no torch, no clock, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True, slots=True)
class SamplerState:
    """Position of the elastic sampler.

    Attributes:
        seed: seed of the epoch permutations.
        epoch: current epoch, from 0.
        consumed: samples of this epoch already consumed by all ranks together.
    """

    seed: int
    epoch: int = 0
    consumed: int = 0


class ElasticSampler:
    """Deterministic, resize-safe sampler over ``dataset_size`` samples.

    Args:
        dataset_size: number of samples in the dataset (≥ 1).
        state: starting position.

    Raises:
        ValueError: if the size or the position is out of range.
    """

    def __init__(self, dataset_size: int, state: SamplerState) -> None:
        if dataset_size < 1:
            raise ValueError(f"dataset_size={dataset_size}: must be ≥ 1")
        if not 0 <= state.consumed < dataset_size or state.epoch < 0:
            raise ValueError(f"sampler state {state}: consumed must be in [0, {dataset_size}), epoch ≥ 0")
        self.dataset_size = dataset_size
        self.state = state
        self._perm_epoch = -1
        self._perm: npt.NDArray[np.int64] = np.empty(0, dtype=np.int64)

    def _permutation(self) -> npt.NDArray[np.int64]:
        if self._perm_epoch != self.state.epoch:
            rng = np.random.default_rng([self.state.seed, self.state.epoch])
            self._perm = rng.permutation(self.dataset_size).astype(np.int64)
            self._perm_epoch = self.state.epoch
        return self._perm

    def step_size(self, world_size: int, local_batch: int) -> int:
        """Samples the next step consumes across all ranks: ``min(W·b, remaining)``.

        Args:
            world_size: number of ranks W (≥ 1).
            local_batch: per-rank batch b (≥ 1).

        Returns:
            The global number of samples of the next step (≥ 1).
        """
        if world_size < 1 or local_batch < 1:
            raise ValueError(f"world_size={world_size}, local_batch={local_batch}: both must be ≥ 1")
        return min(world_size * local_batch, self.dataset_size - self.state.consumed)

    def bounds(self, world_size: int, rank: int, local_batch: int) -> tuple[int, int]:
        """Start and end (exclusive) of ``rank``'s chunk within the next step's samples.

        Args:
            world_size: number of ranks W.
            rank: this rank, in ``[0, W)``.
            local_batch: per-rank batch b.

        Returns:
            ``(start, end)`` offsets into the step's ``min(W·b, remaining)`` samples; the first
            ``n mod W`` ranks get one more sample than the others (numpy ``array_split`` rule).
        """
        if not 0 <= rank < world_size:
            raise ValueError(f"rank={rank}: must be in [0, {world_size})")
        n = self.step_size(world_size, local_batch)
        base, extra = divmod(n, world_size)
        start = rank * base + min(rank, extra)
        return start, start + base + (1 if rank < extra else 0)

    def indices(self, world_size: int, rank: int, local_batch: int) -> list[int]:
        """Dataset indices ``rank`` trains on in the next step (possibly empty near an epoch end).

        Args:
            world_size: number of ranks W.
            rank: this rank.
            local_batch: per-rank batch b.

        Returns:
            The indices, in permutation order.
        """
        start, end = self.bounds(world_size, rank, local_batch)
        offset = self.state.consumed
        return [int(i) for i in self._permutation()[offset + start : offset + end]]

    def advance(self, world_size: int, local_batch: int) -> int:
        """Mark the next step as done by all ranks; roll over to the next epoch at its end.

        Args:
            world_size: number of ranks W of the step that finished.
            local_batch: per-rank batch b of that step.

        Returns:
            The number of samples the step consumed (the loss normaliser).
        """
        n = self.step_size(world_size, local_batch)
        consumed = self.state.consumed + n
        if consumed >= self.dataset_size:
            self.state = SamplerState(self.state.seed, self.state.epoch + 1, 0)
        else:
            self.state = SamplerState(self.state.seed, self.state.epoch, consumed)
        return n
