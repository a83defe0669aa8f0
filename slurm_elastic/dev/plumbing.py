"""Host-side plumbing of the dev cluster: its error, the argv runner, the state file, process identity.

Development tooling only. Every command is an argv list (never a shell string); a process is
identified by its PID *and* its start time, so a reused PID is never taken for one of ours.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from slurm_elastic.errors import ElasticError

STATE_FILE = "devcluster.json"
"""Where, under the cluster's root, everything it created is recorded the moment it exists."""


class DevClusterError(ElasticError):
    """The dev cluster cannot be brought up or down (the message says what is missing or which log to read)."""


def state_path(root: Path) -> Path:
    return root / STATE_FILE


def load_state(root: Path) -> dict[str, Any]:
    path = state_path(root)
    if not path.exists():
        return {}
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise DevClusterError(f"{path}: unreadable state file ({exc}); remove it after checking by hand") from exc
    return data


def save_state(root: Path, state: Mapping[str, Any]) -> None:
    path = state_path(root)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1, sort_keys=True))
    tmp.replace(path)


def proc_start(pid: int) -> int | None:
    """The start time (clock ticks since boot) of ``pid``, or None if it is gone or a zombie."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def alive(entry: Mapping[str, int]) -> bool:
    return proc_start(entry["pid"]) == entry["start"]


def _shown(argv: Sequence[str]) -> str:
    """A command line for a message: at most 300 characters (an scancel of thousands of ids is not)."""
    line = " ".join(argv)
    return line if len(line) <= 300 else f"{line[:300]}... ({len(argv)} words)"


def run(argv: Sequence[str], *, env: Mapping[str, str] | None = None, input_text: str | None = None,
         check: bool = True, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run one command (argv list, never a shell) and raise :class:`DevClusterError` if it fails."""
    try:
        proc = subprocess.run(list(argv), env=dict(env) if env is not None else None, input=input_text,
                              capture_output=True, text=True, check=False, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DevClusterError(f"{_shown(argv)}: {type(exc).__name__}: no answer within {timeout:g} s"
                              if isinstance(exc, subprocess.TimeoutExpired) else f"{_shown(argv)}: {exc}") from exc
    if check and proc.returncode != 0:
        raise DevClusterError(f"{_shown(argv)} failed (rc {proc.returncode}): "
                              f"{(proc.stderr or proc.stdout).strip()[-2000:]}")
    return proc
