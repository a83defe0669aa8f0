"""The JSON dialects of Slurm's ``--json`` output, and the typed accessors every reader uses.

This module owns telling the dialects apart (:func:`detect_version`), the errors a document can
raise, the small accessors that read one field by the dialect's conventions and name the document
kind, subject, key and rule when it breaks one, and the mapping of Slurm's node and job states to
the core's. It reads no file, runs no command, reads no clock and does not log.

* **Slurm 22.05** (``openapi/v0.0.38``; ``sacct`` says ``openapi/dbv0.0.38``): ``meta.plugin.type``
  and ``meta.Slurm.version.{major,minor,micro}`` as ints; ``job_state`` a string; numbers plain ints
  or null; unset strings null or ``""`` (the recording has ``""``, the source allows null; both read as
  ``""``); ``tres_per_node`` like ``gres:gpu:2``; ``sinfo --json`` gives
  ``nodes[]``, one record per node, with a lower-case base ``state`` and ``state_flags[]``.
* **Slurm 23.02 to 25.11** (``data_parser/v0.0.39`` to ``v0.0.44``, :data:`DATA_PARSERS`: each
  release prints its own by default and accepts older ones with ``--json=v0.0.NN``):
  ``meta.plugin.data_parser`` and ``meta.slurm.version.{major,minor,micro}`` (strings; numbers
  accepted); ``job_state`` a list whose item 0 is the base state (v0.0.39: one word, as 22.05);
  numbers ``{"set", "infinite", "number"}``; unset strings ``""``; ``tres_per_node`` like
  ``gres/gpu:2``; ``sinfo -N --json`` gives ``sinfo[]`` (one record per node *per partition*), and
  ``scontrol show node --json`` gives ``nodes[]`` with ``state`` as a list.

Every field read here was compared across the recorded output of each data_parser version
(``tests/fixtures/slurm-json/<release>/``, see its README): the versions differ in keys this parser
does not read, so one set of accessors reads them all. The accessors take either shape where the
versions differ (a state as one word or as a list, a number plain or as ``{set, infinite, number}``).

Node state mapping (:func:`map_node_state`; base state and flags upper-cased first, 22.05's
``"drained"``/``"draining"`` spellings accepted as base states):

* ``DOWN`` when the base state is ``DOWN``, ``ERROR``, ``FUTURE``, ``UNKNOWN`` or anything not known
  here, or a flag says the node cannot run work: ``NOT_RESPONDING``, ``POWERED_DOWN``,
  ``POWERING_DOWN``, ``POWER_DOWN``, ``POWERING_UP``, ``REBOOT_ISSUED``, ``INVALID_REG``,
  ``DYNAMIC_FUTURE``.
* otherwise, when a flag drains the node (``DRAIN``, ``FAIL``, ``MAINTENANCE``,
  ``REBOOT_REQUESTED``) or the base state is ``DRAINING``/``DRAINED``: ``DRAINING`` while jobs still
  run there (base ``ALLOCATED``/``MIXED``/``DRAINING``, the ``COMPLETING`` flag, or GPUs in use),
  ``DOWN`` once it is empty (Slurm's "drained").
* otherwise ``UP`` (``IDLE``, ``ALLOCATED``, ``MIXED``, with flags such as ``COMPLETING``,
  ``PLANNED``, ``RESERVED``, ``CLOUD``, ``DYNAMIC_NORM``, ``UNDRAIN``, ``POWER_UP``).

Job state mapping (:func:`map_job_state`; 22.05 prints one word in which a flag hides the base state,
25.11 the base state then the flags):

* ``PREEMPTED`` for a ``PENDING`` job with the ``COMPLETING`` flag (25.11): it was just requeued
  and its processes are still being killed. It waits again, so it is not finished. 22.05 prints
  such a job as ``COMPLETING``, as it prints a job that ends; the observer tells them apart by the
  restart count (:class:`~slurm_elastic.observe.view.ClusterView`).
* ``FINISHED`` when a ``COMPLETING``, ``STAGE_OUT`` or ``REVOKED`` flag is set or the base state is
  terminal (``COMPLETED``, ``CANCELLED``, ``FAILED``, ``TIMEOUT``, ``NODE_FAIL``, ``PREEMPTED``,
  ``BOOT_FAIL``, ``DEADLINE``, ``OUT_OF_MEMORY``). A completing job's GPUs stay busy on its nodes
  (``gres_used``) but it is no longer a job to plan. :func:`has_settled` says when Slurm is done
  with it (terminal, no longer completing).
* ``RUNNING`` for ``RUNNING`` (with ``CONFIGURING``, ``RESIZING``, ``SIGNALING``, ``STOPPED`` …).
* ``PREEMPTED`` for ``SUSPENDED`` (it ran and now waits), for a ``PENDING`` job that was requeued
  (``REQUEUED``, ``REQUEUE_HOLD``, ``REQUEUE_FED``, ``SPECIAL_EXIT`` flags, or ``restart_cnt > 0``).
* ``PENDING`` for any other ``PENDING`` job.
* an unknown base state is an error.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from slurm_elastic.core.model import JobState, NodeState
from slurm_elastic.errors import ElasticError


class SlurmJsonError(ElasticError):
    """A Slurm JSON document breaks a rule this parser relies on (message: doc kind, job/node, key, rule)."""


class UnsupportedSlurmVersion(SlurmJsonError):  # noqa: N818 (the name the adapters and CLI use)
    """The document comes from a Slurm JSON dialect this parser does not read."""


class DocKind(enum.Enum):
    """Which command printed a document (named in every error message)."""

    SQUEUE = "squeue --json"
    SINFO = "sinfo --json"
    SACCT = "sacct --json"
    SCONTROL_JOB = "scontrol show job --json"
    SCONTROL_NODE = "scontrol show node --json"
    UNKNOWN = "Slurm JSON document"


class JsonDialect(enum.Enum):
    """The two families of Slurm's JSON, by the plugin that printed them."""

    OPENAPI_V0038 = "openapi/v0.0.38"
    """Slurm 22.05 (``sacct`` prints ``openapi/dbv0.0.38``, same conventions)."""
    DATA_PARSER = "data_parser"
    """Slurm 23.02 to 25.11: ``data_parser/v0.0.39`` to ``v0.0.44`` (:data:`DATA_PARSERS`)."""


