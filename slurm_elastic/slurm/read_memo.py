"""What the last read made of each raw record, so that the next read does not read an unchanged one again.

This module owns :class:`ReadMemo`. A daemon reads the whole queue every round, and in a large
queue nearly every record is the one it read last round; reading it again (its ids, state,
hostlist, GRES and TRES strings, each checked) costs more than the rest of the round. The memo
finds each raw record's last version by a key the reader gives (a job's id, a row's place) and
takes the record made from it when the two are equal: every key and value the reader reads is
compared, so a change of any of them is a miss and is read again (equality is Python's: within
one dialect a value keeps its JSON type, and a change of dialect empties the memo). It holds the
records of the last read only: each read replaces them, so a finished job's record is let go one
read after it leaves the queue and nothing older is ever held. A record that does not read is not
kept (its error is raised again, with the record's place in this document). A record read afresh
is read as a plain dict when it can give one (:func:`plain`). Pure: no command, no file, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

R = TypeVar("R")
RowReader = Callable[[Mapping[str, Any], int], R]
RowKey = Callable[[Mapping[str, Any], int], Hashable]


def plain(row: Mapping[str, Any]) -> Mapping[str, Any]:
    """The row as a dict when it can give one (a :class:`~slurm_elastic.slurm.listing_json.ListedRecord`
    reads through Python calls, a dict in C), else the row."""
    as_dict = getattr(row, "plain", None)
    return as_dict() if callable(as_dict) else row


@dataclass
class ReadMemo(Generic[R]):
    """The records of the last read, by the key of their raw record (see the module docstring).

    Attributes:
        hits: records of the last read taken from the memo.
        misses: records of the last read read afresh.
    """

    hits: int = 0
    misses: int = 0
    _dialect: Hashable = None
    _kept: dict[Hashable, tuple[Mapping[str, Any], R]] = field(default_factory=dict, repr=False)

    @contextmanager
    def reading(self, dialect: Hashable, read: RowReader[R], key: RowKey) -> Iterator[RowReader[R]]:
        """A reader for one document of ``dialect``: each row from the memo (its ``key`` found, and
        equal to the row kept under it) or read with ``read``.

        The memo keeps exactly the rows read through it during the ``with`` block; it is emptied if
        the block raises (the next read starts afresh)."""
        last = self._kept if dialect == self._dialect else {}
        kept: dict[Hashable, tuple[Mapping[str, Any], R]] = {}
        self._kept, self._dialect, self.hits, self.misses = {}, dialect, 0, 0

        def read_row(row: Mapping[str, Any], i: int) -> R:
            k = key(row, i)
            prior = last.get(k)
            if prior is not None and prior[0] == row:
                got = prior[1]
                self.hits += 1
            else:
                got = read(plain(row), i)
                self.misses += 1
            kept[k] = (row, got)
            return got

        yield read_row
        self._kept = kept


@contextmanager
def memoised(memo: ReadMemo[R] | None, dialect: Hashable, read: RowReader[R],
             key: RowKey) -> Iterator[RowReader[R]]:
    """``memo.reading(dialect, read, key)``, or ``read`` itself when there is no memo."""
    if memo is None:
        yield lambda row, i: read(plain(row), i)
        return
    with memo.reading(dialect, read, key) as read_row:
        yield read_row
