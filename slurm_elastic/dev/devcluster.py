"""A real local Slurm 22.05 cluster for development and the ``slurm`` tests.

Owns bringing up and tearing down one dev cluster under a root folder: a private munged, MariaDB
(private datadir, port 3307) with slurmdbd, slurmctld, and one slurmd per node, each node in its own
network namespace (veth on a bridge) with its own hostname (a private UTS namespace), fake GPUs made
with ``mknod``, the ``--elastic`` SPANK plugin and ``job_submit.lua``. Configuration files are rendered
from ``site_configs/dev/*.j2`` by :func:`render` only.

Everything it creates is recorded in ``ROOT/devcluster.json`` the moment it exists, and :func:`down`
removes exactly that: the recorded PIDs (checked against their start time, so a reused PID is never
hit), the processes inside the recorded namespaces, the veths, bridge, route and the tagged
``/etc/hosts`` lines. It must not install packages, touch system services or other processes, or run
a command through a shell string: every command is an argv list.

Needs root and the Debian packages of :data:`PACKAGES` (``up`` names what is missing).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_elastic.errors import ElasticError

log = logging.getLogger(__name__)

DEFAULT_ROOT = Path("/tmp/slurm-elastic-dev")
CONFIG_DIR = Path(__file__).resolve().parents[2] / "site_configs" / "dev"
STATE_FILE = "devcluster.json"
CLUSTER_NAME = "dev"
SUBNET_PREFIX = "10.78.0"  # bridge .1, node i at .(10+i)
GUARD_ROUTE = ("unreachable", "10.78.0.0/16", "metric", "4000")
BRIDGE = "sebr0"
NETNS_PREFIX = "se-"
HOSTS_FILE = Path("/etc/hosts")
HOSTS_TAG = "# slurm-elastic-dev"
CTLD_PORT = 6817
SLURMD_PORT = 6818
DBD_PORT = 6819
DB_PORT = 3307
CPUS_PER_NODE = 8
MEMORY_MB = 64000
STOP_GRACE_S = 10.0
MAX_NODES = 200

# Debian 12 package providing each program or file the dev cluster needs.
PACKAGES: dict[str, str] = {
    "slurmctld": "slurmctld",
    "slurmd": "slurmd",
    "slurmstepd": "slurmd",
    "slurmdbd": "slurmdbd",
    "sbatch": "slurm-client",
    "squeue": "slurm-client",
    "sinfo": "slurm-client",
    "scontrol": "slurm-client",
    "sacct": "slurm-client",
    "sacctmgr": "slurm-client",
    "munged": "munge",
    "mariadbd": "mariadb-server",
    "mariadb-install-db": "mariadb-server",
    "mariadb": "mariadb-client",
    "ip": "iproute2",
    "gcc": "gcc",
    "/usr/include/slurm/spank.h": "libslurm-dev",
    "/usr/lib/x86_64-linux-gnu/slurm-wlm/job_submit_lua.so": "slurm-wlm-basic-plugins",
}
_SBIN = ("/usr/sbin", "/usr/local/sbin", "/usr/bin", "/usr/local/bin")
_CLONE_NEWNET = 0x40000000
_CLONE_NEWUTS = 0x04000000


class DevClusterError(ElasticError):
    """The dev cluster cannot be brought up or down (the message says what is missing or which log to read)."""


@dataclass(frozen=True, slots=True)
class DevNode:
    """One dev node: its Slurm name, network namespace, host-side veth and address."""

    name: str
    netns: str
    veth: str
    addr: str


def nodes_for(count: int) -> tuple[DevNode, ...]:
    """The dev nodes ``n01..nNN`` (names as wide as needed, at least two digits)."""
    if not 1 <= count <= MAX_NODES:
        raise DevClusterError(f"nodes={count}: must be between 1 and {MAX_NODES}")
    width = max(2, len(str(count)))
    out = []
    for i in range(1, count + 1):
        name = f"n{i:0{width}d}"
        out.append(DevNode(name, f"{NETNS_PREFIX}{name}", f"{NETNS_PREFIX}{name}h", f"{SUBNET_PREFIX}.{10 + i}"))
    return tuple(out)


def hostlist(names: Sequence[str]) -> str:
    """A Slurm host list for consecutive names ``n01..nNN`` (``n[01-04]``; a single name as is)."""
    if len(names) == 1:
        return names[0]
    return f"n[{names[0][1:]}-{names[-1][1:]}]"


def render(template: str, config_dir: Path = CONFIG_DIR, **values: Any) -> str:
    """Render one ``site_configs/dev`` template with jinja2 (undefined names are an error)."""
    try:
        import jinja2
    except ImportError as exc:
        raise DevClusterError("python package jinja2 missing: pip install jinja2") from exc
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(config_dir)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    return env.get_template(template).render(**values)


def slurm_env(root: Path = DEFAULT_ROOT) -> dict[str, str]:
    """The environment for Slurm commands aimed at the dev cluster under ``root`` (sets ``SLURM_CONF``)."""
    env = dict(os.environ)
    env["SLURM_CONF"] = str(root / "etc" / "slurm.conf")
    return env


# --------------------------------------------------------------------------------------------- state


def _state_path(root: Path) -> Path:
    return root / STATE_FILE


def _load_state(root: Path) -> dict[str, Any]:
    path = _state_path(root)
    if not path.exists():
        return {}
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise DevClusterError(f"{path}: unreadable state file ({exc}); remove it after checking by hand") from exc
    return data


def _save_state(root: Path, state: Mapping[str, Any]) -> None:
    path = _state_path(root)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1, sort_keys=True))
    tmp.replace(path)


def _proc_start(pid: int) -> int | None:
    """The start time (clock ticks since boot) of ``pid``, or None if it is gone or a zombie."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def _alive(entry: Mapping[str, int]) -> bool:
    return _proc_start(entry["pid"]) == entry["start"]


