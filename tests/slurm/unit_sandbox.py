"""Run a command under a systemd unit's own user, capabilities and sandbox, without systemd.

PID 1 on the test machines is not systemd, so ``systemctl start`` is not available. This helper
parses the unit file (:func:`load`) and runs a command the way systemd would start the service's
``ExecStart=`` (:func:`command`): in a private mount namespace whose file system follows the
unit's ``Protect*``/``Private*``/``ReadWritePaths=``/``StateDirectory=`` settings, with the
unit's seccomp-based restrictions loaded (libseccomp through ctypes), a clean environment, the
unit's ``UMask=`` and working directory, and finally ``setpriv`` for ``User=``,
``CapabilityBoundingSet=``, ``AmbientCapabilities=`` and ``NoNewPrivileges=``.

Every ``[Service]`` setting is either emulated (:data:`EMULATED`), or has nothing to emulate
here (:data:`NOT_SANDBOX`: how systemd supervises the process), or is named with the reason it is
not emulated (:data:`NOT_EMULATED`). :func:`load` refuses a setting in none of them, so a unit
that gains a setting makes the test fail until the emulation follows.

Run as root. This file is also the second stage (``python unit_sandbox.py SPEC``): it only uses
the standard library.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import json
import os
import pwd
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from slurm_elastic.resources import SYSTEMD_UNIT

UNIT = SYSTEMD_UNIT
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # systemd's, for services

EMULATED = frozenset({
    "User", "CapabilityBoundingSet", "AmbientCapabilities", "NoNewPrivileges", "UMask", "Environment",
    "WorkingDirectory", "ProtectSystem", "ProtectHome", "ReadWritePaths", "ReadOnlyPaths", "InaccessiblePaths",
    "StateDirectory", "StateDirectoryMode", "PrivateTmp", "PrivateDevices", "PrivateMounts",
    "ProtectKernelTunables", "ProtectKernelModules", "ProtectKernelLogs", "ProtectControlGroups", "ProtectClock",
    "ProtectHostname", "RestrictAddressFamilies", "RestrictNamespaces", "RestrictRealtime", "RestrictSUIDSGID",
    "LockPersonality", "SystemCallArchitectures", "SystemCallFilter", "SystemCallErrorNumber",
})
NOT_SANDBOX = frozenset({"Type", "ExecStart", "ExecStartPre", "Restart", "RestartSec", "KillMode"})
NOT_EMULATED: dict[str, str] = {}  # setting -> why the sandbox leaves it to systemd (none so far)

_BOOL = {"yes": True, "true": True, "on": True, "1": True, "no": False, "false": False, "off": False, "0": False}
_LISTS = ("ReadWritePaths", "ReadOnlyPaths", "InaccessiblePaths", "StateDirectory", "Environment")


class UnitError(Exception):
    """The unit file says something this helper does not know how to emulate."""


def parse(text: str) -> dict[str, list[tuple[str, str]]]:
    """Section -> its ``(key, value)`` assignments in order (comments and continuations handled)."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    lines = iter(text.splitlines())
    for raw in lines:
        line = raw.strip()
        while line.endswith("\\"):
            line = line[:-1] + " " + next(lines, "").strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], [])
            continue
        key, sep, value = line.partition("=")
        if not sep or current is None:
            raise UnitError(f"not a unit file line: {raw!r}")
        current.append((key.strip(), value.strip()))
    return sections


@dataclass(frozen=True)
class Unit:
    """The ``[Service]`` settings of a unit, as systemd would read them."""

    user: str = "root"
    bounding: frozenset[str] | None = None  # None: not limited
    ambient: frozenset[str] = frozenset()
    no_new_privileges: bool = False
    umask: int = 0o022
    environment: dict[str, str] = field(default_factory=dict)
    working_directory: str = "/"
    protect_system: str = "no"
    protect_home: str = "no"
    read_write: tuple[str, ...] = ()
    read_only: tuple[str, ...] = ()
    inaccessible: tuple[str, ...] = ()
    state_directories: tuple[str, ...] = ()
    state_directory_mode: int = 0o755
    private_tmp: bool = False
    private_devices: bool = False
    protect_kernel_tunables: bool = False
    protect_kernel_modules: bool = False
    protect_kernel_logs: bool = False
    protect_control_groups: bool = False
    protect_clock: bool = False
    protect_hostname: bool = False
    address_families: tuple[bool, frozenset[str]] | None = None  # (allow list?, families)
    restrict_namespaces: bool = False
    restrict_realtime: bool = False
    restrict_suid_sgid: bool = False
    lock_personality: bool = False
    native_only: bool = False
    syscall_filter: tuple[bool, tuple[str, ...]] | None = None  # (allow list?, names and @groups)
    syscall_errno: str = ""
    exec_start: tuple[str, ...] = ()


