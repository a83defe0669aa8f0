"""The real dev Slurm cluster for the ``slurm`` tests: brought up once per session, always brought down.

Skips when Slurm (or root) is missing, unless ``SLURM_ELASTIC_REQUIRE_SLURM=1`` (set by CI): then the
missing prerequisites are a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from slurm_elastic.dev import devcluster


@dataclass
class DevCluster:
    """A running dev cluster: its root, the environment for Slurm commands, and helpers to run them."""

    root: Path
    env: dict[str, str]
    info: dict[str, Any]

    def run(self, argv: Sequence[str], *, check: bool = False,
            timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """Run a Slurm command against this cluster (argv list, from the jobs folder)."""
        proc = subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=timeout,
                              cwd=self.root / "jobs", check=False)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} failed (rc {proc.returncode}): {proc.stderr.strip()}")
        return proc

    def json(self, argv: Sequence[str]) -> dict[str, Any]:
        """Run a ``--json`` Slurm command and parse its output."""
        out: dict[str, Any] = json.loads(self.run(argv, check=True).stdout)
        return out

    def sbatch(self, *args: str) -> int:
        """Submit with ``sbatch --parsable ARGS``; returns the job id."""
        return int(self.run(["sbatch", "--parsable", *args], check=True).stdout.strip().split(";")[0])

    def job(self, job_id: int) -> dict[str, Any]:
        """The job's record from ``squeue --json``."""
        for job in self.json(["squeue", "--json"])["jobs"]:
            if job["job_id"] == job_id:
                return dict(job)
        raise AssertionError(f"job {job_id} not in squeue --json")

    def log_of(self, job_id: int, lines: int = 40) -> str:
        """The last lines slurmctld and the slurmds logged about ``job_id`` (for failure messages)."""
        needles = (f"JobId={job_id} ", f"JobId={job_id}\n", f"job {job_id} ", f"StepId={job_id}.")
        found: list[str] = []
        for path in sorted((self.root / "log").glob("slurm*.log")):
            for line in path.read_text(errors="replace").splitlines():
                if any(n in line + "\n" for n in needles):
                    found.append(f"{path.name}: {line}")
        return "\n".join(found[-lines:])

    def wait_state(self, job_id: int, state: str, timeout: float = 30.0) -> dict[str, Any]:
        """Poll ``squeue --json`` until the job is in ``state``."""
        deadline = time.monotonic() + timeout
        job = self.job(job_id)
        while job["job_state"] != state:
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} is {job['job_state']} ({job.get('state_reason')}), not {state}")
            time.sleep(0.3)
            job = self.job(job_id)
        return job

    def cancel_all(self) -> None:
        """``scancel`` every job and wait until no job holds a node."""
        self.run(["scancel", "-u", "root"])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            states = {j["job_state"] for j in self.json(["squeue", "--json"])["jobs"]}
            if not states & {"RUNNING", "PENDING", "COMPLETING", "CONFIGURING", "SUSPENDED"}:
                return
            time.sleep(0.3)


def _require() -> bool:
    return os.environ.get("SLURM_ELASTIC_REQUIRE_SLURM") == "1"


@pytest.fixture(scope="session")
def dev_root() -> Iterator[Path]:
    """The root folder of this session's dev cluster, directly in /tmp.

    Not under pytest's tmp_path: that is mode 0700, and munged wants every folder above its socket
    traversable by others. Short, so the munge socket path stays short.
    """
    root = Path(tempfile.mkdtemp(prefix="slurm-elastic-test-", dir="/tmp"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def cluster(dev_root: Path) -> Iterator[DevCluster]:
    """A 4-node x 4-GPU dev cluster, up for the whole session."""
    missing = devcluster.check_prerequisites()
    if missing:
        reason = "dev Slurm cluster unavailable: " + "; ".join(missing)
        if _require():
            pytest.fail(reason + " (SLURM_ELASTIC_REQUIRE_SLURM=1)")
        pytest.skip(reason)
    try:
        info = devcluster.up(nodes=4, gpus_per_node=4, root=dev_root)
    except devcluster.DevClusterError as exc:
        pytest.fail(f"devcluster up failed: {exc}")
    try:
        yield DevCluster(dev_root, devcluster.slurm_env(dev_root), info)
    finally:
        devcluster.down(dev_root)


EXAMPLE = Path(__file__).resolve().parents[2] / "launcher" / "examples" / "train_cnn.py"


@pytest.fixture
def submit_example(cluster: DevCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                   capsys: pytest.CaptureFixture[str]) -> Any:
    """Submit the launcher example with ``slurm-elastic submit`` as a user whose HOME is ``tmp_path``.

    Returns a function ``(output_name, *submit_options, dataset_size=...) -> job id``.
    """
    from slurm_elastic.cli import main

    pytest.importorskip("torch")
    cluster.cancel_all()
    for key, value in cluster.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("HOME", str(tmp_path))

    def submit(out: Path, *options: str, dataset_size: int = 512) -> int:
        assert main(["submit", *options, "--output", str(out), "--", sys.executable, str(EXAMPLE),
                     "--dataset-size", str(dataset_size)]) == 0
        return int(capsys.readouterr().out.strip())

    return submit