# ---------------------------------------------------------------------------------------- commands


def _run(argv: Sequence[str], *, env: Mapping[str, str] | None = None, input_text: str | None = None,
         check: bool = True, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run one command (argv list, never a shell) and raise :class:`DevClusterError` if it fails."""
    try:
        proc = subprocess.run(list(argv), env=dict(env) if env is not None else None, input=input_text,
                              capture_output=True, text=True, check=False, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DevClusterError(f"{' '.join(argv)}: {exc}") from exc
    if check and proc.returncode != 0:
        raise DevClusterError(f"{' '.join(argv)} failed (rc {proc.returncode}): "
                              f"{(proc.stderr or proc.stdout).strip()[-2000:]}")
    return proc


def _find(program: str) -> str | None:
    if program.startswith("/"):
        return program if Path(program).exists() else None
    for folder in _SBIN:
        path = Path(folder) / program
        if path.exists():
            return str(path)
    return shutil.which(program)


def _daemon_binary(name: str) -> str | None:
    """The real build of a daemon: Debian's ``NAME-wlm`` (behind alternatives), else ``NAME``."""
    return _find(f"{name}-wlm") or _find(name)


def check_prerequisites() -> list[str]:
    """What the dev cluster lacks on this machine, one line each naming the program and its package."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root: the dev cluster needs root (network namespaces, mknod, /etc/hosts)")
    for program, package in PACKAGES.items():
        found = _daemon_binary(program) if program in ("slurmctld", "slurmd", "slurmstepd") else _find(program)
        if found is None:
            missing.append(f"{program}: install the Debian package {package}")
    try:
        import jinja2  # noqa: F401
    except ImportError:
        missing.append("jinja2: pip install jinja2 (Python package)")
    return missing


def _tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"({path} missing)"
    return f"--- tail of {path}:\n" + "\n".join(text[-lines:])


def _wait(what: str, ready: Callable[[], bool], timeout: float, logs: Sequence[Path],
          alive: Callable[[], bool] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if ready():
            return
        if alive is not None and not alive():
            raise DevClusterError(f"{what}: the process exited\n" + "\n".join(_tail(p) for p in logs))
        if time.monotonic() > deadline:
            raise DevClusterError(f"{what}: not ready after {timeout:.0f} s\n" + "\n".join(_tail(p) for p in logs))
        time.sleep(0.1)


def _port_open(addr: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((addr, port)) == 0


# ------------------------------------------------------------------------------------------ daemons


class _Starter:
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
            start = _proc_start(proc.pid)
            if start is not None:
                break
            time.sleep(0.01)
        entry = {"pid": proc.pid, "start": start if start is not None else -1}
        self.state.setdefault("pids", {})[key] = entry
        _save_state(self.root, self.state)
        return entry


def _netns_preexec(netns: str, hostname: str) -> Callable[[], None]:
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


# ------------------------------------------------------------------------------------------ network


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return _run(["ip", *args], check=check)


def _netns_exists(name: str) -> bool:
    return Path(f"/run/netns/{name}").exists()


def _link_exists(name: str) -> bool:
    return Path(f"/sys/class/net/{name}").exists()


def _setup_network(root: Path, state: dict[str, Any], nodes: Sequence[DevNode]) -> None:
    """Create the bridge, guard route, one namespace + veth per node, and the tagged /etc/hosts lines.

    Runs ``ip link add BRIDGE type bridge``, ``ip route replace unreachable 10.78.0.0/16 metric 4000``,
    ``ip netns add``, ``ip link add VETH type veth peer name eth0 netns NS`` and ``ip -n NS addr/link``.
    """
    net: dict[str, Any] = state.setdefault("network", {"netns": [], "veths": []})
    if _link_exists(BRIDGE):
        raise DevClusterError(f"bridge {BRIDGE} already exists: another dev cluster is up "
                              f"(run `slurm-elastic devcluster down --root ROOT` for its root)")
    net["route"] = True
    _save_state(root, state)
    _ip("route", "replace", *GUARD_ROUTE)
    net["bridge"] = BRIDGE
    _save_state(root, state)
    _ip("link", "add", BRIDGE, "type", "bridge")
    _ip("addr", "add", f"{SUBNET_PREFIX}.1/24", "dev", BRIDGE)
    _ip("link", "set", BRIDGE, "up")
    _add_hosts_lines(root, state, nodes)
    for node in nodes:
        if _netns_exists(node.netns):
            raise DevClusterError(f"network namespace {node.netns} already exists: another dev cluster is up")
        net["netns"].append(node.netns)
        net["veths"].append(node.veth)
        _save_state(root, state)
        _ip("netns", "add", node.netns)
        _ip("link", "add", node.veth, "type", "veth", "peer", "name", "eth0", "netns", node.netns)
        _ip("link", "set", node.veth, "master", BRIDGE, "up")
        _ip("-n", node.netns, "addr", "add", f"{node.addr}/24", "dev", "eth0")
        _ip("-n", node.netns, "link", "set", "lo", "up")
        _ip("-n", node.netns, "link", "set", "eth0", "up")


def _hosts_tag(root: Path) -> str:
    return f"{HOSTS_TAG} {root}"


def _add_hosts_lines(root: Path, state: dict[str, Any], nodes: Sequence[DevNode]) -> None:
    tag = _hosts_tag(root)
    state["network"]["hosts_tag"] = tag
    _save_state(root, state)
    text = HOSTS_FILE.read_text()
    if text and not text.endswith("\n"):
        text += "\n"
    text += "".join(f"{n.addr} {n.name} {tag}\n" for n in nodes)
    HOSTS_FILE.write_text(text)  # in place: /etc/hosts is often a bind mount


def _remove_hosts_lines(tag: str) -> None:
    try:
        lines = HOSTS_FILE.read_text().splitlines(keepends=True)
    except OSError:
        return
    kept = [line for line in lines if not line.rstrip("\n").endswith(tag)]
    if len(kept) != len(lines):
        HOSTS_FILE.write_text("".join(kept))


def _teardown_network(state: dict[str, Any]) -> None:
    """Remove what :func:`_setup_network` recorded (``ip link del``, ``ip netns del``, ``ip route del``)."""
    net: dict[str, Any] = state.get("network", {})
    for veth in net.get("veths", []):
        if _link_exists(veth):
            _ip("link", "del", veth, check=False)
    for ns in net.get("netns", []):
        if _netns_exists(ns):
            _ip("netns", "del", ns, check=False)
    if net.get("bridge") and _link_exists(net["bridge"]):
        _ip("link", "del", net["bridge"], check=False)
    if net.get("hosts_tag"):
        _remove_hosts_lines(net["hosts_tag"])
    if net.get("route"):
        # the guard route goes last, so traffic to the dev subnet never leaves by the default route
        _ip("route", "del", *GUARD_ROUTE, check=False)


def _netns_pids(netns: str) -> list[int]:
    """PIDs inside a dev node's namespace (``ip netns pids NS``): slurmstepd and job processes."""
    if not _netns_exists(netns):
        return []
    proc = _ip("netns", "pids", netns, check=False)
    return [int(p) for p in proc.stdout.split() if p.isdigit()]


# ------------------------------------------------------------------------------------------- stopping


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _stop(entries: Sequence[dict[str, int]], grace: float = STOP_GRACE_S) -> None:
    """SIGTERM the recorded processes that are still the same processes; SIGKILL after ``grace`` s."""
    live = [e for e in entries if _alive(e)]
    for e in live:
        with contextlib.suppress(ProcessLookupError):
            os.kill(e["pid"], signal.SIGTERM)
    deadline = time.monotonic() + grace
    while live and time.monotonic() < deadline:
        for e in live:
            _reap(e["pid"])
        live = [e for e in live if _alive(e)]
        if live:
            time.sleep(0.05)
    for e in live:
        log.warning("pid %s ignored SIGTERM for %.0f s: SIGKILL", e["pid"], grace)
        with contextlib.suppress(ProcessLookupError):
            os.kill(e["pid"], signal.SIGKILL)
    for e in live:
        for _ in range(100):
            _reap(e["pid"])
            if not _alive(e):
                break
            time.sleep(0.02)


def _kill_netns_processes(netns_names: Sequence[str]) -> None:
    pids = [p for ns in netns_names for p in _netns_pids(ns) if p != os.getpid()]
    entries = [{"pid": p, "start": s} for p in pids if (s := _proc_start(p)) is not None]
    _stop(entries, grace=3.0)


def _cancel_jobs(root: Path) -> None:
    """Cancel every job of the dev cluster (``scancel --full --cluster... -u root`` style; best effort)."""
    env = slurm_env(root)
    squeue = _find("squeue")
    scancel = _find("scancel")
    if squeue is None or scancel is None:
        return
    proc = _run([squeue, "-h", "-o", "%i", "-t", "PD,R,S,CG,CF,RQ,RS,SI,SO,ST"], env=env, check=False, timeout=10)
    ids = sorted(set(proc.stdout.split()))
    if proc.returncode == 0 and ids:
        _run([scancel, *ids], env=env, check=False, timeout=10)


# -------------------------------------------------------------------------------------------- public


def up(nodes: int = 4, gpus_per_node: int = 4, root: Path = DEFAULT_ROOT, *, timeout: float = 60.0) -> dict[str, Any]:
    """Bring up the dev cluster under ``root`` and wait until every node is idle.

    Runs, in order: ``munged``, ``mariadb-install-db`` + ``mariadbd`` (port 3307), ``slurmdbd``,
    ``sacctmgr -i add cluster dev``, ``slurmctld``, one ``slurmd`` per node (in its namespace), then
    polls ``sinfo -h -N -o '%N %T'``. On failure everything started so far is stopped again and the
    error carries the tail of the log that explains it.

    Args:
        nodes: number of nodes (``n01..``).
        gpus_per_node: fake V100s per node.
        root: folder owning all files of the cluster (configs, logs, state, spool, fake devices).
        timeout: seconds to wait for each daemon and for the nodes to become idle.

    Returns:
        :func:`status` of the running cluster, plus ``seconds`` (bring-up time).

    Raises:
        DevClusterError: a prerequisite is missing (each named with its package), a cluster is
            already up, or a daemon did not come up.
    """
    started = time.monotonic()
    if gpus_per_node < 1:
        raise DevClusterError(f"gpus_per_node={gpus_per_node}: must be >= 1")
    node_list = nodes_for(nodes)
    missing = check_prerequisites()
    if missing:
        raise DevClusterError("missing prerequisites:\n  " + "\n  ".join(missing))
    root = root.resolve()
    _check_root(root)
    old = _load_state(root)
    if any(_alive(e) for e in old.get("pids", {}).values()):
        raise DevClusterError(f"a dev cluster is already up under {root}: run `slurm-elastic devcluster down`")
    if old:
        down(root)
    try:
        _up(node_list, gpus_per_node, root, timeout)
    except BaseException:
        log.error("bring-up failed; stopping what was started (logs stay in %s/log)", root)
        down(root)
        raise
    result = status(root)
    result["seconds"] = round(time.monotonic() - started, 2)
    return result


def _up(node_list: tuple[DevNode, ...], gpus_per_node: int, root: Path, timeout: float) -> None:
    from slurm_elastic.spank.build import build_plugin, plugstack_line

    for sub in ("bin", "etc", "log", "run", "state", "spool", "dev", "lib", "mysql", "jobs"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "jobs").chmod(0o1777)
    state: dict[str, Any] = {"root": str(root), "nodes": [n.name for n in node_list], "gpus_per_node": gpus_per_node,
                             "pids": {}, "network": {"netns": [], "veths": []}}
    _save_state(root, state)
    env = slurm_env(root)
    starter = _Starter(root, state, env)
    names = [n.name for n in node_list]
    ctld_host = socket.gethostname().split(".")[0]

    # programs under their exact names: Slurm 22.05 drops every Gres= when the name is slurmctld-wlm
    for name in ("slurmctld", "slurmd", "slurmstepd"):
        link = root / "bin" / name
        target = _daemon_binary(name)
        if target is None:  # pragma: no cover - checked by check_prerequisites
            raise DevClusterError(f"{name}: install the Debian package {PACKAGES[name]}")
        link.unlink(missing_ok=True)
        link.symlink_to(target)
    for i in range(gpus_per_node):
        dev = root / "dev" / f"nvidia{i}"
        if not dev.exists():
            os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(195, i))
            dev.chmod(0o666)
    plugin = build_plugin(root / "lib")

    munge_socket = root / "run" / "munge" / "munge.socket.2"
    munge_socket.parent.mkdir(mode=0o755, exist_ok=True)
    key = root / "etc" / "munge.key"
    if not key.exists():
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        with os.fdopen(fd, "wb") as fh:
            fh.write(secrets.token_bytes(1024))
    pass_file = root / "etc" / "db.pass"
    if not pass_file.exists():
        fd = os.open(pass_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(16))
    db_password = pass_file.read_text().strip()

    values: dict[str, Any] = {
        "cluster": CLUSTER_NAME, "root": str(root), "ctld_host": ctld_host, "ctld_addr": f"{SUBNET_PREFIX}.1",
        "ctld_port": CTLD_PORT, "slurmd_port": SLURMD_PORT, "dbd_addr": "127.0.0.1", "dbd_port": DBD_PORT,
        "db_port": DB_PORT, "db_password": db_password, "munge_socket": str(munge_socket),
        "nodes": node_list, "nodelist": hostlist(names), "gpus_per_node": gpus_per_node,
        "cpus_per_node": CPUS_PER_NODE, "memory_mb": MEMORY_MB, "plugstack_line": plugstack_line(plugin),
    }
    etc = root / "etc"
    for template, target_name, mode in (("slurm.conf.j2", "slurm.conf", 0o644), ("gres.conf.j2", "gres.conf", 0o644),
                                        ("plugstack.conf.j2", "plugstack.conf", 0o644),
                                        ("slurmdbd.conf.j2", "slurmdbd.conf", 0o600)):
        path = etc / target_name
        path.write_text(render(template, **values))
        path.chmod(mode)
    shutil.copyfile(CONFIG_DIR / "job_submit.lua", etc / "job_submit.lua")

    _check_ports_free(root)
    _setup_network(root, state, node_list)

    # munge: a private munged on its own socket (named in AuthInfo), shared by every namespace
    munged = starter.start("munged", [_req("munged"), "-F", f"--socket={munge_socket}", f"--key-file={key}",
                                      f"--pid-file={root / 'run' / 'munged.pid'}",
                                      f"--log-file={root / 'log' / 'munged.log'}",
                                      f"--seed-file={root / 'run' / 'munged.seed'}", "--num-threads=4"])
    _wait("munged", munge_socket.exists, timeout, [root / "log" / "munged.log", root / "log" / "munged.out"],
          alive=lambda: _alive(munged))

    _start_database(root, starter, db_password, timeout)

    dbd = starter.start("slurmdbd", [_req("slurmdbd"), "-D"])
    dbd_logs = [root / "log" / "slurmdbd.log", root / "log" / "slurmdbd.out"]
    _wait("slurmdbd", lambda: _port_open("127.0.0.1", DBD_PORT), timeout, dbd_logs, alive=lambda: _alive(dbd))
    sacctmgr = _req("sacctmgr")
    listed = _run([sacctmgr, "-n", "-P", "list", "cluster", "format=cluster"], env=env).stdout.split()
    if CLUSTER_NAME not in listed:
        _run([sacctmgr, "-i", "add", "cluster", CLUSTER_NAME], env=env)

    ctld = starter.start("slurmctld", [str(root / "bin" / "slurmctld"), "-D", "-f", str(etc / "slurm.conf")])
    ctld_logs = [root / "log" / "slurmctld.log", root / "log" / "slurmctld.out"]
    _wait("slurmctld", lambda: _port_open(f"{SUBNET_PREFIX}.1", CTLD_PORT), timeout, ctld_logs,
          alive=lambda: _alive(ctld))

    for node in node_list:
        argv = [str(root / "bin" / "slurmd"), "-D", "-d", str(root / "bin" / "slurmstepd"),
                "-f", str(etc / "slurm.conf"), "-N", node.name]
        starter.start(f"slurmd:{node.name}", argv, preexec=_netns_preexec(node.netns, node.name))
    _wait_idle(root, names, timeout)