DATA_PARSERS: dict[int, str] = {39: "23.02", 40: "23.11", 41: "24.05", 42: "24.11", 43: "25.05", 44: "25.11"}
"""The data_parser versions read (``data_parser/v0.0.NN`` by NN), each with the release that prints it by default."""

_SUPPORTED = ("openapi/v0.0.38 or openapi/dbv0.0.38 (Slurm 22.05) and data_parser/v0.0.39 to v0.0.44 "
              "(Slurm 23.02 to 25.11)")


@dataclass(frozen=True, slots=True)
class SlurmJsonVersion:
    """What :func:`detect_version` found in a document's ``meta``.

    Attributes:
        dialect: the JSON conventions to read the document with.
        plugin: the plugin string as printed (``openapi/dbv0.0.38``, ``data_parser/v0.0.42`` …).
        release: the printing Slurm's version ``(major, minor, micro)``.
    """

    dialect: JsonDialect
    plugin: str
    release: tuple[int, int, int]

    @property
    def is_legacy(self) -> bool:
        """True for 22.05's conventions (plain ints, string states, ``gres:`` TRES)."""
        return self.dialect is JsonDialect.OPENAPI_V0038

    def describe(self) -> str:
        """``data_parser/v0.0.42 (Slurm 24.11's default) from Slurm 25.11.7``, for status and check-config."""
        m = _DATA_PARSER.match(self.plugin)
        native = DATA_PARSERS.get(int(m.group(1))) if m else "22.05"
        return f"{self.plugin} (Slurm {native}'s default) from Slurm {release_text(self.release)}"


def release_text(release: Sequence[int]) -> str:
    """A release as Slurm writes it: ``(22, 5, 8)`` -> ``22.05.8``, ``(25, 11)`` -> ``25.11``."""
    return ".".join(f"{v:02d}" if i == 1 else str(v) for i, v in enumerate(release))



# Small typed accessors: every failure names the document kind, the subject, the key and the rule.


@dataclass(frozen=True, slots=True)
class Where:
    kind: DocKind
    subject: str  # "job 9", "node s01", "document"

    def error(self, key: str, rule: str) -> SlurmJsonError:
        return SlurmJsonError(f"{self.kind.value}: {self.subject}: key {key!r}: {rule}")


def require(obj: Mapping[str, Any], key: str, where: Where) -> Any:
    if key not in obj:
        raise where.error(key, "is missing")
    return obj[key]


