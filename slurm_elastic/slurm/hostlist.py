"""Slurm's compact strings: hostlists (``n[01-03]``), GRES (``gpu:v100:2(IDX:0-1)``) and TRES GPU requests.

Pure: every malformed string is a :class:`~slurm_elastic.slurm.dialects.SlurmJsonError` naming the
string and the rule it breaks. Numbers are ASCII digits (at most 18), and no string expands to more
than :data:`MAX_NAMES` host names or GPU indices, so a record cannot make the reader hang or run out
of memory.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from slurm_elastic.core.model import NodeName
from slurm_elastic.slurm.dialects import SlurmJsonError

_HOST_RANGE = re.compile(r"^([0-9]{1,18})(?:-([0-9]{1,18}))?$")
MAX_NAMES = 100_000
"""Most host names a hostlist, or GPU indices an index list, expands to (a cluster has far fewer)."""


def _too_many(what: str, text: str) -> SlurmJsonError:
    return SlurmJsonError(f"{what} {text[:200]!r}: expands to more than {MAX_NAMES} items (rule: at most {MAX_NAMES})")


def expand_hostlist(hostlist: str) -> tuple[str, ...]:
    """Expand a Slurm hostlist (``n[01-03,05]``, ``a1,b[1-2]``, ``r[1-2]n[1-2]``) in Slurm's order.

    Zero padding follows the width of each range's first bound. An empty string gives ``()``.

    Raises:
        SlurmJsonError: unbalanced brackets, an empty item, a non-numeric or descending range.
    """
    text = hostlist.strip()
    if not text:
        return ()
    out: list[str] = []
    for item in _split_top(text, ",", "[", "]", hostlist):
        if not item:
            raise SlurmJsonError(f"hostlist {hostlist!r}: empty host name (rule: comma-separated names)")
        out.extend(_expand_host(item, hostlist))
        if len(out) > MAX_NAMES:
            raise _too_many("hostlist", hostlist)
    return tuple(out)


def _split_top(text: str, sep: str, open_: str, close: str, whole: str) -> list[str]:
    """Split on ``sep`` outside ``open_ … close`` brackets."""
    parts: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in text:
        if ch == open_:
            depth += 1
            if depth > 1:
                raise SlurmJsonError(f"{whole!r}: nested {open_!r} (rule: brackets do not nest)")
        elif ch == close:
            depth -= 1
            if depth < 0:
                raise SlurmJsonError(f"{whole!r}: {close!r} without {open_!r}")
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise SlurmJsonError(f"{whole!r}: unclosed {open_!r}")
    parts.append("".join(cur))
    return parts


def _expand_host(item: str, whole: str) -> list[str]:
    start = item.find("[")
    if start < 0:
        return [item]
    end = item.index("]", start)
    prefix, body, rest = item[:start], item[start + 1 : end], item[end + 1 :]
    values: list[str] = []
    for rng in body.split(","):
        m = _HOST_RANGE.match(rng.strip())
        if not m:
            raise SlurmJsonError(f"hostlist {whole!r}: range {rng!r} must be N or N-M with digits")
        lo_s, hi_s = m.group(1), m.group(2)
        lo, hi = int(lo_s), int(hi_s if hi_s is not None else lo_s)
        if hi < lo:
            raise SlurmJsonError(f"hostlist {whole!r}: range {rng!r} descends (rule: N-M needs N <= M)")
        if len(values) + hi - lo + 1 > MAX_NAMES:
            raise _too_many("hostlist", whole)
        width = len(lo_s)
        values.extend(f"{v:0{width}d}" for v in range(lo, hi + 1))
    tails = _expand_host(rest, whole) if rest else [""]
    if len(values) * len(tails) > MAX_NAMES:
        raise _too_many("hostlist", whole)
    return [prefix + v + t for v in values for t in tails]


def parse_index_list(text: str) -> tuple[int, ...]:
    """Parse a GRES index list (``0-1,3``; ``N/A`` gives ``()``) into sorted unique indices.

    Raises:
        SlurmJsonError: a part is not ``N`` or ``N-M`` with ``N <= M``.
    """
    t = text.strip()
    if t in ("", "N/A"):
        return ()
    out: set[int] = set()
    for part in t.split(","):
        m = _HOST_RANGE.match(part.strip())
        if not m:
            raise SlurmJsonError(f"GPU index list {text!r}: {part!r} must be N or N-M")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise SlurmJsonError(f"GPU index list {text!r}: range {part!r} descends (rule: N-M needs N <= M)")
        if len(out) + hi - lo + 1 > MAX_NAMES:
            raise _too_many("GPU index list", text)
        out.update(range(lo, hi + 1))
    return tuple(sorted(out))


@dataclass(frozen=True, slots=True)
class GresItem:
    name: str
    gtype: str
    count: int
    indices: tuple[int, ...] | None  # None when no IDX: was printed


_COUNT = re.compile(r"[0-9]{1,18}")
_GRES_ITEM = re.compile(r"^(?P<spec>[^()]+?)(?:\((?P<paren>[^()]*)\))?$")


def parse_gres(text: str | None) -> tuple[GresItem, ...]:
    """Parse a GRES string (``gpu:v100:4``, ``gpu:4(S:0-1)``, ``gpu:v100:2(IDX:0-1),gpu:k80:0(IDX:N/A)``).

    ``None``, ``""``, ``"(null)"`` and ``"N/A"`` mean none. A missing count means 1 (Slurm's
    ``--gres=gpu``). ``(S:…)`` socket affinity is ignored, ``(IDX:…)`` is read, ``(CNT:n)`` gives the
    count when no index is known.

    Raises:
        SlurmJsonError: an item is not ``name[:type][:count][(…)]`` or a count/index is malformed.
    """
    if text is None:
        return ()
    t = text.strip()
    if t in ("", "(null)", "N/A"):
        return ()
    items: list[GresItem] = []
    for raw in _split_top(t, ",", "(", ")", text):
        m = _GRES_ITEM.match(raw.strip())
        if not m:
            raise SlurmJsonError(f"GRES {text!r}: item {raw!r} must be name[:type][:count][(IDX:…)]")
        spec = m.group("spec").split(":")
        paren = m.group("paren")
        name = spec[0].strip()
        if not name:
            raise SlurmJsonError(f"GRES {text!r}: item {raw!r} has no name")
        count: int | None = None
        gtype = ""
        rest = [s for s in spec[1:] if s != "no_consume"]
        if rest and _COUNT.fullmatch(rest[-1]):
            count = int(rest.pop())
        elif rest and re.fullmatch(r"[0-9]{1,12}[KMGTP]", rest[-1]):
            count = _scaled(rest.pop())
        if len(rest) > 1:
            raise SlurmJsonError(f"GRES {text!r}: item {raw!r} has too many ':' parts (rule: name[:type][:count])")
        if rest:
            gtype = rest[0]
            if not gtype or gtype.isdigit():
                raise SlurmJsonError(f"GRES {text!r}: item {raw!r} has a malformed type {gtype!r}")
        indices: tuple[int, ...] | None = None
        if paren is not None:
            if paren.startswith("IDX:"):
                try:
                    indices = parse_index_list(paren[4:])
                except SlurmJsonError as exc:
                    raise SlurmJsonError(f"GRES {text!r}: item {raw!r}: {exc}") from exc
            elif paren.startswith("CNT:"):
                c = paren[4:]
                if not _COUNT.fullmatch(c):
                    raise SlurmJsonError(f"GRES {text!r}: item {raw!r}: CNT must be an integer")
                count = int(c) if count is None else count
            elif not paren.startswith("S:"):
                raise SlurmJsonError(f"GRES {text!r}: item {raw!r}: unknown '({paren})' (rule: IDX:, CNT: or S:)")
        items.append(GresItem(name, gtype, 1 if count is None else count, indices))
    return tuple(items)


def _scaled(s: str) -> int:
    mult = {"K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5}[s[-1]]
    return int(s[:-1]) * mult


def parse_gres_detail(entries: Sequence[str | None], nodes: Sequence[NodeName],
                      where: str = "gres_detail") -> tuple[tuple[NodeName, tuple[int, ...]], ...]:
    """Pair a job's ``gres_detail`` (one entry per allocated node, node order) with its node list.

    Entries without GPUs (null, ``""``, non-GPU GRES) give the node no GPUs and are left out.

    Raises:
        SlurmJsonError: more entries than nodes; a GPU entry without an ``IDX:`` list; an ``IDX``
            list whose length differs from the entry's count.
    """
    if len(entries) > len(nodes):
        raise SlurmJsonError(f"{where}: {len(entries)} entries for {len(nodes)} nodes {list(nodes)} "
                             "(rule: one entry per allocated node, in node order)")
    out: list[tuple[NodeName, tuple[int, ...]]] = []
    for node, entry in zip(nodes, entries, strict=False):
        idx: set[int] = set()
        for item in parse_gres(entry):
            if item.name != "gpu":
                continue
            if item.indices is None:
                if item.count:
                    raise SlurmJsonError(f"{where}: node {node}: {entry!r} has no IDX list "
                                         "(rule: GPUs must be configured with File= so Slurm tracks indices)")
                continue
            if len(item.indices) != item.count:
                raise SlurmJsonError(f"{where}: node {node}: {entry!r}: count {item.count} != "
                                     f"{len(item.indices)} indices")
            idx.update(item.indices)
        if idx:
            out.append((node, tuple(sorted(idx))))
    return tuple(out)


_TRES_GPU = re.compile(r"^gres[:/]gpu(?::(?P<type>[A-Za-z_][\w.-]*))?(?:[:=](?P<count>[0-9]{1,18}))?$")


def parse_tres_gpus(text: str | None, key: str = "tres") -> tuple[int | None, str]:
    """GPUs in a TRES request string (``gres:gpu:2``, ``gres/gpu:2``, ``gres/gpu:v100:2``, lists).

    The count follows ``:`` or ``=``: 25.11 prints a ``--gpus-per-task`` request as ``gres/gpu=1``
    and ``gres/gpu:v100=1`` (read as no GPU, and as a broken record, before this was known).

    Returns:
        ``(count, type)``: ``count`` is ``None`` when no GPU is requested (null, ``""`` or only other
        TRES); a GPU entry without a count counts 1; typed entries add up.

    Raises:
        SlurmJsonError: a ``gres…gpu`` entry that does not match ``gres[:/]gpu[:type][:count]``.
    """
    if text is None or not text.strip():
        return None, ""
    total: int | None = None
    gtype = ""
    for raw in text.split(","):
        item = raw.strip()
        if not re.match(r"^gres[:/]gpu(?:$|[:=])", item):
            continue
        m = _TRES_GPU.match(item)
        if not m:
            raise SlurmJsonError(f"{key} {text!r}: {item!r} must be gres/gpu[:type][:count] or [=count] "
                                 "(25.11) or gres:gpu[:type][:count] (22.05)")
        total = (total or 0) + int(m.group("count") or 1)
        gtype = gtype or (m.group("type") or "")
    return total, gtype


# --------------------------------------------------------------------------------------------------
# State mapping
