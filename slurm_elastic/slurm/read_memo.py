"""What the last read made of each raw record, so that the next read does not read an unchanged one again.

This module owns :class:`ReadMemo`. A daemon reads the whole queue every round, and in a large
queue nearly every record is the one it read last round; reading it again (its ids, state,
hostlist, GRES and TRES strings, each checked) costs more than the rest of the round. The memo
looks each raw record up by itself (a :class:`~slurm_elastic.slurm.listing_json.ListedRecord` is
hashable, and equal to another exactly when every kept key and value is) and takes the record
made from the equal one last time: a change of any value the reader reads is a miss
and is read again (equality is Python's: within one dialect a value keeps its JSON type, and a
change of dialect empties the memo). A hit keeps last read's raw record and lets this read's go
at once, so what one round decodes of unchanged jobs never outlives it. The memo holds the
records of the last read only: each read replaces them, so a finished job's record is let go one
read after it leaves the queue and nothing older is ever held. A record that does not read is
not kept (its error is raised again, with the record's place in this document), nor is one
that is not hashable (a dict from Python's ``json``: read every time). A record read afresh is read as
a plain dict when it can give one (:func:`plain`). Pure: no command, no file, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

R = TypeVar("R")
RowReader = Callable[[Mapping[str, Any], int], R]


def plain(row: Mapping[str, Any]) -> Mapping[str, Any]:
    """The row as a dict when it can give one (a :class:`~slurm_elastic.slurm.listing_json.ListedRecord`
    reads through Python calls, a dict in C), else the row."""
    as_dict = getattr(row, "plain", None)
    return as_dict() if callable(as_dict) else row


@dataclass
class ReadMemo(Generic[R]):
    """The records of the last read, by their raw record (see the module docstring).

    Attributes:
        hits: records of the last read taken from the memo.
        misses: records of the last read read afresh.
    """

    hits: int = 0
    misses: int = 0
    _dialect: Hashable = None
    _kept: dict[Hashable, tuple[Hashable, R]] = field(default_factory=dict, repr=False)

    @contextmanager
    def reading(self, dialect: Hashable, read: RowReader[R]) -> Iterator[RowReader[R]]:
        """A reader for one document of ``dialect``: each row from the memo, or read with ``read``.

        The memo keeps exactly the rows read through it during the ``with`` block; it is emptied if
        the block raises (the next read starts afresh)."""
        last = self._kept if dialect == self._dialect else {}
        kept: dict[Hashable, tuple[Hashable, R]] = {}
        self._kept, self._dialect, self.hits, self.misses = {}, dialect, 0, 0

        def read_row(row: Mapping[str, Any], i: int) -> R:
            try:
                entry = last.get(row)
            except TypeError:  # a dict from Python's json: no key, read every time
                self.misses += 1
                return read(row, i)
            if entry is None:
                got = read(plain(row), i)
                self.misses += 1
                kept[row] = (row, got)
                return got
            self.hits += 1
            kept[entry[0]] = entry  # last read's raw record stays; this read's goes with its document
            return entry[1]

        yield read_row
        self._kept = kept


@contextmanager
def memoised(memo: ReadMemo[R] | None, dialect: Hashable, read: RowReader[R]) -> Iterator[RowReader[R]]:
    """``memo.reading(dialect, read)``, or ``read`` (of each row as a plain dict) when there is no memo."""
    if memo is None:
        yield lambda row, i: read(plain(row), i)
        return
    with memo.reading(dialect, read) as read_row:
        yield read_row