def get_path(obj: Mapping[str, Any], dotted: str, where: Where) -> Any:
    """Follow ``a.b.c``; a missing key is an error naming the full path, a null value is returned."""
    cur: Any = obj
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        if not isinstance(cur, Mapping):
            raise where.error(".".join(parts[:i]), f"must be an object, got {typename(cur)}")
        if part not in cur:
            raise where.error(".".join(parts[: i + 1]), "is missing")
        cur = cur[part]
    return cur


def typename(value: object) -> str:
    return "null" if value is None else type(value).__name__


INT_LIMIT = 2**64
"""Slurm prints numbers of 64 bits at most (``NO_VAL64`` is ``2**64 - 2``): a larger one is refused."""
TIME_MAX = 2**40
"""Latest timestamp read (seconds since 1970, past the year 30000): a later one is refused, so
every time is an exact float."""


def _encodable(value: str, key: str, where: Where) -> str:
    """``value`` if it is text UTF-8 can encode (JSON's ``\\ud800`` escapes give lone surrogates,
    which no file name, log line or store row can hold)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise where.error(key, f"holds a lone surrogate at index {exc.start} (rule: text encodable as UTF-8), "
                          f"got {value[:100]!r}") from None
    return value


def as_str(value: object, key: str, where: Where) -> str:
    """A string field: null -> ``""`` (22.05 prints null for unset strings, 25.11 ``""``); text UTF-8 encodes."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise where.error(key, f"must be a string or null, got {typename(value)} {_short(value)}")
    return _encodable(value, key, where)


def _short(value: object) -> str:
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**30 else f"of {value.bit_length()} bits"
    return text if len(text) <= 200 else text[:200] + "..."


def _bounded(num: int, key: str, where: Where) -> int:
    if not -INT_LIMIT < num < INT_LIMIT:
        raise where.error(key, f"integer {_short(num)} out of range (rule: Slurm's numbers fit 64 bits)")
    return num


RESTART_MAX = 2**16 - 1
"""Slurm counts a job's requeues (``restart_cnt``, pyslurm's ``requeue_count``) in 16 bits."""


def restart_count_error(count: int) -> str | None:
    """Why ``count`` cannot be a job's requeue count (the rule it breaks), or None."""
    if 0 <= count <= RESTART_MAX:
        return None
    return f"{count} out of range (rule: 0 .. {RESTART_MAX}: Slurm counts requeues in 16 bits)"


