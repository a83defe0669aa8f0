"""``examples/ddp_train.py`` (the porting guide's plain DDP script) ported through the drop-in module
``slurm_elastic_launcher.ddp`` by the guide's rules: the changed lines docs/launcher.md states, and
``slurm-elastic rehearse`` passing every check on the port (grows, shrinks, a lost worker, a requeue,
each sample of each epoch once, the script's own checkpoint, no stale rank, the final loss)."""

from __future__ import annotations

import difflib
import json
import sys
from pathlib import Path

import pytest

from slurm_elastic.cli import main

pytestmark = pytest.mark.launcher

BEFORE = Path(__file__).resolve().parents[2] / "launcher" / "slurm_elastic_launcher" / "examples" / "ddp_train.py"

PORT = [  # (the script's text, the port's): the guide's rules, nothing else
    ("import torch.distributed as dist\n", "import slurm_elastic_launcher.ddp as dist\n"),
    ("from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: N817\n"
     "from torch.utils.data import DataLoader, Dataset, DistributedSampler\n",
     "from slurm_elastic_launcher.ddp import DistributedDataParallel as DDP, world  # noqa: N817\n"
     "from torch.utils.data import Dataset, DistributedSampler\n"),
    ("    rank = dist.get_rank()\n", ""),  # read once, it goes stale: world.is_main below
    ("    loader = DataLoader(dataset,", "    loader = world.loader(dataset,"),
    ("    start_epoch = 0\n",
     "    world.register(model=model, optimizer=optimizer, scheduler=scheduler, trainer=trainer)\n"
     "    start_epoch = 0\n"),
    ("    for epoch in range(start_epoch, args.epochs):\n",
     "    for epoch in world.epochs(args.epochs, start=start_epoch):\n"),
    ("            loss = trainer.train_step(x, y)\n            if rank == 0 and",
     "            loss = trainer.train_step(x, y)\n            world.step(loss)\n            if world.is_main and"),
    ("        if rank == 0 and args.checkpoint:", "        if world.is_main and args.checkpoint:"),
]


def ported() -> str:
    text = BEFORE.read_text()
    for old, new in PORT:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


def changed_lines(before: str, after: str) -> tuple[int, int]:
    """Lines added and removed, as ``diff -u before after | grep '^[-+][^-+]'`` counts them."""
    diff = list(difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm=""))
    added = sum(1 for d in diff if d.startswith("+") and not d.startswith("++"))
    removed = sum(1 for d in diff if d.startswith("-") and not d.startswith("--"))
    return added, removed


def test_the_dropin_port_changes_the_lines_the_guide_states() -> None:
    text = ported()
    compile(text, "port.py", "exec")
    assert changed_lines(BEFORE.read_text(), text) == (9, 8)  # 17: docs/launcher.md, porting table
    assert "in range(" not in text and "rank == 0" not in text and "DataLoader(" not in text


def test_the_dropin_port_passes_every_check_of_a_rehearsal(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    from slurm_elastic_launcher.examples.make_npy_data import write

    write(tmp_path / "data", 200)
    port = tmp_path / "ddp_train_port.py"
    port.write_text(ported())
    ckpt = tmp_path / "own.pt"
    rc = main(["rehearse", "--pace", "0.25", "--timeout", "120", "--json", "--workdir", str(tmp_path / "work"),
               "--script-checkpoint", str(ckpt), "--", sys.executable, str(port), "--data", str(tmp_path / "data"),
               "--epochs", "3", "--batch-size", "8", "--workers", "1", "--checkpoint", str(ckpt)])
    out = json.loads(capsys.readouterr().out)
    checks = {c["check"]: c for c in out["checks"]}
    assert rc == 0 and out["passed"], json.dumps(out, indent=1)
    assert list(checks) == ["run", "1. grow 2 -> 3", "2. shrink 3 -> 1", "3. grow 1 -> 2", "4. kill 2 -> 1",
                            "5. requeue 1 -> 1", "samples", "script checkpoint", "stale rank", "final loss"]
    assert {c["status"] for c in out["checks"]} == {"pass"}, json.dumps(out, indent=1)
    assert checks["samples"]["epochs"] == 3 and checks["samples"]["epoch_size"] == 200
    assert checks["script checkpoint"]["epoch"] == 2
