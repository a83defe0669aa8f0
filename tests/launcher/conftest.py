"""Fixtures of the launcher tests: a fake job (store + daemon role) for the multi-process tests, the
ranks of a small script that forms its own world, and a job's TCPStore with a hostile client."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def fake_job_factory(tmp_path: Path) -> Iterator[Any]:
    """Build FakeJob instances (see harness.py); kills leftover workers at the end."""
    pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location("launcher_harness", Path(__file__).with_name("harness.py"))
    assert spec is not None and spec.loader is not None
    harness = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(harness)
    jobs: list[Any] = []

    def make(**kwargs: Any) -> Any:
        job = harness.FakeJob(tmp_path, **kwargs)
        jobs.append(job)
        return job

    yield make
    for job in jobs:
        job.close()


@pytest.fixture
def start_ranks() -> Iterator[Callable[[str, int], list[subprocess.Popen[str]]]]:
    """``start(script, world)``: ``python -c script <rank> <port>`` for each rank, one free port for
    their rendezvous; stdout and stderr piped. Ranks still running at the end are killed."""
    pytest.importorskip("torch")
    from slurm_elastic_launcher.resize_bench import free_port

    started: list[subprocess.Popen[str]] = []

    def start(script: str, world: int = 2) -> list[subprocess.Popen[str]]:
        port = free_port()
        procs = [subprocess.Popen([sys.executable, "-c", script, str(r), str(port)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for r in range(world)]
        started.extend(procs)
        return procs

    yield start
    for p in started:
        if p.poll() is None:
            p.kill()
            p.communicate()


@pytest.fixture
def server() -> Iterator[tuple[int, Any, Any]]:
    """A job's TCPStore (hosted here) and a hostile raw client of it: ``(port, host, hostile)``."""
    pytest.importorskip("torch")
    from slurm_elastic_launcher.resize_bench import free_port
    from slurm_elastic_launcher.signed_store import make_store

    port = free_port()
    host = make_store("127.0.0.1", port, serve=True, timeout_s=5.0)
    hostile = make_store("127.0.0.1", port, serve=False, timeout_s=5.0)
    yield port, host, hostile
