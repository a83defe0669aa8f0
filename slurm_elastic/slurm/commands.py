"""Running Slurm's commands: argv lists, never a shell, with a timeout; the release check; ``--json`` decoding.

This module owns :func:`run_command` (the one place a Slurm command is started; the actuator and
the readers get it injected as a ``runner`` so the unit tests can feed recorded output),
:func:`slurm_release` and :func:`run_json` (:func:`decode_json`). Which commands change Slurm is
:mod:`slurm_elastic.slurm.actions`' business alone; the readers are
:mod:`slurm_elastic.slurm.cli_backend` and :mod:`slurm_elastic.slurm.pyslurm_backend`.

Supported: Slurm 22.05 (JSON openapi/v0.0.38) and 23.02 to 25.11 (data_parser/v0.0.39 to v0.0.44).
Any other version is refused at start with the version found and the supported ones.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
from collections.abc import Callable, Mapping, Sequence
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


def run_command(argv: Sequence[str], env: Mapping[str, str] | None = None, timeout: float = COMMAND_TIMEOUT_S) -> str:
    """Run one Slurm command (argv list, no shell) and return its standard output.

    The output is read as UTF-8 with each byte that is not UTF-8 replaced (U+FFFD): a job name or
    comment holding a user's arbitrary bytes changes that field only, never the reading of the queue.

    Raises:
        SlurmCommandError: the program is missing, timed out, or exited non-zero.
    """
    try:
        proc = subprocess.run(list(argv), capture_output=True, timeout=timeout, check=False,
                              env=dict(env) if env is not None else None)
    except FileNotFoundError as exc:
        raise SlurmCommandError(f"{argv[0]}: not found (is Slurm's client installed and on PATH?)") from exc
    except subprocess.TimeoutExpired as exc:
        raise SlurmCommandError(f"{' '.join(argv)}: no answer within {timeout:g} s") from exc
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
