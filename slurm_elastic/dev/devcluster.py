"""A real local Slurm cluster for the ``slurm`` tests and development (Debian's 22.05, or a built release).

Owns bringing up and tearing down one dev cluster under a root folder: a private munged, MariaDB
(private datadir, port 3307) with slurmdbd, slurmctld, and one slurmd per node, each node in its own
network namespace (veth on a bridge) with its own hostname (a private UTS namespace), fake GPUs made
with ``mknod``, the ``--elastic`` SPANK plugin and ``job_submit.lua``. Configuration files are rendered
from ``slurm_elastic/site_configs/dev/*.j2`` by :func:`render` only.

Everything it creates is recorded in ``ROOT/devcluster.json`` the moment it exists, and :func:`down`
removes exactly that: the recorded PIDs (checked against their start time, so a reused PID is never
hit), the processes inside the recorded namespaces, the veths, bridge, route and the tagged
``/etc/hosts`` lines. It must not install packages, touch system services or other processes, or run
a command through a shell string: every command is an argv list.

Several clusters can run side by side, each under its own root with its own
:class:`~.instance.Instance` number (node names, subnet, bridge and ports); instance 0 is the default.

Needs root and the Debian packages of :data:`PACKAGES` (``up`` names what is missing). With
``slurm_prefix`` (a release built by ``scripts/build-slurm``), Slurm's programs, ``spank.h`` and
plugins come from that prefix instead, the SPANK plugin is compiled against its headers, and
:func:`slurm_env` puts its ``bin``/``sbin`` first on ``PATH``. The
network is :mod:`.network`, the processes :mod:`.processes`, the state file and argv runner
:mod:`.plumbing`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import socket
import stat
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from slurm_elastic.dev.instance import DEFAULT_INSTANCE, NETNS_PREFIX, Instance
from slurm_elastic.dev.network import (
    DevNode,
    link_exists,
    netns_exists,
    setup_network,
    teardown_network,
)
from slurm_elastic.dev.plumbing import (
    DevClusterError as DevClusterError,  # re-exported: the error of this module's API
)
from slurm_elastic.dev.plumbing import (
    alive,
    load_state,
    run,
    save_state,
    state_path,
)
from slurm_elastic.dev.processes import Starter, kill_netns_processes, netns_preexec, stop
from slurm_elastic.resources import SITE_CONFIGS
from slurm_elastic.slurm.runner import with_slurm_prefix
from slurm_elastic.textfiles import read_text

log = logging.getLogger(__name__)

DEFAULT_ROOT = Path("/tmp/slurm-elastic-dev")
CONFIG_DIR = SITE_CONFIGS / "dev"
CLUSTER_NAME = "dev"
CTLD_PORT = DEFAULT_INSTANCE.ctld_port  # instance 0's ports; instance k's are on Instance(k)
SLURMD_PORT = DEFAULT_INSTANCE.slurmd_port
DBD_PORT = DEFAULT_INSTANCE.dbd_port
DB_PORT = DEFAULT_INSTANCE.db_port
CPUS_PER_NODE = 8
MEMORY_MB = 64000
MAX_NODES = 200
CANCEL_CHUNK = 500
"""Job ids per ``scancel`` when :func:`down` cancels the cluster's jobs (2,500 in one took over 10 s)."""

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
_SLURM_PROGRAMS = frozenset(p for p, pkg in PACKAGES.items() if pkg.startswith("slurm") and not p.startswith("/"))


def nodes_for(count: int, instance: Instance = DEFAULT_INSTANCE) -> tuple[DevNode, ...]:
    """The dev nodes ``n01..nNN`` of instance 0 (``m01..`` of instance 1, ...; names as wide as needed,
    at least two digits)."""
    if not 1 <= count <= MAX_NODES:
        raise DevClusterError(f"nodes={count}: must be between 1 and {MAX_NODES}")
    width = max(2, len(str(count)))
    out = []
    for i in range(1, count + 1):
        name = f"{instance.node_letter}{i:0{width}d}"
        out.append(DevNode(name, f"{NETNS_PREFIX}{name}", f"{NETNS_PREFIX}{name}h",
                           f"{instance.subnet_prefix}.{10 + i}"))
    return tuple(out)


def hostlist(names: Sequence[str]) -> str:
    """A Slurm host list for consecutive names ``n01..nNN`` of one letter (``n[01-04]``; a single name as is)."""
    if len(names) == 1:
        return names[0]
    return f"{names[0][0]}[{names[0][1:]}-{names[-1][1:]}]"


