"""``bench load`` counts what the daemon did from its journal (issue 38, bug 6): a refused action
(Slurm's "Invalid node name specified" once, never reproduced since) is a figure of the benchmark,
not only a line on stderr."""

from __future__ import annotations

from slurm_elastic.bench.live.load import _journal_counts
from slurm_elastic.core.actions import Action, ActionKind
from slurm_elastic.core.model import JobId, Placement
from slurm_elastic.store import JournalEntry


def _entry(i: int, kind: ActionKind, job: str, state: str, message: str = "") -> JournalEntry:
    action = Action(kind, JobId(job), Placement.of([]), Placement.of([("n01", 0)]))
    return JournalEntry(i, None, action, state, message, float(i), float(i) + 0.5)


def test_the_journal_gives_actions_by_kind_and_each_refusal_reason_once() -> None:
    journal = [
        _entry(1, ActionKind.START, "11", "done"),
        _entry(2, ActionKind.START, "12", "failed", "scontrol update JobId=12 failed: Invalid node name specified"),
        _entry(3, ActionKind.START, "13", "failed", "scontrol update JobId=13 failed: Invalid node name specified"),
        _entry(4, ActionKind.PREEMPT, "14", "failed", "job 14 is not running"),
        _entry(5, ActionKind.PREEMPT, "15", "done"),
    ]
    out = _journal_counts(journal)
    assert out["actions"] == {"preempt": 2, "start": 3}
    assert out["actions_refused"] == 3
    assert out["refusals"] == {"scontrol update job J failed: Invalid node name specified": 2,
                               "job J is not running": 1}


def test_a_quiet_journal_says_so() -> None:
    assert _journal_counts([]) == {"actions": {}, "actions_refused": 0, "refusals": {}}
