"""Hostile values, bytes and JSON: the mutations every fuzz family applies to a valid input.

Pure and seeded: every function takes a :class:`random.Random`, so a case is rebuilt exactly from
its seed. Nothing here touches a file.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

NAN = float("nan")
INF = float("inf")

HUGE_INTS: tuple[int, ...] = (-1, 0, 2**31, 2**32 + 1, 2**63, -(2**63), 2**64 + 7, 10**30, -(10**30), 10**400)
SPECIAL_FLOATS: tuple[float, ...] = (NAN, INF, -INF, 1e308, -1e308, -0.0, 5e-324, 1e18, -1.5, 0.5)
NON_ASCII_DIGITS: tuple[str, ...] = ("١٢", "۳", "४२", "１２", "𝟗", "²", "½", "Ⅻ", "٣:٤", "８:０")
HOSTILE_STRINGS: tuple[str, ...] = (
    *NON_ASCII_DIGITS, "", " ", "\t", "\n", "\x00", "\x00x", "é" * 64, "\u202e" + "gpu", "\ufeff1", "\u2003", "💥",
    "NaN", "Infinity", "-Infinity", "nan", "inf", "-1", "0", "1e3", "1e400", "0x10", "1_000", " 3 ", "+5", "1.", ".5",
    "1,5", "\ud800", "\udcff", "x" * 5000, "9" * 5000, "'", '"', "\\", "../../etc/passwd", "/dev/zero", "%s%n",
    "{}", "[]", "null", "true", "a=b=c", "::", ":", "1:", ":1", "1:2:3",
)


def pick(rng: random.Random, seq: Sequence[T]) -> T:
    """One element of ``seq``."""
    return seq[rng.randrange(len(seq))]


def hostile_number(rng: random.Random) -> int | float:
    """A number that is out of range, not finite or of the unexpected kind."""
    roll = rng.random()
    if roll < 0.45:
        return pick(rng, HUGE_INTS)
    if roll < 0.9:
        return pick(rng, SPECIAL_FLOATS)
    return rng.choice((rng.randint(-(10**6), 10**6), rng.uniform(-1e9, 1e9)))


def hostile_value(rng: random.Random, depth: int = 0) -> Any:
    """A JSON-ish value of any type: a hostile number or string, a bool, null, or a nested container."""
    roll = rng.random()
    if roll < 0.35:
        return hostile_number(rng)
    if roll < 0.65:
        return pick(rng, HOSTILE_STRINGS)
    if roll < 0.75:
        return rng.choice((True, False, None))
    if depth > 3:
        return None
    if roll < 0.85:
        return [hostile_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {pick(rng, ("a", "job_id", "", "é", "\x00", "mac")): hostile_value(rng, depth + 1)
            for _ in range(rng.randrange(3))}


def deep_nesting(rng: random.Random) -> bytes:
    """JSON text nested far deeper than any parser's recursion limit (or just below it)."""
    depth = pick(rng, (900, 990, 1000, 5_000, 100_000))
    opener, closer = pick(rng, ((b"[", b"]"), (b'{"a":', b"}")))
    return opener * depth + b"1" + closer * depth


def huge_digits(rng: random.Random) -> bytes:
    """An integer (or float) literal with thousands of digits."""
    digits = pick(rng, (4301, 5000, 50_000))
    return pick(rng, (b"", b"-", b"0.")) + b"9" * digits


def mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    """One byte-level mutation of ``data``: truncation, bit flips, insertions of bytes that are not
    UTF-8, NUL, CR or non-ASCII digits, a deleted or duplicated span, padding far past any cap."""
    ops: list[Callable[[], bytes]] = [
        lambda: data[:rng.randrange(len(data) + 1)],
        lambda: _flip(rng, data),
        lambda: _insert(rng, data, pick(rng, (b"\xff", b"\xfe\xff", b"\xc3", b"\xed\xa0\x80", b"\x00", b"\r",
                                                b"\x1b[2J", "١".encode(), "𝟗".encode(), b"\n", b"\\u0000",
                                                b"\\ud800", b"NaN", b"Infinity", b"-", b"1e999")),),
        lambda: _delete(rng, data),
        lambda: _duplicate(rng, data),
        lambda: data + b"x" * pick(rng, (64 << 10, (64 << 10) + 1, 200_000)),
        lambda: b"",
        lambda: data.replace(b"1", "١".encode()) if b"1" in data else data + "١".encode(),
    ]
    return ops[rng.randrange(len(ops))]()


def _flip(rng: random.Random, data: bytes) -> bytes:
    if not data:
        return b"\x80"
    out = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        i = rng.randrange(len(out))
        out[i] ^= 1 << rng.randrange(8)
    return bytes(out)


def _insert(rng: random.Random, data: bytes, what: bytes) -> bytes:
    i = rng.randrange(len(data) + 1)
    return data[:i] + what + data[i:]


def _delete(rng: random.Random, data: bytes) -> bytes:
    if not data:
        return data
    i = rng.randrange(len(data))
    return data[:i] + data[i + rng.randint(1, 16):]


def _duplicate(rng: random.Random, data: bytes) -> bytes:
    if not data:
        return data
    i = rng.randrange(len(data))
    span = data[i:i + rng.randint(1, 32)]
    return data[:i] + span * rng.randint(2, 50) + data[i:]


def mutate_mapping(rng: random.Random, body: dict[str, Any], keys: tuple[str, ...] = ()) -> dict[str, Any]:
    """A copy of ``body`` with one structural mutation: a field set to a hostile value, deleted, an
    extra field added, or one value wrapped or replaced by a container."""
    out = dict(body)
    names = list(keys or tuple(out)) or ["x"]
    key = pick(rng, names)
    roll = rng.random()
    if roll < 0.55:
        out[key] = hostile_value(rng)
    elif roll < 0.7:
        out.pop(key, None)
    elif roll < 0.85:
        out[pick(rng, ("extra", "é", "", "\x00", "mac", "job_id ", "JOB_ID"))] = hostile_value(rng)
    else:
        out[key] = pick(rng, ([out.get(key)], {"number": out.get(key)}, {"set": True, "infinite": True}))
    return out


def is_finite_number(value: object) -> bool:
    """True for an int or a finite float (not a bool)."""
    return (isinstance(value, int) and not isinstance(value, bool)) or (
        isinstance(value, float) and math.isfinite(value))


def short(value: object, limit: int = 160) -> str:
    """``repr(value)`` cut to ``limit`` characters (for a case's description)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}...({len(text)} chars)"