def _caps(key: str, assignments: Sequence[str]) -> frozenset[str] | None:
    """``CapabilityBoundingSet=``/``AmbientCapabilities=``: lines OR-ed; empty resets to none."""
    caps: set[str] | None = None
    for value in assignments:
        if value.startswith("~"):
            raise UnitError(f"{key}=~...: an inverted list is not emulated")
        names = {n.upper() for n in value.split()}
        bad = [n for n in names if not re.fullmatch(r"CAP_[A-Z_]+", n)]
        if bad:
            raise UnitError(f"{key}: not capabilities: {bad}")
        caps = names if value == "" else (caps or set()) | names
    return None if caps is None else frozenset(caps)


def _paths(values: Sequence[str]) -> tuple[str, ...]:
    out: list[str] = []
    for value in values:
        if value == "":
            out = []
        else:
            out += shlex.split(value)
    return tuple(out)


def _bool(key: str, value: str) -> bool:
    if value.lower() not in _BOOL:
        raise UnitError(f"{key}={value}: not a boolean")
    return _BOOL[value.lower()]


def load(path: Path = UNIT) -> Unit:
    """The ``[Service]`` settings of the unit file at ``path``.

    Raises:
        UnitError: a setting neither emulated nor known to need no emulation, or a value not understood.
    """
    service = parse(path.read_text()).get("Service", [])
    values: dict[str, list[str]] = {}
    for key, value in service:
        if key not in EMULATED | NOT_SANDBOX | NOT_EMULATED.keys():
            raise UnitError(f"{path.name}: {key}= is not emulated by {Path(__file__).name}: teach it, "
                            "or name it in NOT_EMULATED with the reason")
        values.setdefault(key, []).append(value)

    def last(key: str, default: str) -> str:
        return values.get(key, [default])[-1]

    def flag(key: str) -> bool:
        return _bool(key, last(key, "no"))

    env: dict[str, str] = {}
    for value in values.get("Environment", []):
        if value == "":
            env = {}
        for word in shlex.split(value):
            name, _, val = word.partition("=")
            env[name] = val
    families = None
    for value in values.get("RestrictAddressFamilies", []):
        allow = not value.startswith("~")
        families = (allow, frozenset(value.lstrip("~").split()))
    calls: tuple[bool, tuple[str, ...]] | None = None
    for value in values.get("SystemCallFilter", []):
        allow = not value.startswith("~")
        names = tuple(value.lstrip("~").split())
        if calls is not None and calls[0] != allow:
            raise UnitError("SystemCallFilter= mixes allow and deny lists")
        calls = (allow, (calls[1] if calls else ()) + names)
    arch = last("SystemCallArchitectures", "")
    if arch not in ("", "native"):
        raise UnitError(f"SystemCallArchitectures={arch}: only native is emulated")
    protect_system = {"yes": "yes", "true": "yes", "no": "no", "false": "no"}.get(last("ProtectSystem", "no"),
                                                                                last("ProtectSystem", "no"))
    protect_home = {"yes": "yes", "true": "yes", "no": "no", "false": "no"}.get(last("ProtectHome", "no"),
                                                                              last("ProtectHome", "no"))
    if protect_system not in ("no", "yes", "full", "strict") or protect_home not in ("no", "yes", "read-only",
                                                                                     "tmpfs"):
        raise UnitError(f"ProtectSystem={protect_system} ProtectHome={protect_home}")
    return Unit(
        user=last("User", "root"), bounding=_caps("CapabilityBoundingSet", values.get("CapabilityBoundingSet", [])),
        ambient=_caps("AmbientCapabilities", values.get("AmbientCapabilities", [])) or frozenset(),
        no_new_privileges=flag("NoNewPrivileges"), umask=int(last("UMask", "0022"), 8), environment=env,
        working_directory=last("WorkingDirectory", "/"), protect_system=protect_system, protect_home=protect_home,
        read_write=_paths(values.get("ReadWritePaths", [])), read_only=_paths(values.get("ReadOnlyPaths", [])),
        inaccessible=_paths(values.get("InaccessiblePaths", [])),
        state_directories=_paths(values.get("StateDirectory", [])),
        state_directory_mode=int(last("StateDirectoryMode", "0755"), 8), private_tmp=flag("PrivateTmp"),
        private_devices=flag("PrivateDevices"), protect_kernel_tunables=flag("ProtectKernelTunables"),
        protect_kernel_modules=flag("ProtectKernelModules"), protect_kernel_logs=flag("ProtectKernelLogs"),
        protect_control_groups=flag("ProtectControlGroups"), protect_clock=flag("ProtectClock"),
        protect_hostname=flag("ProtectHostname"), address_families=families,
        restrict_namespaces=flag("RestrictNamespaces"), restrict_realtime=flag("RestrictRealtime"),
        restrict_suid_sgid=flag("RestrictSUIDSGID"), lock_personality=flag("LockPersonality"),
        native_only=arch == "native", syscall_filter=calls, syscall_errno=last("SystemCallErrorNumber", ""),
        exec_start=tuple(shlex.split(last("ExecStart", ""))),
    )


