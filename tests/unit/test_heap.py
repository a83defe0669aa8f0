"""The simulating commands keep freed memory (glibc's allocator thresholds); the others do not."""

from __future__ import annotations

import contextlib
import platform

import pytest

from slurm_elastic import cli, heap


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
    calls: list[bool] = []
    monkeypatch.setattr(heap, "keep_freed_memory", lambda: calls.append(True) or True)
    with contextlib.suppress(SystemExit):
        cli.main(argv)
    assert bool(calls) is kept
