"""The step journal of one action, and the crash points that test it.

This module owns how an action's steps are journaled (:class:`Steps`) and the named points at
which a daemon can be told to die (:data:`CRASH_POINTS`, :func:`crash_from_env`), so that
``slurm-elastic bench chaos`` and the tests can kill it at every step and check that the next
daemon resumes or undoes what the journal says ran.

A step is journaled *before* it runs, with what it will do and what it will leave behind that a
later daemon must be able to find (a satellite's submission token, the order's workers, the
command's argv); a step's outcome (the Slurm id it produced) is journaled after it as its own
entry (:meth:`Steps.note`). Crash point ``<kind>:<step>`` fires after the step is journaled and
before it runs; ``<kind>:<step>+`` fires right after it ran, before anything else is written.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from slurm_elastic.errors import ConfigError
from slurm_elastic.store import Store

log = logging.getLogger(__name__)

T = TypeVar("T")
CRASH_ENV = "SLURM_ELASTIC_CRASH_AT"
"""Environment variable naming one crash point (never set in production; ``bench chaos`` sets it)."""

# The steps of each action kind, in order (launcher resizes, then the requeue path of the others).
STEPS: dict[str, tuple[str, ...]] = {
    "start": ("shape", "start"),
    "preempt": ("requeue",),
    "drop": ("cancel",),
    "grow": ("order", "sbatch", "mark", "requeuehold", "shape", "release", "start"),
    "shrink": ("order", "owe-release", "requeuehold", "shape", "release", "start"),
    "move": ("requeuehold", "shape", "release", "start"),
    "rebatch": ("order",),
}
CRASH_POINTS: tuple[str, ...] = tuple(f"{kind}:{step}{after}" for kind, steps in STEPS.items()
                                      for step in steps for after in ("", "+"))
"""Every point a daemon can be told to die at (see the module docstring)."""


def step_of(argv: Sequence[str]) -> str:
    """The step name of one Slurm command of the requeue path, a start, a preemption or a drop."""
    program, verb = [*argv, "", ""][:2]
    if program == "scancel":
        return "cancel"
    if verb in ("requeue", "requeuehold", "release"):
        return verb
    return "start" if "StartTime=now" in argv else "shape"


def crash_from_env(environ: dict[str, str] | None = None) -> Callable[[str], None]:
    """The crash hook the environment asks for: SIGKILL this process at the named point, or nothing.

    Raises:
        ConfigError: the variable names no crash point.
    """
    point = (os.environ if environ is None else environ).get(CRASH_ENV, "")
    if not point:
        return lambda at: None
    if point not in CRASH_POINTS:
        raise ConfigError(f"{CRASH_ENV}={point[:80]!r}: not a crash point (rule: one of kind:step[+], "
                          f"e.g. grow:sbatch+; all: {', '.join(CRASH_POINTS)})")

    def crash(at: str) -> None:
        if at == point:
            log.warning("crash point %s: killing the daemon (%s)", at, CRASH_ENV)
            logging.shutdown()
            os.kill(os.getpid(), signal.SIGKILL)

    return crash


class Steps:
    """The journal of one running action's steps (:meth:`~slurm_elastic.store.Store.add_step`).

    Args:
        store: the journal.
        action_id: the running action.
        kind: the action's kind (its crash points are ``<kind>:<step>``).
        clock: seconds since the epoch.
        crash: called with each crash point reached (:func:`crash_from_env`).
    """

    def __init__(self, store: Store, action_id: int, kind: str, clock: Callable[[], float],
                 crash: Callable[[str], None]) -> None:
        self.store, self.action_id, self.kind, self.clock, self.crash = store, action_id, kind, clock, crash

    def run(self, name: str, fn: Callable[[], T], **detail: Any) -> T:
        """Journal step ``name`` with ``detail``, run ``fn``, return what it returned."""
        self.store.add_step(self.action_id, name, detail, self.clock())
        self.crash(f"{self.kind}:{name}")
        out = fn()
        self.crash(f"{self.kind}:{name}+")
        return out

    def note(self, name: str, **detail: Any) -> None:
        """Journal what a step produced (a Slurm id), right after it ran."""
        self.store.add_step(self.action_id, name, detail, self.clock())
