"""A ported script that fails before it makes the elastic world is not told to port itself: a
script that imports ``slurm_elastic_launcher.ddp`` and stops on its own code first (Princeton's DDP
tutorial read ``SLURM_PROCID`` there) fails ``run`` saying so, with its output."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from slurm_elastic.cli import main

pytestmark = pytest.mark.launcher

FAILS_FIRST = textwrap.dedent('''
    import os
    import slurm_elastic_launcher.ddp as dist
    workers = int(os.environ["NO_SUCH_VARIABLE_OF_THE_SCRIPTS"])  # its own code fails before init
    dist.init_process_group("gloo")
''')


def test_a_ported_script_failing_before_init_is_not_told_to_port_itself(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    script = tmp_path / "train.py"
    script.write_text(FAILS_FIRST)
    rc = main(["rehearse", "--sequence", "2", "--timeout", "60", "--no-baseline", "--workdir",
               str(tmp_path / "work"), "--", sys.executable, str(script)])
    out = capsys.readouterr().out
    assert rc == 1, out
    assert "imports slurm_elastic_launcher.ddp but stopped before its init_process_group" in out, out
    assert "port it first" not in out, out
