"""Decoding Slurm's large listings (``squeue --json``, ``sinfo --json``) into the keys the records read.

This module owns :func:`decode_listing`. A 50,000-job ``squeue --json`` of Slurm 25.11 is about
300 MB, of which the readers of :mod:`slurm_elastic.slurm.records` use a few dozen keys per job;
Python's ``json`` builds every other value too (2.3 s for that document here). msgspec decodes
the same text into typed records that keep only the keys listed in
:data:`~slurm_elastic.slurm.records.JOB_KEYS`, :data:`~slurm_elastic.slurm.records.NODE_KEYS` and
:data:`~slurm_elastic.slurm.records.SINFO_ROW_KEYS` (every other key of a record is skipped as it
is scanned, without being built; ``bench observe`` gives the figures), and hands each on as a
read-only mapping (:class:`ListedRecord`) that reads like the dict ``json`` makes, so the readers,
their rules and their error messages are the same for both decoders. Two listed records compare
equal when their kept keys and values do (compared by msgspec without building a dict), which
:class:`~slurm_elastic.slurm.read_memo.ReadMemo` relies on; a record it has to read is read as a
plain dict (:meth:`ListedRecord.plain`).

A document msgspec will not decode but Python's ``json`` reads (a lone UTF-16 surrogate escape a
user put in a comment, a number beyond 64 bits, a listing whose shape is wrong) is decoded by
``json`` instead, whole: the result, or the error naming what is wrong, is exactly what it was
before this module, only slower. So one user's odd field can cost the round time, never the read.
Pure: no command, no file, no clock.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from functools import cache
from typing import Any

import msgspec

from slurm_elastic.slurm.commands import decode_json
from slurm_elastic.slurm.records import JOB_KEYS, JOB_NUMBER_KEYS, NODE_KEYS, SINFO_ROW_KEYS

_TOP_KEYS = ("meta", "errors", "warnings")
_LISTS = (("jobs", JOB_KEYS), ("nodes", NODE_KEYS), ("sinfo", SINFO_ROW_KEYS))


class _Number(msgspec.Struct, gc=False):
    """A number as data_parser prints it (the reader checks each key)."""

    set: Any = msgspec.UNSET
    infinite: Any = msgspec.UNSET
    number: Any = msgspec.UNSET


def _record_type(name: str, keys: Sequence[str], numbers: frozenset[str] = frozenset()) -> type[msgspec.Struct]:
    """A record keeping ``keys``; ``a.b`` keeps only ``b`` of the object under ``a`` (which must then
    be an object, or the whole document is decoded by ``json``); a key of ``numbers`` must be an
    integer, null or ``{set, infinite, number}`` (else, likewise)."""
    nested: dict[str, list[str]] = {}
    for key in keys:
        head, _, rest = key.partition(".")
        nested.setdefault(head, [])
        if rest:
            nested[head].append(rest)

    def kind(head: str, sub: list[str]) -> Any:
        if sub:
            return _record_type(f"{name}_{head}", sub)
        return int | _Number | None if head in numbers else Any

    return msgspec.defstruct(name, [(head, kind(head, sub), msgspec.UNSET) for head, sub in nested.items()], gc=False)


@cache
def _decoder() -> msgspec.json.Decoder[Any]:
    """One decoder for every listing: the top keys, and each list of records with its kept keys."""
    fields: list[tuple[str, Any, Any]] = [(k, Any, msgspec.UNSET) for k in _TOP_KEYS]
    for key, keys in _LISTS:
        record = _record_type(f"Listed_{key}", keys, JOB_NUMBER_KEYS if key == "jobs" else frozenset())
        fields.append((key, list[record], msgspec.UNSET))  # type: ignore[valid-type]
    return msgspec.json.Decoder(msgspec.defstruct("Listing", fields, gc=False))


def _plain(record: msgspec.Struct) -> dict[str, Any]:
    """A record as the dict ``json`` makes of it (the keys kept and printed; inner records likewise)."""
    out = {}
    for key in record.__struct_fields__:
        value = getattr(record, key)
        if value is not msgspec.UNSET:
            out[key] = _plain(value) if isinstance(value, msgspec.Struct) else value
    return out


class ListedRecord(Mapping[str, Any]):
    """One record of a listing, with the keys it has of those kept (a key Slurm did not print is
    absent, as in the dict ``json`` makes)."""

    __slots__ = ("_keys", "_record")

    def __init__(self, record: msgspec.Struct, keys: frozenset[str]) -> None:
        self._record, self._keys = record, keys

    def __getitem__(self, key: str) -> Any:
        value = getattr(self._record, key) if key in self._keys else msgspec.UNSET
        if value is msgspec.UNSET:
            raise KeyError(key)
        return _plain(value) if isinstance(value, msgspec.Struct) else value

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key in self._keys and getattr(self._record, key) is not msgspec.UNSET

    def get(self, key: str, default: Any = None) -> Any:
        """``self[key]``, else ``default`` (as a dict's, without raising inside)."""
        value = getattr(self._record, key) if key in self._keys else msgspec.UNSET
        if value is msgspec.UNSET:
            return default
        return _plain(value) if isinstance(value, msgspec.Struct) else value

    def __iter__(self) -> Iterator[str]:
        return (k for k in self._record.__struct_fields__ if getattr(self._record, k) is not msgspec.UNSET)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __eq__(self, other: object) -> bool:
        """Equal kept keys and values (a record that is not a listed one is not equal)."""
        return isinstance(other, ListedRecord) and self._record == other._record

    __hash__ = None  # type: ignore[assignment]

    def plain(self) -> dict[str, Any]:
        """The record as the dict ``json`` makes of it (what a reader reads fastest)."""
        return _plain(self._record)


def decode_listing(text: str, argv: Sequence[str]) -> dict[str, Any]:
    """The listing ``argv`` printed, with only the keys the records read (see the module docstring).

    Raises:
        SlurmJsonError: as :func:`~slurm_elastic.slurm.commands.decode_json` (the text is not a JSON
            object).
    """
    try:
        doc = _decoder().decode(text)
    except (msgspec.DecodeError, RecursionError):  # ValidationError is a DecodeError
        return decode_json(text, argv)
    out: dict[str, Any] = {k: getattr(doc, k) for k in _TOP_KEYS if getattr(doc, k) is not msgspec.UNSET}
    for key, keys in _LISTS:
        records = getattr(doc, key)
        if records is not msgspec.UNSET:
            kept = frozenset(k.partition(".")[0] for k in keys)
            out[key] = [ListedRecord(r, kept) for r in records]
    return out
