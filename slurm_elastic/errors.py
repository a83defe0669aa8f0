"""The one exception hierarchy of slurm-elastic.

Every error the project raises on purpose derives from :class:`ElasticError`, so the daemon loop
and the CLI can tell "our clear message" from a bug. Messages name the value and the rule broken.
The base and :class:`ProfileError` are defined in :mod:`slurm_elastic_predictor.errors` (the
predictor, below the controller, raises profile errors too and imports nothing from here) and are
the same classes here: one hierarchy, one ``ProfileError``.
"""

from __future__ import annotations

from slurm_elastic_predictor.errors import ElasticError, ProfileError


class ConfigError(ElasticError):
    """A configuration key or value breaks its rule (the message names key, value and rule)."""


class SnapshotError(ElasticError):
    """A cluster snapshot is inconsistent (duplicate ids, GPUs held twice, bad ranges)."""


class InvalidPlanError(ElasticError):
    """A plan breaks a hard constraint; ``violations`` lists every rule broken."""

    def __init__(self, violations: tuple[str, ...]) -> None:
        self.violations = violations
        super().__init__("invalid plan: " + "; ".join(violations))


class UnknownPolicyError(ElasticError):
    """A planner name is not registered."""


class TraceError(ElasticError):
    """A trace or workload input is malformed (the message names file, line and rule)."""


__all__ = ["ConfigError", "ElasticError", "InvalidPlanError", "ProfileError", "SnapshotError", "TraceError",
           "UnknownPolicyError"]
