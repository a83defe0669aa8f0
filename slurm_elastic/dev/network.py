"""The dev cluster's network: one namespace and veth per node on a bridge, a guard route, /etc/hosts lines.

Development tooling only (root). Everything created is recorded in the cluster's state the moment
it exists (:func:`setup_network`), and :func:`teardown_network` removes exactly what was recorded.
Commands are ``ip`` argv lists.

``/etc/hosts`` is shared with every other process on the host, and two dev clusters (the test
suite's two instances, or a developer's next to CI's) edit it at once. Each edit is a
read-modify-write under an exclusive lock (:data:`HOSTS_LOCK`), and the file is rewritten in
place without ever being empty (appended to, or overwritten then cut to length): a reader never
finds the host's own lines gone. Two unlocked ``write_text`` calls once left it empty, and with it
``localhost`` (MariaDB's install then failed on every later cluster).
"""

from __future__ import annotations

import fcntl
import os
import subprocess
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_elastic.dev.instance import DEFAULT_INSTANCE, Instance
from slurm_elastic.dev.plumbing import DevClusterError, run, save_state

HOSTS_FILE = Path("/etc/hosts")
HOSTS_TAG = "# slurm-elastic-dev"
HOSTS_LOCK = Path("/run/slurm-elastic-hosts.lock")
"""Held (``flock``) by every edit of the hosts file, by every dev cluster on the host."""


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


def add_hosts_lines(root: Path, state: dict[str, Any], nodes: Sequence[DevNode], hosts: Path = HOSTS_FILE) -> None:
    tag = hosts_tag(root)
    state["network"]["hosts_tag"] = tag
    save_state(root, state)
    added = "".join(f"{n.addr} {n.name} {tag}\n" for n in nodes)
    edit_hosts(lambda text: (text if not text or text.endswith("\n") else text + "\n") + added, hosts)


def remove_hosts_lines(tag: str, hosts: Path = HOSTS_FILE) -> None:
    def without(text: str) -> str:
        return "".join(line for line in text.splitlines(keepends=True) if not line.rstrip("\n").endswith(tag))

    try:
        edit_hosts(without, hosts)
    except OSError:
        return


@contextmanager
def _locked(lock: Path) -> Iterator[None]:
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def edit_hosts(edit: Callable[[str], str], hosts: Path = HOSTS_FILE) -> None:
    """Replace the hosts file's text ``t`` by ``edit(t)``, in place (``/etc/hosts`` is often a bind
    mount, which a rename would not reach), under :data:`HOSTS_LOCK` (a lock file next to
    ``hosts`` when it is not ``/etc/hosts``: tests), never leaving it empty or cut short."""
    lock = HOSTS_LOCK if hosts == HOSTS_FILE else hosts.with_name(hosts.name + ".lock")
    with _locked(lock), open(hosts, "r+", encoding="utf-8") as f:
        old = f.read()
        new = edit(old)
        if new == old:
            return
        if new.startswith(old):
            f.write(new[len(old):])  # after the read: at the end
        else:
            f.seek(0)
            f.write(new)
            f.truncate()
        f.flush()
        os.fsync(f.fileno())


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
