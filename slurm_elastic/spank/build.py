"""Build the ``--elastic`` SPANK plugin, check who could change it, and produce the lines that install it.

Owns compiling ``slurm_elastic.c`` with gcc against the ``<slurm/spank.h>`` of the Slurm that runs
(:func:`slurm_include_dir`: a build's prefix, else ``pkg-config slurm``, else Debian's ``libslurm-dev``
in ``/usr/include``), the release those headers are (:func:`header_release`: Slurm refuses a SPANK
plugin whose major.minor differs from its own, and with ``required`` every ``sbatch`` then fails),
the text of the ``plugstack.conf`` / ``slurm.conf`` lines, the check that only
root can change the plugin and the folders above it (slurmstepd loads it as root on every node:
:func:`check_root_only`, the rule injectable as :class:`Trust`), and ``--write``: the plugstack line
and ``job_submit.lua`` written atomically, never through a link, and never over a site's own
``job_submit.lua`` (then the lines to merge are handed back and nothing is written). Must not edit a
live Slurm configuration by itself, nor run anything but the compiler.

The check runs where ``install-plugin`` runs; each node that loads the plugin from its own disk
needs the same ownership and modes.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import stat
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from slurm_elastic.errors import ElasticError
from slurm_elastic.resources import JOB_SUBMIT_LUA
from slurm_elastic.textfiles import read_text

SOURCE = Path(__file__).with_name("slurm_elastic.c")
PLUGIN_NAME = "slurm_elastic.so"
DEFAULT_INCLUDE = Path("/usr/include")


@dataclass(frozen=True)
class Trust:
    """Who may be able to change a file that Slurm runs as root: its owner and every folder's above it.

    Attributes:
        owners: the uids trusted to own them (root).
        top: the highest folder checked (``/``); tests stop below their own temporary folder.
    """

    owners: frozenset[int] = field(default_factory=lambda: frozenset({0}))
    top: Path = Path("/")


#: The rule ``install-plugin`` applies (looked up at each call, so tests can replace it).
SITE_TRUST = Trust()


class UnsafePathError(ElasticError):
    """A path Slurm would load or read as root is, or lies below, something another user can change,
    or a write would go through a link or over a site's file."""


class JobSubmitExistsError(UnsafePathError):
    """A ``job_submit.lua`` that is not ours is already there: it is never overwritten.

    ``merge`` is the text to show the admin: where to merge, and slurm-elastic's script.
    """

    def __init__(self, message: str, merge: str) -> None:
        super().__init__(message)
        self.merge = merge


class PluginBuildError(ElasticError):
    """The SPANK plugin cannot be built (missing compiler or header, or a compile error)."""


def slurm_include_dir(prefix: Path | None = None) -> Path:
    """Where the headers of the Slurm to build against are: ``PREFIX/include`` when a prefix is
    given, else ``pkg-config --variable=includedir slurm`` (a source build installs ``slurm.pc``),
    else Debian's ``/usr/include``."""
    if prefix is not None:
        return prefix / "include"
    pkg_config = shutil.which("pkg-config")
    if pkg_config is not None:
        proc = subprocess.run([pkg_config, "--variable=includedir", "slurm"], capture_output=True, text=True,
                              check=False, timeout=30)
        found = proc.stdout.strip()
        if proc.returncode == 0 and found and (Path(found) / "slurm" / "spank.h").exists():
            return Path(found)
    return DEFAULT_INCLUDE


def header_release(include_dir: Path = DEFAULT_INCLUDE) -> tuple[int, int, int]:
    """The Slurm release of the headers in ``include_dir`` (``SLURM_VERSION_NUMBER`` of
    ``slurm/slurm_version.h``), which a plugin built against them carries.

    Raises:
        PluginBuildError: the file is missing or names no version.
    """
    path = include_dir / "slurm" / "slurm_version.h"
    text = read_text(path, max_bytes=65536, noun="Slurm's version header", error=PluginBuildError,
                     kind_rule="the headers of a Slurm release", size_rule="Slurm's slurm_version.h is a few KB")
    m = re.search(r"^#define\s+SLURM_VERSION_NUMBER\s+0x([0-9a-fA-F]+)\s*$", text, re.MULTILINE)
    if m is None:
        raise PluginBuildError(f"{path}: no SLURM_VERSION_NUMBER line")
    number = int(m.group(1), 16)
    return (number >> 16) & 0xFF, (number >> 8) & 0xFF, number & 0xFF


