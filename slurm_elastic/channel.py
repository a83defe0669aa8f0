"""The daemon's side of the order channel to a job's launcher: signed resize orders in a job file.

This module owns finding a job's channel and writing orders to it. A job submitted with
``slurm-elastic submit`` carries ``slurm-elastic-orders=<path>`` in its comment; ``<path>`` is a
JSON-lines file next to the job's secret (``<path>`` without ``.orders``), both created by the user
at submit. The launcher reads the file at step boundaries (``SLURM_ELASTIC_ORDERS=file:<path>``)
and refuses any order whose HMAC-SHA256, keyed with the job's secret, does not match or that names
another job.

Because the comment and the files are the user's, the daemon trusts nothing in them: every file
is opened once and checked by its descriptor (:mod:`slurm_elastic.jobfiles`: a regular file, not
a link, owned by the job's user, mode 0600, size-capped), read with a cap, appended to and never
created. Only lines signed with the job's secret count: a line the user adds to the orders file
is ignored. A job whose comment names no channel never had the launcher (:class:`NoChannel`); one
whose channel breaks a rule is refused in place, never sent down the requeue path.

Wire form: owned by ``slurm_elastic_launcher.orders`` (standard library only), which both sides
import, so orders and reports are signed and checked by one piece of code: one line of sorted,
compact JSON ``{"job_id", "seq", "kind", "workers", "local_batch", "mac"}`` where ``mac`` is the
hex HMAC of the same JSON without ``mac``; ``seq`` increases by one per order of the job.
:func:`sign` and :func:`verify` are that module's ``sign_order`` and ``verify_report``.

The way back: rank 0 of the job appends signed progress reports to ``<secret>.reports`` (written by
``slurm_elastic_launcher.reports``); :meth:`Channel.reports` returns only those whose MAC matches
and that name this job, so a job can speak only for itself. To grow a job the daemon
submits the job's ``<secret>.join`` as the job's user (:mod:`slurm_elastic.slurm.satellites`); that
script must be a regular file owned by the user and writable by nobody else, and it is read here
once, through the checked descriptor (:meth:`Channel.read_join_script`): sbatch gets those bytes,
never the path, so a script swapped after the check is not the one submitted.
"""

from __future__ import annotations

import pwd
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_elastic import jobfiles
from slurm_elastic.errors import ElasticError
from slurm_elastic.jobfiles import JobFileError
from slurm_elastic_launcher.orders import Order, sign_order, verify_order, verify_report

COMMENT_KEY = "slurm-elastic-orders="


class ChannelError(ElasticError):
    """A job's order channel is missing or not trustworthy (the message says which rule)."""


class NoChannel(ChannelError):  # noqa: N818 (an outcome: the job never had the launcher)
    """The job's comment names no order channel: it was not submitted for the launcher."""


SECRET_MAX_BYTES = 4096
ORDERS_MAX_BYTES = 4 << 20
"""An orders file larger than this is refused (a job gets one short line per resize)."""
JOIN_MAX_BYTES = 4 << 20
"""A join script larger than this is refused (Slurm's own default ``max_script_size`` is 4 MiB)."""
REPORTS_MAX_BYTES = 256 << 20
"""A reports file larger than this is refused (a launcher writes ~200 bytes per report)."""
REPORTS_CHUNK_BYTES = 1 << 20
"""At most this much of a job's new reports is read per poll (the rest at the next polls)."""
REPORT_LINE_MAX_BYTES = 64 << 10
"""A report line longer than this is refused unread."""


def orders_path(comment: str) -> Path | None:
    """The orders file named in a job's comment, if any."""
    for word in comment.split():
        if word.startswith(COMMENT_KEY):
            return Path(word[len(COMMENT_KEY):])
    return None


sign = sign_order  # one order line, signed with the job's secret
verify = verify_report  # the body of a signed line if its MAC matches and it names the job, else None


