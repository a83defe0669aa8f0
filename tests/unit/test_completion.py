"""``slurm-elastic completion bash``: the script made from the parser completes commands, sub-commands,
options and choices in a real bash (issue 18, part 4: shell completion)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from slurm_elastic.cli import main
from slurm_elastic.cli.completion import _word

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="bash")


def _complete(script: str, *words: str) -> list[str]:
    probe = (f"{script}\nCOMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}; "
             "_slurm_elastic; printf '%s\\n' \"${COMPREPLY[@]}\"")
    proc = subprocess.run(["bash", "--norc", "--noprofile", "-c", probe], capture_output=True, text=True, check=True,
                          timeout=30)
    assert proc.stderr == ""
    return [w for w in proc.stdout.splitlines() if w]


@pytest.fixture(scope="module")
def script() -> str:
    out = subprocess.run([sys.executable, "-c", "from slurm_elastic.cli import main; main(['completion', 'bash'])"],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    assert out.startswith("# bash completion for slurm-elastic")
    return out


@pytest.mark.parametrize(("words", "expected"), [
    (("slurm-elastic", "be"), ["bench"]),
    (("slurm-elastic", "bench", "ob"), ["observe"]),
    (("slurm-elastic", "bench", "observe", "--no"), ["--nodes"]),
    (("slurm-elastic", "status", "--backend", "p"), ["pyslurm"]),
    (("slurm-elastic", "-v", "devcluster", "up", "--sl"), ["--slurm-prefix"]),
    (("slurm-elastic", "completion", "b"), ["bash"]),
    (("slurm-elastic", "daemon", "--config", "/et"), []),  # a file: bash's own completion
])
def test_bash_completes_from_the_parser(script: str, words: tuple[str, ...], expected: list[str]) -> None:
    assert _complete(script, *words) == expected


def test_every_command_is_offered(script: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", "bash"]) == 0 and capsys.readouterr().out == script
    offered = set(_complete(script, "slurm-elastic", ""))
    assert {"submit", "status", "daemon", "install-plugin", "report", "bench", "devcluster", "completion"} <= offered


def test_words_are_plain() -> None:
    with pytest.raises(ValueError, match="must be letters, digits"):
        _word("a;rm -rf /")
