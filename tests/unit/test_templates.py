"""The sbatch templates: golden rendering, quoting, refused values, and the submit command."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_elastic.cli import main
from slurm_elastic.errors import ConfigError
from slurm_elastic.templates import JobRequest, render

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "pytorch.sbatch"
GOLDEN_JOIN = Path(__file__).resolve().parents[1] / "golden" / "pytorch.join"
REQ = JobRequest(command=("python", "train.py", "--data", "/scratch/my data"), min_gpus=2, max_gpus=8,
                 batch="64:512", mode="exo", local_batch=64, epochs=3, name="resnet", time="02:00:00",
                 account="proj-1", partition="v100", secret_file="/home/alice/.slurm-elastic/secrets/job-1")


def test_pytorch_template_renders_the_golden_script() -> None:
    assert render("pytorch", REQ) == GOLDEN.read_text()


def test_join_script_renders_the_golden_script() -> None:
    assert render("pytorch", REQ, part="join") == GOLDEN_JOIN.read_text()


def test_unknown_template_part_is_refused() -> None:
    with pytest.raises(ConfigError, match="template part 'restart'"):
        render("pytorch", REQ, part="restart")


def test_user_words_are_quoted_and_options_follow_the_request() -> None:
    from dataclasses import replace

    script = render("pytorch", replace(REQ, command=("python", "t.py", "$(rm -rf ~)"), start_gpus=6, batch=""))
    assert "'$(rm -rf ~)'" in script
    assert "#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=4\n" in script
    assert "--elastic-batch" not in script


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"min_gpus": 4, "max_gpus": 2}, "expected MIN:MAX with 1 <= MIN <= MAX"),
        ({"mode": "both"}, "--mode 'both': must be exo or endo"),
        ({"account": "a b"}, "--account 'a b': only letters"),
        ({"command": ()}, "no training command given"),
        ({"batch": "lots"}, "--batch 'lots': expected MIN:MAX"),
    ],
)
def test_bad_values_are_refused(change: dict[str, object], message: str) -> None:
    from dataclasses import replace

    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        render("pytorch", replace(REQ, **change))  # type: ignore[arg-type]


def test_unknown_template_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="known templates: pytorch"):
        render("tensorflow", REQ)


def test_submit_dry_run_prints_the_script(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["submit", "--elastic", "2:8", "--dry-run", "--", "python", "train.py"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("#!/bin/bash") and "#SBATCH --elastic=2:8" in out and "python train.py" in out
    assert main(["submit", "--elastic", "eight", "--dry-run", "--", "python"]) == 2
