"""Benchmark of the launcher: pause of an in-place resize against checkpoint-to-disk + restart.

This module owns :func:`bench_resize`. It hosts the job's TCPStore, acts as the daemon (signed orders),
and runs the example worker (``slurm_elastic_launcher/examples/train_cnn.py``, under ``run(ElasticJob)`` or in
its own loop through ``init()``) as real processes on this machine. The
pause of a resize is "stop after step" → "first step in the new world done", minus one normal step of
the new world; the checkpoint-restart pause is measured the same way in the same run: the job stops
with a checkpoint, its processes exit, new ones start, load it and take their first step. It prints
nothing and parses no arguments (the controller's CLI wires it).
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .order_sources import StoreOrderSource
from .orders import Order
from .signed_store import SignedStore, make_store
from .torch_backend import TorchBackend

EXAMPLE = Path(__file__).resolve().parent / "examples" / "train_cnn.py"


def free_port() -> int:
    """A TCP port free on this machine now (the benches' stores and rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Run:
    """Worker processes of one benchmark job, their event logs, and the daemon's orders."""

    def __init__(self, tmp: Path, model: str, dataset_size: int, api: str = "run") -> None:
        self.tmp = tmp
        self.model = model
        self.api = api
        self.dataset_size = dataset_size
        self.port = free_port()
        self.store = make_store("127.0.0.1", self.port, serve=True)
        self.secret = os.urandom(16).hex()
        self.kv = TorchBackend(SignedStore(self.store, "bench", self.secret.encode()), 30.0)
        self.seq = 0
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, worker: str, workers: list[str] | None, tag: str, **extra: str) -> None:
        env = dict(os.environ)
        env.update(
            SLURM_ELASTIC_JOB_ID="bench",
            SLURM_ELASTIC_SECRET=self.secret,
            SLURM_ELASTIC_STORE_PORT=str(self.port),
            SLURM_ELASTIC_EPOCHS="100000",
            SLURM_ELASTIC_LOCAL_BATCH="8",
            SLURM_ELASTIC_GROUP_TIMEOUT_S="60",
            SLURM_ELASTIC_WORKER_ID=worker,
            SLURM_ELASTIC_WORKERS=",".join(workers or []),
            SLURM_ELASTIC_JOIN="0" if workers else "1",
            SLURM_ELASTIC_EVENT_LOG=str(self.tmp / f"{worker}.{tag}.jsonl"),
            SLURM_ELASTIC_CHECKPOINT=str(self.tmp / "ckpt.pt"),
            **extra,
        )
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # 2+ workers per core here: idle OpenMP threads must sleep
        argv = [sys.executable, str(EXAMPLE), "--model", self.model, "--dataset-size", str(self.dataset_size),
                "--val-size", "0", "--api", self.api, "--batch-size", "8", "--epochs", "100000"]
        with open(self.tmp / f"{worker}.{tag}.out", "ab") as out:
            self.procs[f"{worker}.{tag}"] = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)

    def order(self, kind: str, workers: list[str] | None = None) -> int:
        self.seq += 1
        order = Order("bench", self.seq, kind, tuple(workers or ())).signed(self.secret.encode())
        StoreOrderSource.publish(self.kv, order)
        return self.seq

    def events(self, worker: str, tag: str) -> list[dict[str, Any]]:
        path = self.tmp / f"{worker}.{tag}.jsonl"
        out: list[dict[str, Any]] = []
        if path.exists():
            for line in path.read_text().splitlines():
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    break
        return out

    def steps(self, worker: str, tag: str, gen: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self.events(worker, tag) if e["ev"] == "step" and (gen is None or e["gen"] == gen)]

    def wait(self, what: str, pred: Any, timeout: float = 300.0) -> None:
        deadline = time.monotonic() + timeout
        while not pred():
            for name, p in self.procs.items():
                if p.poll() not in (None, 0):
                    tail = (self.tmp / f"{name}.out").read_text()[-2000:]
                    raise RuntimeError(f"bench worker {name} exited rc={p.returncode} waiting for {what}: {tail}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"bench: timed out waiting for {what}")
            time.sleep(0.02)

    def wait_exit(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        for p in self.procs.values():
            p.wait(max(0.1, deadline - time.monotonic()))

    def close(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()


def _step_time(steps: list[dict[str, Any]]) -> float:
    gaps = [b["t"] - a["t"] for a, b in itertools.pairwise(steps)]
    return statistics.median(gaps) if gaps else 0.0


def _switch_s(run: _Run, old: list[str], new: list[str], gen: str) -> float:
    """Protocol time of a switch: last stayer to reach the switch → last rank ready to step in ``gen``.

    Ranks leave a step at slightly different times (each commits its state after the step); those that
    come first would wait in the next all-reduce anyway, so the pause the switch adds runs from the
    last arrival.
    """
    starts, ready = [], []
    for w in sorted(set(old) | set(new)):
        for e in run.events(w, "a"):
            if e["ev"] == "switch" and e["seq"] == int(gen[1:]) and w in new:  # a leaver's switch is no pause
                starts.append(e["t"])
            elif e["gen"] == gen and e["ev"] in ("resumed", "formed"):
                ready.append(e["t"])
    return float(max(ready) - max(starts))


def _bench_once(model: str, from_: int, to: int, steps_after: int, api: str) -> dict[str, Any]:
    old = [f"w{i}" for i in range(from_)]
    new = [f"w{i}" for i in range(to)]
    with tempfile.TemporaryDirectory(prefix="se-bench-") as tmpdir:
        run = _Run(Path(tmpdir), model, 4096 if model == "cnn" else 1024, api)
        try:
            for w in old:
                run.start(w, old, "a")
            run.wait("old workers training", lambda: len(run.steps("w0", "a")) >= 5)
            for w in new[from_:]:
                run.start(w, None, "a")
            seq = run.order("resize", new)
            gen = f"o{seq}"
            run.wait("resize", lambda: len(run.steps("w0", "a", gen)) >= steps_after)
            ev = run.events("w0", "a")
            t_switch = next(e["t"] for e in ev if e["ev"] == "switch" and e["seq"] == seq)
            new_steps = run.steps("w0", "a", gen)
            step_new = _step_time(new_steps)
            synced = max(e["synced_bytes"] for w in new for e in run.events(w, "a")
                         if e["ev"] == "formed" and e["gen"] == gen)
            old_steps = [e for e in run.steps("w0", "a") if e["gen"] != gen]
            resize_raw = new_steps[0]["t"] - t_switch
            switch = _switch_s(run, old, new, gen)

            run.order("stop")
            run.wait("checkpoint", lambda: any(e["ev"] == "exit" for e in run.events("w0", "a")))
            t_stop = next(e["t"] for e in run.events("w0", "a") if e["ev"] == "stop")
            run.wait_exit()
            for w in new:
                run.start(w, new, "b", SLURM_ELASTIC_RESUME=str(run.tmp / "ckpt.pt"))
            run.wait("restart", lambda: len(run.steps("w0", "b")) >= steps_after)
            restart_steps = run.steps("w0", "b")
            restart_raw = restart_steps[0]["t"] - t_stop
            step_restart = _step_time(restart_steps)
            run.order("stop")
            run.wait_exit()
        finally:
            run.close()
    return {
        "step_s_before": round(_step_time(old_steps), 4),
        "step_s_after": round(step_new, 4),
        "resize_raw_s": round(resize_raw, 4),
        "resize_pause_s": round(resize_raw - step_new, 4),
        "switch_s": round(switch, 4),
        "synced_bytes": synced,
        "checkpoint_restart_raw_s": round(restart_raw, 4),
        "checkpoint_restart_pause_s": round(restart_raw - step_restart, 4),
    }


def _backend_label() -> str:
    """The workers' collectives and device, as their backend chooses them (``nccl-cuda``, ``gloo-cuda``
    when ``SLURM_ELASTIC_DIST_BACKEND=gloo`` on a GPU, ``gloo-cpu``)."""
    import torch

    chosen = os.environ.get("SLURM_ELASTIC_DIST_BACKEND", "auto").strip() or "auto"
    cuda = torch.cuda.is_available()
    library = ("nccl" if cuda else "gloo") if chosen == "auto" else chosen
    return f"{library}-{'cuda' if cuda else 'cpu'}"


def bench_resize(
    model: str = "resnet18", from_: int = 2, to: int = 4, steps_after: int = 6, repeat: int = 1, api: str = "run"
) -> dict[str, Any]:
    """Measure an in-place resize ``from_`` → ``to`` workers and a checkpoint-restart of the same job.

    Joiners (on grow) are started with the order and initialise while the old workers train, as in
    ONES §3.3; the resize happens at the first step boundary after all joiners are ready. Each repeat
    is a fresh job; the figures are medians over the repeats, with every run's figures under ``runs``.

    Args:
        model: ``"resnet18"`` (11.7M parameters, Adam) or ``"cnn"`` (small CNN, SGD).
        from_: workers before the resize (≥ 1).
        to: workers after it (≥ 1, ≠ ``from_``).
        steps_after: steps to run in each new world to time a normal step there.
        repeat: fresh jobs to measure (≥ 1).
        api: ``"run"``: the workers train under ``run(ElasticJob)``; ``"loop"``: in a loop of their own
            through ``init()``, ``world.loader`` and ``world.step`` (the user-loop API).

    Returns:
        JSON-ready figures in seconds: ``resize_pause_s`` and ``checkpoint_restart_pause_s`` (each
        "stop after a step" → "first step of the new world done", minus one normal step of the new
        world), ``switch_s`` (the protocol alone: last rank to reach the switch → last rank ready to
        step, so without the step-time noise), ``speedup`` (checkpoint-restart pause ÷ the larger of
        the resize pause and the switch: the pause carries step-time noise and can come out below
        the protocol's own time), step times and the bytes sent to each joiner.

    Raises:
        ValueError: on bad arguments.
        RuntimeError: if a worker fails.
    """
    if model not in {"resnet18", "cnn"} or api not in {"run", "loop"} or min(from_, to, repeat) < 1 or from_ == to:
        raise ValueError(
            f"bench_resize(model={model!r}, from_={from_}, to={to}, repeat={repeat}, api={api!r}): "
            "need resnet18|cnn, sizes ≥ 1, from_ ≠ to, repeat ≥ 1, api run|loop"
        )
    if not EXAMPLE.exists():
        raise RuntimeError(f"example worker {EXAMPLE} not found (bench runs from a source checkout)")
    runs = [_bench_once(model, from_, to, steps_after, api) for _ in range(repeat)]
    median = {k: round(statistics.median(r[k] for r in runs), 4) for k in runs[0]}
    return {
        "model": model,
        "from": from_,
        "to": to,
        "backend": _backend_label(),
        "api": api,
        "cpu_cores": os.cpu_count(),
        "repeat": repeat,
        **median,
        "speedup": round(median["checkpoint_restart_pause_s"]
                         / max(median["resize_pause_s"], median["switch_s"], 1e-3), 1),
        "runs": runs if repeat > 1 else [],
    }
