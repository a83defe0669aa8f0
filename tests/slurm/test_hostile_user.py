"""A hostile user against the daemon on the real dev cluster (issue 13, findings 1 and 4).

One user's job writes junk and a signed lie into its own reports file; another user's job is
honest. The daemon still plans both in the same round, the liar is quarantined (``status`` names
it, with the reason), and when that job's channel then breaks, the daemon refuses to resize it
rather than requeue it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from slurm_elastic.cli import main
from slurm_elastic_launcher.orders import sign_report

from .conftest import DevCluster

pytestmark = pytest.mark.slurm

SECRET = b"h" * 32


def _channel(folder: Path) -> Path:
    """The files ``slurm-elastic submit`` writes for a launcher job; returns the orders file."""
    folder.mkdir(parents=True, exist_ok=True)
    base = folder / "job-h"
    for suffix, data, mode in (("", SECRET, 0o600), (".orders", b"", 0o600), (".reports", b"", 0o600),
                               (".join", b"#!/bin/bash\nexit 0\n", 0o700)):
        path = Path(f"{base}{suffix}")
        path.write_bytes(data)
        path.chmod(mode)
    return Path(f"{base}.orders")


def test_a_lying_job_is_quarantined_and_a_broken_channel_is_never_a_requeue(
        cluster: DevCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    cluster.cancel_all()
    for key, value in cluster.env.items():
        monkeypatch.setenv(key, value)
    orders = _channel(tmp_path / "home")
    liar = cluster.sbatch("--elastic=1:8", "--gres=gpu:1", "-N1", f"--comment=slurm-elastic-orders={orders}",
                          "--wrap", "sleep 300")
    honest = cluster.sbatch("--elastic=1:8", "--gres=gpu:1", "-N1", "--wrap", "sleep 300")
    cluster.wait_state(liar, "RUNNING")
    cluster.wait_state(honest, "RUNNING")
    now = time.time()
    report = {"job_id": str(liar), "kind": "progress", "t": now, "samples": 640, "world": 1, "global_batch": 128,
              "throughput": 500.0, "epoch_size": 50_000}
    with open(orders.with_suffix(".reports"), "ab") as fh:
        fh.write(b'{"job_id":"%d","mac":"\xc3\xa9"}\n' % liar)  # a non-ASCII mac: once a TypeError every round
        fh.write((sign_report({**report, "global_batch": 16384}, SECRET) + "\n").encode())  # signed, impossible
    conf = tmp_path / "elastic.toml"
    conf.write_text(f'[daemon]\npartitions = ["gpu"]\npolicy = "dp"\ndry_run = true\n'
                    f'store = "{tmp_path / "s.db"}"\n')
    assert main(["daemon", "--config", str(conf), "--once"]) == 0
    capsys.readouterr()
    assert main(["status", "--config", str(conf), "--json"]) == 0
    rows = {r["job_id"]: r for r in json.loads(capsys.readouterr().out)}
    assert "refused" in rows[str(liar)]["quarantine"], rows
    assert rows[str(honest)]["quarantine"] == "" and rows[str(honest)]["planned_gpus"] >= 1
    assert rows[str(liar)]["planned_gpus"] >= 1  # still planned, from priors

    # Its channel breaks (a chmod): acting, the daemon grows the honest job and refuses the liar's
    # resize with the reason, instead of requeueing it (which would throw its training away).
    os.chmod(orders.with_suffix(""), 0o644)
    conf.write_text(conf.read_text().replace("dry_run = true", "dry_run = false"))
    assert main(["daemon", "--config", str(conf), "--once"]) == 0
    from slurm_elastic.store import Store

    journal = Store(tmp_path / "s.db").actions_of(str(liar))
    assert journal and all(e.state == "failed" and "never requeued" in e.message for e in journal), journal
    job = cluster.job(liar)
    assert job["job_state"] == "RUNNING" and job.get("restart_cnt", 0) == 0
    cluster.cancel_all()
