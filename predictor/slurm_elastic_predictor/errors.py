"""The root of slurm-elastic's one exception hierarchy, and the predictor's profile error.

This module owns :class:`ElasticError`, the base of every error the project raises on purpose, and
:class:`ProfileError`, the one error for a bad throughput or progress profile. They live here because
the predictor sits below the controller and must not import anything from ``slurm_elastic``;
:mod:`slurm_elastic.errors` re-exports both and derives the controller's own errors from the same
base, so the command and the daemon tell "our clear message" from a bug whichever package raised it.
"""

from __future__ import annotations


class ElasticError(Exception):
    """Base of every error slurm-elastic raises on purpose (controller and predictor alike)."""


class ProfileError(ElasticError, ValueError):
    """A throughput or progress profile is missing, malformed or breaks a rule.

    Messages name the file (and line number) where there is one, the offending value and the rule
    it breaks, e.g. ``".../placements.csv:7: step_time must be a positive number, got '-1'"``. It is
    a :class:`ValueError` too, as the predictor's numeric callers expect of bad input.
    """


__all__ = ["ElasticError", "ProfileError"]
