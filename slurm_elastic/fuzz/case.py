"""One fuzz case's result, and the one way a family calls an entry point and names what happened."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
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
    places: list[str] = field(default_factory=list)
    """Per problem, where it is: for a foreign exception ``Type in path:function`` of the project's
    innermost frame it passed (the bug's place), for a failed round or an honest job left unplanned
    or unacted a line naming it and the reason."""

    def note_foreign(self, where: str, exc: BaseException) -> None:
        """Record an exception that escaped ``where``."""
        tail = "".join(traceback.format_exception(exc)[-6:])
        self.foreign.append(f"{where}: {type(exc).__name__}: {str(exc)[:300]}\n{tail[-2500:]}")
        self.places.append(place(exc, where))

    def note_failure(self, text: str, place: str) -> None:
        """Record a rule the round or the act step broke without an exception."""
        self.failures.append(text)
        self.places.append(place)

    def note_foreign_text(self, where: str, text: str) -> None:
        """Record a foreign outcome that was caught and reported as text (an action's ``failed: ...``)."""
        self.foreign.append(f"{where}: {text}")
        self.places.append(f"{text.split(':')[1].strip() if text.count(':') > 1 else text[:40]} in {where}")


_ROOT = Path(__file__).resolve().parents[2]
_OWN = Path(__file__).resolve().parent


def place(exc: BaseException, where: str) -> str:
    """``Type in path:function``: the innermost frame of the project (not of this package) that
    ``exc`` passed, else ``where``."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if f.filename.startswith(str(_ROOT)) and not f.filename.startswith(str(_OWN))
              and "site-packages" not in f.filename]
    if not frames:
        return f"{type(exc).__name__} in {where}"
    inner = frames[-1]
    return f"{type(exc).__name__} in {Path(inner.filename).relative_to(_ROOT)}:{inner.name}"


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