def build_plugin(out_dir: Path, *, cc: str = "gcc", include_dir: Path | None = None) -> Path:
    """Compile the SPANK plugin into ``out_dir/slurm_elastic.so``.

    Runs ``gcc -shared -fPIC -O2 -Wall -I INCLUDE -o OUT/slurm_elastic.so slurm_elastic.c``.

    Args:
        out_dir: folder for the shared object (created if missing).
        cc: the C compiler to run.
        include_dir: the headers of the Slurm that will load it (default :data:`DEFAULT_INCLUDE`).

    Returns:
        The path of the built plugin.

    Raises:
        PluginBuildError: the compiler or ``slurm/spank.h`` is missing, or compiling failed.
    """
    compiler = shutil.which(cc)
    if compiler is None:
        raise PluginBuildError(f"compiler {cc!r} not found: install the Debian package gcc")
    include = include_dir if include_dir is not None else DEFAULT_INCLUDE
    header = include / "slurm" / "spank.h"
    if not header.exists():
        hint = ("install the Debian package libslurm-dev" if include == DEFAULT_INCLUDE
                else "give the prefix Slurm was installed into (its include/slurm/spank.h)")
        raise PluginBuildError(f"{header} not found: {hint}")
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / PLUGIN_NAME
    tmp = out_dir / (PLUGIN_NAME + ".tmp")
    argv = [compiler, "-shared", "-fPIC", "-O2", "-Wall", "-Wno-unused-parameter", "-I", str(include),
            "-o", str(tmp), str(SOURCE)]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise PluginBuildError(f"{' '.join(argv)} failed (rc {proc.returncode}): {proc.stderr.strip()}")
    tmp.chmod(0o755)  # whatever the umask: group and others may read and run it, never write it
    tmp.replace(out)  # atomic, so a running sbatch never loads a half-written plugin
    return out


def plugstack_line(path: Path) -> str:
    """The ``plugstack.conf`` line that loads the plugin at ``path``.

    ``required``: Slurm ignores the return codes of ``optional`` plugins, so a bad ``--elastic`` value
    would be accepted. This is safe because the plugin always returns 0 in remote context.
    """
    return f"required {path.resolve()}"


def install_lines() -> tuple[str, ...]:
    """The ``slurm.conf`` settings the plugin relies on (job_submit.lua writes the AdminComment record)."""
    return (
        "JobSubmitPlugins=lua  # with our job_submit.lua (install-plugin --write copies it) next to slurm.conf",
        "PlugStackConfig=/etc/slurm/plugstack.conf  # or wherever the plugstack line above lives",
    )


PLUGIN_WHY = ("slurmstepd loads the plugin as root on every node, so only root may be able to change it or any "
              "folder above it; build it into a root-owned folder such as /usr/local/lib/slurm-elastic")
CONFIG_WHY = ("Slurm reads plugstack.conf as root on every node and loads the plugins it names, so only root may "
              "be able to change it or any folder above it")


def _problem(path: Path, st: os.stat_result, trust: Trust) -> str | None:
    """Why another user could change ``path`` (its ``lstat``), or ``None``."""
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid not in trust.owners:
        return f"{path} is owned by uid {st.st_uid}"
    if mode & stat.S_IWOTH:
        return f"{path} is writable by every user (mode {mode:o})"
    if mode & stat.S_IWGRP:  # with POSIX ACLs these bits are the mask: any named writer shows here too
        return f"{path} is writable by its group (mode {mode:o})"
    return None


def _chain(path: Path, top: Path) -> list[Path]:
    """``path`` and the folders above it, up to ``top`` (to ``/`` when ``path`` is not below ``top``)."""
    out = [path]
    if path == top:
        return out
    for parent in path.parents:
        out.append(parent)
        if parent == top:
            break
    return out


