"""The (policy, seed) pairs of ``simulate``, ``what-if`` and ``reproduce`` in a pool of processes:
the same results as the serial run, byte for byte, the serial run's errors, a clean Ctrl-C, and a
``--processes`` that refuses a bad value."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slurm_elastic.cli import main
from slurm_elastic.errors import ConfigError
from slurm_elastic.experiments.comparison import PolicySpec, run_comparison
from slurm_elastic.experiments.pool import MAX_PROCESSES, Pair, PairPool, default_processes
from slurm_elastic.workloads.philly import philly_like

POLICIES = [PolicySpec("fifo"), PolicySpec("dp"), PolicySpec("dp", {"mode": "drop"}, "dp (drop)")]


def _trace(path: Path, jobs: int = 16) -> Path:
    lines = ["job_id,submit_time,num_gpus,duration"]
    lines += [f"{i},{37 * i % 300},{1 + i % 4},{600 + 97 * i % 1800}" for i in range(1, jobs + 1)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_pool_gives_the_serial_results_in_the_serial_order() -> None:
    serial = run_comparison(POLICIES, [1, 2], workload="ares-philly", gpus=64, loads=())
    seen: list[str] = []
    with PairPool(2) as pool:
        pooled = run_comparison(POLICIES, [1, 2], workload="ares-philly", gpus=64, pool=pool, progress=seen.append)
        again = run_comparison(POLICIES[:1], [3], workload="ares-philly", gpus=64, pool=pool)  # the workers kept
    assert json.dumps(pooled, default=float) == json.dumps(serial, default=float)
    assert [(r["seed"], r["policy"]) for r in pooled] == [(s, p.shown) for s in (1, 2) for p in POLICIES]
    assert sorted(seen) == sorted(f"ares-philly seed {s}: {p.shown} on 64 GPUs (160 jobs)" for s in (1, 2)
                                  for p in POLICIES)  # one progress step per pair
    assert again[0]["seed"] == 3 and again[0]["policy"] == "fifo"


def _pair(params: dict[str, Any], shown: str, jobs: int = 12) -> Pair:
    return Pair(philly_like(jobs, 16, 1), "dp", params, shown, simulate={"gpus": 16, "seed": 1}, label=shown)


@pytest.mark.parametrize("processes", [1, 2])
def test_the_first_failing_pair_in_order_is_the_error_raised(processes: int) -> None:
    pairs = [_pair({}, "ok"), _pair({"mode": "first-bad"}, "bad 1"), _pair({"mode": "second-bad"}, "bad 2")]
    with pytest.raises(ConfigError) as err, PairPool(processes) as pool:
        pool.run(pairs)
    assert "first-bad" in str(err.value)  # the serial run's error, whichever worker ended first


def test_the_pool_is_stopped_after_an_error_and_starts_again() -> None:
    with PairPool(2) as pool:
        with pytest.raises(ConfigError):
            pool.run([_pair({"mode": "bad"}, "bad"), _pair({}, "ok")])
        assert pool._pool is None  # terminated, not left running
        assert [r["policy"] for r in pool.run([_pair({}, "a"), _pair({}, "b")])] == ["a", "b"]


@pytest.fixture
def python_ctrl_c() -> Iterator[None]:
    """Python's own Ctrl-C handler, whatever this process inherited: a shell starts a background
    command with SIGINT ignored, and Python then installs none (the interrupt was then lost)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.usefixtures("python_ctrl_c")
def test_ctrl_c_stops_the_workers_and_raises_keyboard_interrupt_here() -> None:
    pairs = [_pair({}, f"long {i}", jobs=400) for i in range(4)]
    pool = PairPool(2)
    workers: list[Any] = []

    def interrupt() -> None:
        while pool._pool is None:
            time.sleep(0.05)
        workers.extend(pool._pool._pool)
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        pool.run(pairs)
    assert time.monotonic() - started < 30  # not after the four long runs
    assert pool._pool is None and workers
    for proc in workers:
        proc.join(timeout=10)
        assert not proc.is_alive()


def test_the_default_is_the_cpus_this_process_may_use(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 64)  # the machine's
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {2, 5, 7})  # this process's (taskset, cgroup)
    assert default_processes() == 3


@pytest.mark.parametrize("command", [["simulate", "--workload", "ares-philly"], ["reproduce", "--quick"],
                                     ["what-if", "--since", "now-1d", "--policy", "dp", "--gpus", "8"]])
@pytest.mark.parametrize(("value", "said"), [("0", "0: must be >= 1 and <= 1024"),
                                             ("-3", "-3: must be >= 1 and <= 1024"),
                                             ("2000", "2000: must be >= 1 and <= 1024"),
                                             ("two", "'two' is not an integer")])
def test_a_bad_number_of_processes_exits_2_naming_the_value_and_the_rule(
        command: list[str], value: str, said: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([*command, "--processes", value])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--processes" in err and said in err and "worker processes" in err
    assert len(err.strip().splitlines()) == 1
    assert MAX_PROCESSES == 1024


def test_pool_construction_refuses_a_bad_count() -> None:
    for bad in (0, -1, MAX_PROCESSES + 1, True):
        with pytest.raises(ConfigError, match="--processes"):
            PairPool(bad)


def test_simulate_writes_the_same_json_with_a_pool_as_without(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    trace = _trace(tmp_path / "t.csv")
    base = ["simulate", "--trace", str(trace), "--gpus", "8", "--policy", "fifo,dp,min-jct", "--seeds", "1-2",
            "--quiet"]
    assert main([*base, "--processes", "1", "--json", str(tmp_path / "serial.json")]) == 0
    serial_out = capsys.readouterr().out
    assert main([*base, "--processes", "2", "--json", str(tmp_path / "pool.json")]) == 0
    assert capsys.readouterr().out == serial_out
    assert (tmp_path / "pool.json").read_bytes() == (tmp_path / "serial.json").read_bytes()
