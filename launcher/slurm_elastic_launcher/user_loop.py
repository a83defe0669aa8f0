"""The elastic API around the user's own training loop: the script keeps its loop, adds a few lines.

This module owns :class:`ElasticWorld` (what :func:`slurm_elastic_launcher.init` returns), the model
wrapper :class:`ElasticDataParallel` and the loader :class:`ElasticLoader`. The user keeps their model,
optimizer, ``Dataset``, ``DataLoader`` arguments, loop and step logic::

    world = slurm_elastic_launcher.init()                  # instead of dist.init_process_group()
    model = world.wrap(model.to(world.device))             # instead of DistributedDataParallel(model)
    loader = world.loader(dataset, batch_size=64, num_workers=2, pin_memory=True)  # instead of the
                                                           # DistributedSampler and the DataLoader
    world.register(model=model, optimizer=opt, scheduler=sched, scaler=scaler, counters=counters)
    for epoch in world.epochs(args.epochs):                # instead of range(start_epoch, args.epochs)
        for x, y in loader:
            ...                                            # the user's step: forward, loss (the batch's
            optimizer.step()                               # mean, as DDP expects), backward, clipping,
            world.step(loss)                               # AMP, ...; then a step boundary

The agent (:mod:`.agent`) still owns the protocol: orders, the switch of worlds, the state transfer,
the recovery of a lost worker and the exact sample accounting. Here the user's loop drives it through
the same step driver as ``run(ElasticJob)`` (:attr:`.agent.Agent.driver`, :mod:`.step_driver`):
:meth:`ElasticWorld.step` ends a step (the buffers and control words are shared, the sampler
advances, a resize happens if one was announced) and starts the next (its sample ids, its gradient
weight). It reads the agent and changes it only through the agent's methods, driver and resize protocol. The
loader serves this worker's samples of each step from the elastic sampler through a real
``DataLoader`` (worker processes, ``pin_memory``, ``collate_fn``; its batch sampler is
:mod:`.step_batches`'), and starts again from the sampler's position after every change of the world;
its worker processes persist across resizes.

A joiner's warm-up pass is the user's own first step, run on the first samples of the dataset with no
collective while the old workers train on; the state it then receives replaces whatever that step did.
Its loop's epoch is the job's from that first batch on: rank 0 tells the joiner the job's epoch, and
switches it in only while the job is still in that epoch (or at that epoch's end), so the rest of the
pass is that epoch's; a job that moved on first makes the joiner end the pass unjoined and warm up
again under the new epoch (:meth:`.resize.ResizeProtocol.join`).

What a DDP script already does is taken where it is safe: ``world.loader`` takes ``shuffle`` and a
``DistributedSampler`` (the elastic sampler shuffles in its place), ``loader.sampler.set_epoch`` does
nothing, ``RANK``/``WORLD_SIZE`` are set from :func:`init` on and after every change, a default process
group exists from :func:`init` on (one process of its own until the world forms: a
``DistributedSampler`` built before training takes it) and after the world closes
(``destroy_process_group()`` ends it).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import functools
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader

from .agent import Agent, stop_on_sigterm
from .agent_types import AgentResult, AgentState, ElasticJob, Resize, StepPlan, WorkerLost
from .env import LauncherEnv
from .grad_reducer import BOUNDARY
from .order_sources import make_order_source
from .orders import Order
from .step_batches import EpochSetter, StepBatches, loader_worker_init, take_ddp_sampler
from .torch_backend import TorchBackend, job_backend


class ElasticDataParallel(nn.Module):
    """The user's model with its gradients averaged over the current world (DDP's interface).

    ``module`` is the user's model; the wrapper's forward is the model's. The gradients are reduced in
    buckets while backward runs (:mod:`.grad_reducer`).
    """

    def __init__(self, module: nn.Module, world: ElasticWorld) -> None:
        super().__init__()
        self.module = module
        self._world = world

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The wrapped model's forward."""
        return self.module(*args, **kwargs)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Backward passes inside accumulate gradients locally, unreduced (as DDP's ``no_sync``); the
        first backward after it reduces the accumulated gradients."""
        reducer = self._world.backend.reducer(self.module)
        reducer.paused = True
        try:
            yield
        finally:
            reducer.paused = False


class ElasticLoader:
    """A ``DataLoader`` over the user's ``Dataset`` that serves this worker's samples of each step.

    Iterating it yields the batches of the rest of the current epoch, one per step; after a change of
    the world it goes on from the sampler's position with the new world and batch, so across resizes
    no sample is lost or repeated. ``drop_last`` drops an epoch's last step when it is smaller than a
    full one (counted in the event log, as DDP's sampler would drop it).
    """

    def __init__(self, world: ElasticWorld, dataset: Any, batch_size: int, drop_last: bool,
                 loader_kwargs: Mapping[str, Any]) -> None:
        self.world = world
        self.dataset = dataset
        self.batch_size = batch_size
        self._batches = StepBatches(len(dataset), drop_last)
        kwargs = dict(loader_kwargs)
        if kwargs.get("num_workers", 0) > 0:
            kwargs.setdefault("persistent_workers", True)  # a resize restarts the iteration, not the workers
            kwargs["worker_init_fn"] = functools.partial(loader_worker_init, kwargs.get("worker_init_fn"))
        self._loader = DataLoader(dataset, batch_sampler=self._batches, **kwargs)
        self.sampler = EpochSetter()  # a DDP script calls loader.sampler.set_epoch(epoch)
        if self._loader.num_workers > 0:
            atexit.register(self.shutdown)  # before multiprocessing's own exit hook, which would wait on them

    def shutdown(self) -> None:
        """Stop the loader's worker processes: ask them, then kill any left (they ignore SIGTERM,
        so multiprocessing's exit hook, which terminates and then joins them, would wait forever).
        Done when the world closes, and at exit (a script that failed never closed it)."""
        it = getattr(self._loader, "_iterator", None)
        if it is None:
            return
        self._loader._iterator = None
        workers = list(getattr(it, "_workers", ()))
        stop = getattr(it, "_shutdown_workers", None)
        if stop is not None:
            stop()
        for w in workers:
            if w.is_alive():
                w.kill()
                w.join(1.0)

    def __len__(self) -> int:
        """Steps left in the current epoch at the current world and batch (before training: a whole
        epoch at the initial world)."""
        agent = self.world.agent
        if agent is None or not agent.members:
            left, world, local = len(self.dataset), max(1, len(self.world.env.workers)), self.batch_size
        else:
            state, world, local = agent.sampler.state, len(agent.members), agent.counters.local_batch
            left = len(self.dataset) - state.consumed
        return left // (world * local) if self._batches.drop_last else -(-left // (world * local))

    def __iter__(self) -> Iterator[Any]:
        world = self.world
        world.start()
        epoch: int | None = None
        while world.training:
            agent = world.require_agent()
            version = world.version
            if world.joining is not None:
                if epoch is not None:
                    return  # the job moved on during the warm-up: the next pass warms up under its epoch
                epoch = -1
                self._batches.reset(agent.sampler.state, 1, 0, 1,
                                    warm_up=min(len(self.dataset), agent.env.local_batch, agent.env.max_local_batch))
            else:
                state = agent.sampler.state
                if epoch is None:
                    epoch = state.epoch
                elif epoch == -1:  # joined: the pass goes on in the epoch it was labelled with, or ends
                    epoch = state.epoch if world.joined_as is None else world.joined_as
                if state.epoch != epoch:
                    return
                self._batches.reset(state, len(agent.members), agent.rank, agent.counters.local_batch)
            served = False
            for batch in self._loader:
                served = True
                world.delivered = (self._batches.positions.popleft(), version)
                yield batch
                if world.version != version or not world.training:
                    break
            if not served and self._batches.drop_last and world.version == version and world.joining is None:
                world.drop_tail(epoch)


class ElasticWorld:
    """This worker's place in the job's elastic world, driven by the user's loop (module docstring).

    Made by :func:`init`. Attributes read at any time: :attr:`rank`, :attr:`size`, :attr:`group` (pass
    it to collectives of your own), :attr:`device`, :attr:`epoch`, :attr:`batch_size` (this worker's
    batch now), :attr:`is_main`, :attr:`result` (how this worker ended, once it has).

    Args:
        env: the parsed ``SLURM_ELASTIC_*`` variables.
        backend: the torch.distributed backend on the job's store.
        lr_reference_workers: the number of workers the script's LR was tuned for (exo scales the LR
            with the global batch relative to that); None: the initial world's size.
    """

    MAX_RELABELS = 3
    """Warm-ups a joiner redoes because the job left the epoch it was told; then it joins wherever the
    job is (its first pass keeps the label it had: a job whose epochs last less than a warm-up step
    and two reads of the orders, 0.4 s, might otherwise never take it in)."""

    def __init__(self, env: LauncherEnv, backend: TorchBackend, lr_reference_workers: int | None = None) -> None:
        if lr_reference_workers is not None and lr_reference_workers < 1:
            raise ValueError(f"lr_reference_workers={lr_reference_workers}: must be ≥ 1 or None")
        self.env = env
        self.backend = backend
        self.lr_reference_workers = lr_reference_workers
        self.agent: Agent | None = None
        self.joining: Order | None = None
        self.joining_epoch = 0  # the job's epoch, the label of a joiner's warm-up pass
        self.joined_as: int | None = None  # the label a joiner joined under (None: none, past MAX_RELABELS)
        self._relabels = 0
        self.version = 0  # bumped at every change of the world: the loader starts again
        self.delivered: tuple[tuple[int, int], int] | None = None
        self._loader: ElasticLoader | None = None
        self._registered: dict[str, Any] = {}
        self._callbacks: list[Callable[[ElasticWorld], None]] = []
        self._plan: StepPlan | None = None
        self._loss_sum: torch.Tensor | float | None = None  # rank 0's losses since the last report
        self._loss_n = 0
        self._total_epochs: int | None = None  # world.epochs(n)'s n: what the job trains

    # -- what the script calls once ---------------------------------------------------------------
    def wrap(self, model: nn.Module) -> ElasticDataParallel:
        """The model with its gradients averaged over the current world (use it as DDP's); register it
        (:meth:`register`) as the state to carry."""
        self.backend.reducer(model)
        return ElasticDataParallel(model, self)

    def loader(self, dataset: Any, batch_size: int, *, drop_last: bool = False, **loader_kwargs: Any) -> ElasticLoader:
        """An elastic loader over ``dataset`` (a map-style ``Dataset``: ``len`` and ``dataset[i]``).

        Args:
            dataset: the user's dataset; every worker, joiners included, must build the same one.
            batch_size: this worker's batch at the start (the daemon's orders may change it; exo
                keeps it per worker, endo keeps the global batch).
            drop_last: drop an epoch's last, smaller step.
            loader_kwargs: the rest of the ``DataLoader`` arguments (``num_workers``, ``pin_memory``,
                ``collate_fn``, ``prefetch_factor``, ``worker_init_fn``, ...). The elastic sampler owns
                the order, shuffled with ``SLURM_ELASTIC_SEED`` each epoch: ``sampler=`` may be a
                ``DistributedSampler`` that shuffles, and ``shuffle=`` is taken beside it (or
                ``shuffle=True`` alone); an order of another kind and ``batch_sampler`` are refused,
                saying the one-line fix.

        Raises:
            ValueError: a bad batch size, a sampler or order the elastic sampler cannot keep, or a
                second loader.
        """
        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size}: must be ≥ 1")
        take_ddp_sampler(loader_kwargs.pop("sampler", None), loader_kwargs.pop("shuffle", None))
        if "batch_sampler" in loader_kwargs:
            raise ValueError("world.loader(..., batch_sampler=...): the elastic sampler makes each step's batches "
                             "(it keeps the exact count across resizes); drop batch_sampler= and pass batch_size=")
        if self._loader is not None:
            raise ValueError("world.loader() was called before: one elastic loader per job")
        self._loader = ElasticLoader(self, dataset, batch_size, drop_last, loader_kwargs)
        return self._loader

    def register(self, *, model: nn.Module, optimizer: Any, scheduler: Any = None, model_name: str | None = None,
                 **carried: Any) -> None:
        """The state a resize carries to joiners, a lost worker rolls back and a checkpoint holds.

        Args:
            model: the model (wrapped or not).
            optimizer: its optimizer (its LR follows the exo/endo rule at each resize).
            scheduler: the LR scheduler, or None.
            model_name: the model's name for the daemon's throughput profiles (see :class:`.ElasticJob`).
            carried: more state by name: objects with ``state_dict``/``load_state_dict`` (an AMP
                ``GradScaler``, a trainer) or dicts of the user's counters (refilled in place).

        Raises:
            TypeError: a carried value that is neither.
            RuntimeError: called after training started.
        """
        if self.agent is not None:
            raise RuntimeError("world.register() after training started: register before world.epochs()")
        for name, obj in carried.items():
            if not isinstance(obj, dict) and not (hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict")):
                raise TypeError(f"world.register({name}=<{type(obj).__name__}>): must have state_dict and "
                                "load_state_dict, or be a dict")
        inner = model.module if isinstance(model, ElasticDataParallel) else model
        self._registered = {"model": inner, "optimizer": optimizer, "scheduler": scheduler,
                            "model_name": model_name, "carried": carried}

    def on_resize(self, callback: Callable[[ElasticWorld], None]) -> None:
        """Call ``callback(world)`` after every change of the world, once the exo/endo rule has set the
        new batch and LR (a callback may set its own)."""
        self._callbacks.append(callback)

    # -- the loop -----------------------------------------------------------------------------------
    def epochs(self, n: int, start: int = 0) -> Iterator[int]:
        """The epochs left of ``n``, from where the job is (a resumed or joining worker starts mid-way).

        Ends early when the job stops (an order, SIGTERM: a checkpoint is written), this worker is
        dropped, or it is declared lost (see :attr:`result`).

        Args:
            n: the epochs to train.
            start: the first epoch of a fresh start (a script that resumed from a checkpoint of its
                own passes its start epoch; ``n`` when that checkpoint is of the last epoch, as after
                a requeue that landed on the last step: nothing is left, and the job ends at once); a
                job resuming from the launcher's own checkpoint goes on where that stopped instead.
        """
        if not 0 <= start <= n:
            raise ValueError(f"epochs({n}, start={start}): must have 0 ≤ start ≤ n")
        self._total_epochs = n
        self.start(start)
        try:
            while self.training:
                agent = self.require_agent()
                if self.joining is None and agent.sampler.state.epoch >= n:
                    agent.driver.finish(None, stopped=False)
                    break
                yield agent.sampler.state.epoch if self.joining is None else self.joining_epoch
        finally:
            self.close()

    def start(self, first_epoch: int = 0) -> None:
        """Join the job's world (done by the first :meth:`epochs` or loader iteration; idempotent).

        Raises:
            RuntimeError: :meth:`register` or :meth:`loader` was not called.
        """
        if self.agent is not None:
            return
        if not self._registered or self._loader is None:
            raise RuntimeError("call world.register(model=..., optimizer=...) and world.loader(...) before training")
        reg = self._registered
        env = dataclasses.replace(self.env, local_batch=self._loader.batch_size)
        job = ElasticJob(model=reg["model"], optimizer=reg["optimizer"], dataset=self._loader.dataset,
                         loss_fn=_no_loss, scheduler=reg["scheduler"], model_name=reg["model_name"])
        _skip_step_after_a_lost_peer(reg["optimizer"], lambda: self.backend.reducer(self._model).failed)
        agent = Agent(env, self.backend, job, make_order_source(env, self.backend),
                      reference_workers=self.lr_reference_workers, carried=reg["carried"])
        self.agent = agent
        self._say_what_runs(agent)
        stop_on_sigterm(agent)
        if env.join:
            self.joining = agent.resize.await_order()
            self.joining_epoch = agent.resize.job_epoch(self.joining)
        else:
            agent.start_world(first_epoch)
            self._changed()

    def _say_what_runs(self, agent: Agent) -> None:
        """The script's epochs and per-worker batch are what runs (one source of truth): rank 0's
        reports carry them (``epochs``; ``local_batch`` already), so the daemon plans from them. Where
        ``slurm-elastic submit``'s ``--epochs``/``--local-batch`` (``SLURM_ELASTIC_EPOCHS``,
        ``SLURM_ELASTIC_LOCAL_BATCH``) said otherwise, the first report says so too (``submitted``),
        and the initial rank 0 says it in the job's log."""
        assert self._loader is not None
        runs = {"epochs": self._total_epochs, "local_batch": self._loader.batch_size}
        submitted = {"epochs": self.env.epochs, "local_batch": self.env.local_batch}
        if runs["epochs"] is None:  # training started from the loader, before world.epochs(n)
            runs["epochs"] = submitted["epochs"]
        reporter = agent.reporter
        if reporter is not None:
            reporter.epochs = runs["epochs"]
            reporter.submitted = submitted if runs != submitted else None
        if runs != submitted and not self.env.join and self.env.workers[0] == self.env.worker_id:
            print(f"slurm-elastic: the script trains {runs['epochs']} epochs at a per-worker batch of "
                  f"{runs['local_batch']}, but the job was submitted with --epochs {submitted['epochs']} "
                  f"--local-batch {submitted['local_batch']}: the script's values run, and its reports give "
                  f"them to the daemon (submit with --epochs {runs['epochs']} --local-batch "
                  f"{runs['local_batch']} to make the two agree)", file=sys.stderr, flush=True)

    def step(self, loss: torch.Tensor | float | None = None) -> None:
        """End this step (after ``optimizer.step()``): a resize, stop or recovery happens here.

        Args:
            loss: the step's loss (the batch's mean), for the job's progress reports; optional.

        Raises:
            RuntimeError: not exactly one loader batch since the last step, or the job has ended.
        """
        with torch.profiler.record_function(BOUNDARY):
            self._step(loss)

    def _step(self, loss: torch.Tensor | float | None) -> None:
        agent = self.require_agent()
        if self.joining is not None:  # the warm-up step ran: now join the world
            label = self.joining_epoch if self._relabels < self.MAX_RELABELS else None
            moved_on = agent.resize.join(self.joining, label)
            if moved_on is not None:  # the loader ends this pass; the next warms up labelled moved_on
                self.joining_epoch = moved_on
                self._relabels += 1
                return
            self.joining, self.joined_as = None, label
            self._changed()
            return
        if agent.status is not AgentState.TRAINING:
            raise RuntimeError(f"world.step() after this worker ended ({agent.status.value})")
        plan = self._plan
        assert plan is not None
        position = (agent.sampler.state.epoch, agent.sampler.state.consumed)
        if self.delivered != (position, self.version):
            raise RuntimeError("world.step() must follow exactly one batch of world.loader() per step "
                               f"(step at {position}, last batch {self.delivered})")
        if agent.rank == 0 and agent.reporter is not None:
            self._account_loss(agent, loss, len(plan.indices))
        interrupt = agent.driver.end(plan, self._model)  # the optimizer stepped in the user's loop
        if isinstance(interrupt, (Resize, WorkerLost)) and agent.status is AgentState.TRAINING:
            self._changed()
            return
        if agent.status is AgentState.TRAINING:
            self._begin()
        else:
            self.close()

    def _account_loss(self, agent: Agent, loss: torch.Tensor | float | None, samples: int) -> None:
        """Rank 0: add the step's loss to the next report. A tensor is summed where it lives and read
        only when a report is due, so the step never waits for the GPU to read it."""
        reporter = agent.reporter
        assert reporter is not None
        if loss is not None and samples:
            weighted = loss.detach() * samples if isinstance(loss, torch.Tensor) else float(loss) * samples
            self._loss_sum = weighted if self._loss_sum is None else self._loss_sum + weighted
            self._loss_n += samples
        if self._loss_sum is not None and reporter.due(agent.clock()):
            reporter.add_loss(float(self._loss_sum), self._loss_n)
            self._loss_sum, self._loss_n = None, 0

    def drop_tail(self, epoch: int) -> None:
        """``drop_last``: skip the rest of ``epoch`` (a step smaller than a full one) on every worker."""
        if self.require_agent().driver.skip_epoch_tail(epoch):
            self._begin()

    def close(self) -> None:
        """Leave the world and stop the loader's worker processes (at the loop's end; idempotent)."""
        if self.agent is not None:
            self.agent.close()
            self.backend.placeholder()  # for the script's destroy_process_group()
        if self._loader is not None:
            self._loader.shutdown()

    # -- what the script may read ---------------------------------------------------------------
    @property
    def training(self) -> bool:
        """True until this worker is done, dropped or lost."""
        return self.agent is None or self.agent.status in (AgentState.TRAINING, AgentState.JOINING)

    @property
    def result(self) -> AgentResult | None:
        """How this worker ended (DONE, LEFT or FAILED), or None while it trains."""
        return None if self.agent is None or self.training else self.agent.result()

    @property
    def rank(self) -> int:
        """This worker's rank in the current world (-1 before it joins one)."""
        return self.agent.rank if self.agent is not None else -1

    @property
    def size(self) -> int:
        """Workers in the current world."""
        return len(self.agent.members) if self.agent is not None else len(self.env.workers)

    @property
    def is_main(self) -> bool:
        """True on rank 0 of the world while it trains or once it is done (log and save there); False
        on a worker a shrink dropped or the survivors declared lost."""
        live = self.agent is not None and self.agent.status in (AgentState.TRAINING, AgentState.DONE)
        return live and self.rank == 0

    @property
    def group(self) -> Any:
        """The current world's process group (collectives of the script's own must pass it)."""
        return self.backend.group if self.backend.group is not None else dist.group.WORLD

    @property
    def device(self) -> torch.device:
        """This worker's device (its GPU, ``LOCAL_RANK``; else the CPU)."""
        return self.backend.device

    @property
    def epoch(self) -> int:
        """The epoch the job is in (a joiner's warm-up: the one rank 0 told it, its loop's epoch)."""
        if self.agent is None:
            return 0
        return self.joining_epoch if self.joining is not None else self.agent.sampler.state.epoch

    @property
    def batch_size(self) -> int:
        """This worker's batch now."""
        return self.agent.counters.local_batch if self.agent is not None and self.agent.counters.started else 0

    # -- internals --------------------------------------------------------------------------------
    def require_agent(self) -> Agent:
        """The agent, once training has started.

        Raises:
            RuntimeError: before :meth:`start`.
        """
        if self.agent is None:
            raise RuntimeError("the elastic world has not started: iterate world.epochs() first")
        return self.agent

    @property
    def _model(self) -> nn.Module:
        """The registered model, unwrapped (what the reducer is hooked on)."""
        model: nn.Module = self._registered["model"]
        return model

    def _changed(self) -> None:
        """After the world changed: the loader starts again, the torch variables follow, the
        callbacks run, and the next step begins."""
        self.version += 1
        agent = self.require_agent()
        os.environ.update(RANK=str(agent.rank), WORLD_SIZE=str(len(agent.members)),
                          MASTER_ADDR=self.env.store_host, MASTER_PORT=str(self.env.store_port))
        os.environ["LOCAL_RANK"] = str(self.backend.gpu_binding.local_rank)  # set at start too (job_backend)
        for callback in self._callbacks:
            callback(self)
        self._begin()

    def _begin(self) -> None:
        self._plan = self.require_agent().driver.begin(self._model, batch_mean=True)