def check_root_only(path: Path, what: str, trust: Trust | None = None, *, folder: bool = False,
                    why: str = PLUGIN_WHY, named: Path | None = None) -> tuple[str, ...]:
    """Refuse ``path`` unless only the trusted owners (root) can change it or any folder above it.

    Each of ``path`` and the folders above it (up to ``trust.top``, ``/``) is read with ``lstat``:
    it must be owned by a trusted uid and be neither group- nor world-writable (a sticky ``/tmp``
    is refused too). ``path`` itself must not be a symbolic link (its target could be swapped),
    unless it is a ``folder``. A folder above that is a link is checked by what it resolves to (that
    folder and every one above it), and the link by the folder holding it.

    Args:
        path: the file (or with ``folder``, the folder) to check; made absolute, never resolved.
        what: what it is, for the message ("the plugin").
        trust: the rule (default :data:`SITE_TRUST`).
        folder: ``path`` is a folder: a link there is followed like a link above.
        why: the reason given in the message.
        named: the path the message names (default ``path``; a folder still to be made names itself).

    Returns:
        Notes on the links followed ("X is a symbolic link: checked what it resolves to, Y").

    Raises:
        UnsafePathError: naming every path another user could change, and why that matters.
    """
    trust = trust if trust is not None else SITE_TRUST
    path = path.absolute()
    if ".." in path.parts:
        raise UnsafePathError(f"{what} {path}: contains '..': give a plain path")
    problems: list[str] = []
    notes: list[str] = []
    seen: set[Path] = set()

    def check(p: Path, via: str = "") -> None:
        if p in seen:
            return
        seen.add(p)
        try:
            st = os.lstat(p)
        except OSError as exc:
            problems.append(f"{p}: {exc.strerror}")
            return
        if stat.S_ISLNK(st.st_mode):
            real = Path(os.path.realpath(p))
            if p == path and not folder:
                problems.append(f"{p} is a symbolic link (to {os.readlink(p)}): give the real path")
                return
            notes.append(f"{p} is a symbolic link: checked what it resolves to, {real}")
            for r in _chain(real, trust.top):
                check(r, f" (reached through {p}, which resolves to {real})")
            return
        bad = _problem(p, st, trust)
        if bad is not None:
            problems.append(bad + via)

    for p in _chain(path, trust.top):
        check(p)
    if problems:
        raise UnsafePathError(f"{what} {named or path}: {'; '.join(problems)}: {why}")
    return tuple(notes)


def _ensure_folder(folder: Path, what: str, trust: Trust | None, why: str) -> tuple[str, ...]:
    """Check the folders of ``folder`` that exist, create the missing ones (mode 755), check it all."""
    folder = folder.absolute()
    missing: list[Path] = []
    probe = folder
    while not os.path.lexists(probe):
        missing.append(probe)
        probe = probe.parent
    check_root_only(probe, what, trust, folder=True, why=why, named=folder)
    if not probe.is_dir():
        raise UnsafePathError(f"{what} {folder}: {probe} is not a folder")
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o755)  # the umask can only take bits away
        except FileExistsError:  # someone made it meanwhile: checked below
            pass
        except OSError as exc:
            raise UnsafePathError(f"{what} {folder}: cannot make {d}: {exc.strerror}") from exc
    return check_root_only(folder, what, trust, folder=True, why=why)


def install_plugin(out_dir: Path, *, trust: Trust | None = None, cc: str = "gcc",
                   include_dir: Path | None = None) -> tuple[Path, tuple[str, ...]]:
    """Build the plugin into ``out_dir`` after checking that only root can change that folder and
    the ones above it, then check the plugin itself (:func:`check_root_only`).

    Returns:
        The plugin's path and the notes on the symbolic links followed.

    Raises:
        UnsafePathError: another user could change the folder, one above it, or the plugin.
        PluginBuildError: the plugin cannot be built.
    """
    _ensure_folder(out_dir, "plugin folder", trust, PLUGIN_WHY)
    plugin = build_plugin(out_dir.absolute(), cc=cc, include_dir=include_dir)
    return plugin, check_root_only(plugin, "the plugin", trust)


@dataclass(frozen=True)
class Written:
    """What ``--write`` did: the plugstack file, our ``job_submit.lua``, whether that was written now."""

    plugstack: Path
    job_submit: Path
    wrote_job_submit: bool


def _ours() -> bytes:
    try:
        return JOB_SUBMIT_LUA.read_bytes()
    except OSError as exc:
        raise PluginBuildError(f"{JOB_SUBMIT_LUA}: {exc.strerror}: slurm-elastic's job_submit.lua ships in "
                               "its package data (slurm_elastic/site_configs/dev)") from exc


def merge_text(lua: Path) -> str:
    """What the admin must merge into a site's own ``job_submit.lua``: where, how, and our script."""
    return (f"# merge into {lua}: it exists, and slurm-elastic never overwrites it. Copy slurm-elastic's\n"
            "# job_submit.lua (below) into it above your slurm_job_submit, with its slurm_job_submit renamed to\n"
            "# a local function elastic_submit, and without its slurm_job_modify and its last two lines; then\n"
            "# begin your slurm_job_submit with (elastic_submit returns slurm.SUCCESS for a job without --elastic):\n"
            "#     local rc = elastic_submit(job_desc, part_list, submit_uid)\n"
            "#     if rc ~= slurm.SUCCESS then return rc end\n"
            f"# slurm-elastic's job_submit.lua ({JOB_SUBMIT_LUA}):\n"
            + _ours().decode("utf-8", "replace"))


