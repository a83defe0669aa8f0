"""The policies this package can run: planner names, their factories, and the planner a driver runs.

This module owns the name -> planner-factory table (an explicit list: the core planners and the
``drl`` factory of :mod:`slurm_elastic.drl.weights`, which reads a model file and so lives outside
the pure core), :func:`available`, :func:`create` (a planner from a name and keyword parameters,
with the name and the parameters checked), and :func:`build`: the planner a driver runs, that is
the policy inside the trust guard (:class:`~slurm_elastic.core.trust.ReportGuard`: what jobs
report moves GPUs only within fair shares, and never stops another job), in the site guards
(:class:`~slurm_elastic.core.guards.GuardedPlanner`) when the driver has guards. The daemon,
``simulate`` and ``what-if`` build their planners here; ``reproduce`` (the seed papers'
comparisons) and the benchmarks run the bare policies.

Every parameter of every policy has a type and a range (:data:`PARAMETERS`), checked by
:func:`create` before the planner is made, whatever the parameters came from (``[policy.<name>]``
of ``elastic.toml``, ``--param``, ``train-drl --teacher-param``): integers refuse floats and
booleans, numbers are finite, and each range has an upper bound that keeps a round or a simulation
from running for ever (``ones.generations`` at most 1000, intervals at most 30 days).

It sits above the core and ``slurm_elastic.drl.weights`` and below every driver: nothing in the
core imports it (the import-linter contract ``core-pure``). It reads no file itself (only the
``drl`` factory does, when asked for a ``drl`` planner) and never imports torch.
"""

from __future__ import annotations

import inspect
import itertools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from slurm_elastic.core.baselines import FifoPlanner, OptimusPlanner, TiresiasPlanner
from slurm_elastic.core.dl2_baselines import DrfPlanner, TetrisPlanner
from slurm_elastic.core.dynprog import DynamicProgramPlanner, fixed_batch_planner
from slurm_elastic.core.efq import EfqPlanner
from slurm_elastic.core.evolutionary import OnesPlanner
from slurm_elastic.core.guards import GuardedPlanner, Guards
from slurm_elastic.core.minjct import MinJctPlanner
from slurm_elastic.core.planner import Planner
from slurm_elastic.core.trust import ReportGuard
from slurm_elastic.drl.weights import drl
from slurm_elastic.errors import ConfigError, UnknownPolicyError

__all__ = ["DEFAULT_GUARDS", "DEFAULT_POLICY", "PARAMETERS", "Param", "PlannerFactory", "available", "build",
           "check_params", "create", "validate"]

PlannerFactory = Callable[..., Planner]
"""Makes a planner from keyword parameters (a planner class, or a function such as ``drl``)."""

DEFAULT_POLICY = "min-jct"
"""The policy of a site whose ``elastic.toml`` names none (our own; docs/planners.md)."""

DEFAULT_GUARDS = Guards()
"""The shipped site guards (``[guards]`` left out of ``elastic.toml``): only ``protect_rigid``."""

_FACTORIES: dict[str, PlannerFactory] = {
    "dp": DynamicProgramPlanner,
    "dp-fixed": fixed_batch_planner,
    "drf": DrfPlanner,
    "drl": drl,
    "efq": EfqPlanner,
    "fifo": FifoPlanner,
    "min-jct": MinJctPlanner,
    "ones": OnesPlanner,
    "optimus": OptimusPlanner,
    "tetris": TetrisPlanner,
    "tiresias": TiresiasPlanner,
}


MAX_SECONDS = 30 * 24 * 3600.0
"""Longest interval a policy parameter may name (30 days: a planner that waits longer between plans
waits past any queue a site runs)."""

MAX_EPOCHS = 1e6
"""Largest epoch count a policy parameter may name."""

MAX_PATH_CHARS = 4096


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:80]}... ({len(text)} characters)"


