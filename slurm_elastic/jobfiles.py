"""Reading and appending the files a job's user owns, as root, without trusting them.

This module owns the one way the daemon touches a user's job file (the secret, the orders file it
appends to, the reports file it reads, and the join script and environment file it copies for a
satellite's sbatch). The user can swap any of them at any moment for a link, a FIFO, a device, a
sparse 8 GiB file or someone else's file, so every access:

* opens the path once, with ``O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC`` (a link in the last
  component is refused by the kernel; opening a FIFO or a device never waits);
* checks the *open descriptor* (``fstat``), never the name: a regular file, owned by the job's
  user, with none of the forbidden mode bits, no larger than the cap — so nothing can be swapped
  between the check and the read;
* reads at most a fixed number of bytes (the descriptor is put back into blocking mode only after
  it proved to be a regular file, where reads never wait).

A parent directory may be a link (home directories often are); the owner check on the file itself
is what keeps root from reading or writing a file the job's user does not own. Nothing checked here
is handed to a command by name: a command that needs a file's contents gets the bytes read here
(:func:`~slurm_elastic.slurm.runner.sealed_copy`), since a name checked now may lead elsewhere
when the command opens it.
Every failure is a :class:`JobFileError` whose message names the path and the rule.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from slurm_elastic.errors import ElasticError

_OPEN_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class JobFileError(ElasticError):
    """A job file is missing, unreadable, or breaks a rule (the message names the path and the rule)."""


def _open(path: Path, uid: int, *, write: bool, forbidden: int, rule: str, max_size: int) -> tuple[int, int]:
    """A checked descriptor of ``path`` and the file's size (see the module docstring)."""
    try:
        fd = os.open(path, (os.O_WRONLY | os.O_APPEND if write else os.O_RDONLY) | _OPEN_FLAGS)
    except OSError as exc:
        why = "a symbolic link (rule: no links)" if exc.errno == errno.ELOOP else exc.strerror or str(exc)
        raise JobFileError(f"{path}: {why}") from None
    except ValueError:  # an embedded NUL, or a lone surrogate the file system cannot encode
        raise JobFileError(f"{str(path)!r}: not a file name (rule: no NUL, and encodable as UTF-8)") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise JobFileError(f"{path}: not a regular file (rule: a regular file, not a FIFO, device or directory)")
        if st.st_uid != uid:
            raise JobFileError(f"{path}: owned by uid {st.st_uid}, not by the job's user (uid {uid})")
        if st.st_mode & forbidden:
            raise JobFileError(f"{path}: mode {stat.S_IMODE(st.st_mode):04o}, {rule}")
        if st.st_size > max_size:
            raise JobFileError(f"{path}: {st.st_size} bytes, more than the {max_size} allowed")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size


def read(path: Path, uid: int, *, max_size: int, forbidden: int = 0o077,
         rule: str = "must be 0600 (readable by its owner only)") -> bytes:
    """The whole of a small job file (a secret, an orders file), checked and capped.

    Raises:
        JobFileError: missing, a link, not a regular file, another owner, a forbidden mode bit,
            or larger than ``max_size``.
    """
    fd, _ = _open(path, uid, write=False, forbidden=forbidden, rule=rule, max_size=max_size)
    try:
        return _read_at_most(fd, max_size)
    finally:
        os.close(fd)


def read_from(path: Path, uid: int, start: int, *, chunk: int, max_size: int) -> tuple[bytes, int]:
    """At most ``chunk`` bytes of a growing job file from offset ``start``, and the file's size.

    Raises:
        JobFileError: as :func:`read` (the size cap is on the whole file).
    """
    fd, size = _open(path, uid, write=False, forbidden=0, rule="", max_size=max_size)
    try:
        os.lseek(fd, max(0, start), os.SEEK_SET)
        return _read_at_most(fd, chunk), size
    finally:
        os.close(fd)


def append(path: Path, uid: int, data: bytes, *, max_size: int) -> None:
    """Append ``data`` to a job file the job's user owns (mode 0600), never creating it.

    Raises:
        JobFileError: as :func:`read`, or the write failed or was short.
    """
    fd, _ = _open(path, uid, write=True, forbidden=0o077, rule="must be 0600 (readable by its owner only)",
                  max_size=max_size)
    try:
        written = os.write(fd, data)
    except OSError as exc:
        raise JobFileError(f"{path}: write failed: {exc.strerror}") from None
    finally:
        os.close(fd)
    if written != len(data):
        raise JobFileError(f"{path}: short write ({written} of {len(data)} bytes)")


def check(path: Path, uid: int, *, forbidden: int, rule: str, max_size: int) -> None:
    """Check a job file by an open descriptor, reading nothing (whether a job could be grown, say).

    Raises:
        JobFileError: as :func:`read`.
    """
    fd, _ = _open(path, uid, write=False, forbidden=forbidden, rule=rule, max_size=max_size)
    os.close(fd)


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    left = limit
    while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
