"""The daemon's side of the order channel to a job's launcher: signed resize orders in a job file.

This module owns finding a job's channel and writing orders to it. A job submitted with
``slurm-elastic submit`` carries ``slurm-elastic-orders=<path>`` in its comment; ``<path>`` is a
JSON-lines file next to the job's secret (``<path>`` without ``.orders``), both created by the user
at submit. The launcher reads the file at step boundaries (``SLURM_ELASTIC_ORDERS=file:<path>``)
and refuses any order whose HMAC-SHA256, keyed with the job's secret, does not match or that names
another job.

Because the comment is the user's to set, the daemon trusts nothing in it: both files must be
regular files (not symlinks) owned by the job's user and readable by nobody else (mode 0600), or
the job has no channel. The daemon appends with ``O_APPEND | O_NOFOLLOW`` and never creates them.

Wire form: owned by ``slurm_elastic_launcher.orders`` (standard library only), which both sides
import, so orders and reports are signed and checked by one piece of code: one line of sorted,
compact JSON ``{"job_id", "seq", "kind", "workers", "local_batch", "mac"}`` where ``mac`` is the
hex HMAC of the same JSON without ``mac``; ``seq`` increases by one per order of the job.
:func:`sign` and :func:`verify` are that module's ``sign_order`` and ``verify_report``.

The way back: rank 0 of the job appends signed progress reports to ``<secret>.reports`` (written by
``slurm_elastic_launcher.reports``); :meth:`Channel.reports` returns only those whose MAC matches
and that name this job, so a job can speak only for itself. To grow a job the daemon
submits ``<secret>.join`` as the job's user (:mod:`slurm_elastic.slurm.satellites`); that script
must be a regular file owned by the user and writable by nobody else.
"""

from __future__ import annotations

import json
import os
import pwd
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_elastic.errors import ElasticError
from slurm_elastic_launcher.orders import sign_order, verify_report

COMMENT_KEY = "slurm-elastic-orders="


class ChannelError(ElasticError):
    """A job's order channel is missing or not trustworthy (the message says which rule)."""


def orders_path(comment: str) -> Path | None:
    """The orders file named in a job's comment, if any."""
    for word in comment.split():
        if word.startswith(COMMENT_KEY):
            return Path(word[len(COMMENT_KEY):])
    return None


def _check_file(path: Path, uid: int, forbidden: int, rule: str, missing: str = "") -> None:
    """``path`` must be a regular file (no link) owned by ``uid`` with none of the ``forbidden`` mode bits."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise ChannelError(f"{path}: {exc.strerror}{missing}") from exc
    if not stat.S_ISREG(st.st_mode):
        raise ChannelError(f"{path}: must be a regular file (not a link or anything else)")
    if st.st_uid != uid:
        raise ChannelError(f"{path}: owned by uid {st.st_uid}, not by the job's user (uid {uid})")
    if st.st_mode & forbidden:
        raise ChannelError(f"{path}: mode {stat.S_IMODE(st.st_mode):04o}, {rule}")


def _check_private(path: Path, uid: int) -> None:
    _check_file(path, uid, 0o077, "must be 0600 (readable by its owner only)")


sign = sign_order  # one order line, signed with the job's secret
verify = verify_report  # the body of a signed line if its MAC matches and it names the job, else None


@dataclass(frozen=True, slots=True)
class Channel:
    """One job's verified channel.

    Attributes:
        job_id: the Slurm job.
        path: its orders file.
        secret: its secret (the bytes of the secret file's text).
    """

    job_id: str
    path: Path
    secret: bytes

    @classmethod
    def open(cls, job_id: str, user: str, comment: str) -> Channel:
        """Find and verify the channel of a job from its comment and user.

        Raises:
            ChannelError: no channel named, unknown user, or a file that breaks a rule.
        """
        path = orders_path(comment)
        if path is None:
            raise ChannelError(f"job {job_id}: no {COMMENT_KEY}<path> in its comment (not submitted for the launcher)")
        if path.suffix != ".orders" or not path.is_absolute():
            raise ChannelError(f"job {job_id}: orders file {path} must be an absolute path ending in .orders")
        try:
            uid = pwd.getpwnam(user).pw_uid
        except KeyError:
            raise ChannelError(f"job {job_id}: unknown user {user!r}") from None
        secret_path = path.with_suffix("")
        _check_private(path, uid)
        _check_private(secret_path, uid)
        secret = secret_path.read_bytes().strip()
        if len(secret) < 16:
            raise ChannelError(f"job {job_id}: secret in {secret_path} is shorter than 16 bytes")
        return cls(job_id, path, secret)

    @property
    def reports_path(self) -> Path:
        """The job's progress report file."""
        return self.path.with_suffix(".reports")

    def reports(self, start: int = 0) -> tuple[list[dict[str, Any]], int, int]:
        """Verified reports from byte offset ``start`` of the report file.

        Returns:
            (reports in file order, the offset after the last whole line, lines refused). A line
            with a bad MAC, naming another job or not JSON is refused and counted, never trusted.
        """
        if not self.reports_path.exists() and not self.reports_path.is_symlink():
            return [], start, 0
        _check_file(self.reports_path, os.lstat(self.path).st_uid, 0, "")
        fd = os.open(self.reports_path, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            os.lseek(fd, start, os.SEEK_SET)
            chunks = []
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
        finally:
            os.close(fd)
        data = b"".join(chunks)
        whole = data[: data.rfind(b"\n") + 1]
        out, refused = [], 0
        for raw in whole.decode(errors="replace").splitlines():
            if not raw.strip():
                continue
            body = verify_report(raw, self.job_id, self.secret)
            if body is None:
                refused += 1
            else:
                out.append(body)
        return out, start + len(whole), refused

    def join_script(self) -> Path:
        """The job's join script, checked: a regular file of the job's user, writable by nobody else.

        Raises:
            ChannelError: it is missing or breaks a rule.
        """
        path = self.path.with_suffix(".join")
        _check_file(path, os.lstat(self.path).st_uid, 0o022, "must not be writable by group or others",
                    missing=" (job not submitted with a join script)")
        return path

    def history(self) -> list[dict[str, Any]]:
        """The orders already written (parsed lines)."""
        lines = [line for line in self.path.read_text().splitlines() if line.strip()]
        return [json.loads(line) for line in lines]

    def send(self, kind: str, workers: Sequence[str], local_batch: int = 0) -> int:
        """Append one signed order; returns its sequence number."""
        seq = len(self.history()) + 1
        line = sign_order(self.job_id, seq, kind, workers, local_batch, self.secret) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
        return seq

    def workers(self, initial: Sequence[str]) -> list[str]:
        """The job's current workers: those of the last resize order, else ``initial``."""
        resizes = [o for o in self.history() if o.get("kind") == "resize"]
        if resizes:
            return [str(w) for w in resizes[-1]["workers"]]
        return list(initial)