@dataclass(frozen=True, slots=True)
class Channel:
    """One job's verified channel.

    Attributes:
        job_id: the Slurm job.
        path: its orders file.
        secret: its secret (the bytes of the secret file's text).
        uid: the job's user, who must own every file of the channel.
        run: the job's run (Slurm's restart count): orders are signed for it, and the orders of an
            earlier run name workers a requeue ended.
    """

    job_id: str
    path: Path
    secret: bytes
    uid: int
    run: int = 0

    @classmethod
    def open(cls, job_id: str, user: str, comment: str, run: int = 0) -> Channel:
        """Find and verify the channel of a job from its comment and user, for its run ``run``.

        Raises:
            NoChannel: the comment names no channel (the job never had the launcher).
            ChannelError: unknown user, a path or a file that breaks a rule.
        """
        path = orders_path(comment)
        if path is None:
            raise NoChannel(f"job {job_id}: no {COMMENT_KEY}<path> in its comment (not submitted for the launcher)")
        if path.suffix != ".orders" or not path.is_absolute() or "\x00" in str(path):
            raise ChannelError(f"job {job_id}: orders file {str(path)[:200]!r} must be an absolute path ending in "
                               ".orders")
        try:
            uid = pwd.getpwnam(user).pw_uid
        except (KeyError, ValueError):
            raise ChannelError(f"job {job_id}: unknown user {user!r}") from None
        try:
            jobfiles.check(path, uid, forbidden=0o077, rule="must be 0600 (readable by its owner only)",
                           max_size=ORDERS_MAX_BYTES)
            secret = jobfiles.read(path.with_suffix(""), uid, max_size=SECRET_MAX_BYTES).strip()
        except JobFileError as exc:
            raise ChannelError(f"job {job_id}: {exc}") from None
        if len(secret) < 16:
            raise ChannelError(f"job {job_id}: secret in {path.with_suffix('')} is shorter than 16 bytes")
        return cls(job_id, path, secret, uid, run)

    @property
    def reports_path(self) -> Path:
        """The job's progress report file."""
        return self.path.with_suffix(".reports")

    def reports(self, start: int = 0) -> tuple[list[dict[str, Any]], int, list[str]]:
        """Verified reports from byte offset ``start`` of the report file (at most
        :data:`REPORTS_CHUNK_BYTES` of it; the rest at the next call).

        Returns:
            (reports in file order, the offset after the last line consumed, one reason per refused
            line). A line with a bad MAC, naming another job, not JSON or longer than
            :data:`REPORT_LINE_MAX_BYTES` is refused, never trusted, and consumed all the same.

        Raises:
            ChannelError: the report file exists but breaks a rule (a link, not a regular file,
                another owner, larger than :data:`REPORTS_MAX_BYTES`).
        """
        try:
            data, size = jobfiles.read_from(self.reports_path, self.uid, start, chunk=REPORTS_CHUNK_BYTES,
                                            max_size=REPORTS_MAX_BYTES)
        except JobFileError as exc:
            if not self.reports_path.exists() and not self.reports_path.is_symlink():
                return [], start, []
            raise ChannelError(f"job {self.job_id}: {exc}") from None
        if start > size:
            raise ChannelError(f"job {self.job_id}: {self.reports_path} shrank below the {start} bytes read "
                               "(rule: a report file is only appended to)")
        end = data.rfind(b"\n") + 1
        if end == 0 and len(data) == REPORTS_CHUNK_BYTES:
            end = len(data)  # one line longer than a whole chunk: consumed as refused
        out: list[dict[str, Any]] = []
        refused: list[str] = []
        for raw in data[:end].split(b"\n"):
            if not raw.strip():
                continue
            if len(raw) > REPORT_LINE_MAX_BYTES:
                refused.append(f"a line of {len(raw)} bytes (rule: at most {REPORT_LINE_MAX_BYTES})")
                continue
            body = verify_report(raw, self.job_id, self.secret)
            if body is None:
                refused.append(f"line {raw[:60]!r}: not a report of job {self.job_id} signed with its secret")
            else:
                out.append(body)
        return out, start + end, refused

    @property
    def join_path(self) -> Path:
        """Where the job's join script is: ``<secret>.join``."""
        return self.path.with_suffix(".join")

    def join_script(self) -> Path:
        """The job's join script, checked: a regular file of the job's user, writable by nobody else.

        Raises:
            ChannelError: it is missing or breaks a rule.
        """
        try:
            jobfiles.check(self.join_path, self.uid, forbidden=0o022, rule="must not be writable by group or others",
                           max_size=JOIN_MAX_BYTES)
        except JobFileError as exc:
            raise ChannelError(f"job {self.job_id}: {exc} (a join script is needed to grow in place)") from None
        return self.join_path

    def read_join_script(self) -> bytes:
        """The bytes of the job's join script, read through the descriptor that was checked
        (:meth:`join_script`'s rules, at most :data:`JOIN_MAX_BYTES`): what a satellite's sbatch is
        given (:func:`~slurm_elastic.slurm.runner.sealed_copy`), never the path.

        Raises:
            ChannelError: it is missing or breaks a rule.
        """
        try:
            return jobfiles.read(self.join_path, self.uid, forbidden=0o022,
                                 rule="must not be writable by group or others", max_size=JOIN_MAX_BYTES)
        except JobFileError as exc:
            raise ChannelError(f"job {self.job_id}: {exc} (a join script is needed to grow in place)") from None

    def history(self) -> list[Order]:
        """The orders this daemon wrote to the file: the lines signed with the job's secret, in file order.

        Anything else in the file (a line the user added, junk, a line for another job) is ignored.

        Raises:
            ChannelError: the orders file breaks a rule (:mod:`slurm_elastic.jobfiles`).
        """
        try:
            data = jobfiles.read(self.path, self.uid, max_size=ORDERS_MAX_BYTES)
        except JobFileError as exc:
            raise ChannelError(f"job {self.job_id}: {exc}") from None
        orders = (verify_order(line, self.job_id, self.secret) for line in data.split(b"\n") if line.strip())
        return [o for o in orders if o is not None]

    def send(self, kind: str, workers: Sequence[str], local_batch: int = 0) -> int:
        """Append one signed order; returns its sequence number (one more than the last signed order's).

        Raises:
            ChannelError: the orders file breaks a rule or cannot be written.
        """
        seq = max((o.seq for o in self.history()), default=0) + 1
        line = sign_order(self.job_id, seq, kind, workers, local_batch, self.secret, self.run) + "\n"
        try:
            jobfiles.append(self.path, self.uid, line.encode("ascii"), max_size=ORDERS_MAX_BYTES)
        except JobFileError as exc:
            raise ChannelError(f"job {self.job_id}: {exc}") from None
        return seq

    def orders_of_run(self) -> list[Order]:
        """The signed orders of this run (:meth:`history` holds every run's)."""
        return [o for o in self.history() if o.run == self.run]

    def workers(self, initial: Sequence[str]) -> list[str]:
        """The job's current workers: those of this run's last signed resize order, else ``initial``."""
        resizes = [o for o in self.orders_of_run() if o.kind == "resize"]
        return list(resizes[-1].workers) if resizes else list(initial)
