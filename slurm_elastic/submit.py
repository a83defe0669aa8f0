"""Submitting an elastic job for the launcher: its private files, then ``sbatch``.

This module owns what ``slurm-elastic submit`` (and the demo) do for one job: render the batch
script and the join script from a template (:mod:`slurm_elastic.templates`), create the job's
files beside a fresh secret (the secret, the order and report channels and the saved environment
0600, the join script 0700; all created exclusively, never overwritten), and pipe the script to
``sbatch --parsable``. If sbatch refuses the job, the files are removed again.

The saved environment (``<secret>.env``) is the environment sbatch gets here, which it passes to
the job (``--export=ALL``, sbatch's default), as NUL-separated ``NAME=value`` entries, the format
of ``sbatch --export-file``: the daemon submits the job's satellites with it, so extra workers run
in the job's environment, never in the daemon's (:mod:`slurm_elastic.slurm.satellites`). The
join script is rendered with this process's umask (sbatch gives the job the submitter's umask;
a satellite's sbatch runs with the daemon's).
"""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from slurm_elastic.errors import ConfigError
from slurm_elastic.templates import JobRequest, job_files, render


def new_secret_file(secret_dir: Path) -> Path:
    """A fresh, not yet existing secret path under ``secret_dir``."""
    return secret_dir / f"job-{secrets.token_hex(8)}"


def env_file_bytes(env: Mapping[bytes, bytes]) -> bytes:
    """``env`` in the format of ``sbatch --export-file``: every ``NAME=value`` followed by a NUL.

    Slurm stops reading at the first empty entry and drops a last entry without its separator, so
    every entry is terminated. Names that are empty or hold ``=`` and entries with a NUL cannot be
    environment entries at all and are left out.
    """
    out = []
    for k, v in env.items():
        if not k or b"=" in k or b"\0" in k or b"\0" in v:
            continue
        out.append(k + b"=" + v + b"\0")
    return b"".join(out)


def current_umask() -> str:
    """This process's umask as four octal digits (``0022``)."""
    mask = os.umask(0o077)
    os.umask(mask)
    return f"{mask:04o}"


def submit(template: str, req: JobRequest, *, env: Mapping[str, str] | None = None) -> str:
    """Create the job's files and submit it; returns the Slurm job id.

    Args:
        template: ``slurm_elastic/sbatch_templates/<template>.sbatch.j2`` (and ``.join.j2``).
        req: the request; ``req.secret_file`` must not exist yet (its folder is created 0700).
        env: environment for ``sbatch`` (``None``: this process's); saved as the job's ``.env``.

    Raises:
        ConfigError: a bad request, or sbatch refused the job (its message is included).
    """
    if not req.umask:
        req = replace(req, umask=current_umask())
    # exactly what sbatch gets, and passes to the job (os.environ, not the C environment that a
    # library may have changed behind it)
    job_env = os.environb.copy() if env is None else {os.fsencode(k): os.fsencode(v) for k, v in env.items()}
    script = render(template, req)
    join_script = render(template, req, part="join")
    secret_file = Path(req.secret_file)
    secret_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    files = [secret_file, *(Path(p) for k, p in job_files(req.secret_file).items() if k != "store_file")]
    try:
        _create(secret_file, 0o600, secrets.token_hex(32))
        paths = job_files(req.secret_file)
        for key in ("orders_file", "reports_file"):  # the order and report channels: private, created empty
            _create(Path(paths[key]), 0o600, "")
        # the job's environment, for its satellites (it may hold the user's tokens: private)
        _create(Path(paths["env_file"]), 0o600, env_file_bytes(job_env))
        _create(Path(paths["join_file"]), 0o700, join_script)  # what the daemon submits, as this user, to grow
        proc = subprocess.run(["sbatch", "--parsable"], input=script, capture_output=True, text=True, check=False,
                              env=job_env)
        if proc.returncode != 0:
            raise ConfigError(f"sbatch refused the job: {proc.stderr.strip()}")
    except BaseException:
        for path in files:
            path.unlink(missing_ok=True)
        raise
    return proc.stdout.strip().split(";")[0]


def _create(path: Path, mode: int, data: str | bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data.encode() if isinstance(data, str) else data)
