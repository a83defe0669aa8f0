"""The dev cluster's network: one namespace and veth per node on a bridge, a guard route, /etc/hosts lines.

Development tooling only (root). Everything created is recorded in the cluster's state the moment
it exists (:func:`setup_network`), and :func:`teardown_network` removes exactly what was recorded.
Commands are ``ip`` argv lists.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_elastic.dev.instance import DEFAULT_INSTANCE, Instance
from slurm_elastic.dev.instance import NETNS_PREFIX as NETNS_PREFIX  # re-exported: the namespaces' prefix
from slurm_elastic.dev.plumbing import DevClusterError, run, save_state

HOSTS_FILE = Path("/etc/hosts")
HOSTS_TAG = "# slurm-elastic-dev"


@dataclass(frozen=True, slots=True)
class DevNode:
    """One dev node: its Slurm name, network namespace, host-side veth and address."""

    name: str
    netns: str
    veth: str
    addr: str


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run(["ip", *args], check=check)


def netns_exists(name: str) -> bool:
    return Path(f"/run/netns/{name}").exists()


def link_exists(name: str) -> bool:
    return Path(f"/sys/class/net/{name}").exists()


def setup_network(root: Path, state: dict[str, Any], nodes: Sequence[DevNode],
                  instance: Instance = DEFAULT_INSTANCE) -> None:
    """Create the bridge, guard route, one namespace + veth per node, and the tagged /etc/hosts lines.

    Runs ``ip link add BRIDGE type bridge``, ``ip route replace unreachable 10.78.K.0/24 metric 4000``,
    ``ip netns add``, ``ip link add VETH type veth peer name eth0 netns NS`` and ``ip -n NS addr/link``
    (the bridge, subnet and route of ``instance``, numbered K).
    """
    net: dict[str, Any] = state.setdefault("network", {"netns": [], "veths": []})
    bridge = instance.bridge
    if link_exists(bridge):
        raise DevClusterError(f"bridge {bridge} already exists: dev cluster instance {instance.number} is up "
                              f"(run `slurm-elastic devcluster down --root ROOT` for its root)")
    net["route"] = list(instance.guard_route)
    save_state(root, state)
    ip("route", "replace", *instance.guard_route)
    net["bridge"] = bridge
    save_state(root, state)
    ip("link", "add", bridge, "type", "bridge")
    ip("addr", "add", f"{instance.subnet_prefix}.1/24", "dev", bridge)
    ip("link", "set", bridge, "up")
    add_hosts_lines(root, state, nodes)
    for node in nodes:
        if netns_exists(node.netns):
            raise DevClusterError(f"network namespace {node.netns} already exists: another dev cluster is up")
        net["netns"].append(node.netns)
        net["veths"].append(node.veth)
        save_state(root, state)
        ip("netns", "add", node.netns)
        ip("link", "add", node.veth, "type", "veth", "peer", "name", "eth0", "netns", node.netns)
        ip("link", "set", node.veth, "master", bridge, "up")
        ip("-n", node.netns, "addr", "add", f"{node.addr}/24", "dev", "eth0")
        ip("-n", node.netns, "link", "set", "lo", "up")
        ip("-n", node.netns, "link", "set", "eth0", "up")


def hosts_tag(root: Path) -> str:
    return f"{HOSTS_TAG} {root}"


def add_hosts_lines(root: Path, state: dict[str, Any], nodes: Sequence[DevNode]) -> None:
    tag = hosts_tag(root)
    state["network"]["hosts_tag"] = tag
    save_state(root, state)
    text = HOSTS_FILE.read_text()
    if text and not text.endswith("\n"):
        text += "\n"
    text += "".join(f"{n.addr} {n.name} {tag}\n" for n in nodes)
    HOSTS_FILE.write_text(text)  # in place: /etc/hosts is often a bind mount


def remove_hosts_lines(tag: str) -> None:
    try:
        lines = HOSTS_FILE.read_text().splitlines(keepends=True)
    except OSError:
        return
    kept = [line for line in lines if not line.rstrip("\n").endswith(tag)]
    if len(kept) != len(lines):
        HOSTS_FILE.write_text("".join(kept))


def teardown_network(state: dict[str, Any]) -> None:
    """Remove what :func:`setup_network` recorded (``ip link del``, ``ip netns del``, ``ip route del``)."""
    net: dict[str, Any] = state.get("network", {})
    for veth in net.get("veths", []):
        if link_exists(veth):
            ip("link", "del", veth, check=False)
    for ns in net.get("netns", []):
        if netns_exists(ns):
            ip("netns", "del", ns, check=False)
    if net.get("bridge") and link_exists(net["bridge"]):
        ip("link", "del", net["bridge"], check=False)
    if net.get("hosts_tag"):
        remove_hosts_lines(net["hosts_tag"])
    route = net.get("route")
    if route:
        # the guard route goes last, so traffic to the dev subnet never leaves by the default route;
        # a state written before instances recorded ``true`` for instance 0's /16 route
        argv = [str(a) for a in route] if isinstance(route, list) else ["unreachable", "10.78.0.0/16", "metric", "4000"]
        ip("route", "del", *argv, check=False)


def netns_pids(netns: str) -> list[int]:
    """PIDs inside a dev node's namespace (``ip netns pids NS``): slurmstepd and job processes."""
    if not netns_exists(netns):
        return []
    proc = ip("netns", "pids", netns, check=False)
    return [int(p) for p in proc.stdout.split() if p.isdigit()]