def setpriv_argv(unit: Unit) -> list[str]:
    """The ``setpriv`` prefix for the unit's user, capabilities and no-new-privileges flag."""
    pw = pwd.getpwnam(unit.user)
    argv = ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--init-groups"]
    if unit.bounding is not None:
        argv.append("--bounding-set=" + ",".join(["-all", *sorted(f"+{c[4:].lower()}" for c in unit.bounding)]))
    amb = sorted(f"+{c[4:].lower()}" for c in unit.ambient)
    argv.append("--inh-caps=" + ",".join(["-all", *amb]))
    if amb:
        argv.append("--ambient-caps=" + ",".join(["-all", *amb]))
    if unit.no_new_privileges:
        argv.append("--no-new-privs")
    return [*argv, "--"]


def syscall_names(groups: Sequence[str]) -> list[str]:
    """System call names of ``@group`` names and plain names, expanded by ``systemd-analyze``."""
    out: set[str] = set()
    seen: set[str] = set()
    todo = list(groups)
    while todo:
        name = todo.pop()
        if not name.startswith("@"):
            out.add(name)
            continue
        if name in seen:
            continue
        seen.add(name)
        exe = shutil.which("systemd-analyze")
        if exe is None:
            raise UnitError("systemd-analyze (Debian package systemd) is needed to expand SystemCallFilter groups")
        text = subprocess.run([exe, "syscall-filter", "--no-pager", name], capture_output=True, text=True,
                              check=True).stdout
        for line in text.splitlines()[1:]:
            word = line.strip()
            if word and not word.startswith("#"):
                todo.append(word)
    return sorted(out)


