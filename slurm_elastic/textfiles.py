"""Reading one text file that a person hands the tools (the site configuration, a trace): once, bounded.

This module owns the rules of that read: the path is opened once (``O_NONBLOCK``, so a FIFO never
blocks), the open descriptor must be a regular file, at most ``max_bytes`` are read, and the bytes
must be UTF-8. Each refusal is the caller's error class with a message naming the file and the rule.
Users' job files have stricter rules of their own (owner, mode, no links): :mod:`slurm_elastic.jobfiles`.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


def read_text(path: Path, *, max_bytes: int, noun: str, kind_rule: str, size_rule: str,
              error: type[Exception]) -> str:
    """The UTF-8 text of ``path``, a regular file of at most ``max_bytes`` bytes.

    Args:
        noun: what the file is, in messages (``configuration``).
        kind_rule: the rule a file that is not regular breaks (``the configuration is a regular TOML file``).
        size_rule: the rule a larger file breaks.
        error: the exception class raised, with one message naming ``path``, the value and the rule.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, ValueError) as exc:
        raise error(f"{path}: cannot read {noun}: {getattr(exc, 'strerror', None) or exc}") from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise error(f"{path}: not a file (rule: {kind_rule})")
    with os.fdopen(fd, "rb") as f:
        try:
            data = f.read(max_bytes + 1)
        except OSError as exc:
            raise error(f"{path}: cannot read {noun}: {exc.strerror}") from exc
    if len(data) > max_bytes:
        raise error(f"{path}: larger than {max_bytes} bytes (rule: {size_rule})")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 (byte {exc.start}): cannot read {noun}") from None
