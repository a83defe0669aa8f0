"""Fixtures of the launcher tests: a fake job (store + daemon role) for the multi-process tests."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
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
