"""Argument types shared by the command-line parsers (``slurm-elastic`` and its ``train-drl``).

Each turns one command-line word into a value or raises ``argparse.ArgumentTypeError`` naming the
word and the rule, which argparse prints as a one-line usage error (exit status 2).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any


def int_at_least(low: int) -> Callable[[str], int]:
    """An argument type for integers ``>= low``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} must be >= {low}")
        return value

    return parse


def param(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` or ``POLICY.KEY=VALUE`` with VALUE read as JSON when it is JSON (numbers,
    booleans), else as text.

    Dashes in the parameter name (after the last dot) become underscores (``start-between-rounds``
    is ``start_between_rounds``); a policy name before the dot is kept as written (``dp-fixed``).
    """
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} must look like KEY=VALUE")
    try:
        value: Any = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    policy, dot, name = key.rpartition(".")
    return policy + dot + name.replace("-", "_"), value
