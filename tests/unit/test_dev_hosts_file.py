"""Two dev clusters edit the hosts file at once: the host's own lines are never lost."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from slurm_elastic.dev import network
from slurm_elastic.dev.network import DevNode

BASE = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n192.0.2.2\tvm\n"


def _churn(hosts: str, k: int, rounds: int) -> None:
    root = Path(f"/nonexistent/cluster-{k}")
    nodes = [DevNode(f"x{k}{i}", f"ns{k}{i}", f"v{k}{i}", f"10.78.{k}.{i}") for i in range(1, 5)]
    for _ in range(rounds):
        state: dict[str, dict[str, str]] = {"network": {}}
        network.save_state = lambda *_: None  # type: ignore[attr-defined]  # no cluster root in this test
        network.add_hosts_lines(root, state, nodes, hosts=Path(hosts))
        network.remove_hosts_lines(network.hosts_tag(root), hosts=Path(hosts))


def test_clusters_editing_the_hosts_file_together_keep_its_own_lines(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text(BASE)
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_churn, args=(str(hosts), k, 150)) for k in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    assert hosts.read_text() == BASE


def test_lines_are_added_and_removed_by_their_clusters_tag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text(BASE.rstrip("\n"))  # a file without its last newline
    monkeypatch.setattr(network, "save_state", lambda *_: None)
    node = DevNode("n01", "se-n01", "sev-n01", "10.78.0.11")
    state: dict[str, dict[str, str]] = {"network": {}}
    network.add_hosts_lines(Path("/tmp/a"), state, [node], hosts=hosts)
    network.add_hosts_lines(Path("/tmp/b"), {"network": {}}, [DevNode("m01", "x", "y", "10.78.1.11")], hosts=hosts)
    assert hosts.read_text() == BASE + "10.78.0.11 n01 # slurm-elastic-dev /tmp/a\n" \
        "10.78.1.11 m01 # slurm-elastic-dev /tmp/b\n"
    assert state["network"]["hosts_tag"] == "# slurm-elastic-dev /tmp/a"
    network.remove_hosts_lines("# slurm-elastic-dev /tmp/a", hosts=hosts)
    assert hosts.read_text() == BASE + "10.78.1.11 m01 # slurm-elastic-dev /tmp/b\n"
