"""The simulating commands keep freed memory (glibc's allocator thresholds) and collect garbage seldom; the
others do neither. A simulation's rounds run with the collector paused, as the daemon's do."""

from __future__ import annotations

import contextlib
import gc
import platform
from typing import Any

import pytest

from slurm_elastic import cli, collector, policies
from slurm_elastic.cli import heap
from slurm_elastic.sim.engine import simulate
from slurm_elastic.workloads.philly import philly_like


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the thresholds are glibc's")
def test_glibc_takes_all_three_thresholds() -> None:
    assert heap.keep_freed_memory() is True


@pytest.mark.parametrize(("argv", "kept"), [
    (["simulate", "--workload", "nope"], True),
    (["reproduce", "--seeds", "x"], True),
    (["completion", "bash"], False),
    (["check-config", "/nonexistent/elastic.toml"], False),
])
def test_only_the_simulating_commands_set_them(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                               argv: list[str], kept: bool) -> None:
    calls: list[str] = []
    monkeypatch.setattr(heap, "keep_freed_memory", lambda: calls.append("heap") or True)
    monkeypatch.setattr(collector, "collect_seldom", lambda: calls.append("gc"))
    with contextlib.suppress(SystemExit):
        cli.main(argv)
    assert calls == (["heap", "gc"] if kept else [])


def test_collect_seldom_sets_the_thresholds() -> None:
    before = gc.get_threshold()
    try:
        collector.collect_seldom()
        assert gc.get_threshold() == collector.SIMULATING_THRESHOLDS
    finally:
        gc.set_threshold(*before)


def test_a_simulation_plans_with_the_collector_paused() -> None:
    seen: list[bool] = []
    dp = policies.create("dp")

    class Watched:
        name, interval, epoch_events, uses_progress = "dp", 0.0, False, False

        def plan(self, snapshot: Any, memo: Any, rng: Any) -> Any:
            seen.append(gc.isenabled())
            return dp.plan(snapshot, memo, rng)

    assert gc.isenabled()
    simulate(philly_like(12, 8, 1), Watched(), gpus=8, seed=1)  # type: ignore[arg-type]
    assert seen and not any(seen) and gc.isenabled()
