"""A real elastic PyTorch job: `slurm-elastic submit` renders the template, Slurm runs two launcher
workers (gloo on CPU, fake GPUs) on the dev cluster, and both finish their epoch."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from slurm_elastic.resources import EXAMPLE_TRAINER

from .conftest import DevCluster

pytestmark = pytest.mark.slurm
EXAMPLE = EXAMPLE_TRAINER


def test_submitted_job_trains_with_the_launcher(cluster: DevCluster, tmp_path: Path, submit_example: Any) -> None:
    out = cluster.root / "jobs" / "submit-%j.out"
    job = submit_example(out, "--elastic", "2:4", "--gpus-per-node", "2")
    files = {f.suffix: f for f in (tmp_path / ".slurm-elastic" / "secrets").iterdir()}
    secrets = [f for suffix, f in files.items() if suffix == ""]
    # the secret, the order and report channels, the join script; the job adds its TCPStore address
    assert {".orders", ".reports", ".join"} <= set(files) and len(secrets) == 1, files
    assert all((files[k].stat().st_mode & 0o777) == 0o600 for k in ("", ".orders", ".reports"))
    assert files[".join"].stat().st_mode & 0o777 == 0o700
    deadline = time.monotonic() + 90
    while cluster.job(job)["job_state"] in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
        assert time.monotonic() < deadline, f"job {job} still {cluster.job(job)['job_state']}"
        time.sleep(1)
    assert cluster.job(job)["job_state"] == "COMPLETED"
    log = Path(str(out).replace("%j", str(job))).read_text()
    assert log.count('"state": "done"') == 2, log[-2000:]
    assert os.path.exists(secrets[0])