def command(argv: Sequence[str], unit: Unit, *, state_dirs: Mapping[str, Path], visible: Sequence[Path] = (),
            env: Mapping[str, str] | None = None) -> list[str]:
    """The argv that runs ``argv`` as the unit's service (run it as root).

    Args:
        argv: what stands for ``ExecStart=`` (e.g. the daemon from a virtual environment).
        unit: the unit's settings.
        state_dirs: for each ``StateDirectory=`` name, the folder bound at ``/var/lib/<name>``
            (so the test's store lands in a test folder; ``/var/lib/<name>`` is created, as systemd
            does, and stays empty).
        visible: folders that stay visible in the private ``/tmp`` when they are below it (others
            are visible anyway): the dev cluster's configuration and munge socket stand there for
            ``/etc/slurm`` and ``/run/munge``, the test's configuration file, and the checkout and
            virtual environment that stand for ``/usr/local`` (a clone in ``/tmp`` is common).
        env: variables added to the clean environment (what ``Environment=`` lines would add).
    """
    for name in unit.state_directories:
        if name not in state_dirs:
            raise UnitError(f"StateDirectory={name}: the test must say which folder stands for /var/lib/{name}")
        Path("/var/lib", name).mkdir(mode=unit.state_directory_mode, exist_ok=True)
    calls: list[str] = []
    if unit.syscall_filter is not None:
        calls = syscall_names(unit.syscall_filter[1])
    spec = {
        "unit": {k: (sorted(v) if isinstance(v, frozenset) else v) for k, v in unit.__dict__.items()
                 if k not in ("bounding", "ambient", "address_families", "syscall_filter")},
        "families": None if unit.address_families is None else [unit.address_families[0],
                                                                 sorted(unit.address_families[1])],
        "syscalls": None if unit.syscall_filter is None else [unit.syscall_filter[0], calls],
        "state_dirs": {name: str(p) for name, p in state_dirs.items()},
        "visible": [str(p) for p in visible],
        "env": {"PATH": DEFAULT_PATH, **unit.environment,
                **({"STATE_DIRECTORY": ":".join(f"/var/lib/{n}" for n in unit.state_directories)}
                   if unit.state_directories else {}),
                **(env or {})},
        "argv": [*setpriv_argv(unit), *argv],
    }
    return [sys.executable, str(Path(__file__).resolve()), json.dumps(spec)]