@dataclass(frozen=True, slots=True)
class Param:
    """The type and range of one policy parameter.

    Attributes:
        kind: ``int`` (an integer, never a float or a bool), ``float`` (a finite number, not a
            bool), ``bool``, ``choice`` (one of ``choices``), ``floats`` (a list of 1 to ``count``
            finite numbers in the range, strictly increasing), ``path`` (a file path).
        low, high: the range (``low < value`` when ``low_open``).
        off: 0 is accepted besides the range (``0 = off``).
        optional: ``None`` is accepted (the planner's own default; ``--param KEY=null``).
        choices: the words of a ``choice``.
        count: the longest list of a ``floats``.
    """

    kind: Literal["int", "float", "bool", "choice", "floats", "path"]
    low: float = 0.0
    high: float = 0.0
    low_open: bool = False
    off: bool = False
    optional: bool = False
    choices: tuple[str, ...] = ()
    count: int = 0

    @property
    def rule(self) -> str:
        """The rule, as error messages say it (``must be ...``)."""
        null = ", or null for the default" if self.optional else ""
        if self.kind == "bool":
            return "must be true or false"
        if self.kind == "choice":
            return f"must be one of {', '.join(repr(c) for c in self.choices)}"
        if self.kind == "path":
            return f"must be the path of a file (1 to {MAX_PATH_CHARS} characters, no NUL){null}"
        bound = f"{'>' if self.low_open else '>='} {self.low:g} and <= {self.high:g}"
        if self.kind == "floats":
            return (f"must be a list of 1 to {self.count} finite numbers {bound}, strictly increasing")
        if self.kind == "int":
            return f"must be {bound} (an integer{null})"
        return f"must be {'0 (off) or ' if self.off else ''}{bound} (a finite number{null})"

    def _in_range(self, value: float) -> bool:
        return (math.isfinite(value) and (value > self.low if self.low_open else value >= self.low)
                and value <= self.high)

    def check(self, label: str, name: str, value: Any) -> Any:
        """``value`` as the planner takes it (floats as ``float``, lists as tuples).

        Raises:
            ConfigError: ``<label>.<name> = <value>: <rule>``.
        """
        if value is None and self.optional:
            return None
        ok: Any = None
        if self.kind == "bool":
            ok = value if isinstance(value, bool) else None
        elif self.kind == "choice":
            ok = value if isinstance(value, str) and value in self.choices else None
        elif self.kind == "path":
            ok = value if isinstance(value, str) and 0 < len(value) <= MAX_PATH_CHARS and "\0" not in value else None
        elif self.kind == "int":
            ok = value if type(value) is int and self.low <= value <= self.high else None
        elif self.kind == "float":
            if isinstance(value, int | float) and not isinstance(value, bool) and (
                    self._in_range(value) or (self.off and value == 0)):
                ok = float(value)
        elif isinstance(value, list | tuple) and 0 < len(value) <= self.count and all(
                isinstance(v, int | float) and not isinstance(v, bool) and self._in_range(v) for v in value):
            numbers = tuple(float(v) for v in value)
            ok = numbers if all(a < b for a, b in itertools.pairwise(numbers)) else None
        if ok is None:
            raise ConfigError(f"{label}.{name} = {_shown(value)}: {self.rule}")
        return ok


_SECONDS = Param("float", 0.0, MAX_SECONDS)
_FTF = Param("float", 1.0, 1e6, low_open=True, off=True)
_BOOL = Param("bool")
_DP: dict[str, Param] = {
    "mode": Param("choice", choices=("queue", "drop")),
    "kmax": Param("int", 1, 65536, optional=True),
    "interval": _SECONDS,
    "batch": Param("choice", choices=("optimal", "fixed")),
    "ftf_bound": _FTF,
}

