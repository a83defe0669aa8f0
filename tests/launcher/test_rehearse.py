"""``slurm-elastic rehearse`` on real local workers: the ported example passes a grow, a shrink and a
requeue with every check it can make; a script that never reaches a step boundary fails, naming the check."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from slurm_elastic.cli import main

pytestmark = pytest.mark.launcher

EXAMPLE = Path(__file__).resolve().parents[2] / "launcher" / "slurm_elastic_launcher" / "examples" / "train_elastic.py"


def test_the_ported_example_passes_a_grow_a_shrink_and_a_requeue(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    from slurm_elastic_launcher.examples.make_npy_data import write

    write(tmp_path / "data", 200)
    ckpt = tmp_path / "own.pt"
    rc = main(["rehearse", "--sequence", "2,+1,-2,requeue", "--pace", "0.2", "--timeout", "90", "--json",
               "--workdir", str(tmp_path / "work"), "--script-checkpoint", str(ckpt), "--",
               sys.executable, str(EXAMPLE), "--data", str(tmp_path / "data"), "--epochs", "3", "--batch-size", "8",
               "--workers", "1", "--checkpoint", str(ckpt)])
    out = json.loads(capsys.readouterr().out)
    checks = {c["check"]: c for c in out["checks"]}
    assert rc == 0 and out["passed"], json.dumps(out, indent=1)
    assert list(checks) == ["run", "1. grow 2 -> 3", "2. shrink 3 -> 1", "3. requeue 1 -> 1", "samples",
                            "script checkpoint", "stale rank", "final loss"]
    assert {c["status"] for c in out["checks"]} == {"pass"}, json.dumps(out, indent=1)
    assert checks["1. grow 2 -> 3"]["pause_s"] >= 0 and checks["2. shrink 3 -> 1"]["pause_s"] >= 0
    assert checks["samples"]["epochs"] == 3 and checks["samples"]["epoch_size"] == 200
    assert checks["script checkpoint"]["epoch"] == 2
    assert not ckpt.exists()  # the rehearsal's own copy is gone: the user's next run does not resume from it


BROKEN = textwrap.dedent('''
    import torch
    from torch.utils.data import TensorDataset
    import slurm_elastic_launcher
    world = slurm_elastic_launcher.init()
    model = world.wrap(torch.nn.Linear(4, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    loader = world.loader(data, batch_size=4)
    world.register(model=model, optimizer=opt)
    for epoch in world.epochs(2):
        for x, y in loader:  # the port forgot world.step(): no step boundary is ever reached
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
''')


def test_a_script_that_never_reaches_a_step_boundary_fails_naming_the_check(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    script = tmp_path / "broken.py"
    script.write_text(BROKEN)
    rc = main(["rehearse", "--sequence", "2,+1", "--timeout", "30", "--no-baseline", "--workdir",
               str(tmp_path / "work"), "--", sys.executable, str(script)])
    out = capsys.readouterr().out
    assert rc == 1, out
    assert "FAIL         run" in out and "FAIL         1. grow 2 -> 3" in out, out
    assert "FAILED: run, 1. grow 2 -> 3" in out and "not reached" in out, out
    assert "NOT CHECKED  final loss" in out


BEFORE = EXAMPLE.with_name("ddp_train.py")  # the porting guide's "before": plain torch.distributed


def test_an_unported_script_fails_saying_it_never_made_the_elastic_world(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    from slurm_elastic_launcher.examples.make_npy_data import write

    write(tmp_path / "data", 40)
    rc = main(["rehearse", "--sequence", "2,+1", "--timeout", "60", "--no-baseline", "--workdir",
               str(tmp_path / "work"), "--", sys.executable, str(BEFORE), "--data", str(tmp_path / "data"),
               "--epochs", "1", "--workers", "0"])
    out = capsys.readouterr().out
    assert rc == 1, out
    assert "FAIL         run                the script never made the elastic world" in out, out
    assert "port it first (docs/launcher.md, porting guide)" in out


def test_a_loss_that_is_zero_in_both_runs_is_not_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    from slurm_elastic.rehearse import checks
    from slurm_elastic.rehearse.driver import RunRecord

    monkeypatch.setattr(checks, "final_loss", lambda record: 0.0)  # e.g. cross_entropy over one output
    verdict = checks.loss_verdict(RunRecord(ended=True), RunRecord(ended=True), 0.25)
    assert verdict.status == checks.NOT_CHECKED and "does not depend on the model" in verdict.detail
    monkeypatch.setattr(checks, "final_loss", lambda record: 0.5)
    assert checks.loss_verdict(RunRecord(ended=True), RunRecord(ended=True), 0.25).status == checks.PASS