def instance_of(root: Path = DEFAULT_ROOT) -> Instance:
    """The instance the cluster under ``root`` was brought up as (0 for a state written before instances)."""
    number = load_state(root.resolve()).get("instance", 0)
    return Instance(number if isinstance(number, int) and not isinstance(number, bool) else 0)


def render(template: str, config_dir: Path = CONFIG_DIR, **values: Any) -> str:
    """Render one ``slurm_elastic/site_configs/dev`` template with jinja2 (undefined names are an error)."""
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
    """The environment for Slurm commands aimed at the dev cluster under ``root``: sets ``SLURM_CONF``,
    and puts the cluster's Slurm build (when it runs one from a prefix) first on ``PATH``."""
    env = with_slurm_prefix(os.environ, slurm_prefix_of(root))
    env["SLURM_CONF"] = str(root / "etc" / "slurm.conf")
    return env


def slurm_prefix_of(root: Path = DEFAULT_ROOT) -> Path | None:
    """The Slurm build the cluster under ``root`` runs (``None``: Debian's)."""
    prefix = load_state(root.resolve()).get("slurm_prefix")
    return Path(prefix) if isinstance(prefix, str) and prefix else None


# ---------------------------------------------------------------------------------------- commands


_PREFIX_FILES = {  # where a source build keeps what Debian's packages put elsewhere
    "/usr/include/slurm/spank.h": "include/slurm/spank.h",
    "/usr/lib/x86_64-linux-gnu/slurm-wlm/job_submit_lua.so": "lib/slurm/job_submit_lua.so",
}


def _find(program: str, prefix: Path | None = None) -> str | None:
    if prefix is not None:
        inside = [prefix / _PREFIX_FILES[program]] if program in _PREFIX_FILES else [
            prefix / "sbin" / program, prefix / "bin" / program]
        for path in inside:
            if path.exists():
                return str(path)
        if program in _PREFIX_FILES or program in _SLURM_PROGRAMS:
            return None
    if program.startswith("/"):
        return program if Path(program).exists() else None
    for folder in _SBIN:
        path = Path(folder) / program
        if path.exists():
            return str(path)
    return shutil.which(program)


def _daemon_binary(name: str, prefix: Path | None = None) -> str | None:
    """The real build of a daemon: the prefix's, else Debian's ``NAME-wlm`` (behind alternatives), else ``NAME``."""
    if prefix is not None:
        return _find(name, prefix)
    return _find(f"{name}-wlm") or _find(name)


def check_prerequisites(slurm_prefix: Path | None = None) -> list[str]:
    """What the dev cluster lacks on this machine, one line each naming the program and its package
    (or, for Slurm's own files with ``slurm_prefix``, the build that lacks it)."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root: the dev cluster needs root (network namespaces, mknod, /etc/hosts)")
    for program, package in PACKAGES.items():
        daemon = program in ("slurmctld", "slurmd", "slurmstepd")
        found = _daemon_binary(program, slurm_prefix) if daemon else _find(program, slurm_prefix)
        if found is not None:
            continue
        if slurm_prefix is not None and (program in _SLURM_PROGRAMS or program in _PREFIX_FILES):
            missing.append(f"{program}: not in the Slurm build at {slurm_prefix} "
                           f"(scripts/build-slurm RELEASE {slurm_prefix}; lua needs liblua5.3-dev)")
        else:
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


def _cancel_jobs(root: Path) -> None:
    """Cancel every job of the dev cluster (``scancel --full --cluster... -u root`` style; best effort)."""
    env = slurm_env(root)
    prefix = slurm_prefix_of(root)
    squeue = _find("squeue", prefix)
    scancel = _find("scancel", prefix)
    if squeue is None or scancel is None:
        return
    try:
        proc = run([squeue, "-h", "-o", "%i", "-t", "PD,R,S,CG,CF,RQ,RS,SI,SO,ST"], env=env, check=False, timeout=30)
        ids = sorted(set(proc.stdout.split()))
        for i in range(0, len(ids) if proc.returncode == 0 else 0, CANCEL_CHUNK):
            run([scancel, *ids[i:i + CANCEL_CHUNK]], env=env, check=False, timeout=30)
    except DevClusterError as exc:  # best effort: stopping the daemons ends every job anyway
        log.warning("cancelling the dev cluster's jobs: %s; stopping the daemons ends them", exc)


# -------------------------------------------------------------------------------------------- public


def up(nodes: int = 4, gpus_per_node: int = 4, root: Path = DEFAULT_ROOT, *, timeout: float = 60.0,
       slurm_prefix: Path | None = None, instance: int = 0) -> dict[str, Any]:
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
        slurm_prefix: run the Slurm release built into this prefix (``scripts/build-slurm``)
            instead of Debian's.
        instance: which of the clusters that can run side by side this is (:class:`~.instance.Instance`:
            its node names, subnet, bridge and ports); 0 unless another cluster is up.

    Returns:
        :func:`status` of the running cluster, plus ``seconds`` (bring-up time).

    Raises:
        DevClusterError: a prerequisite is missing (each named with its package), a cluster is
            already up, or a daemon did not come up.
    """
    started = time.monotonic()
    if gpus_per_node < 1:
        raise DevClusterError(f"gpus_per_node={gpus_per_node}: must be >= 1")
    which = Instance(instance)
    node_list = nodes_for(nodes, which)
    if slurm_prefix is not None:
        slurm_prefix = slurm_prefix.resolve()
    missing = check_prerequisites(slurm_prefix)
    if missing:
        raise DevClusterError("missing prerequisites:\n  " + "\n  ".join(missing))
    root = root.resolve()
    _check_root(root)
    _check_same_build(root, slurm_prefix)
    old = load_state(root)
    if any(alive(e) for e in old.get("pids", {}).values()):
        raise DevClusterError(f"a dev cluster is already up under {root}: run `slurm-elastic devcluster down`")
    if old:
        down(root)
    try:
        _up(node_list, gpus_per_node, root, timeout, slurm_prefix, which)
    except BaseException:
        log.error("bring-up failed; stopping what was started (logs stay in %s/log)", root)
        down(root)
        raise
    result = status(root)
    result["seconds"] = round(time.monotonic() - started, 2)
    return result


