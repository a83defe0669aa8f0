"""Argument types shared by the command-line parsers (``slurm-elastic`` and its ``train-drl``).

Each turns one command-line word into a value or raises ``argparse.ArgumentTypeError`` naming the
word and the rule, which the ``slurm-elastic`` parser prints as one line (exit status 2). Numbers
are ASCII only (``٣`` or ``²`` are not digits here), integers have a range, and floats are finite
and in range: a value that would hang a simulation or exhaust memory is refused where it comes in.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from collections.abc import Callable
from typing import Any

GPUS_MAX = 65536
"""Largest GPU count an option takes (``contract.MAX_GPUS``, the ``--elastic`` limit)."""

SEED_MAX = 2**32 - 1
"""Largest seed (numpy's seeds are 32-bit words here: 0 .. 2**32 - 1)."""

PARAM_MAX_CHARS = 4096
"""Longest ``KEY=VALUE`` of ``--param`` (and ``--set``)."""

_INT = re.compile(r"[+-]?[0-9]{1,30}", re.ASCII)
_FLOAT = re.compile(r"[+-]?([0-9]{1,30}(\.[0-9]{0,30})?|\.[0-9]{1,30})([eE][+-]?[0-9]{1,4})?", re.ASCII)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}", re.ASCII)
_POLICY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}", re.ASCII)


def _shown(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:40] + "...")


def comma_words(text: str) -> list[str]:
    """The non-empty words of a comma-separated option value, stripped (``"a, b,,c"`` -> a, b, c)."""
    return [w.strip() for w in text.split(",") if w.strip()]


def int_in(low: int, high: int) -> Callable[[str], int]:
    """An argument type for integers ``low <= value <= high`` (ASCII digits, optional sign)."""

    def parse(text: str) -> int:
        if not _INT.fullmatch(text):
            raise argparse.ArgumentTypeError(f"{_shown(text)} is not an integer")
        value = int(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value}: must be >= {low} and <= {high}")
        return value

    return parse


def int_at_least(low: int, high: int = 2**63 - 1) -> Callable[[str], int]:
    """An argument type for integers ``>= low`` (and ``<= high``)."""
    return int_in(low, high)


seed = int_in(0, SEED_MAX)
"""An argument type for a random seed: ``0 .. 2**32 - 1``."""


def float_in(low: float, high: float, *, low_open: bool = False) -> Callable[[str], float]:
    """An argument type for finite numbers ``low <= value <= high`` (``low < value`` with ``low_open``).

    ``nan``, ``inf`` and anything that is not a decimal number in ASCII are refused.
    """
    rule = f"must be {'>' if low_open else '>='} {low:g} and <= {high:g}"

    def parse(text: str) -> float:
        if not _FLOAT.fullmatch(text):
            raise argparse.ArgumentTypeError(f"{_shown(text)}: must be a finite number ({rule[8:]})")
        value = float(text)
        if not math.isfinite(value) or value < low or (low_open and value == low) or value > high:
            raise argparse.ArgumentTypeError(f"{value:g}: {rule}" if math.isfinite(value) else
                                             f"{_shown(text)}: must be a finite number ({rule[8:]})")
        return value

    return parse


def param(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` or ``POLICY.KEY=VALUE`` with VALUE read as JSON when it is JSON (numbers,
    booleans, lists), else as text.

    Dashes in the parameter name (after the last dot) become underscores (``start-between-rounds``
    is ``start_between_rounds``); a policy name before the dot is kept as written (``dp-fixed``).
    KEY is ASCII letters, digits, ``_`` and ``-``; the whole word is at most
    :data:`PARAM_MAX_CHARS` characters. Whether the value suits the parameter is the policy's
    rule (:func:`slurm_elastic.policies.create`), checked before anything runs.
    """
    if len(text) > PARAM_MAX_CHARS:
        raise argparse.ArgumentTypeError(f"{_shown(text)} ({len(text)} characters): must be at most "
                                         f"{PARAM_MAX_CHARS} characters")
    key, sep, raw = text.partition("=")
    policy, dot, name = key.rpartition(".")
    if not sep or not _NAME.fullmatch(name) or (dot and not _POLICY.fullmatch(policy)):
        raise argparse.ArgumentTypeError(f"{_shown(text)} must look like KEY=VALUE or POLICY.KEY=VALUE "
                                         "(KEY: ASCII letters, digits, _ and -)")
    try:
        value: Any = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    except (ValueError, RecursionError):  # an integer past Python's digit limit, lists nested too deep
        raise argparse.ArgumentTypeError(f"{_shown(text)}: VALUE is not a usable number or list") from None
    return policy + dot + name.replace("-", "_"), value