def as_int(value: object, key: str, where: Where) -> int | None:
    """A number field: plain int or null (22.05), or ``{set, infinite, number}`` (25.11), within 64 bits.

    Returns ``None`` for null, ``set: false`` and ``infinite: true``.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise where.error(key, f"must be a number, got boolean {value!r}")
    if isinstance(value, int):
        return _bounded(value, key, where)
    if isinstance(value, Mapping):
        for k in ("set", "infinite", "number"):
            if k not in value:
                raise where.error(f"{key}.{k}", "is missing (25.11 numbers are {set, infinite, number})")
        if value["infinite"] is True or value["set"] is not True:
            return None
        num = value["number"]
        if isinstance(num, bool) or not isinstance(num, int):
            raise where.error(f"{key}.number", f"must be an integer, got {typename(num)} {_short(num)}")
        return _bounded(int(num), f"{key}.number", where)
    raise where.error(key, f"must be an integer, null or {{set, infinite, number}}, got {typename(value)} "
                      f"{_short(value)}")


def as_time(value: object, key: str, where: Where) -> int | None:
    """A timestamp: ``None`` when unset or 0 (Slurm's "never"); else ``0 < t <= TIME_MAX``."""
    t = as_int(value, key, where)
    if t and not 0 < t <= TIME_MAX:
        raise where.error(key, f"time {t} out of range (rule: 0 < seconds since 1970 <= 2**40)")
    return t if t else None


def as_states(value: object, key: str, where: Where) -> tuple[str, ...]:
    """A state, upper case: one word (22.05, data_parser v0.0.39) or a list, base state first (v0.0.40 on)."""
    words = (as_str(value, key, where),) if isinstance(value, str) else as_str_list(value, key, where)
    return tuple(w.upper() for w in words)


def as_str_list(value: object, key: str, where: Where) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise where.error(key, f"must be a list of strings, got {_short(value)}")
    return tuple(_encodable(v, key, where) for v in value)


# --------------------------------------------------------------------------------------------------
# Version detection


def detect_version(doc: Mapping[str, Any], kind: DocKind = DocKind.UNKNOWN) -> SlurmJsonVersion:
    """Identify the JSON dialect of a Slurm document from its ``meta``.

    Args:
        doc: a decoded ``squeue``/``sinfo``/``sacct``/``scontrol --json`` document.
        kind: the command that printed it (for error messages).

    Returns:
        The dialect and Slurm release.

    Raises:
        UnsupportedSlurmVersion: the plugin is not one of the supported ones (the message names what
            was found and what is supported).
        SlurmJsonError: ``meta`` is missing or malformed.
    """
    where = Where(kind, "document")
    if not isinstance(doc, Mapping):
        raise where.error("meta", f"the document must be a JSON object, got {typename(doc)}")
    meta = require(doc, "meta", where)
    if not isinstance(meta, Mapping):
        raise where.error("meta", f"must be an object, got {typename(meta)}")
    plugin = meta.get("plugin")
    if not isinstance(plugin, Mapping):
        raise where.error("meta.plugin", f"must be an object, got {typename(plugin)}")
    data_parser = plugin.get("data_parser") or ""
    ptype = plugin.get("type") or ""
    m = _DATA_PARSER.match(data_parser) if isinstance(data_parser, str) else None
    if m is not None and int(m.group(1)) in DATA_PARSERS:
        release = _release(meta, "slurm", (str, int), where)
        return SlurmJsonVersion(JsonDialect.DATA_PARSER, data_parser, release)
    if ptype in ("openapi/v0.0.38", "openapi/dbv0.0.38") and not data_parser:
        release = _release(meta, "Slurm", (int,), where)
        return SlurmJsonVersion(JsonDialect.OPENAPI_V0038, ptype, release)
    found = data_parser or ptype or "no plugin"
    slurm = meta.get("slurm") or meta.get("Slurm")
    rel = slurm.get("release") if isinstance(slurm, Mapping) else None
    raise UnsupportedSlurmVersion(
        f"{kind.value}: unsupported Slurm JSON dialect {found!r}"
        f"{f' (Slurm {rel})' if rel else ''}; supported: {_SUPPORTED}"
    )


_DATA_PARSER = re.compile(r"^(?:data_parser/)?v0\.0\.([0-9]{2})$")
"""25.11 prints ``data_parser/v0.0.44``, 24.05 just ``v0.0.41``."""


def _release(meta: Mapping[str, Any], key: str, types: tuple[type, ...], where: Where) -> tuple[int, int, int]:
    parts: list[int] = []
    for p in ("major", "minor", "micro"):
        v = get_path(meta, f"{key}.version.{p}", where)
        if isinstance(v, bool) or not isinstance(v, types):
            names = " or ".join(t.__name__ for t in types)
            raise where.error(f"meta.{key}.version.{p}", f"must be a {names}, got {typename(v)} {v!r}")
        if isinstance(v, str) and not (v.isascii() and v.isdigit() and len(v) <= 4):
            raise where.error(f"meta.{key}.version.{p}", f"must be a number, got {v[:50]!r}")
        parts.append(int(v))
        if not 0 <= parts[-1] < 10_000:
            raise where.error(f"meta.{key}.version.{p}", f"must be 0..9999, got {parts[-1]}")
    return (parts[0], parts[1], parts[2])


def check_errors(doc: Mapping[str, Any], kind: DocKind, *, tolerate: Iterable[str] = ()) -> None:
    """Refuse a document whose ``errors`` list is not empty (its lists could be partial)."""
    errors = doc.get("errors") or []
    if not isinstance(errors, list):
        raise Where(kind, "document").error("errors", f"must be a list, got {typename(errors)}")
    ok = set(tolerate)
    msgs = []
    for e in errors:
        if isinstance(e, Mapping):
            text = str(e.get("description") or e.get("error") or e)
            if text in ok:
                continue
        else:
            text = str(e)
        msgs.append(text)
    if msgs:
        raise SlurmJsonError(f"{kind.value}: Slurm reported errors, refusing a possibly partial answer: "
                             + "; ".join(msgs))


# --------------------------------------------------------------------------------------------------
# Hostlists and GRES strings

_NODE_DOWN_BASE = frozenset({"DOWN", "ERROR", "FUTURE", "UNKNOWN"})
_NODE_RUNNING_BASE = frozenset({"ALLOCATED", "MIXED", "DRAINING"})
_NODE_UP_BASE = frozenset({"IDLE", "ALLOCATED", "MIXED"})
_NODE_DOWN_FLAGS = frozenset({
    "NOT_RESPONDING", "POWERED_DOWN", "POWERING_DOWN", "POWER_DOWN", "POWERING_UP", "REBOOT_ISSUED",
    "INVALID_REG", "DYNAMIC_FUTURE",
})
_NODE_DRAIN_FLAGS = frozenset({"DRAIN", "FAIL", "MAINTENANCE", "REBOOT_REQUESTED"})


def map_node_state(base: str, flags: Iterable[str] = (), *, gpus_in_use: bool = False) -> NodeState:
    """Reduce a Slurm node state (base state plus flags) to a core :class:`NodeState`.

    See the module docstring for the table. Case is ignored.
    """
    b = base.strip().upper()
    fl = {f.strip().upper() for f in flags}
    if b not in _NODE_UP_BASE and b not in ("DRAINING", "DRAINED", "DRAIN"):
        return NodeState.DOWN
    if b in _NODE_DOWN_BASE or fl & _NODE_DOWN_FLAGS:
        return NodeState.DOWN
    if fl & _NODE_DRAIN_FLAGS or b in ("DRAINING", "DRAINED", "DRAIN"):
        busy = b in _NODE_RUNNING_BASE or "COMPLETING" in fl or gpus_in_use
        return NodeState.DRAINING if busy and b != "DRAINED" else NodeState.DOWN
    return NodeState.UP


_JOB_TERMINAL = frozenset({
    "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE",
    "OUT_OF_MEMORY",
})
_JOB_ENDING_FLAGS = frozenset({"COMPLETING", "STAGE_OUT", "REVOKED"})
_JOB_REQUEUE_FLAGS = frozenset({"REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SPECIAL_EXIT"})
# 22.05 prints a flag instead of the base state for these; the base they imply:
_LEGACY_FLAG_BASE = {
    "CONFIGURING": "RUNNING", "RESIZING": "RUNNING", "SIGNALING": "RUNNING", "STOPPED": "RUNNING",
    "REQUEUED": "PENDING", "REQUEUE_HOLD": "PENDING", "REQUEUE_FED": "PENDING", "SPECIAL_EXIT": "PENDING",
    "RESV_DEL_HOLD": "PENDING", "COMPLETING": "COMPLETED", "STAGE_OUT": "COMPLETED", "REVOKED": "CANCELLED",
}


def _base_and_flags(states: Sequence[str]) -> tuple[str, set[str]]:
    if not states:
        raise SlurmJsonError("job_state: empty (rule: base state first)")
    words = [s.strip().upper() for s in states]
    base, flags = words[0], set(words[1:])
    if base in _LEGACY_FLAG_BASE:
        flags.add(base)
        base = _LEGACY_FLAG_BASE[base]
    return base, flags


def has_settled(states: Sequence[str]) -> bool:
    """Whether Slurm is done with a job in this state: terminal, and no longer completing (a job
    that is completing may still be requeued, or be a requeue under way).

    Raises:
        SlurmJsonError: the list is empty.
    """
    base, flags = _base_and_flags(states)
    return base in _JOB_TERMINAL and not flags & _JOB_ENDING_FLAGS


def is_bare_completing(states: Sequence[str]) -> bool:
    """Whether the state is the one word ``COMPLETING`` (22.05): the job's processes are being
    killed, and the state does not say whether it ends or was requeued (25.11 says it: a requeue
    under way is ``PENDING`` with the ``COMPLETING`` flag, an end its terminal state with the flag)."""
    return len(states) == 1 and states[0] == "COMPLETING"


def map_job_state(states: Sequence[str], restart_count: int = 0) -> JobState:
    """Reduce a Slurm job state (25.11: base then flags; 22.05: one word) to a core :class:`JobState`.

    Raises:
        SlurmJsonError: the list is empty or the base state is unknown.
    """
    base, flags = _base_and_flags(states)
    if base == "PENDING" and "COMPLETING" in flags:
        return JobState.PREEMPTED
    if flags & _JOB_ENDING_FLAGS or base in _JOB_TERMINAL:
        return JobState.FINISHED
    if base == "RUNNING":
        return JobState.RUNNING
    if base == "SUSPENDED":
        return JobState.PREEMPTED
    if base == "PENDING":
        return JobState.PREEMPTED if (flags & _JOB_REQUEUE_FLAGS or restart_count > 0) else JobState.PENDING
    raise SlurmJsonError(f"job_state {list(states)!r}: unknown base state {base!r}")


# --------------------------------------------------------------------------------------------------
# Nodes