def _up(node_list: tuple[DevNode, ...], gpus_per_node: int, root: Path, timeout: float,
        prefix: Path | None, which: Instance) -> None:
    from slurm_elastic.spank.build import build_plugin, plugstack_line

    for sub in ("bin", "etc", "log", "run", "state", "spool", "dev", "lib", "mysql", "jobs"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "etc" / "slurm-build").write_text(f"{prefix or 'debian'}\n")
    (root / "jobs").chmod(0o1777)
    state: dict[str, Any] = {"root": str(root), "nodes": [n.name for n in node_list], "gpus_per_node": gpus_per_node,
                             "pids": {}, "network": {"netns": [], "veths": []},
                             "slurm_prefix": str(prefix) if prefix is not None else "",
                             "instance": which.number}
    save_state(root, state)
    env = slurm_env(root)
    starter = Starter(root, state, env)
    names = [n.name for n in node_list]
    ctld_host = socket.gethostname().split(".")[0]

    # programs under their exact names: Slurm 22.05 drops every Gres= when the name is slurmctld-wlm
    for name in ("slurmctld", "slurmd", "slurmstepd"):
        link = root / "bin" / name
        target = _daemon_binary(name, prefix)
        if target is None:  # pragma: no cover - checked by check_prerequisites
            raise DevClusterError(f"{name}: install the Debian package {PACKAGES[name]}")
        link.unlink(missing_ok=True)
        link.symlink_to(target)
    for i in range(gpus_per_node):
        dev = root / "dev" / f"nvidia{i}"
        if not dev.exists():
            os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(195, i))
            dev.chmod(0o666)
    plugin = build_plugin(root / "lib", include_dir=prefix / "include" if prefix is not None else None)

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
        "cluster": CLUSTER_NAME, "root": str(root), "ctld_host": ctld_host, "ctld_addr": f"{which.subnet_prefix}.1",
        "ctld_port": which.ctld_port, "slurmd_port": which.slurmd_port, "dbd_addr": "127.0.0.1",
        "dbd_port": which.dbd_port, "db_port": which.db_port, "db_password": db_password,
        "munge_socket": str(munge_socket),
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

    _check_ports_free(root, which)
    setup_network(root, state, node_list, which)

    # munge: a private munged on its own socket (named in AuthInfo), shared by every namespace
    munged = starter.start("munged", [_req("munged"), "-F", f"--socket={munge_socket}", f"--key-file={key}",
                                      f"--pid-file={root / 'run' / 'munged.pid'}",
                                      f"--log-file={root / 'log' / 'munged.log'}",
                                      f"--seed-file={root / 'run' / 'munged.seed'}", "--num-threads=4"])
    _wait("munged", munge_socket.exists, timeout, [root / "log" / "munged.log", root / "log" / "munged.out"],
          alive=lambda: alive(munged))

    _start_database(root, starter, db_password, timeout, which.db_port)

    dbd = starter.start("slurmdbd", [_req("slurmdbd", prefix), "-D"])
    dbd_logs = [root / "log" / "slurmdbd.log", root / "log" / "slurmdbd.out"]
    _wait("slurmdbd", lambda: _port_open("127.0.0.1", which.dbd_port), timeout, dbd_logs, alive=lambda: alive(dbd))
    sacctmgr = _req("sacctmgr", prefix)
    listed = run([sacctmgr, "-n", "-P", "list", "cluster", "format=cluster"], env=env).stdout.split()
    if CLUSTER_NAME not in listed:
        run([sacctmgr, "-i", "add", "cluster", CLUSTER_NAME], env=env)

    _start_controller(starter, root, timeout)

    for node in node_list:
        argv = [str(root / "bin" / "slurmd"), "-D", "-d", str(root / "bin" / "slurmstepd"),
                "-f", str(etc / "slurm.conf"), "-N", node.name]
        starter.start(f"slurmd:{node.name}", argv, preexec=netns_preexec(node.netns, node.name))
    _wait_idle(root, names, timeout)