# -- the second stage: runs as root in the child, then execs setpriv --------------------------------

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = (
    1, 2, 4, 8, 32, 4096, 16384, 1 << 18)
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
CLONE_NEWNS, CLONE_NEWUTS = 0x00020000, 0x04000000
_OPTION_FLAGS = {"ro": MS_RDONLY, "nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC,
                 "noatime": MS_NOATIME, "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME}
_libc = ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(_libc.mount(source and source.encode(), target.encode(), fstype and fstype.encode(),
                       ctypes.c_ulong(flags), data and data.encode()), f"mount {source} {target} {flags:#x}")


def _mounts() -> list[tuple[str, int]]:
    """Mount points (in mount order) and their per-mount flags, from ``/proc/self/mountinfo``."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        parts = line.split()
        point = parts[4].encode().decode("unicode_escape")
        flags = 0
        for opt in parts[5].split(","):
            flags |= _OPTION_FLAGS.get(opt, 0)
        out.append((point, flags))
    return out


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def _remount(top: str, readonly: bool) -> None:
    """Every mount at or below ``top`` read-only (or writable again), keeping its other flags."""
    if not any(point == top for point, _ in _mounts()):
        _mount(top, top, None, MS_BIND | MS_REC)
    for point, flags in _mounts():
        if _under(point, top):
            new = (flags | MS_RDONLY) if readonly else (flags & ~MS_RDONLY)
            try:
                _mount(None, point, None, MS_REMOUNT | MS_BIND | new)
            except OSError as exc:
                if exc.errno not in (errno.EACCES, errno.ENOENT):
                    raise


def _empty(path: str) -> None:
    """``path`` made inaccessible (as systemd's ``InaccessiblePaths=``): an empty, mode 000 thing over it."""
    if not os.path.lexists(path):
        return
    if os.path.isdir(path):
        _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=000,size=4k")
        _mount(None, path, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    else:
        _mount("/dev/null", path, None, MS_BIND)
        _mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY)


def _private_devices() -> None:
    keep = ["null", "zero", "full", "random", "urandom", "tty"]
    fds = {name: os.open(f"/dev/{name}", os.O_PATH) for name in keep if os.path.exists(f"/dev/{name}")}
    _mount("tmpfs", "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=755,size=4m")
    for name, fd in fds.items():
        Path(f"/dev/{name}").touch()
        _mount(f"/proc/self/fd/{fd}", f"/dev/{name}", None, MS_BIND)
        os.close(fd)
    for sub in ("shm", "mqueue"):
        os.mkdir(f"/dev/{sub}")
    _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"/dev/{name}")


def _seccomp(spec: dict[str, object], unit: dict[str, object]) -> None:
    """The unit's seccomp-based settings, one filter each (the kernel applies the strictest answer)."""
    lib = ctypes.CDLL(ctypes.util.find_library("seccomp") or "libseccomp.so.2", use_errno=True)
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]

    class Cmp(ctypes.Structure):
        _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int),  # noqa: RUF012 (ctypes reads it)
                    ("a", ctypes.c_uint64), ("b", ctypes.c_uint64)]

    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                           ctypes.POINTER(Cmp)]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    allow, kill = 0x7FFF0000, 0x80000000
    eperm = 0x00050000 | errno.EPERM
    ne, eq, masked_eq, ge = 1, 4, 7, 5

    def nr(name: str) -> int:
        return int(lib.seccomp_syscall_resolve_name(name.encode()))

    def load(default: int, rules: Sequence[tuple[str, int, Sequence[tuple[int, int, int, int]]]]) -> None:
        ctx = lib.seccomp_init(default)
        try:
            for name, action, cmps in rules:
                number = nr(name)
                if number < 0:
                    continue  # not a system call of this architecture
                arr = (Cmp * max(1, len(cmps)))(*(Cmp(*c) for c in cmps))
                rc = lib.seccomp_rule_add_array(ctx, action, number, len(cmps), arr)
                if rc not in (0, -errno.EEXIST):
                    raise OSError(-rc, f"seccomp rule {name}: {os.strerror(-rc)}")
            rc = lib.seccomp_load(ctx)
            if rc != 0:
                raise OSError(-rc, f"seccomp_load: {os.strerror(-rc)}")
        finally:
            lib.seccomp_release(ctx)

    def deny(names: Sequence[str]) -> None:
        load(allow, [(n, eperm, ()) for n in names])

    families = spec["families"]
    if isinstance(families, list):
        is_allow, names = families
        numbers = {getattr(__import__("socket"), n) for n in names}
        noafs = 0x00050000 | errno.EAFNOSUPPORT
        if is_allow:
            load(allow, [*(("socket", noafs, [(0, eq, f, 0)]) for f in range(46) if f not in numbers),
                         ("socket", noafs, [(0, ge, 46, 0)])])
        else:
            load(allow, [("socket", noafs, [(0, eq, f, 0)]) for f in sorted(numbers)])
    if unit["restrict_namespaces"]:
        new_ns = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000, 0x00000080)
        load(allow, [("setns", eperm, ()),
                     *((call, eperm, [(0, masked_eq, bit, bit)]) for call in ("unshare", "clone") for bit in new_ns),
                     ("clone3", 0x00050000 | errno.ENOSYS, ())])  # as systemd: clone3's flags are out of reach
    if unit["restrict_realtime"]:
        load(allow, [("sched_setscheduler", eperm, [(1, eq, p, 0)]) for p in (1, 2, 6)])  # FIFO, RR, DEADLINE
    if unit["restrict_suid_sgid"]:
        rules: list[tuple[str, int, Sequence[tuple[int, int, int, int]]]] = []
        for b in (0o4000, 0o2000):  # S_ISUID, S_ISGID in the mode of chmod or of a file created by open
            rules += [("chmod", eperm, [(1, masked_eq, b, b)]), ("fchmod", eperm, [(1, masked_eq, b, b)]),
                      ("fchmodat", eperm, [(2, masked_eq, b, b)]), ("creat", eperm, [(1, masked_eq, b, b)]),
                      ("open", eperm, [(1, masked_eq, os.O_CREAT, os.O_CREAT), (2, masked_eq, b, b)]),
                      ("openat", eperm, [(2, masked_eq, os.O_CREAT, os.O_CREAT), (3, masked_eq, b, b)])]
        load(allow, rules)
    if unit["lock_personality"]:
        current = _libc.personality(ctypes.c_ulong(0xFFFFFFFF)) & 0xFFFFFFFF
        load(allow, [("personality", eperm, [(0, ne, current, 0)])])  # as systemd: only the current one
    if unit["protect_clock"]:
        deny(syscall_names(["@clock"]))
    if unit["protect_kernel_modules"]:
        deny(syscall_names(["@module"]))
    if unit["protect_kernel_logs"]:
        deny(["syslog"])
    if unit["protect_hostname"]:
        deny(["sethostname", "setdomainname"])
    calls = spec["syscalls"]  # last, as systemd does: it may forbid loading filters
    if isinstance(calls, list):
        is_allow, names = calls
        err = unit["syscall_errno"]
        action = (0x00050000 | getattr(errno, str(err))) if err else kill
        if is_allow:
            load(action, [(n, allow, ()) for n in names])
        else:
            load(allow, [(n, action, ()) for n in names])


