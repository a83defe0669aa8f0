"""The elastic loader's parts that know no world: each step's sample ids, a DDP script's sampler
arguments, and the loader's worker processes.

This module owns what :class:`.user_loop.ElasticLoader` hands its ``DataLoader``: the batch sampler
that walks the elastic sampler from a position, one batch of this worker's sample ids per step
(:class:`StepBatches`); the check that takes a DDP script's ``sampler=``/``shuffle=`` where the
elastic sampler keeps their meaning (:func:`take_ddp_sampler`); ``loader.sampler``'s ``set_epoch``
(:class:`EpochSetter`); and the init of the loader's worker processes (:func:`loader_worker_init`).
"""

from __future__ import annotations

import collections
import signal
from collections.abc import Callable, Iterator
from typing import Any

from torch.utils.data import DistributedSampler

from .sampler import ElasticSampler, SamplerState


class StepBatches:
    """Batch sampler of an :class:`.user_loop.ElasticLoader`: this worker's sample ids of each step from a start.

    It walks a private copy of the elastic sampler from :meth:`reset`'s position to the epoch's end
    (a ``DataLoader`` prefetches, so it runs ahead of training) and records each step's position in
    :attr:`positions` for the loader to match batches with steps. A worker with no sample in a step
    (near an epoch's end) gets the step's first sample as padding: its gradient weight is 0.
    """

    def __init__(self, size: int, drop_last: bool) -> None:
        self.size = size
        self.drop_last = drop_last
        self.start = SamplerState(0)
        self.world = self.rank = self.local = 1
        self.warm_up = 0  # > 0: one batch of that many first samples (a joiner's warm-up)
        self.positions: collections.deque[tuple[int, int]] = collections.deque()

    def reset(self, start: SamplerState, world: int, rank: int, local: int, warm_up: int = 0) -> None:
        self.start, self.world, self.rank, self.local, self.warm_up = start, world, rank, local, warm_up
        self.positions.clear()

    def __iter__(self) -> Iterator[list[int]]:
        if self.warm_up:
            self.positions.append((-1, -1))
            yield list(range(self.warm_up))
            return
        sampler = ElasticSampler(self.size, self.start)
        epoch = self.start.epoch
        while sampler.state.epoch == epoch:
            if self.drop_last and sampler.step_size(self.world, self.local) < self.world * self.local:
                return
            ids = sampler.indices(self.world, self.rank, self.local) or sampler.indices(self.world, 0, self.local)[:1]
            self.positions.append((sampler.state.epoch, sampler.state.consumed))
            yield ids
            sampler.advance(self.world, self.local)


def take_ddp_sampler(sampler: Any, shuffle: bool | None) -> None:
    """Check the ``sampler=`` and ``shuffle=`` a DDP script passes to its ``DataLoader``: the elastic
    sampler takes their place where it keeps their meaning (a ``DistributedSampler`` that shuffles);
    else a ValueError says the rule and the one-line fix."""
    if sampler is not None:
        if not isinstance(sampler, DistributedSampler):
            raise ValueError(f"world.loader(..., sampler={type(sampler).__name__}(...)): the elastic sampler "
                             "orders the samples (a seeded shuffle each epoch, exact across resizes); drop "
                             "sampler= (a DistributedSampler that shuffles is taken)")
        if not sampler.shuffle:
            raise ValueError("world.loader(..., sampler=DistributedSampler(shuffle=False)): the elastic sampler "
                             "shuffles each epoch (seed SLURM_ELASTIC_SEED); drop shuffle=False from the sampler")
    elif shuffle is False:
        raise ValueError("world.loader(..., shuffle=False): the elastic sampler shuffles each epoch (seed "
                         "SLURM_ELASTIC_SEED) and splits the samples among the workers; drop shuffle=False")


class EpochSetter:
    """``loader.sampler``: ``set_epoch`` does nothing (the elastic sampler knows the epoch)."""

    def set_epoch(self, epoch: int) -> None:
        """Nothing to do: the loop's epoch comes from ``world.epochs()``, the sampler's with it."""


def loader_worker_init(user_init: Callable[[int], None] | None, worker_id: int) -> None:
    """A loader worker process ignores SIGTERM, then runs the script's own ``worker_init_fn``.

    Slurm signals every process of a task (preemption, time limit, requeue). A loader worker that
    died of it failed the script's next batch (``DataLoader worker ... is killed by signal:
    Terminated``) before the step boundary where the job checkpoints, as seen on the dev cluster;
    the main process stops its loader workers itself once it has.
    """
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if user_init is not None:
        user_init(worker_id)
