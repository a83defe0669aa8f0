"""One fuzz case's result, and the one way a family calls an entry point and names what happened."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")


class CaseTimeout(BaseException):
    """The case ran past its time limit (a hang): counted as a foreign exception."""


@dataclass
class CaseResult:
    """What one case did.

    Attributes:
        family: the input family.
        outcome: the expected outcome's name (``accepted``, an error type, ``quarantined`` …), or
            ``foreign`` when something else happened.
        described: the hostile input, short enough to print, to reproduce the case.
        foreign: one text per exception that escaped an entry point (a bug), with its traceback's tail.
        rounds_failed: daemon rounds that raised or recorded nothing.
        other_jobs_unplanned: honest jobs missing from the round's plan, or whose action did not run.
    """

    family: str
    outcome: str = ""
    described: str = ""
    foreign: list[str] = field(default_factory=list)
    rounds_failed: int = 0
    other_jobs_unplanned: int = 0
    failures: list[str] = field(default_factory=list)
    """Why a round failed or an honest job went unplanned (not exceptions: the round's own record)."""

    def note_foreign(self, where: str, exc: BaseException) -> None:
        """Record an exception that escaped ``where``."""
        tail = "".join(traceback.format_exception(exc)[-6:])
        self.foreign.append(f"{where}: {type(exc).__name__}: {str(exc)[:300]}\n{tail[-2500:]}")


def attempt(res: CaseResult, where: str, fn: Callable[[], T],
            expected: tuple[type[BaseException], ...] = ()) -> tuple[str, T | None]:
    """Call ``fn``; return ``("accepted", value)``, or the name of an expected exception's type and
    ``None``; any other exception is recorded as foreign (``("foreign", None)``).

    :class:`CaseTimeout` (and ``KeyboardInterrupt``) pass through.
    """
    try:
        return "accepted", fn()
    except expected as exc:
        return type(exc).__name__, None
    except Exception as exc:  # everything else that escaped the entry point is a bug
        res.note_foreign(where, exc)
        return "foreign", None


def attempt_any(res: CaseResult, where: str, fn: Callable[[], Any],
                expected: tuple[type[BaseException], ...] = ()) -> str:
    """:func:`attempt`, the outcome's name only."""
    return attempt(res, where, fn, expected)[0]
