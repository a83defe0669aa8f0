"""Dev clusters side by side: each instance's node names, subnet, bridge, route and ports are its own
(no Slurm needed; the real-cluster tests run two of them at once under pytest-xdist)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from slurm_elastic.dev import devcluster, plumbing
from slurm_elastic.dev.instance import MAX_INSTANCES, Instance


def _holds(which: Instance) -> set[str]:
    nodes = devcluster.nodes_for(4, which)
    return {*(n.name for n in nodes), *(n.netns for n in nodes), *(n.veth for n in nodes), *(n.addr for n in nodes),
            which.bridge, which.guard_route[1], *(str(p) for p in (which.ctld_port, which.slurmd_port,
                                                                    which.dbd_port, which.db_port))}


def test_two_instances_share_no_name_address_or_port() -> None:
    for a, b in itertools.combinations(range(MAX_INSTANCES), 2):
        assert not _holds(Instance(a)) & _holds(Instance(b)), (a, b)


def test_instance_0_is_the_cluster_every_command_brings_up() -> None:
    nodes = devcluster.nodes_for(4)
    assert [n.name for n in nodes] == ["n01", "n02", "n03", "n04"]
    assert nodes[0].addr == "10.78.0.11" and Instance().bridge == "sebr0"
    assert (devcluster.CTLD_PORT, devcluster.SLURMD_PORT, devcluster.DBD_PORT, devcluster.DB_PORT) == (
        6817, 6818, 6819, 3307)


def test_another_instance_has_its_own_node_names_and_host_list() -> None:
    names = [n.name for n in devcluster.nodes_for(4, Instance(1))]
    assert names == ["m01", "m02", "m03", "m04"]
    assert devcluster.hostlist(names) == "m[01-04]"
    assert devcluster.nodes_for(2, Instance(1))[1].addr == "10.78.1.12"


@pytest.mark.parametrize("number", [-1, MAX_INSTANCES, True, 1.0, "1"])
def test_an_instance_out_of_range_is_refused_naming_the_rule(number: object) -> None:
    with pytest.raises(devcluster.DevClusterError, match="must be an integer from 0 to 7"):
        Instance(number)  # type: ignore[arg-type]


def test_the_instance_a_root_was_brought_up_as_is_read_back(tmp_path: Path) -> None:
    assert devcluster.instance_of(tmp_path) == Instance(0)  # nothing recorded: instance 0
    (tmp_path / plumbing.STATE_FILE).write_text(json.dumps({"instance": 2}))
    assert devcluster.instance_of(tmp_path) == Instance(2)


def test_the_port_check_looks_at_the_instance_s_own_ports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(devcluster, "DEFAULT_ROOT", tmp_path / "none")
    monkeypatch.setattr(devcluster, "_port_open", lambda addr, port: port == devcluster.CTLD_PORT)
    devcluster._check_ports_free(tmp_path / "mine", Instance(1))  # instance 0's port is busy: not ours
    with pytest.raises(devcluster.DevClusterError, match=f"port {Instance(1).ctld_port} "):
        monkeypatch.setattr(devcluster, "_port_open", lambda addr, port: port == Instance(1).ctld_port)
        devcluster._check_ports_free(tmp_path / "mine", Instance(1))
