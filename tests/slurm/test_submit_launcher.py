"""A real elastic PyTorch job: `slurm-elastic submit` renders the template, Slurm runs two launcher
workers (gloo on CPU, fake GPUs) on the dev cluster, and both finish their epoch."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from slurm_elastic.cli import main

from .conftest import DevCluster

pytestmark = pytest.mark.slurm
EXAMPLE = Path(__file__).resolve().parents[2] / "launcher" / "examples" / "train_cnn.py"


def test_submitted_job_trains_with_the_launcher(cluster: DevCluster, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    cluster.cancel_all()
    for key, value in cluster.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("HOME", str(tmp_path))
    out = cluster.root / "jobs" / "submit-%j.out"
    assert main(["submit", "--elastic", "2:4", "--gpus-per-node", "2", "--output", str(out), "--",
                 sys.executable, str(EXAMPLE), "--dataset-size", "512"]) == 0
    job = int(capsys.readouterr().out.strip())
    files = sorted((tmp_path / ".slurm-elastic" / "secrets").iterdir())
    secrets = [f for f in files if f.suffix != ".orders"]
    assert len(files) == 2 and len(secrets) == 1  # the secret and its order channel
    assert all((f.stat().st_mode & 0o777) == 0o600 for f in files)
    deadline = time.monotonic() + 90
    while cluster.job(job)["job_state"] in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
        assert time.monotonic() < deadline, f"job {job} still {cluster.job(job)['job_state']}"
        time.sleep(1)
    assert cluster.job(job)["job_state"] == "COMPLETED"
    log = Path(str(out).replace("%j", str(job))).read_text()
    assert log.count('"state": "done"') == 2, log[-2000:]
    assert os.path.exists(secrets[0])