def _check_root(root: Path) -> None:
    """munged refuses a socket below a folder that others cannot traverse: check every ancestor."""
    for folder in root.parents:
        if folder.exists() and not folder.stat().st_mode & stat.S_IXOTH:
            raise DevClusterError(f"root {root}: {folder} is not traversable by others (o+x), which munged "
                                  f"requires for its socket; choose a root such as {DEFAULT_ROOT}")
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)


def _req(program: str) -> str:
    path = _find(program)
    if path is None:
        raise DevClusterError(f"{program}: install the Debian package {PACKAGES.get(program, program)}")
    return path


def _check_ports_free(root: Path) -> None:
    for addr, port, who in (("127.0.0.1", DB_PORT, "mariadbd"), ("127.0.0.1", DBD_PORT, "slurmdbd"),
                            ("127.0.0.1", CTLD_PORT, "slurmctld")):
        if _port_open(addr, port):
            other = DEFAULT_ROOT.resolve()
            if other != root and any(_alive(e) for e in _load_state(other).get("pids", {}).values()):
                raise DevClusterError(f"port {port} ({who}) is held by the dev cluster still up under {other} "
                                      f"(left by `slurm-elastic demo --keep`?): run "
                                      f"`slurm-elastic devcluster down --root {other}` first")
            raise DevClusterError(f"port {port} ({who}) is already in use: stop whatever listens there "
                                  f"(`ss -ltnp sport = :{port}`)")


