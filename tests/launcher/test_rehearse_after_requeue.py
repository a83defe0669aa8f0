"""A resize after a requeue is judged in the requeued run's processes: the stayers of a grow that
follows ``requeue`` logged ``resumed_from`` when the new run started, before the steps the grow came
after, and the check took that for a restart through the resize ("did not stay in its process")."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from slurm_elastic.cli import main

pytestmark = pytest.mark.launcher

SCRIPT = textwrap.dedent('''
    import torch
    from torch.utils.data import TensorDataset
    import slurm_elastic_launcher
    world = slurm_elastic_launcher.init()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(384, 4), torch.randint(0, 2, (384,)))
    model = world.wrap(torch.nn.Linear(4, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = world.loader(data, batch_size=8)
    world.register(model=model, optimizer=opt)
    for epoch in world.epochs(2):
        for x, y in loader:
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            world.step(loss)
''')


def test_a_grow_after_a_requeue_passes_in_place(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    rc = main(["rehearse", "--sequence", "1,requeue,+1", "--pace", "0.1", "--timeout", "90", "--no-baseline",
               "--json", "--workdir", str(tmp_path / "work"), "--", sys.executable, str(script)])
    out = json.loads(capsys.readouterr().out)
    checks = {c["check"]: c for c in out["checks"]}
    assert checks["2. grow 1 -> 2"]["status"] == "pass", json.dumps(out, indent=1)
    assert rc == 0 and out["passed"], json.dumps(out, indent=1)