def _check_same_build(root: Path, prefix: Path | None) -> None:
    """A root keeps the state of one Slurm build: 25.11 saves its cluster id with the cluster's name,
    which 22.05 refuses (``CLUSTER NAME MISMATCH``), and no release promises to read another's state."""
    marker = root / "etc" / "slurm-build"
    if not marker.exists():
        return
    before = read_text(marker, max_bytes=4096, noun="the root's Slurm build", error=DevClusterError,
                       kind_rule="a file devcluster up wrote", size_rule="one path").strip()
    now = str(prefix or "debian")
    if before != now:
        raise DevClusterError(f"root {root} holds the state of the Slurm build {before!r}, not {now!r} (rule: a "
                              "root keeps one build's state): choose another --root, or give the same --slurm-prefix")


def _check_root(root: Path) -> None:
    """munged refuses a socket below a folder that others cannot traverse: check every ancestor."""
    for folder in root.parents:
        if folder.exists() and not folder.stat().st_mode & stat.S_IXOTH:
            raise DevClusterError(f"root {root}: {folder} is not traversable by others (o+x), which munged "
                                  f"requires for its socket; choose a root such as {DEFAULT_ROOT}")
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)


def _req(program: str, prefix: Path | None = None) -> str:
    path = _find(program, prefix)
    if path is None:
        raise DevClusterError(f"{program}: install the Debian package {PACKAGES.get(program, program)}")
    return path


def _check_ports_free(root: Path, which: Instance = DEFAULT_INSTANCE) -> None:
    for addr, port, who in (("127.0.0.1", which.db_port, "mariadbd"), ("127.0.0.1", which.dbd_port, "slurmdbd"),
                            ("127.0.0.1", which.ctld_port, "slurmctld")):
        if _port_open(addr, port):
            other = DEFAULT_ROOT.resolve()
            if other != root and any(alive(e) for e in load_state(other).get("pids", {}).values()):
                raise DevClusterError(f"port {port} ({who}) is held by the dev cluster still up under {other} "
                                      f"(left by `slurm-elastic demo --keep`?): run "
                                      f"`slurm-elastic devcluster down --root {other}` first")
            raise DevClusterError(f"port {port} ({who}) is already in use: stop whatever listens there "
                                  f"(`ss -ltnp sport = :{port}`)")


def _start_database(root: Path, starter: Starter, db_password: str, timeout: float, port: int) -> None:
    """Private MariaDB: ``mariadb-install-db`` (first time), ``mariadbd`` on ``port``, the ``slurm`` user."""
    datadir = root / "mysql"
    sock = root / "run" / "mysqld.sock"
    db_log = root / "log" / "mariadb.log"
    tmp = root / "run" / "mysql-tmp"
    tmp.mkdir(mode=0o700, exist_ok=True)
    if not (datadir / "mysql").exists():
        # a private tmpdir: two clusters installing at once shared /tmp's temporary table names
        run([_req("mariadb-install-db"), "--no-defaults", f"--datadir={datadir}", "--user=root",
              "--auth-root-authentication-method=socket", "--skip-test-db", f"--tmpdir={tmp}"], timeout=timeout)
    db = starter.start("mariadbd", [_req("mariadbd"), "--no-defaults", f"--datadir={datadir}", f"--port={port}",
                                    "--bind-address=127.0.0.1", f"--socket={sock}", "--user=root", f"--tmpdir={tmp}",
                                    f"--pid-file={root / 'run' / 'mariadbd.pid'}", f"--log-error={db_log}",
                                    "--skip-name-resolve", "--innodb-buffer-pool-size=128M",
                                    "--innodb-lock-wait-timeout=900", "--max-allowed-packet=16M"])
    _wait("mariadbd", lambda: sock.exists() and _port_open("127.0.0.1", port), timeout,
          [db_log, root / "log" / "mariadbd.out"], alive=lambda: alive(db))
    sql = (f"CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '{db_password}';\n"
           f"ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '{db_password}';\n"
           "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';\n")
    run([_req("mariadb"), "--no-defaults", f"--socket={sock}", "-u", "root"], input_text=sql)  # password via stdin