def _start_database(root: Path, starter: _Starter, db_password: str, timeout: float) -> None:
    """Private MariaDB: ``mariadb-install-db`` (first time), ``mariadbd`` on 3307, the ``slurm`` user."""
    datadir = root / "mysql"
    sock = root / "run" / "mysqld.sock"
    db_log = root / "log" / "mariadb.log"
    if not (datadir / "mysql").exists():
        _run([_req("mariadb-install-db"), "--no-defaults", f"--datadir={datadir}", "--user=root",
              "--auth-root-authentication-method=socket", "--skip-test-db"], timeout=timeout)
    db = starter.start("mariadbd", [_req("mariadbd"), "--no-defaults", f"--datadir={datadir}", f"--port={DB_PORT}",
                                    "--bind-address=127.0.0.1", f"--socket={sock}", "--user=root",
                                    f"--pid-file={root / 'run' / 'mariadbd.pid'}", f"--log-error={db_log}",
                                    "--skip-name-resolve", "--innodb-buffer-pool-size=128M",
                                    "--innodb-lock-wait-timeout=900", "--max-allowed-packet=16M"])
    _wait("mariadbd", lambda: sock.exists() and _port_open("127.0.0.1", DB_PORT), timeout,
          [db_log, root / "log" / "mariadbd.out"], alive=lambda: _alive(db))
    sql = (f"CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '{db_password}';\n"
           f"ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '{db_password}';\n"
           "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';\n")
    _run([_req("mariadb"), "--no-defaults", f"--socket={sock}", "-u", "root"], input_text=sql)  # password via stdin


