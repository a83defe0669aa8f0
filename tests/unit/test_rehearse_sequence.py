"""``rehearse --sequence``: the grammar, and a bad value refused naming the value and the rule (exit 2)."""

from __future__ import annotations

import pytest

from slurm_elastic.cli import main
from slurm_elastic.rehearse.sequence import DEFAULT, SequenceError, parse


def test_the_default_starts_at_2_grows_shrinks_loses_a_worker_and_requeues() -> None:
    seq = parse(DEFAULT)
    assert seq.start == 2
    assert [a.label for a in seq.actions] == ["grow 2 -> 3", "shrink 3 -> 1", "grow 1 -> 2", "kill 2 -> 1",
                                              "requeue 1 -> 1"]
    assert seq.most_workers == 3


@pytest.mark.parametrize(("text", "named"), [
    ("0", "'0'"), ("x,+1", "'x'"), ("2,+0", "'+0'"), ("2,-2", "'-2'"), ("1,kill", "'kill'"),
    ("2,grow", "'grow'"), ("16,+1", "'+1'"), ("", "''"),
])
def test_a_bad_sequence_is_refused_naming_the_item_and_the_rule(text: str, named: str) -> None:
    with pytest.raises(SequenceError) as err:
        parse(text)
    assert named in str(err.value) and "must be a start of 1..16 workers" in str(err.value)


def test_the_cli_refuses_a_bad_sequence_with_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["rehearse", "--sequence", "2,+1,explode", "--", "python", "train.py"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "'explode' is not an action" in err and "2,+1,explode" in err and len(err.strip().splitlines()) == 1
