"""Test harness for multi-process launcher tests: hosts the job's TCPStore and acts as the daemon."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slurm_elastic_launcher import examples
from slurm_elastic_launcher.order_sources import StoreOrderSource
from slurm_elastic_launcher.orders import Order
from slurm_elastic_launcher.signed_store import SignedStore, make_store
from slurm_elastic_launcher.torch_backend import TorchBackend

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = Path(examples.__file__).parent / "train_cnn.py"
SECRET = "test-secret-0123456789abcdef"
JOB_ID = "4242"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class FakeJob:
    """One elastic job: the store, worker processes (the example), and signed orders."""

    def __init__(self, tmp: Path, model: str = "cnn", dataset_size: int = 512, script: list[str] | None = None,
                 **env: str) -> None:
        self.tmp = tmp
        self.script = script or [str(EXAMPLE), "--model", model, "--dataset-size", str(dataset_size)]
        self.model = model
        self.dataset_size = dataset_size
        self.port = free_port()
        self.store = make_store("127.0.0.1", self.port, serve=True)
        self.kv = TorchBackend(SignedStore(self.store, JOB_ID, SECRET.encode()), 10.0)
        self.env = {
            "SLURM_ELASTIC_JOB_ID": JOB_ID,
            "SLURM_ELASTIC_SECRET": SECRET,
            "SLURM_ELASTIC_STORE_PORT": str(self.port),
            "SLURM_ELASTIC_EPOCHS": "1000",
            "SLURM_ELASTIC_LOCAL_BATCH": "8",
            "SLURM_ELASTIC_GROUP_TIMEOUT_S": "10",
            "SLURM_ELASTIC_JOIN_TIMEOUT_S": "120",
            "GLOO_SOCKET_IFNAME": "lo",
            **env,
        }
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.seq = 0
        self.killed: set[str] = set()

    def start(self, worker: str, workers: list[str] | None = None, **env: str) -> subprocess.Popen[bytes]:
        full = dict(os.environ)
        full.update(self.env)
        full.update(
            SLURM_ELASTIC_WORKER_ID=worker,
            SLURM_ELASTIC_WORKERS=",".join(workers or []),
            SLURM_ELASTIC_JOIN="0" if workers else "1",
            SLURM_ELASTIC_EVENT_LOG=str(self.tmp / f"{worker}.jsonl"),
            **env,
        )
        with open(self.tmp / f"{worker}.out", "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, *self.script],
                env=full, stdout=out, stderr=subprocess.STDOUT,
            )
        self.procs[worker] = proc
        return proc

    def order(self, kind: str, workers: list[str] | None = None, secret: str = SECRET, job_id: str = JOB_ID,
              local_batch: int = 0) -> int:
        self.seq += 1
        order = Order(job_id, self.seq, kind, tuple(workers or ()), local_batch).signed(secret.encode())
        StoreOrderSource.publish(self.kv, order)
        return self.seq

    def events(self, worker: str) -> list[dict[str, Any]]:
        path = self.tmp / f"{worker}.jsonl"
        if not path.exists():
            return []
        out = []
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                break  # a line being written
        return out

    def last_step(self, worker: str, gen: str | None = None) -> int:
        steps = [e["step"] for e in self.events(worker) if e["ev"] == "step" and (gen is None or e["gen"] == gen)]
        return max(steps, default=0)

    def steps_in(self, worker: str, gen: str) -> int:
        """Steps ``worker`` logged in generation ``gen`` (step numbers are the job's global count)."""
        return sum(1 for e in self.events(worker) if e["ev"] == "step" and e["gen"] == gen)

    def kill(self, worker: str) -> None:
        self.killed.add(worker)
        os.kill(self.procs[worker].pid, signal.SIGKILL)

    def output(self, worker: str) -> str:
        return (self.tmp / f"{worker}.out").read_text()

    def wait_until(self, what: str, pred: Callable[[], bool], timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while not pred():
            for w, p in self.procs.items():
                if p.poll() not in (None, 0) and w not in self.killed:
                    raise AssertionError(f"{w} exited rc={p.returncode} while waiting for {what}:\n{self.output(w)}")
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {w}\n{self.output(w)[-3000:]}" for w in self.procs)
                raise AssertionError(f"timed out waiting for {what}\n{logs}")
            time.sleep(0.05)

    def wait_exit(self, timeout: float = 30.0) -> dict[str, int]:
        deadline = time.monotonic() + timeout
        rcs = {}
        for w, p in self.procs.items():
            try:
                rcs[w] = p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                rcs[w] = -999
        return rcs

    def close(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
