"""Submitting an elastic job for the launcher: its private files, then ``sbatch``.

This module owns what ``slurm-elastic submit`` (and the demo) do for one job: render the batch
script and the join script from a template (:mod:`slurm_elastic.templates`), create the job's
files beside a fresh secret (the secret and the order and report channels 0600, the join script
0700; all created exclusively, never overwritten), and pipe the script to ``sbatch --parsable``.
If sbatch refuses the job, the files are removed again.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Mapping
from pathlib import Path

from slurm_elastic.errors import ConfigError
from slurm_elastic.templates import JobRequest, job_files, render


def new_secret_file(secret_dir: Path) -> Path:
    """A fresh, not yet existing secret path under ``secret_dir``."""
    return secret_dir / f"job-{secrets.token_hex(8)}"


def submit(template: str, req: JobRequest, *, env: Mapping[str, str] | None = None) -> str:
    """Create the job's files and submit it; returns the Slurm job id.

    Args:
        template: ``sbatch_templates/<template>.sbatch.j2`` (and ``.join.j2``).
        req: the request; ``req.secret_file`` must not exist yet (its folder is created 0700).
        env: environment for ``sbatch`` (``None``: this process's).

    Raises:
        ConfigError: a bad request, or sbatch refused the job (its message is included).
    """
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
        _create(Path(paths["join_file"]), 0o700, join_script)  # what the daemon submits, as this user, to grow
        proc = subprocess.run(["sbatch", "--parsable"], input=script, capture_output=True, text=True, check=False,
                              env=None if env is None else dict(env))
        if proc.returncode != 0:
            raise ConfigError(f"sbatch refused the job: {proc.stderr.strip()}")
    except BaseException:
        for path in files:
            path.unlink(missing_ok=True)
        raise
    return proc.stdout.strip().split(";")[0]


def _create(path: Path, mode: int, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
