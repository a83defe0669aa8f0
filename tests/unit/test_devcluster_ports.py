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


def test_a_root_keeps_the_state_of_one_slurm_build(tmp_path: Path) -> None:
    """25.11 saves its cluster id beside the name, which 22.05 refuses at start (found on release-check)."""
    (tmp_path / "etc").mkdir()
    devcluster._check_same_build(tmp_path, None)  # a fresh root: any build
    (tmp_path / "etc" / "slurm-build").write_text("/opt/slurm/25.11.7\n")
    devcluster._check_same_build(tmp_path, Path("/opt/slurm/25.11.7"))
    with pytest.raises(devcluster.DevClusterError, match=r"holds the state of the Slurm build '/opt/slurm/25\.11\.7', "
                                                         r"not 'debian' \(rule: a root keeps one build's state\)"):
        devcluster._check_same_build(tmp_path, None)


def test_a_built_release_supplies_slurms_programs_and_files(tmp_path: Path) -> None:
    prefix = tmp_path / "slurm"
    for rel in ("sbin/slurmctld", "bin/squeue", "include/slurm/spank.h", "lib/slurm/job_submit_lua.so"):
        (prefix / rel).parent.mkdir(parents=True, exist_ok=True)
        (prefix / rel).write_text("")
    assert devcluster._find("slurmctld", prefix) == str(prefix / "sbin/slurmctld")
    assert devcluster._find("squeue", prefix) == str(prefix / "bin/squeue")
    assert devcluster._find("/usr/include/slurm/spank.h", prefix) == str(prefix / "include/slurm/spank.h")
    assert devcluster._find("sinfo", prefix) is None  # never Debian's beside a build
    missing = devcluster.check_prerequisites(prefix)
    assert any(line.startswith(f"sinfo: not in the Slurm build at {prefix}") for line in missing)
    assert not any(line.startswith(("slurmctld:", "squeue:")) for line in missing)


def test_down_cancels_thousands_of_jobs_in_chunks_and_never_stops_on_a_slow_scancel(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """2,500 ids in one scancel timed out after 10 s and down() stopped there, leaving the cluster up."""
    calls: list[list[str]] = []

    def fake_run(argv: list[str], **kw: object) -> object:
        calls.append(argv)
        if argv[0] == "squeue":
            return type("P", (), {"returncode": 0, "stdout": "\n".join(str(i) for i in range(1, 1201))})()
        if len(calls) == 3:
            raise plumbing.DevClusterError("scancel ...: TimeoutExpired: no answer within 30 s")
        return None

    monkeypatch.setattr(devcluster, "_find", lambda program, prefix=None: program)
    monkeypatch.setattr(devcluster, "run", fake_run)
    devcluster._cancel_jobs(tmp_path)
    assert [len(c) - 1 for c in calls[1:]] == [500, 500]  # the third chunk was never reached: the second raised
    assert "stopping the daemons ends them" in caplog.text


def test_a_long_command_line_is_cut_in_messages() -> None:
    with pytest.raises(plumbing.DevClusterError, match=r"^/nonexistent-program 0 1 2 .*\.\.\. \(3001 words\): "):
        plumbing.run(["/nonexistent-program", *map(str, range(3000))])
