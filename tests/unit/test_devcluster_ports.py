"""The dev cluster's port check names a cluster left up under the default root (no Slurm needed)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from slurm_elastic.dev import devcluster, plumbing


def _leave_cluster_up(root: Path) -> None:
    me = {"pid": os.getpid(), "start": plumbing.proc_start(os.getpid())}
    root.mkdir()
    (root / plumbing.STATE_FILE).write_text(json.dumps({"pids": {"mariadbd": me}}))


def test_port_held_by_a_cluster_left_up_names_it_and_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    left = tmp_path / "left-up"
    _leave_cluster_up(left)
    monkeypatch.setattr(devcluster, "DEFAULT_ROOT", left)
    monkeypatch.setattr(devcluster, "_port_open", lambda addr, port: port == devcluster.DB_PORT)
    with pytest.raises(devcluster.DevClusterError, match=f"still up under {left}.*devcluster down --root {left}"):
        devcluster._check_ports_free(tmp_path / "mine")


def test_port_held_by_something_else_says_which_port(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(devcluster, "DEFAULT_ROOT", tmp_path / "none")
    monkeypatch.setattr(devcluster, "_port_open", lambda addr, port: port == devcluster.CTLD_PORT)
    with pytest.raises(devcluster.DevClusterError, match=f"port {devcluster.CTLD_PORT} \\(slurmctld\\) is already"):
        devcluster._check_ports_free(tmp_path / "mine")
    monkeypatch.setattr(devcluster, "_port_open", lambda addr, port: False)
    devcluster._check_ports_free(tmp_path / "mine")  # all free: no error