def _sinfo_states(root: Path) -> dict[str, str]:
    """Node name -> long state, from ``sinfo -h -N -o '%N %T'``."""
    proc = run([_req("sinfo", slurm_prefix_of(root)), "-h", "-N", "-o", "%N %T"], env=slurm_env(root), check=False,
               timeout=10)
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


def _start_controller(starter: Starter, root: Path, timeout: float) -> None:
    ctld = starter.start("slurmctld", [str(root / "bin" / "slurmctld"), "-D", "-f", str(root / "etc" / "slurm.conf")])
    ctld_logs = [root / "log" / "slurmctld.log", root / "log" / "slurmctld.out"]
    which = instance_of(root)
    _wait("slurmctld", lambda: _port_open(f"{which.subnet_prefix}.1", which.ctld_port), timeout, ctld_logs,
          alive=lambda: alive(ctld))


def stop_controller(root: Path = DEFAULT_ROOT) -> None:
    """Stop the dev cluster's slurmctld (SIGTERM; it saves its state): a controller outage.
    Jobs keep running on their nodes; :func:`start_controller` brings it back from its saved state."""
    root = root.resolve()
    ctld = load_state(root).get("pids", {}).get("slurmctld")
    if ctld is None:
        raise DevClusterError(f"no dev cluster slurmctld is recorded under {root}")
    stop([ctld])


def start_controller(root: Path = DEFAULT_ROOT, *, timeout: float = 60.0) -> None:
    """Start the dev cluster's slurmctld again after :func:`stop_controller` (it recovers its saved state)."""
    root = root.resolve()
    state = load_state(root)
    if not state:
        raise DevClusterError(f"no dev cluster is recorded under {root}")
    _start_controller(Starter(root, state, slurm_env(root)), root, timeout)


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
    state = load_state(root)
    if not state:
        return {"root": str(root), "stopped": []}
    pids: dict[str, dict[str, int]] = state.get("pids", {})
    stopped = [k for k, e in pids.items() if alive(e)]
    ctld = pids.get("slurmctld")
    if ctld is not None and alive(ctld):
        _cancel_jobs(root)
    stop([e for k, e in pids.items() if k.startswith("slurmd:")])
    kill_netns_processes(state.get("network", {}).get("netns", []))
    for key in ("slurmctld", "slurmdbd", "mariadbd", "munged"):
        if key in pids:
            stop([pids[key]])
    teardown_network(state)
    state_path(root).unlink(missing_ok=True)
    return {"root": str(root), "stopped": stopped}


def status(root: Path = DEFAULT_ROOT) -> dict[str, Any]:
    """What runs of the dev cluster under ``root``: recorded daemons, network, and node states.

    Runs ``sinfo -h -N -o '%N %T'`` when slurmctld is alive.
    """
    root = root.resolve()
    state = load_state(root)
    pids: dict[str, dict[str, int]] = state.get("pids", {})
    daemons = {k: {"pid": e["pid"], "alive": alive(e)} for k, e in sorted(pids.items())}
    ctld_alive = "slurmctld" in pids and alive(pids["slurmctld"])
    net = state.get("network", {})
    return {
        "root": str(root),
        "up": bool(daemons) and all(d["alive"] for d in daemons.values()),
        "slurm_conf": str(root / "etc" / "slurm.conf"),
        "nodes": _sinfo_states(root) if ctld_alive else {},
        "gpus_per_node": state.get("gpus_per_node"),
        "slurm_prefix": state.get("slurm_prefix") or None,
        "instance": instance_of(root).number,
        "daemons": daemons,
        "network": {
            "bridge": net.get("bridge") if net.get("bridge") and link_exists(net["bridge"]) else None,
            "netns": [ns for ns in net.get("netns", []) if netns_exists(ns)],
        },
    }


@contextlib.contextmanager
def running(nodes: int = 4, gpus_per_node: int = 4, root: Path = DEFAULT_ROOT, *,
            slurm_prefix: Path | None = None, instance: int = 0) -> Iterator[dict[str, Any]]:
    """``with running(...) as info:`` brings the dev cluster up and always brings it down again."""
    try:
        yield up(nodes, gpus_per_node, root, slurm_prefix=slurm_prefix, instance=instance)
    finally:
        down(root)