PARAMETERS: dict[str, dict[str, Param]] = {
    "dp": _DP,
    "dp-fixed": {k: v for k, v in _DP.items() if k != "batch"},
    "drf": {},
    "drl": {
        "model": Param("path", optional=True),
        "sample": _BOOL,
        "default_epochs_to_go": Param("float", 1.0, MAX_EPOCHS),
    },
    "efq": {
        "alpha": Param("float", 0.0, 1.0, low_open=True),
        "default_epochs_to_go": Param("float", 0.0, MAX_EPOCHS),
    },
    "fifo": {"backfill": _BOOL},
    "min-jct": {
        "ftf_bound": _FTF,
        "grow_s": Param("float", 0.0, 3600.0),
        "shrink_s": Param("float", 0.0, 3600.0),
        "restart_s": Param("float", 0.0, 3600.0),
        "kmax": Param("int", 1, 65536, optional=True),
        "default_epochs_to_go": Param("float", 1.0, MAX_EPOCHS),
    },
    "ones": {
        "population": Param("int", 2, 4096, optional=True),
        "population_cap": Param("int", 2, 4096),
        "generations": Param("int", 0, 1000),
        "mutation_rate": Param("float", 0.0, 1.0),
        "sigma": Param("float", 0.0, 1e6, optional=True),
        "default_epochs_to_go": Param("float", 1.0, MAX_EPOCHS),
        "gate": _BOOL,
        "interval": _SECONDS,
        "ftf_bound": _FTF,
    },
    "optimus": {
        "interval": _SECONDS,
        "start_between_rounds": _BOOL,
        "default_epochs_to_go": Param("float", 1.0, MAX_EPOCHS),
    },
    "tetris": {"default_epochs_to_go": Param("float", 1.0, MAX_EPOCHS)},
    "tiresias": {
        "thresholds": Param("floats", 0.0, 1e12, low_open=True, count=32),
        "promote_after": _SECONDS,
    },
}
"""Every policy's parameters: name -> :class:`Param` (a test keeps it equal to the factories' signatures)."""

_LABELS = {"dp-fixed": "dp"}  # dp-fixed is the dp planner with a fixed batch: its messages say dp.


def check_params(name: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters of policy ``name`` checked against :data:`PARAMETERS` (unknown names are
    left to :func:`create`, which names the known ones).

    Raises:
        ConfigError: ``<policy>.<parameter> = <value>: <rule>``.
    """
    table = PARAMETERS.get(name, {})
    label = _LABELS.get(name, name)
    return {key: (table[key].check(label, key, value) if key in table else value) for key, value in params.items()}


def available() -> tuple[str, ...]:
    """Every policy name, sorted."""
    return tuple(sorted(_FACTORIES))


def create(name: str, **params: Any) -> Planner:
    """The bare planner named ``name``, made with keyword parameters (no site guards).

    Raises:
        UnknownPolicyError: no policy has that name (the message lists the known ones).
        ConfigError: a parameter is unknown (named, with the policy's known parameters), or a
            value breaks its type or range (:data:`PARAMETERS`) or the planner's rule.
    """
    checked = validate(name, params)
    return _FACTORIES[name](**checked)


def validate(name: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters of policy ``name``, their names and values checked (nothing is made: a
    ``drl`` model file is not read); what :func:`create` checks before it makes the planner.

    Raises:
        UnknownPolicyError: no policy has that name.
        ConfigError: a parameter is unknown, or its value breaks its type or range.
    """
    try:
        factory = _FACTORIES[name]
    except (KeyError, TypeError):
        raise UnknownPolicyError(f"unknown policy {_shown(name)}; known policies: {', '.join(available())}") from None
    try:
        inspect.signature(factory).bind(**params)
    except TypeError as exc:
        known = [n for n in inspect.signature(factory).parameters if n != "self"]
        raise ConfigError(
            f"policy {name!r}: bad parameters {sorted(params)} ({exc}); known parameters: {', '.join(known)}"
        ) from None
    return check_params(name, params)


def build(name: str, params: Mapping[str, Any] | None = None, guards: Guards | None = None) -> Planner:
    """The planner a driver runs: policy ``name`` with ``params`` inside the trust guard, inside the
    site ``guards``.

    Args:
        name: the policy.
        params: its parameters (``[policy.<name>]`` of ``elastic.toml``, ``--param``).
        guards: the site guards (``[guards]``; :data:`DEFAULT_GUARDS` when the file has none);
            ``None`` runs the policy in the trust guard only.

    Raises:
        UnknownPolicyError, ConfigError: as :func:`create`.
    """
    planner = ReportGuard(create(name, **dict(params or {})))
    return planner if guards is None else GuardedPlanner(planner, guards)