def _enter(spec: dict[str, object]) -> None:
    """Set up the mount namespace and the filters of ``spec``, then exec its argv (see :func:`command`)."""
    unit = spec["unit"]
    assert isinstance(unit, dict)
    _check(_libc.unshare(CLONE_NEWNS | (CLONE_NEWUTS if unit["protect_hostname"] else 0)), "unshare")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    visible = [str(p) for p in spec["visible"]]  # type: ignore[attr-defined]
    kept = {p: os.open(p, os.O_PATH | os.O_DIRECTORY) for p in visible}
    states = {name: os.open(p, os.O_PATH | os.O_DIRECTORY) for name, p in spec["state_dirs"].items()}  # type: ignore[attr-defined]
    if unit["protect_system"] == "strict":
        _remount("/", True)
        for api in ("/dev", "/proc", "/sys"):  # the API file systems stay as they were, unless protected below
            _remount(api, False)
    elif unit["protect_system"] in ("yes", "full"):
        for top in ("/usr", "/boot", "/efi", *(("/etc",) if unit["protect_system"] == "full" else ())):
            if os.path.isdir(top):
                _remount(top, True)
    homes = [h for h in ("/home", "/root", "/run/user") if os.path.isdir(h)]
    if unit["protect_home"] == "yes":
        for h in homes:
            _empty(h)
    elif unit["protect_home"] == "read-only":
        for h in homes:
            _remount(h, True)
    elif unit["protect_home"] == "tmpfs":
        for h in homes:
            _mount("tmpfs", h, "tmpfs", MS_NOSUID | MS_NODEV | MS_RDONLY, "mode=755")
    if unit["private_devices"]:
        _private_devices()
    if unit["protect_kernel_tunables"]:
        for top in ("/proc/sys", "/proc/sysrq-trigger", "/sys"):
            if os.path.exists(top):
                _remount(top, True)
    if unit["protect_control_groups"] and os.path.isdir("/sys/fs/cgroup"):
        _remount("/sys/fs/cgroup", True)
    if unit["protect_kernel_modules"]:
        for path in ("/usr/lib/modules", "/lib/modules"):
            _empty(path)
    if unit["protect_kernel_logs"]:
        for path in ("/proc/kmsg", "/dev/kmsg"):
            _empty(path)
    for path in unit["read_only"]:
        if os.path.exists(path.lstrip("-")):
            _remount(path.lstrip("-"), True)
    for path in unit["inaccessible"]:
        _empty(path.lstrip("-"))
    for path in unit["read_write"]:
        optional, path = path.startswith("-"), path.lstrip("-")
        if not os.path.isdir(path):
            if optional:
                continue
            raise UnitError(f"ReadWritePaths={path}: missing")
        _remount(path, False)
    if unit["private_tmp"]:
        for tmp in ("/tmp", "/var/tmp"):
            _mount("tmpfs", tmp, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
        for path, fd in kept.items():
            if not any(Path(path).is_relative_to(tmp) for tmp in ("/tmp", "/var/tmp")):
                continue  # outside the private folders: visible already
            os.makedirs(path, exist_ok=True)
            _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
    for name, fd in states.items():
        target = f"/var/lib/{name}"
        _mount(f"/proc/self/fd/{fd}", target, None, MS_BIND)
        _remount(target, False)
        os.chmod(target, int(unit["state_directory_mode"]))
        os.chown(target, pwd.getpwnam(str(unit["user"])).pw_uid, pwd.getpwnam(str(unit["user"])).pw_gid)
    for fd in [*kept.values(), *states.values()]:
        os.close(fd)
    os.umask(int(unit["umask"]))
    os.chdir(str(unit["working_directory"]))
    argv = [str(a) for a in spec["argv"]]  # type: ignore[attr-defined]
    exe = shutil.which(argv[0], path=DEFAULT_PATH) or argv[0]
    _seccomp(spec, unit)
    os.execve(exe, argv, {str(k): str(v) for k, v in spec["env"].items()})  # type: ignore[attr-defined]


if __name__ == "__main__":
    _enter(json.loads(sys.argv[1]))
