"""The dev cluster's processes: daemons started in their own session (and node namespaces), and stopped.

Development tooling only. A started daemon's PID and start time are recorded in the state file at
once, and only a process that is still that same process is ever signalled.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from slurm_elastic.dev.network import netns_pids
from slurm_elastic.dev.plumbing import DevClusterError, alive, proc_start, save_state

log = logging.getLogger(__name__)

STOP_GRACE_S = 10.0
"""Seconds a daemon gets to end after SIGTERM before SIGKILL."""
_CLONE_NEWNET = 0x40000000
_CLONE_NEWUTS = 0x04000000


class Starter:
    """Starts daemons in their own session and records each PID in the state file at once."""

    def __init__(self, root: Path, state: dict[str, Any], env: Mapping[str, str]) -> None:
        self.root, self.state, self.env = root, state, env

    def start(self, key: str, argv: Sequence[str], *, preexec: Callable[[], None] | None = None) -> dict[str, int]:
        out = self.root / "log" / f"{key.replace(':', '-')}.out"
        with out.open("ab") as sink:
            try:
                proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
                                        env=dict(self.env), start_new_session=True, preexec_fn=preexec)
            except OSError as exc:
                raise DevClusterError(f"cannot start {key} ({' '.join(argv)}): {exc}") from exc
        start = None
        for _ in range(100):
            start = proc_start(proc.pid)
            if start is not None:
                break
            time.sleep(0.01)
        entry = {"pid": proc.pid, "start": start if start is not None else -1}
        self.state.setdefault("pids", {})[key] = entry
        save_state(self.root, self.state)
        return entry


def netns_preexec(netns: str, hostname: str) -> Callable[[], None]:
    """A pre-exec hook: enter network namespace ``netns`` and a new UTS namespace named ``hostname``.

    The same as ``nsenter --net=/run/netns/NETNS unshare --uts`` plus ``hostname HOSTNAME``, without a
    shell (``ip netns exec`` is avoided: it remounts /sys and hides the cgroup mounts).
    """
    libc = ctypes.CDLL(None, use_errno=True)
    path = f"/run/netns/{netns}"

    def hook() -> None:
        fd = os.open(path, os.O_RDONLY)
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {path}")
        os.close(fd)
        if libc.unshare(_CLONE_NEWUTS) != 0:
            raise OSError(ctypes.get_errno(), "unshare CLONE_NEWUTS")
        socket.sethostname(hostname)

    return hook


def reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def stop(entries: Sequence[dict[str, int]], grace: float = STOP_GRACE_S) -> None:
    """SIGTERM the recorded processes that are still the same processes; SIGKILL after ``grace`` s."""
    live = [e for e in entries if alive(e)]
    for e in live:
        with contextlib.suppress(ProcessLookupError):
            os.kill(e["pid"], signal.SIGTERM)
    deadline = time.monotonic() + grace
    while live and time.monotonic() < deadline:
        for e in live:
            reap(e["pid"])
        live = [e for e in live if alive(e)]
        if live:
            time.sleep(0.05)
    for e in live:
        log.warning("pid %s ignored SIGTERM for %.0f s: SIGKILL", e["pid"], grace)
        with contextlib.suppress(ProcessLookupError):
            os.kill(e["pid"], signal.SIGKILL)
    for e in live:
        for _ in range(100):
            reap(e["pid"])
            if not alive(e):
                break
            time.sleep(0.02)


def kill_netns_processes(netns_names: Sequence[str]) -> None:
    pids = [p for ns in netns_names for p in netns_pids(ns) if p != os.getpid()]
    entries = [{"pid": p, "start": s} for p in pids if (s := proc_start(p)) is not None]
    stop(entries, grace=3.0)


def worker_processes(job_id: str) -> dict[str, list[int]]:
    """The launcher workers of elastic job ``job_id`` running on this machine: worker id -> the PIDs of
    its Python processes, found by the environment the batch template gave them (fault injection in
    the dev cluster's benchmarks and tests)."""
    job = f"SLURM_ELASTIC_JOB_ID={job_id}".encode()
    found: dict[str, list[int]] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            env = (proc / "environ").read_bytes().split(b"\0")
            cmd = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if job not in env or b"python" not in cmd:
            continue
        for item in env:
            if item.startswith(b"SLURM_ELASTIC_WORKER_ID="):
                found.setdefault(item.split(b"=", 1)[1].decode(errors="replace"), []).append(int(proc.name))
    return found


_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """A pre-exec hook: the child is SIGKILLed when the process that started it dies (Linux
    ``prctl(PR_SET_PDEATHSIG)``), so a benchmark killed midway leaves no daemon acting on its
    cluster behind it."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
