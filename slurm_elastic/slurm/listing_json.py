"""Decoding Slurm's large listings (``squeue --json``, ``sinfo --json``) into the keys the records read.

This module owns :func:`decode_listing`. A 50,000-job ``squeue --json`` of Slurm 25.11 is about
300 MB, of which the readers of :mod:`slurm_elastic.slurm.json_records` use a few dozen keys per job;
Python's ``json`` builds every other value too (2.3 s for that document here). msgspec decodes
the same text into typed records that keep only the keys listed in
:data:`~slurm_elastic.slurm.json_records.JOB_KEYS`, :data:`~slurm_elastic.slurm.json_records.NODE_KEYS` and
:data:`~slurm_elastic.slurm.json_records.SINFO_ROW_KEYS` (every other key of a record is skipped as it
is scanned, without being built; ``bench observe`` gives the figures), and hands each on as a
read-only mapping (:class:`ListedRecord`) that reads like the dict ``json`` makes, so the readers,
their rules and their error messages are the same for both decoders. The decoded records are
frozen and hashable: :class:`~slurm_elastic.slurm.read_memo.ReadMemo` finds last read's equal
record with one dictionary lookup in C; a record it has to read is read as
a plain dict (:meth:`ListedRecord.plain`).

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

from slurm_elastic.slurm.json_records import JOB_KEYS, NODE_KEYS, SINFO_ROW_KEYS
from slurm_elastic.slurm.runner import decode_json

_TOP_KEYS = ("meta", "errors", "warnings")
_LISTS = (("jobs", JOB_KEYS), ("nodes", NODE_KEYS), ("sinfo", SINFO_ROW_KEYS))


class _Number(msgspec.Struct, frozen=True, gc=False, forbid_unknown_fields=True):
    """A number as data_parser prints it (the reader checks each key)."""

    set: bool | None | msgspec.UnsetType = msgspec.UNSET
    infinite: bool | None | msgspec.UnsetType = msgspec.UNSET
    number: int | None | msgspec.UnsetType = msgspec.UNSET


_Leaf = str | int | _Number | tuple[str | None, ...] | None
"""What a kept key holds: a string, a number (plain or data_parser's), a list of strings, or null;
anything else (a boolean, a float, another object) sends the whole document to ``json``."""


@cache
def _fields_of(kind: type[msgspec.Struct]) -> frozenset[str]:
    return frozenset(kind.__struct_fields__)


class ListedRecord(msgspec.Struct, frozen=True, gc=False):
    """One record of a listing, with the keys it has of those kept, read like the dict ``json`` makes
    (a key Slurm did not print is absent; an inner record reads as a dict, a list of strings as a
    list). It is also its own key in :class:`~slurm_elastic.slurm.read_memo.ReadMemo`: hashable, and
    equal to another exactly when their kept keys and values are (hashed and compared in C)."""

    def __getitem__(self, key: str) -> Any:
        value = getattr(self, key) if key in _fields_of(type(self)) else msgspec.UNSET
        if value is msgspec.UNSET:
            raise KeyError(key)
        return _as_json(value)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key in _fields_of(type(self)) and getattr(self, key) is not msgspec.UNSET

    def get(self, key: str, default: Any = None) -> Any:
        """``self[key]``, else ``default`` (as a dict's)."""
        value = getattr(self, key) if key in _fields_of(type(self)) else msgspec.UNSET
        return default if value is msgspec.UNSET else _as_json(value)

    def __iter__(self) -> Iterator[str]:
        return (k for k in self.__struct_fields__ if getattr(self, k) is not msgspec.UNSET)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def keys(self) -> Any:
        return list(self)

    def plain(self) -> dict[str, Any]:
        """The record as the dict ``json`` makes of it (what a reader reads fastest)."""
        return _as_json(self)  # type: ignore[no-any-return]


Mapping.register(ListedRecord)  # read as a mapping by the readers' checks


def _record_type(name: str, keys: Sequence[str]) -> type[msgspec.Struct]:
    """A record keeping ``keys`` (each a :data:`_Leaf`); ``a.b`` keeps only ``b`` of the object under
    ``a``. Records are frozen and hashable, and never tracked by the cyclic collector (they hold no
    cycle)."""
    nested: dict[str, list[str]] = {}
    for key in keys:
        head, _, rest = key.partition(".")
        nested.setdefault(head, [])
        if rest:
            nested[head].append(rest)
    fields = [(head, (_record_type(f"{name}_{head}", sub) if sub else _Leaf) | msgspec.UnsetType, msgspec.UNSET)
              for head, sub in nested.items()]
    return msgspec.defstruct(name, fields, bases=(ListedRecord,), frozen=True, gc=False)


@cache
def _decoder() -> msgspec.json.Decoder[Any]:
    """One decoder for every listing: the top keys, and each list of records with its kept keys."""
    fields: list[tuple[str, Any, Any]] = [(k, Any, msgspec.UNSET) for k in _TOP_KEYS]
    for key, keys in _LISTS:
        record: Any = _record_type(f"Listed_{key}", keys)
        fields.append((key, list[record], msgspec.UNSET))
    return msgspec.json.Decoder(msgspec.defstruct("Listing", fields, gc=False))


def _as_json(value: Any) -> Any:
    """A kept value as ``json`` gives it: a record as a dict of the keys it has, a tuple as a list."""
    if isinstance(value, msgspec.Struct):
        return {k: _as_json(v) for k in value.__struct_fields__ if (v := getattr(value, k)) is not msgspec.UNSET}
    return list(value) if isinstance(value, tuple) else value


def decode_listing(text: str, argv: Sequence[str]) -> dict[str, Any]:
    """The listing ``argv`` printed, with only the keys the records read (see the module docstring).

    Raises:
        SlurmJsonError: as :func:`~slurm_elastic.slurm.runner.decode_json` (the text is not a JSON
            object).
    """
    try:
        doc = _decoder().decode(text)
    except (msgspec.DecodeError, RecursionError):  # ValidationError is a DecodeError
        return decode_json(text, argv)
    out: dict[str, Any] = {k: getattr(doc, k) for k in _TOP_KEYS if getattr(doc, k) is not msgspec.UNSET}
    for key, _ in _LISTS:
        records = getattr(doc, key)
        if records is not msgspec.UNSET:
            out[key] = records
    return out
