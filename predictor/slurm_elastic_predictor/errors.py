"""Errors of the predictor package.

This module owns the one exception the predictor raises on purpose for bad profile input. It must
not import anything from ``slurm_elastic`` (the predictor is used by both sides and sits below
them); the controller may wrap or re-raise it in its own hierarchy.
"""

from __future__ import annotations


class ProfileError(ValueError):
    """A throughput profile is missing, malformed or breaks a rule.

    Messages name the file (and line number) where there is one, the offending value and the rule
    it breaks, e.g. ``".../placements.csv:7: step_time must be a positive number, got '-1'"``.
    """
