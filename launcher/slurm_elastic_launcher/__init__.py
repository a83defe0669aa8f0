"""In-job runtime of slurm-elastic: resizes a running training job in place.

It never imports the controller package ``slurm_elastic``; its contract with the controller is the
set of ``SLURM_ELASTIC_*`` environment variables (:mod:`.env`) and the authenticated order channel
(:mod:`.orders`, which the controller imports to sign orders and check reports).

Two ways in. Around the user's own loop (:mod:`.user_loop`): :func:`init` returns the worker's
elastic world, which wraps the model, serves the data and marks step boundaries::

    world = init()
    model = world.wrap(model)
    loader = world.loader(dataset, batch_size=64, num_workers=2)
    world.register(model=model, optimizer=opt)
    for epoch in world.epochs(10):
        for x, y in loader:
            ...  # the user's step
            world.step(loss)

Or, following Horovod Elastic, hand the model, optimizer, dataset and a loss function to :func:`run`,
which owns the loop and trains until the job is done, this worker is dropped by a resize, or it is
declared lost::

    job = ElasticJob(model=model, optimizer=opt, dataset=TensorBatchDataset(x, y), loss_fn=loss,
                     model_name="resnet18")  # optional: rank 0's reports name the model (and count its parameters)
    result = run(job)

torch is imported only by :mod:`.torch_backend`, :mod:`.signed_store`, :mod:`.grad_reducer` and
:mod:`.user_loop`, lazily, when :func:`init` or :func:`run` is called.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from .agent import Agent, stop_on_sigterm
from .agent_types import AgentResult, AgentState, ElasticJob
from .env import EnvError, LauncherEnv, ScalingMode
from .order_sources import make_order_source
from .orders import Order, OrderRejectedError
from .sampler import ElasticSampler, SamplerState
from .state import TrainingState

if TYPE_CHECKING:
    from .user_loop import ElasticWorld

__version__ = "0.1.0"

__all__ = [
    "AgentResult",
    "AgentState",
    "ElasticJob",
    "ElasticSampler",
    "EnvError",
    "LauncherEnv",
    "Order",
    "OrderRejectedError",
    "SamplerState",
    "ScalingMode",
    "TrainingState",
    "init",
    "run",
]


def init(environ: Mapping[str, str] | None = None, *, lr_reference_workers: int | None = None) -> ElasticWorld:
    """This worker's elastic world, for a script that keeps its own training loop (:mod:`.user_loop`).

    Args:
        environ: the ``SLURM_ELASTIC_*`` variables; ``os.environ`` when None.
        lr_reference_workers: the number of workers the script's LR was tuned for (exo scales the LR
            with the global batch relative to it); None: the initial world's size.

    Raises:
        EnvError: if a variable is missing or invalid.
    """
    from .user_loop import init as init_world  # torch is imported here, when the script starts

    return init_world(environ, lr_reference_workers=lr_reference_workers)


def run(job: ElasticJob, environ: Mapping[str, str] | None = None) -> AgentResult:
    """Train ``job`` elastically under the torch.distributed backend.

    Args:
        job: model, optimizer, dataset, loss (and optional LR scheduler, validation, model name).
        environ: the ``SLURM_ELASTIC_*`` variables; ``os.environ`` when None.

    Returns:
        How this worker ended (DONE, LEFT or FAILED) and where the job was.

    Raises:
        EnvError: if a variable is missing or invalid.
        ValueError: if ``job.model_name`` is not a valid model name.
    """
    from .torch_backend import job_backend  # the one torch import, at start time

    env = LauncherEnv.from_mapping(os.environ if environ is None else environ)
    backend = job_backend(env)
    agent = Agent(env, backend, job, make_order_source(env, backend))
    stop_on_sigterm(agent)
    return agent.run()