def _sinfo_states(root: Path) -> dict[str, str]:
    """Node name -> long state, from ``sinfo -h -N -o '%N %T'``."""
    proc = _run([_req("sinfo"), "-h", "-N", "-o", "%N %T"], env=slurm_env(root), check=False, timeout=10)
    out: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2:
            out[parts[0]] = parts[1]
    return out


def _wait_idle(root: Path, names: Sequence[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    states: dict[str, str] = {}
    while time.monotonic() < deadline:
        states = _sinfo_states(root)
        if all(states.get(n) == "idle" for n in names):
            return
        time.sleep(0.2)
    bad = [n for n in names if states.get(n) != "idle"]
    logs = [root / "log" / "slurmctld.log"] + [root / "log" / f"slurmd-{n}.log" for n in bad[:2]]
    raise DevClusterError(f"nodes not idle after {timeout:.0f} s: "
                          + ", ".join(f"{n}={states.get(n, 'missing')}" for n in bad) + "\n"
                          + "\n".join(_tail(p) for p in logs))


def down(root: Path = DEFAULT_ROOT) -> dict[str, Any]:
    """Stop the dev cluster under ``root`` and remove what :func:`up` created outside ``root``.

    Runs ``scancel`` on the cluster's jobs, stops the recorded slurmd processes (SIGTERM, SIGKILL after
    10 s), then whatever still runs in the node namespaces (slurmstepd, job processes), then slurmctld,
    slurmdbd, mariadbd and munged; then ``ip link del``/``ip netns del`` for the recorded veths,
    namespaces and bridge, drops the tagged ``/etc/hosts`` lines and finally the guard route.
    Idempotent: a second call finds nothing to do. Files under ``root`` (logs, database) are kept.

    Returns:
        ``{"root": ..., "stopped": [...names...]}``.
    """
    root = root.resolve()
    state = _load_state(root)
    if not state:
        return {"root": str(root), "stopped": []}
    pids: dict[str, dict[str, int]] = state.get("pids", {})
    stopped = [k for k, e in pids.items() if _alive(e)]
    ctld = pids.get("slurmctld")
    if ctld is not None and _alive(ctld):
        _cancel_jobs(root)
    _stop([e for k, e in pids.items() if k.startswith("slurmd:")])
    _kill_netns_processes(state.get("network", {}).get("netns", []))
    for key in ("slurmctld", "slurmdbd", "mariadbd", "munged"):
        if key in pids:
            _stop([pids[key]])
    _teardown_network(state)
    _state_path(root).unlink(missing_ok=True)
    return {"root": str(root), "stopped": stopped}


def status(root: Path = DEFAULT_ROOT) -> dict[str, Any]:
    """What runs of the dev cluster under ``root``: recorded daemons, network, and node states.

    Runs ``sinfo -h -N -o '%N %T'`` when slurmctld is alive.
    """
    root = root.resolve()
    state = _load_state(root)
    pids: dict[str, dict[str, int]] = state.get("pids", {})
    daemons = {k: {"pid": e["pid"], "alive": _alive(e)} for k, e in sorted(pids.items())}
    ctld_alive = "slurmctld" in pids and _alive(pids["slurmctld"])
    net = state.get("network", {})
    return {
        "root": str(root),
        "up": bool(daemons) and all(d["alive"] for d in daemons.values()),
        "slurm_conf": str(root / "etc" / "slurm.conf"),
        "nodes": _sinfo_states(root) if ctld_alive else {},
        "gpus_per_node": state.get("gpus_per_node"),
        "daemons": daemons,
        "network": {
            "bridge": net.get("bridge") if net.get("bridge") and _link_exists(net["bridge"]) else None,
            "netns": [ns for ns in net.get("netns", []) if _netns_exists(ns)],
        },
    }


@contextlib.contextmanager
def running(nodes: int = 4, gpus_per_node: int = 4, root: Path = DEFAULT_ROOT) -> Iterator[dict[str, Any]]:
    """``with running(...) as info:`` brings the dev cluster up and always brings it down again."""
    try:
        yield up(nodes, gpus_per_node, root)
    finally:
        down(root)