def check_site_files(plugstack: Path, *, trust: Trust | None = None) -> bool:
    """Check, writing nothing, that ``--write`` may write ``plugstack`` and ``job_submit.lua`` beside it.

    Returns:
        Whether ``job_submit.lua`` must be written (``False``: it is already slurm-elastic's, byte for byte).

    Raises:
        UnsafePathError: another user could change the plugstack file or a folder above it, or it is a link.
        JobSubmitExistsError: a ``job_submit.lua`` (or a link there) that is not ours is in the way.
    """
    plugstack = plugstack.absolute()
    folder = plugstack.parent
    probe = folder
    while not os.path.lexists(probe):
        probe = probe.parent
    check_root_only(probe, "plugstack folder", trust, folder=True, why=CONFIG_WHY, named=folder)
    if os.path.lexists(plugstack):
        st = os.lstat(plugstack)
        if stat.S_ISLNK(st.st_mode):
            raise UnsafePathError(f"{plugstack} is a symbolic link (to {os.readlink(plugstack)}): give its real "
                                  "path (--write never writes through a link)")
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePathError(f"{plugstack} is not a regular file")
        check_root_only(plugstack, "plugstack file", trust, why=CONFIG_WHY)
    lua = folder / "job_submit.lua"
    if not os.path.lexists(lua):
        return True
    st = os.lstat(lua)
    rerun = "run install-plugin without --write to build the plugin and print the plugstack line to add yourself"
    if stat.S_ISLNK(st.st_mode):
        raise JobSubmitExistsError(f"{lua} exists (a symbolic link to {os.readlink(lua)}) and is never overwritten nor "
                              f"followed: merge slurm-elastic's rules (printed above) into the file it names; "
                              f"{rerun}; nothing was written", merge_text(lua))
    if stat.S_ISREG(st.st_mode) and _read_nofollow(lua) == _ours():
        return False
    raise JobSubmitExistsError(f"{lua} exists and is never overwritten: merge slurm-elastic's rules (printed above) "
                          f"into it; {rerun}; nothing was written", merge_text(lua))


def _read_nofollow(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        return f.read()


def _new_file(folder: Path, name: str, data: bytes, mode: int, owner: tuple[int, int] | None = None) -> Path:
    """A new file in ``folder`` holding ``data``, flushed to disk, under a fresh random name
    (``O_EXCL | O_NOFOLLOW``: never an existing file nor a link)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    while True:
        tmp = folder / f".{name}.{secrets.token_hex(8)}.tmp"
        try:
            fd = os.open(tmp, flags, 0o600)
        except FileExistsError:
            continue
        break
    try:
        if owner is not None and os.geteuid() == 0:
            os.fchown(fd, *owner)
        os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    return tmp


def _sync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_plugstack(plugstack: Path, line: str, *, trust: Trust | None = None) -> Written:
    """Put ``line`` into ``plugstack`` (replacing an older slurm_elastic line) and write slurm-elastic's
    ``job_submit.lua`` beside it, after :func:`check_site_files` (nothing is written if it refuses).

    ``plugstack`` is replaced atomically (a new file, flushed, renamed over it; its mode and owner
    kept, 644 for a new one). ``job_submit.lua`` is only ever created: linked into place from a
    flushed temporary file, which fails rather than replace anything that appeared meanwhile.

    Raises:
        UnsafePathError: as :func:`check_site_files`.
        JobSubmitExistsError: a site's ``job_submit.lua`` is there (the admin merges; nothing written).
    """
    plugstack = plugstack.absolute()
    lua = plugstack.parent / "job_submit.lua"
    need_lua = check_site_files(plugstack, trust=trust)
    _ensure_folder(plugstack.parent, "plugstack folder", trust, CONFIG_WHY)
    mode, owner, old = 0o644, None, b""
    if os.path.lexists(plugstack):
        st = os.lstat(plugstack)
        mode, owner, old = stat.S_IMODE(st.st_mode), (st.st_uid, st.st_gid), _read_nofollow(plugstack)
    kept = [x for x in old.decode("utf-8", "surrogateescape").splitlines() if PLUGIN_NAME not in x]
    text = "\n".join([*kept, line]) + "\n"
    tmp = _new_file(plugstack.parent, plugstack.name, text.encode("utf-8", "surrogateescape"), mode, owner)
    try:
        os.replace(tmp, plugstack)  # replaces a link that appeared meanwhile, never writes through it
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if need_lua:
        tmp = _new_file(lua.parent, lua.name, _ours(), 0o644)
        try:
            os.link(tmp, lua, follow_symlinks=False)
        except FileExistsError as exc:
            raise JobSubmitExistsError(f"{lua} appeared while writing and is never overwritten: merge slurm-elastic's "
                                  f"rules (printed above) into it; {plugstack} was written", merge_text(lua)) from exc
        finally:
            tmp.unlink()
    _sync_folder(plugstack.parent)
    return Written(plugstack, lua, need_lua)