def _skip_step_after_a_lost_peer(optimizer: Any, failed: Callable[[], bool]) -> None:
    """Make ``optimizer.step()`` do nothing in a step whose collectives failed (``failed()``).

    The gradients of such a step are not the world's mean, and the state of the last step boundary
    is the rollback point (nothing else is kept of the parameters or the optimizer): the user's loop
    goes on to ``optimizer.step()`` (directly, or through an AMP ``GradScaler``), which must then
    leave both as they are; :meth:`ElasticWorld.step` recovers right after. The wrapper is the
    optimizer instance's own ``step`` attribute, over whatever wrapped it before (an LR scheduler's
    call counter).
    """
    step = optimizer.step

    @functools.wraps(step)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        return None if failed() else step(*args, **kwargs)

    optimizer.step = guarded


def _no_loss(model: Any, batch: Any) -> Any:
    raise RuntimeError("the user's loop computes the loss: the agent never calls loss_fn here")


def init(environ: Mapping[str, str] | None = None, *, lr_reference_workers: int | None = None) -> ElasticWorld:
    """Open the job's store and return this worker's :class:`ElasticWorld` (the world forms when
    training starts, :meth:`ElasticWorld.epochs`).

    Args:
        environ: the ``SLURM_ELASTIC_*`` variables; ``os.environ`` when None.
        lr_reference_workers: see :class:`ElasticWorld`.

    Raises:
        EnvError: a variable is missing or invalid.
    """
    env = LauncherEnv.from_mapping(os.environ if environ is None else environ)
    backend = job_backend(env)
    if not env.join:  # a joiner's are set once it joins: its rank is the world's it joins
        os.environ.update(RANK=str(env.workers.index(env.worker_id)), WORLD_SIZE=str(len(env.workers)))
    backend.placeholder()
    return ElasticWorld(env, backend, lr_reference_workers)
