"""The grammar of ``slurm-elastic rehearse --sequence``: what the rehearsal does to the workers, in order.

This module owns the grammar and its one parser; it is pure (no I/O, no processes). A sequence is a
comma-separated list: the first item is the number of workers the job starts with, each later item
an action at a step boundary::

    SEQUENCE := START ("," ACTION)*
    START    := an integer 1..MAX_WORKERS          the workers the job starts with
    ACTION   := "+" K                               grow by K joiners (the old workers stay)
              | "-" K                               shrink by K (the K highest ranks leave)
              | "kill"                              SIGKILL the highest rank (a lost node); needs 2 workers
              | "requeue"                           SIGTERM every worker, restart as many from the checkpoint

``K`` is an integer ≥ 1; the worker count stays within 1..MAX_WORKERS after every action, and a
``kill`` leaves at least one survivor. Spaces around items are ignored. The default,
:data:`DEFAULT`, is ``2,+1,-2,+1,kill,requeue``: start at 2, grow to 3, shrink to 1, grow to 2, lose
a worker, and stop and resume as a requeue would.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from slurm_elastic.errors import ElasticError

MAX_WORKERS = 16
"""Most workers at any point of a rehearsal (they are processes on this machine)."""

DEFAULT = "2,+1,-2,+1,kill,requeue"
"""The sequence run when ``--sequence`` is not given."""

RULE = (f"a start of 1..{MAX_WORKERS} workers, then comma-separated actions +K (grow), -K (shrink), kill, "
        f"requeue, with 1..{MAX_WORKERS} workers after each and at least 2 before a kill "
        f"(e.g. {DEFAULT})")
"""The rule a refused sequence names."""

_STEP = re.compile(r"([+-])([0-9]{1,3})")


class SequenceError(ElasticError, ValueError):
    """A ``--sequence`` that breaks the grammar; the message names the value, the item and the rule."""


@dataclass(frozen=True, slots=True)
class Action:
    """One action of a sequence.

    Attributes:
        kind: ``grow``, ``shrink``, ``kill`` or ``requeue``.
        count: workers added or removed (grow, shrink; 1 for kill, 0 for requeue).
        before: workers before the action.
        after: workers after it.
    """

    kind: str
    count: int
    before: int
    after: int

    @property
    def label(self) -> str:
        """How the verdicts name it, e.g. ``grow 2 -> 3``."""
        return f"{self.kind} {self.before} -> {self.after}"


@dataclass(frozen=True, slots=True)
class Sequence:
    """A parsed sequence.

    Attributes:
        start: workers at the start.
        actions: the actions, in order.
        text: the sequence as given.
    """

    start: int
    actions: tuple[Action, ...]
    text: str

    @property
    def most_workers(self) -> int:
        """The largest worker count the sequence reaches."""
        return max([self.start, *(a.after for a in self.actions)])


def parse(text: str) -> Sequence:
    """Parse a ``--sequence`` value.

    Args:
        text: e.g. ``2,+1,-2,kill,requeue``.

    Returns:
        The sequence, with each action's worker counts before and after it.

    Raises:
        SequenceError: naming the value, the item at fault and :data:`RULE`.
    """
    items = [item.strip() for item in text.split(",")]

    def refuse(why: str) -> SequenceError:
        return SequenceError(f"--sequence {text[:200]!r}: {why}; must be {RULE}")

    if not items[0].isascii() or not items[0].isdigit() or len(items[0]) > 3:
        raise refuse(f"the start {items[0][:40]!r} is not a worker count")
    size = int(items[0])
    if not 1 <= size <= MAX_WORKERS:
        raise refuse(f"the start {size} is outside 1..{MAX_WORKERS}")
    start, actions = size, []
    for item in items[1:]:
        match = _STEP.fullmatch(item)
        if match:
            count = int(match.group(2))
            if count < 1:
                raise refuse(f"{item!r} changes no worker")
            after = size + count if match.group(1) == "+" else size - count
            kind = "grow" if match.group(1) == "+" else "shrink"
        elif item == "kill":
            kind, count, after = "kill", 1, size - 1
            if size < 2:
                raise refuse(f"'kill' at {size} worker would leave no survivor")
        elif item == "requeue":
            kind, count, after = "requeue", 0, size
        else:
            raise refuse(f"{item[:40]!r} is not an action")
        if not 1 <= after <= MAX_WORKERS:
            raise refuse(f"{item!r} at {size} workers leaves {after}, outside 1..{MAX_WORKERS}")
        actions.append(Action(kind, count, size, after))
        size = after
    return Sequence(start, tuple(actions), text)
