"""The policies this package can run: planner names, their factories, and the planner a driver runs.

This module owns the name -> planner-factory table (an explicit list: the core planners and the
``drl`` factory of :mod:`slurm_elastic.drl.weights`, which reads a model file and so lives outside
the pure core), :func:`available`, :func:`create` (a planner from a name and keyword parameters,
with the name and the parameters checked), and :func:`build`: the planner a driver runs, that is
the policy wrapped in the site guards (:class:`~slurm_elastic.core.guards.GuardedPlanner`) when
the driver has guards. The daemon, ``simulate`` and ``what-if`` build their planners here;
``reproduce`` (the seed papers' comparisons) and the benchmarks run the bare policies.

It sits above the core and ``slurm_elastic.drl.weights`` and below every driver: nothing in the
core imports it (the import-linter contract ``core-pure``). It reads no file itself (only the
``drl`` factory does, when asked for a ``drl`` planner) and never imports torch.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from slurm_elastic.core.baselines import FifoPlanner, OptimusPlanner, TiresiasPlanner
from slurm_elastic.core.dynprog import DynamicProgramPlanner, fixed_batch_planner
from slurm_elastic.core.efq import EfqPlanner
from slurm_elastic.core.evolutionary import OnesPlanner
from slurm_elastic.core.guards import GuardedPlanner, Guards
from slurm_elastic.core.planner import Planner
from slurm_elastic.drl.weights import drl
from slurm_elastic.errors import ConfigError, UnknownPolicyError

__all__ = ["DEFAULT_GUARDS", "PlannerFactory", "available", "build", "create"]

PlannerFactory = Callable[..., Planner]
"""Makes a planner from keyword parameters (a planner class, or a function such as ``drl``)."""

DEFAULT_GUARDS = Guards()
"""The shipped site guards (``[guards]`` left out of ``elastic.toml``): only ``protect_rigid``."""

_FACTORIES: dict[str, PlannerFactory] = {
    "dp": DynamicProgramPlanner,
    "dp-fixed": fixed_batch_planner,
    "drl": drl,
    "efq": EfqPlanner,
    "fifo": FifoPlanner,
    "ones": OnesPlanner,
    "optimus": OptimusPlanner,
    "tiresias": TiresiasPlanner,
}


def available() -> tuple[str, ...]:
    """Every policy name, sorted."""
    return tuple(sorted(_FACTORIES))


def create(name: str, **params: Any) -> Planner:
    """The bare planner named ``name``, made with keyword parameters (no site guards).

    Raises:
        UnknownPolicyError: no policy has that name (the message lists the known ones).
        ConfigError: a parameter is unknown (named, with the policy's known parameters), or a
            value breaks the planner's rule.
    """
    try:
        factory = _FACTORIES[name]
    except KeyError:
        raise UnknownPolicyError(f"unknown policy {name!r}; known policies: {', '.join(available())}") from None
    try:
        inspect.signature(factory).bind(**params)
    except TypeError as exc:
        known = [n for n in inspect.signature(factory).parameters if n != "self"]
        raise ConfigError(
            f"policy {name!r}: bad parameters {sorted(params)} ({exc}); known parameters: {', '.join(known)}"
        ) from None
    return factory(**params)


def build(name: str, params: Mapping[str, Any] | None = None, guards: Guards | None = None) -> Planner:
    """The planner a driver runs: policy ``name`` with ``params``, inside the site ``guards``.

    Args:
        name: the policy.
        params: its parameters (``[policy.<name>]`` of ``elastic.toml``, ``--param``).
        guards: the site guards (``[guards]``; :data:`DEFAULT_GUARDS` when the file has none);
            ``None`` runs the bare policy.

    Raises:
        UnknownPolicyError, ConfigError: as :func:`create`.
    """
    planner = create(name, **dict(params or {}))
    return planner if guards is None else GuardedPlanner(planner, guards)
