"""Running Slurm's commands: argv lists, never a shell, with a timeout; the release check; ``--json`` decoding.

This module owns :func:`run_command` (the one place a Slurm command is started; the actuator and
the readers get it injected as a ``runner`` so the unit tests can feed recorded output),
:func:`slurm_release` and :func:`run_json` (:func:`decode_json`).

Every command is bounded: it runs at most ``timeout`` seconds (:data:`COMMAND_TIMEOUT_S`), less when
the argv is a :class:`Command` with a limit of its own (a command run as a job's user, whom it may
wait on), and is killed then (:class:`CommandTimeout`). Its standard input is ``/dev/null``, so no
command ever waits on the daemon's. It inherits no descriptor of the daemon but those its
:class:`Command` names (``pass_fds``): what a command must read of a user's file is handed to it as
a :func:`sealed_copy` the daemon made of the bytes it checked, named ``/proc/self/fd/N`` in the argv,
never by the user's path (issue 37, item 2). Which commands change Slurm is
:mod:`slurm_elastic.act`'s business alone; the readers are
:mod:`slurm_elastic.slurm.cli_backend` and :mod:`slurm_elastic.slurm.pyslurm_backend`.

Supported: Slurm 22.05 (JSON openapi/v0.0.38) and 23.02 to 25.11 (data_parser/v0.0.39 to v0.0.44).
Any other version is refused at start with the version found and the supported ones.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from slurm_elastic.errors import ElasticError
from slurm_elastic.slurm.dialects import SlurmJsonError, UnsupportedSlurmVersion, release_text

log = logging.getLogger(__name__)

SUPPORTED_RELEASES = ((22, 5), (23, 2), (23, 11), (24, 5), (24, 11), (25, 5), (25, 11))
"""The releases whose ``--json`` is read (22.05's openapi, then each release's data_parser)."""
COMMAND_TIMEOUT_S = 30.0

Runner = Callable[[Sequence[str]], str]


class SlurmCommandError(ElasticError):
    """A Slurm command failed (the message has the command line, the exit code and stderr)."""


class CommandTimeout(SlurmCommandError):  # noqa: N818 (a SlurmCommandError, named by its cause)
    """A command gave no answer within its limit and was killed."""


class Command(list[str]):
    """An argv that carries what its program gets besides its arguments, for :func:`run_command`.

    It is a list of strings, so a runner that only records or prints argv lists takes it as one.

    Args:
        argv: the program and its arguments.
        pass_fds: descriptors the program inherits (at the same numbers), e.g. :func:`sealed_copy`
            descriptors named ``/proc/self/fd/N`` in ``argv``; no other descriptor of the daemon.
        timeout: this command's own limit in seconds (``None``: the runner's); the lower of the two applies.
    """

    def __init__(self, argv: Iterable[str], *, pass_fds: Sequence[int] = (), timeout: float | None = None) -> None:
        super().__init__(argv)
        self.pass_fds = tuple(pass_fds)
        self.timeout = timeout


def sealed_copy(data: bytes, name: str) -> int:
    """A descriptor of an anonymous in-memory file holding ``data``, sealed against any change.

    This is how a command gets a user's file without its name: the daemon reads the file once,
    checked (:mod:`slurm_elastic.jobfiles`), copies the bytes here and passes the descriptor
    (:class:`Command` ``pass_fds``); the command opens ``/proc/self/fd/N``, which reaches this
    memory file whatever the user's path now leads to, from its start at every open. The file
    belongs to no folder, its size and bytes are sealed (``F_SEAL_WRITE``, ``F_SEAL_GROW``,
    ``F_SEAL_SHRINK``, ``F_SEAL_SEAL``), and only processes that hold the descriptor reach it.
    The caller closes the descriptor.

    Raises:
        OSError: the memory file cannot be made (``memfd_create``; allowed by the unit's
            ``@system-service`` system call filter).
    """
    fd = os.memfd_create(f"slurm-elastic-{name}", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS,
                    fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL)
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def run_command(argv: Sequence[str], env: Mapping[str, str] | None = None, timeout: float = COMMAND_TIMEOUT_S) -> str:
    """Run one Slurm command (argv list, no shell) and return its standard output.

    The output is read as UTF-8 with each byte that is not UTF-8 replaced (U+FFFD): a job name or
    comment holding a user's arbitrary bytes changes that field only, never the reading of the queue.
    A :class:`Command` brings its descriptors and may lower ``timeout``; standard input is ``/dev/null``.

    Raises:
        CommandTimeout: no answer within the limit (the command was killed).
        SlurmCommandError: the program is missing or exited non-zero.
    """
    pass_fds: tuple[int, ...] = ()
    if isinstance(argv, Command):
        pass_fds = argv.pass_fds
        timeout = min(timeout, argv.timeout) if argv.timeout is not None else timeout
    try:
        proc = subprocess.run(list(argv), capture_output=True, timeout=timeout, check=False, stdin=subprocess.DEVNULL,
                              env=dict(env) if env is not None else None, pass_fds=pass_fds)
    except FileNotFoundError as exc:
        raise SlurmCommandError(f"{argv[0]}: not found (is Slurm's client installed and on PATH?)") from exc
    except subprocess.TimeoutExpired as exc:
        raise CommandTimeout(f"{' '.join(argv)}: no answer within {timeout:g} s") from exc
    if proc.returncode != 0:
        stderr = proc.stderr.decode("utf-8", errors="replace")
        raise SlurmCommandError(f"{' '.join(argv)}: exit {proc.returncode}: {stderr.strip()[:500]}")
    return proc.stdout.decode("utf-8", errors="replace")


def slurm_release(runner: Runner) -> tuple[int, int, int]:
    """The running Slurm's release from ``sinfo --version`` (e.g. ``slurm 22.05.8`` -> (22, 5, 8)).

    Raises:
        UnsupportedSlurmVersion: a release this slurm-elastic does not parse.
    """
    text = runner(["sinfo", "--version"]).strip()
    release = release_in(text)
    if release is None:
        raise UnsupportedSlurmVersion(f"sinfo --version printed {text!r}: no Slurm release found")
    if release[:2] not in SUPPORTED_RELEASES:
        known = ", ".join(release_text(r) for r in SUPPORTED_RELEASES)
        raise UnsupportedSlurmVersion(
            f"Slurm {release_text(release)} is not supported (its --json output differs); supported: {known}"
        )
    return release


def release_in(text: str) -> tuple[int, int, int] | None:
    """The first ``MAJOR.MINOR.MICRO`` in a version line (``slurm 22.05.8``, ``slurm-wlm 22.05.8``)."""
    m = re.search(r"(\d+)\.(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def with_slurm_prefix(env: Mapping[str, str], prefix: Path | None) -> dict[str, str]:
    """``env`` with the Slurm built into ``prefix`` first on ``PATH`` (its ``bin``, then ``sbin``);
    ``env`` as it is without a prefix."""
    out = dict(env)
    if prefix is not None:
        out["PATH"] = os.pathsep.join([str(prefix / "bin"), str(prefix / "sbin"), out.get("PATH", "")])
    return out


def controller_release(runner: Runner) -> tuple[int, int, int]:
    """The release the running slurmctld reports (``SLURM_VERSION`` of ``scontrol show config``),
    which may differ from the client's own (``sinfo --version``).

    Raises:
        SlurmCommandError: slurmctld does not answer.
        SlurmJsonError: the answer names no release.
    """
    text = runner(["scontrol", "show", "config"])
    m = re.search(r"^SLURM_VERSION\s*=\s*(\d+)\.(\d+)\.(\d+)", text[:1_000_000], re.MULTILINE)
    if not m:
        raise SlurmJsonError("scontrol show config: no SLURM_VERSION line")
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def run_json(runner: Runner, argv: Sequence[str]) -> dict[str, Any]:
    """Run a ``--json`` Slurm command and return the parsed top-level object (see :func:`decode_json`)."""
    return decode_json(runner(argv), argv)


def decode_json(text: str, argv: Sequence[str]) -> dict[str, Any]:
    """The top-level object ``argv`` printed as ``text``.

    Raises:
        SlurmJsonError: the output is not a JSON object (nested past Python's recursion limit, or
            holding an integer of more than 4300 digits, included).
    """
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        raise SlurmJsonError(f"{' '.join(argv)}: output is not JSON: {type(exc).__name__}: {str(exc)[:200]}") from None
    if not isinstance(doc, dict):
        raise SlurmJsonError(f"{' '.join(argv)}: output is a {type(doc).__name__}, not a JSON object")
    return doc
