"""One source of truth for epochs and batch (issue 36, item 3): the script's ``world.epochs(n)`` and
loader batch are what runs; rank 0's reports carry them (``epochs``, ``local_batch``), and where the
submit flags (``SLURM_ELASTIC_EPOCHS``, ``SLURM_ELASTIC_LOCAL_BATCH``) said otherwise, the first
report carries those (``submitted``) and the job's log says so."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.launcher

SCRIPT = textwrap.dedent('''
    import torch
    from torch.utils.data import TensorDataset
    import slurm_elastic_launcher
    world = slurm_elastic_launcher.init()
    torch.manual_seed(0)
    model = world.wrap(torch.nn.Linear(4, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = world.loader(TensorDataset(torch.randn(32, 4), torch.randint(0, 2, (32,))), batch_size=4)
    world.register(model=model, optimizer=opt)
    for epoch in world.epochs(2):
        for x, y in loader:
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            world.step(loss)
''')

SAID = "slurm-elastic: the script trains 2 epochs at a per-worker batch of 4, but the job was submitted with"


def _run(factory: Any, tmp_path: Path, epochs: str, local_batch: str) -> tuple[list[dict[str, Any]], str]:
    script = tmp_path / f"loop-{epochs}-{local_batch}.py"
    script.write_text(SCRIPT)
    reports = tmp_path / f"{epochs}-{local_batch}.reports"
    job = factory(dataset_size=32, script=[str(script)], SLURM_ELASTIC_EPOCHS=epochs,
                  SLURM_ELASTIC_LOCAL_BATCH=local_batch, SLURM_ELASTIC_REPORTS=str(reports),
                  SLURM_ELASTIC_REPORT_EVERY_S="0.05")
    job.start("w0", ["w0"], SLURM_ELASTIC_STORE_SERVE="0")
    assert job.wait_exit(90.0) == {"w0": 0}, job.output("w0")
    return [json.loads(line) for line in reports.read_text().splitlines()], job.output("w0")


def test_the_reports_carry_the_scripts_epochs_and_say_once_what_submit_said_otherwise(
        fake_job_factory: Any, tmp_path: Path) -> None:
    got, output = _run(fake_job_factory, tmp_path, epochs="3", local_batch="8")
    assert len(got) >= 2 and all(r["epochs"] == 2 and r["local_batch"] == 4 for r in got), got
    assert [r.get("submitted") for r in got] == [{"epochs": 3, "local_batch": 8}] + [None] * (len(got) - 1)
    assert f"{SAID} --epochs 3 --local-batch 8: the script's values run" in output, output


def test_flags_that_agree_with_the_script_are_not_sent_again_nor_said(fake_job_factory: Any, tmp_path: Path) -> None:
    got, output = _run(fake_job_factory, tmp_path, epochs="2", local_batch="4")
    assert got and all(r["epochs"] == 2 and "submitted" not in r for r in got), got
    assert "slurm-elastic: the script trains" not in output
