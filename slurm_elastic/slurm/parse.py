"""Pure parsing of Slurm's JSON (``squeue``/``sinfo``/``sacct``/``scontrol … --json``) into records and snapshots.

This module owns the reading of the JSON documents Slurm prints, for the two dialects the project
supports, and the reduction of what it reads to the core's vocabulary:

* **Slurm 22.05** (``openapi/v0.0.38``; ``sacct`` says ``openapi/dbv0.0.38``): ``meta.plugin.type``
  and ``meta.Slurm.version.{major,minor,micro}`` as ints; ``job_state`` a string; numbers plain ints
  or null; unset strings null or ``""`` (the recording has ``""``, the source allows null; both read as
  ``""``); ``tres_per_node`` like ``gres:gpu:2``; ``sinfo --json`` gives
  ``nodes[]``, one record per node, with a lower-case base ``state`` and ``state_flags[]``.
* **Slurm 25.11** (``data_parser/v0.0.44``): ``meta.plugin.data_parser`` and
  ``meta.slurm.version.{major,minor,micro}`` as strings; ``job_state`` a list whose item 0 is the base
  state; numbers ``{"set", "infinite", "number"}``; unset strings ``""``; ``tres_per_node`` like
  ``gres/gpu:2``; ``sinfo -N --json`` gives ``sinfo[]`` (one record per node *per partition*), and
  ``scontrol show node --json`` gives ``nodes[]`` with ``state`` as a list.

Other data_parser versions (v0.0.39–v0.0.43, from Slurm 23.02–25.05, or chosen with
``--json=v0.0.4x``) are refused: the GPU fields of v0.0.41–v0.0.43 matched v0.0.44 in the one test
recorded in ``SLURM-FACTS.md`` §8, but that does not cover the node, state and accounting fields read
here, nor the older releases that emit them natively.

What this module must not do: run commands, read files, read the clock or the environment, or log.
Running ``squeue``/``sinfo``/``sacct`` is :mod:`slurm_elastic.slurm.cli`'s job; it hands the decoded
documents here. Every error is a :class:`SlurmJsonError` whose message names the document kind, the
job or node, the key and the rule broken.

Job ids (:attr:`JobRecord.job_id`) are the ids ``squeue`` prints and ``scontrol`` accepts:

* a plain job: ``"123"``;
* an array task: ``"<array_job_id>_<array_task_id>"`` (e.g. ``"100_7"``); a pending array record
  not yet split into tasks: ``"<array_job_id>_[<array_task_string>]"`` (e.g. ``"100_[3-9]"``);
* a heterogeneous-job component: ``"<het_job_id>+<het_job_offset>"`` (e.g. ``"200+1"``).

The numeric Slurm id of the record is kept in :attr:`JobRecord.slurm_job_id`.

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

* ``FINISHED`` when a ``COMPLETING``, ``STAGE_OUT`` or ``REVOKED`` flag is set or the base state is
  terminal (``COMPLETED``, ``CANCELLED``, ``FAILED``, ``TIMEOUT``, ``NODE_FAIL``, ``PREEMPTED``,
  ``BOOT_FAIL``, ``DEADLINE``, ``OUT_OF_MEMORY``). A completing job's GPUs stay busy on its nodes
  (``gres_used``) but it is no longer a job to plan.
* ``RUNNING`` for ``RUNNING`` (with ``CONFIGURING``, ``RESIZING``, ``SIGNALING``, ``STOPPED`` …).
* ``PREEMPTED`` for ``SUSPENDED`` (it ran and now waits), for a ``PENDING`` job that was requeued
  (``REQUEUED``, ``REQUEUE_HOLD``, ``REQUEUE_FED``, ``SPECIAL_EXIT`` flags, or ``restart_cnt > 0``).
* ``PENDING`` for any other ``PENDING`` job.
* an unknown base state is an error.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from slurm_elastic.core.model import (
    ClusterSnapshot,
    ElasticMode,
    Job,
    JobId,
    JobState,
    Node,
    NodeName,
    NodeState,
    Placement,
    ProgressReport,
)
from slurm_elastic.errors import ElasticError
from slurm_elastic_predictor.profiles import MODEL_DEFAULTS
from slurm_elastic_predictor.throughput import ThroughputModel

__all__ = [
    "ELASTIC_TAG",
    "AccountingRecord",
    "DocKind",
    "ElasticRequest",
    "GpuRequest",
    "JobRecord",
    "JobRuntime",
    "JsonDialect",
    "NodeRecord",
    "SlurmJsonError",
    "SlurmJsonVersion",
    "UnsupportedSlurmVersion",
    "build_snapshot",
    "detect_version",
    "expand_hostlist",
    "map_job_state",
    "map_node_state",
    "parse_elastic_request",
    "parse_gres",
    "parse_gres_detail",
    "parse_index_list",
    "parse_jobs",
    "parse_nodes",
    "parse_sacct",
    "parse_tres_gpus",
]

ELASTIC_TAG = "slurm-elastic"
"""First token of an elastic job's AdminComment (written by job_submit.lua / the daemon)."""


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
    """The two supported JSON dialects, by the plugin that printed them."""

    OPENAPI_V0038 = "openapi/v0.0.38"
    """Slurm 22.05 (``sacct`` prints ``openapi/dbv0.0.38``, same conventions)."""
    DATA_PARSER_V0044 = "data_parser/v0.0.44"
    """Slurm 25.11."""


_SUPPORTED = "openapi/v0.0.38 or openapi/dbv0.0.38 (Slurm 22.05) and data_parser/v0.0.44 (Slurm 25.11)"


@dataclass(frozen=True, slots=True)
class SlurmJsonVersion:
    """What :func:`detect_version` found in a document's ``meta``.

    Attributes:
        dialect: the JSON conventions to read the document with.
        plugin: the plugin string as printed (``openapi/dbv0.0.38`` …).
        release: Slurm version ``(major, minor, micro)``.
    """

    dialect: JsonDialect
    plugin: str
    release: tuple[int, int, int]

    @property
    def is_legacy(self) -> bool:
        """True for 22.05's conventions (plain ints, string states, ``gres:`` TRES)."""
        return self.dialect is JsonDialect.OPENAPI_V0038


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """One node as Slurm reports it.

    Attributes:
        name: Slurm node name.
        state: reduced scheduling state (see the module docstring for the mapping).
        slurm_state: base state then flags as Slurm printed them, upper case (``("MIXED", "DRAIN")``).
        gpus: GPUs configured (sum of the ``gpu`` entries of ``gres``).
        gpu_types: GPU types named in ``gres`` (``("v100",)``; empty when untyped).
        used_gpus: indices of GPUs allocated to jobs, from ``gres_used`` ``IDX:`` lists, sorted.
        partitions: partitions the node belongs to, sorted.
        reason: the drain/down reason (``""`` if none).
    """

    name: NodeName
    state: NodeState
    slurm_state: tuple[str, ...]
    gpus: int
    gpu_types: tuple[str, ...]
    used_gpus: tuple[int, ...]
    partitions: tuple[str, ...]
    reason: str = ""

    @property
    def free_gpus(self) -> tuple[int, ...]:
        """GPU indices no job holds according to ``gres_used``."""
        used = set(self.used_gpus)
        return tuple(g for g in range(self.gpus) if g not in used)


@dataclass(frozen=True, slots=True)
class GpuRequest:
    """The GPUs a job asked for (``--gres``/``--gpus-per-node``, ``--gpus``, ``--gpus-per-task``).

    Attributes:
        per_node: from ``tres_per_node`` (``None`` if no GPU is asked per node).
        per_job: from ``tres_per_job``.
        per_task: from ``tres_per_task``.
        gpu_type: GPU type named in the request (``"v100"``), ``""`` if none.
    """

    per_node: int | None = None
    per_job: int | None = None
    per_task: int | None = None
    gpu_type: str = ""

    def total(self, node_count: int, tasks: int | None) -> int:
        """GPUs of the whole request: per job, else per node x nodes, else per task x tasks, else 0."""
        if self.per_job is not None:
            return self.per_job
        if self.per_node is not None:
            return self.per_node * max(1, node_count)
        if self.per_task is not None:
            return self.per_task * max(1, tasks or 1)
        return 0


@dataclass(frozen=True, slots=True)
class JobRecord:
    """One job as ``squeue --json`` (or ``scontrol show job --json``) reports it.

    Attributes:
        job_id: display id (plain, ``array_task`` or ``het+offset``; see the module docstring).
        slurm_job_id: the record's numeric Slurm job id.
        name: job name.
        user: owner's user name.
        account: account charged.
        partition: partition (comma list while pending on several).
        state: reduced life-cycle state (see the module docstring).
        slurm_state: base state then flags, as printed (22.05: the one word printed).
        submit_time: seconds since the epoch, ``None`` if unset.
        start_time: seconds since the epoch, ``None`` if unset (for pending jobs Slurm reports the
            *expected* start here).
        resize_time: when the allocation last changed size, ``None`` if never.
        nodes: allocated nodes, hostlist expanded, in Slurm's node order.
        node_count: nodes allocated (or requested while pending).
        tasks: tasks requested, ``None`` if unset.
        gpus: per allocated node, the GPU indices held (from ``gres_detail``, node order).
        gpu_request: what the job asked for.
        admin_comment: AdminComment (``""`` if unset).
        comment: user comment (``""`` if unset).
        batch_host: node running the batch script, ``None`` if none.
        restart_count: times the job was requeued.
        array_job_id, array_task_id: array ids (``None`` if not an array task).
        het_job_id, het_job_offset: heterogeneous-job ids (``None`` if not a het job).
        release_blocks: for a running launcher job, the GPU counts Slurm can free one at a time
            (a node of its own allocation other than the batch host, a whole satellite); ``None``
            when any count can go (set by :func:`slurm_elastic.slurm.satellites.fold`).
    """

    job_id: JobId
    slurm_job_id: int
    name: str
    user: str
    account: str
    partition: str
    state: JobState
    slurm_state: tuple[str, ...]
    submit_time: int | None
    start_time: int | None
    resize_time: int | None
    nodes: tuple[NodeName, ...]
    node_count: int
    tasks: int | None
    gpus: tuple[tuple[NodeName, tuple[int, ...]], ...]
    gpu_request: GpuRequest
    admin_comment: str
    comment: str
    batch_host: str | None
    restart_count: int = 0
    array_job_id: int | None = None
    array_task_id: int | None = None
    het_job_id: int | None = None
    het_job_offset: int | None = None
    release_blocks: tuple[int, ...] | None = None

    @property
    def placement(self) -> Placement:
        """The GPUs held, as a core :class:`Placement`."""
        return Placement.of((n, g) for n, gs in self.gpus for g in gs)

    @property
    def allocated_gpus(self) -> int:
        """GPUs held now (0 unless running)."""
        return sum(len(gs) for _, gs in self.gpus)

    @property
    def requested_gpus(self) -> int:
        """GPUs of the request (see :meth:`GpuRequest.total`)."""
        return self.gpu_request.total(self.node_count, self.tasks)


@dataclass(frozen=True, slots=True)
class AccountingRecord:
    """One job as ``sacct --json`` reports it.

    Attributes:
        job_id: display id, as for :class:`JobRecord`.
        slurm_job_id: numeric Slurm job id.
        name: job name.
        user, account, partition: as in Slurm.
        state: reduced state.
        slurm_state: state as printed (``state.current``).
        submit_time, start_time, end_time: seconds since the epoch, ``None`` if unset (0).
        elapsed: seconds the job ran (``time.elapsed``).
        allocated_gpus: ``tres.allocated`` entry of type ``gres`` named ``gpu`` (0 if absent).
        nodes: nodes, hostlist expanded (empty if none).
        admin_comment: ``comment.administrator`` (``""`` if unset).
    """

    job_id: JobId
    slurm_job_id: int
    name: str
    user: str
    account: str
    partition: str
    state: JobState
    slurm_state: tuple[str, ...]
    submit_time: int | None
    start_time: int | None
    end_time: int | None
    elapsed: int
    allocated_gpus: int
    nodes: tuple[NodeName, ...]
    admin_comment: str


@dataclass(frozen=True, slots=True)
class ElasticRequest:
    """An elastic job's contract, read from its AdminComment.

    Format: ``slurm-elastic gpus=MIN:MAX [batch=MIN:MAX] [mode=exo|endo]``. ``MAX = 0`` means no
    maximum (``None`` here). ``mode`` defaults to ``exo``.

    Attributes:
        min_gpus: fewest GPUs the job can run on (>= 1).
        max_gpus: most GPUs it can use, ``None`` for no limit.
        min_batch: smallest global batch (samples), ``None`` if not given.
        max_batch: largest global batch (samples), ``None`` if not given or no limit.
        mode: exo- or endo-elastic.
    """

    min_gpus: int
    max_gpus: int | None
    min_batch: int | None = None
    max_batch: int | None = None
    mode: ElasticMode = ElasticMode.EXO


@dataclass(frozen=True, slots=True)
class JobRuntime:
    """What the daemon knows about a running job beyond Slurm (from its store and the launcher).

    Every field is optional; :func:`build_snapshot` falls back to documented defaults.

    Attributes:
        model: throughput-profile key (``ClusterSnapshot.profiles``).
        epoch_size: samples per epoch.
        samples_processed: samples trained so far.
        local_batch: per-GPU batch now (samples).
        base_lr: learning rate at the base batch.
        target_epochs: epochs the user declared.
        observed_throughput: samples/s measured at the current placement.
        last_change_time: when the allocation last changed (seconds since the epoch).
        samples_at_last_change: ``samples_processed`` at ``last_change_time``.
        run_time: seconds executed so far (overrides ``now - start_time``).
        progress: latest loss/metric report.
    """

    model: str | None = None
    epoch_size: int | None = None
    samples_processed: int = 0
    local_batch: int | None = None
    base_lr: float | None = None
    target_epochs: float | None = None
    observed_throughput: float | None = None
    last_change_time: float | None = None
    samples_at_last_change: int = 0
    run_time: float | None = None
    progress: ProgressReport = field(default_factory=ProgressReport)


# --------------------------------------------------------------------------------------------------
# Small typed accessors: every failure names the document kind, the subject, the key and the rule.


@dataclass(frozen=True, slots=True)
class _Where:
    kind: DocKind
    subject: str  # "job 9", "node s01", "document"

    def error(self, key: str, rule: str) -> SlurmJsonError:
        return SlurmJsonError(f"{self.kind.value}: {self.subject}: key {key!r}: {rule}")


def _require(obj: Mapping[str, Any], key: str, where: _Where) -> Any:
    if key not in obj:
        raise where.error(key, "is missing")
    return obj[key]


def _get_path(obj: Mapping[str, Any], dotted: str, where: _Where) -> Any:
    """Follow ``a.b.c``; a missing key is an error naming the full path, a null value is returned."""
    cur: Any = obj
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        if not isinstance(cur, Mapping):
            raise where.error(".".join(parts[:i]), f"must be an object, got {_typename(cur)}")
        if part not in cur:
            raise where.error(".".join(parts[: i + 1]), "is missing")
        cur = cur[part]
    return cur


def _typename(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _str(value: object, key: str, where: _Where) -> str:
    """A string field: null -> ``""`` (22.05 prints null for unset strings, 25.11 ``""``)."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise where.error(key, f"must be a string or null, got {_typename(value)} {value!r}")
    return value


def _int(value: object, key: str, where: _Where) -> int | None:
    """A number field: plain int or null (22.05), or ``{set, infinite, number}`` (25.11).

    Returns ``None`` for null, ``set: false`` and ``infinite: true``.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise where.error(key, f"must be a number, got boolean {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, Mapping):
        for k in ("set", "infinite", "number"):
            if k not in value:
                raise where.error(f"{key}.{k}", "is missing (25.11 numbers are {set, infinite, number})")
        if value["infinite"] is True or value["set"] is not True:
            return None
        num = value["number"]
        if isinstance(num, bool) or not isinstance(num, int):
            raise where.error(f"{key}.number", f"must be an integer, got {_typename(num)} {num!r}")
        return int(num)
    raise where.error(key, f"must be an integer, null or {{set, infinite, number}}, got {_typename(value)} {value!r}")


def _time(value: object, key: str, where: _Where) -> int | None:
    """A timestamp: ``None`` when unset or 0 (Slurm's "never")."""
    t = _int(value, key, where)
    return t if t else None


def _str_list(value: object, key: str, where: _Where) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise where.error(key, f"must be a list of strings, got {value!r}")
    return tuple(value)


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
    where = _Where(kind, "document")
    if not isinstance(doc, Mapping):
        raise where.error("meta", f"the document must be a JSON object, got {_typename(doc)}")
    meta = _require(doc, "meta", where)
    if not isinstance(meta, Mapping):
        raise where.error("meta", f"must be an object, got {_typename(meta)}")
    plugin = meta.get("plugin")
    if not isinstance(plugin, Mapping):
        raise where.error("meta.plugin", f"must be an object, got {_typename(plugin)}")
    data_parser = plugin.get("data_parser") or ""
    ptype = plugin.get("type") or ""
    if data_parser == JsonDialect.DATA_PARSER_V0044.value:
        release = _release(meta, "slurm", str, where)
        return SlurmJsonVersion(JsonDialect.DATA_PARSER_V0044, data_parser, release)
    if ptype in ("openapi/v0.0.38", "openapi/dbv0.0.38") and not data_parser:
        release = _release(meta, "Slurm", int, where)
        return SlurmJsonVersion(JsonDialect.OPENAPI_V0038, ptype, release)
    found = data_parser or ptype or "no plugin"
    slurm = meta.get("slurm") or meta.get("Slurm")
    rel = slurm.get("release") if isinstance(slurm, Mapping) else None
    raise UnsupportedSlurmVersion(
        f"{kind.value}: unsupported Slurm JSON dialect {found!r}"
        f"{f' (Slurm {rel})' if rel else ''}; supported: {_SUPPORTED}"
    )


def _release(meta: Mapping[str, Any], key: str, typ: type, where: _Where) -> tuple[int, int, int]:
    parts: list[int] = []
    for p in ("major", "minor", "micro"):
        v = _get_path(meta, f"{key}.version.{p}", where)
        if isinstance(v, bool) or not isinstance(v, typ):
            raise where.error(f"meta.{key}.version.{p}", f"must be a {typ.__name__}, got {_typename(v)} {v!r}")
        try:
            parts.append(int(v))
        except ValueError as exc:
            raise where.error(f"meta.{key}.version.{p}", f"must be a number, got {v!r}") from exc
    return (parts[0], parts[1], parts[2])


def _check_errors(doc: Mapping[str, Any], kind: DocKind, *, tolerate: Iterable[str] = ()) -> None:
    """Refuse a document whose ``errors`` list is not empty (its lists could be partial)."""
    errors = doc.get("errors") or []
    if not isinstance(errors, list):
        raise _Where(kind, "document").error("errors", f"must be a list, got {_typename(errors)}")
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


_HOST_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


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
        width = len(lo_s)
        values.extend(f"{v:0{width}d}" for v in range(lo, hi + 1))
    tails = _expand_host(rest, whole) if rest else [""]
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
        out.update(range(lo, hi + 1))
    return tuple(sorted(out))


@dataclass(frozen=True, slots=True)
class _GresItem:
    name: str
    gtype: str
    count: int
    indices: tuple[int, ...] | None  # None when no IDX: was printed


_GRES_ITEM = re.compile(r"^(?P<spec>[^()]+?)(?:\((?P<paren>[^()]*)\))?$")


def parse_gres(text: str | None) -> tuple[_GresItem, ...]:
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
    items: list[_GresItem] = []
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
        if rest and rest[-1].isdigit():
            count = int(rest.pop())
        elif rest and re.fullmatch(r"\d+[KMGTP]", rest[-1]):
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
                if not c.isdigit():
                    raise SlurmJsonError(f"GRES {text!r}: item {raw!r}: CNT must be an integer")
                count = int(c) if count is None else count
            elif not paren.startswith("S:"):
                raise SlurmJsonError(f"GRES {text!r}: item {raw!r}: unknown '({paren})' (rule: IDX:, CNT: or S:)")
        items.append(_GresItem(name, gtype, 1 if count is None else count, indices))
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


_TRES_GPU = re.compile(r"^gres[:/]gpu(?::(?P<type>[A-Za-z_][\w.-]*))?(?::(?P<count>\d+))?$")


def parse_tres_gpus(text: str | None, key: str = "tres") -> tuple[int | None, str]:
    """GPUs in a TRES request string (``gres:gpu:2``, ``gres/gpu:2``, ``gres/gpu:v100:2``, lists).

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
        if not re.match(r"^gres[:/]gpu(?:$|:)", item):
            continue
        m = _TRES_GPU.match(item)
        if not m:
            raise SlurmJsonError(f"{key} {text!r}: {item!r} must be gres/gpu[:type][:count] "
                                 "(25.11) or gres:gpu[:type][:count] (22.05)")
        total = (total or 0) + int(m.group("count") or 1)
        gtype = gtype or (m.group("type") or "")
    return total, gtype


# --------------------------------------------------------------------------------------------------
# State mapping

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


def map_job_state(states: Sequence[str], restart_count: int = 0) -> JobState:
    """Reduce a Slurm job state (25.11: base then flags; 22.05: one word) to a core :class:`JobState`.

    Raises:
        SlurmJsonError: the list is empty or the base state is unknown.
    """
    if not states:
        raise SlurmJsonError("job_state: empty (rule: base state first)")
    words = [s.strip().upper() for s in states]
    base, flags = words[0], set(words[1:])
    if base in _LEGACY_FLAG_BASE:
        flags.add(base)
        base = _LEGACY_FLAG_BASE[base]
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


def parse_nodes(doc: Mapping[str, Any]) -> list[NodeRecord]:
    """Read nodes from ``sinfo --json`` (22.05), ``sinfo -N --json`` or ``scontrol show node --json`` (25.11).

    25.11's ``sinfo -N`` lists a node once per partition; the records are merged (partitions united)
    and must agree on state and GRES. A 25.11 ``sinfo --json`` record grouping several nodes is
    refused: sinfo groups nodes whose GRES totals may differ (it compares them only when its format
    prints them), so per-node GPUs cannot be trusted; use ``sinfo -N --json``.

    Returns:
        Nodes sorted by name.

    Raises:
        UnsupportedSlurmVersion: unknown dialect.
        SlurmJsonError: a missing key, malformed GRES, disagreeing duplicates, or Slurm errors.
    """
    kind = DocKind.SCONTROL_NODE if "sinfo" not in doc and _command(doc) == "show" else DocKind.SINFO
    version = detect_version(doc, kind)
    _check_errors(doc, kind)
    where = _Where(kind, "document")
    records: list[NodeRecord] = []
    if version.is_legacy:
        nodes = _require(doc, "nodes", where)
        records = [_node_object(n, kind, legacy=True) for n in _list_of_objects(nodes, "nodes", where)]
    elif "sinfo" in doc:
        rows = _list_of_objects(doc["sinfo"], "sinfo", where)
        records = [_sinfo_row(r, i) for i, r in enumerate(rows)]
    else:
        nodes = _require(doc, "nodes", where)
        records = [_node_object(n, kind, legacy=False) for n in _list_of_objects(nodes, "nodes", where)]
    merged: dict[str, NodeRecord] = {}
    for rec in records:
        prev = merged.get(rec.name)
        if prev is None:
            merged[rec.name] = rec
            continue
        if (prev.slurm_state, prev.gpus, prev.used_gpus, prev.gpu_types) != (
                rec.slurm_state, rec.gpus, rec.used_gpus, rec.gpu_types):
            raise _Where(kind, f"node {rec.name}").error(
                "state/gres", "listed twice with different state or GRES (rule: one snapshot per document)")
        parts = tuple(sorted(set(prev.partitions) | set(rec.partitions)))
        merged[rec.name] = NodeRecord(prev.name, prev.state, prev.slurm_state, prev.gpus, prev.gpu_types,
                                      prev.used_gpus, parts, prev.reason)
    return [merged[k] for k in sorted(merged)]


def _command(doc: Mapping[str, Any]) -> str:
    meta = doc.get("meta")
    cmd = meta.get("command") if isinstance(meta, Mapping) else None
    return cmd[0] if isinstance(cmd, list) and cmd and isinstance(cmd[0], str) else ""


def _list_of_objects(value: object, key: str, where: _Where) -> list[Mapping[str, Any]]:
    if not isinstance(value, list):
        raise where.error(key, f"must be a list, got {_typename(value)}")
    for i, v in enumerate(value):
        if not isinstance(v, Mapping):
            raise where.error(f"{key}[{i}]", f"must be an object, got {_typename(v)}")
    return value


def _node_gpus(gres: str | None, used: str | None, where: _Where) -> tuple[int, tuple[str, ...], tuple[int, ...]]:
    try:
        total_items = [g for g in parse_gres(gres) if g.name == "gpu"]
        used_items = [g for g in parse_gres(used) if g.name == "gpu"]
    except SlurmJsonError as exc:
        raise where.error("gres/gres_used", str(exc)) from exc
    total = sum(g.count for g in total_items)
    types = tuple(sorted({g.gtype for g in total_items if g.gtype}))
    idx: set[int] = set()
    for g in used_items:
        if g.indices is None:
            if g.count:
                raise where.error("gres_used", f"{used!r} has no IDX list (rule: GPUs configured with File=)")
            continue
        if len(g.indices) != g.count:
            raise where.error("gres_used", f"{used!r}: count {g.count} != {len(g.indices)} indices")
        idx.update(g.indices)
    bad = sorted(i for i in idx if i >= total)
    if bad:
        raise where.error("gres_used", f"{used!r}: indices {bad} beyond the node's {total} GPUs ({gres!r})")
    return total, types, tuple(sorted(idx))


def _node_object(n: Mapping[str, Any], kind: DocKind, *, legacy: bool) -> NodeRecord:
    name = _str(_require(n, "name", _Where(kind, "node ?")), "name", _Where(kind, "node ?"))
    if not name:
        raise _Where(kind, "node ?").error("name", "must not be empty")
    where = _Where(kind, f"node {name}")
    raw_state = _require(n, "state", where)
    if legacy:
        base = _str(raw_state, "state", where)
        flags = _str_list(n.get("state_flags"), "state_flags", where)
        states = (base.upper(), *(f.upper() for f in flags))
    else:
        states = tuple(s.upper() for s in _str_list(raw_state, "state", where))
        if not states:
            raise where.error("state", "is an empty list (rule: base state first)")
    gres = _str(_require(n, "gres", where), "gres", where)
    used = _str(_require(n, "gres_used", where), "gres_used", where)
    total, types, used_idx = _node_gpus(gres, used, where)
    parts = _str_list(_require(n, "partitions", where), "partitions", where)
    state = map_node_state(states[0], states[1:], gpus_in_use=bool(used_idx))
    return NodeRecord(NodeName(name), state, states, total, types, used_idx, tuple(sorted(set(parts))),
                      _str(n.get("reason"), "reason", where))


def _sinfo_row(r: Mapping[str, Any], i: int) -> NodeRecord:
    where = _Where(DocKind.SINFO, f"sinfo[{i}]")
    names = _str_list(_get_path(r, "nodes.nodes", where), "nodes.nodes", where)
    if len(names) != 1:
        raise where.error("nodes.nodes", f"lists {len(names)} nodes {list(names)} (rule: one node per record: "
                          "run `sinfo -N --json`; grouped records may merge nodes with different GRES)")
    name = names[0]
    where = _Where(DocKind.SINFO, f"node {name}")
    states = tuple(s.upper() for s in _str_list(_get_path(r, "node.state", where), "node.state", where))
    if not states:
        raise where.error("node.state", "is an empty list (rule: base state first)")
    gres = _str(_get_path(r, "gres.total", where), "gres.total", where)
    used = _str(_get_path(r, "gres.used", where), "gres.used", where)
    total, types, used_idx = _node_gpus(gres, used, where)
    part = _str(_get_path(r, "partition.name", where), "partition.name", where)
    reason = r.get("reason")
    desc = _str(reason.get("description"), "reason.description", where) if isinstance(reason, Mapping) else ""
    state = map_node_state(states[0], states[1:], gpus_in_use=bool(used_idx))
    return NodeRecord(NodeName(name), state, states, total, types, used_idx, (part,) if part else (), desc)


# --------------------------------------------------------------------------------------------------
# Jobs


def parse_jobs(doc: Mapping[str, Any]) -> list[JobRecord]:
    """Read jobs from ``squeue --json`` (22.05 or 25.11) or ``scontrol show job --json`` (25.11).

    Returns:
        Jobs in document order.

    Raises:
        UnsupportedSlurmVersion: unknown dialect.
        SlurmJsonError: a missing key (named with the job id), a malformed state, GRES or TRES string,
            a hostlist that does not parse, or errors reported by Slurm.
    """
    kind = DocKind.SCONTROL_JOB if _command(doc) == "show" else DocKind.SQUEUE
    version = detect_version(doc, kind)
    _check_errors(doc, kind)
    jobs = _list_of_objects(_require(doc, "jobs", _Where(kind, "document")), "jobs", _Where(kind, "document"))
    return [_job(j, kind, version) for j in jobs]


def _raw_id(j: Mapping[str, Any]) -> str:
    raw = j.get("job_id")
    if isinstance(raw, Mapping):
        raw = raw.get("number")
    return str(raw) if isinstance(raw, int) else "?"


def _job_ids(j: Mapping[str, Any], where: _Where, *, array_key: str, task_key: str, task_str_key: str | None,
             het_key: str, offset_key: str) -> tuple[JobId, int, int | None, int | None, int | None, int | None]:
    jid = _int(_require(j, "job_id", where), "job_id", where)
    if jid is None:
        raise where.error("job_id", "must be set")
    array_id = _int(_get_path(j, array_key, where), array_key, where) or None
    task_id = _int(_get_path(j, task_key, where), task_key, where)
    if task_id is not None and task_id >= 0xFFFFFFFE:  # NO_VAL / INFINITE printed as plain ints
        task_id = None
    het_id = _int(_get_path(j, het_key, where), het_key, where) or None
    offset = _int(_get_path(j, offset_key, where), offset_key, where)
    if offset is not None and offset >= 0xFFFFFFFE:
        offset = None
    if het_id is not None:
        display = f"{het_id}+{offset or 0}"
    elif array_id is not None and task_id is not None:
        display = f"{array_id}_{task_id}"
    elif array_id is not None:
        tasks = _str(j.get(task_str_key), task_str_key, where) if task_str_key else ""
        display = f"{array_id}_[{tasks}]" if tasks else str(jid)
    else:
        display = str(jid)
    return JobId(display), jid, array_id, (task_id if array_id is not None else None), het_id, (
        offset if het_id is not None else None)


def _job(j: Mapping[str, Any], kind: DocKind, version: SlurmJsonVersion) -> JobRecord:
    where = _Where(kind, f"job {_raw_id(j)}")
    display, jid, array_id, task_id, het_id, offset = _job_ids(
        j, where, array_key="array_job_id", task_key="array_task_id", task_str_key="array_task_string",
        het_key="het_job_id", offset_key="het_job_offset")
    where = _Where(kind, f"job {display}")
    raw_state = _require(j, "job_state", where)
    if version.is_legacy:
        states: tuple[str, ...] = (_str(raw_state, "job_state", where).upper(),)
    else:
        states = tuple(s.upper() for s in _str_list(raw_state, "job_state", where))
    restart = _int(j.get("restart_cnt"), "restart_cnt", where) or 0
    try:
        state = map_job_state(states, restart)
    except SlurmJsonError as exc:
        raise where.error("job_state", str(exc)) from exc
    nodes_str = _str(_require(j, "nodes", where), "nodes", where)
    try:
        nodes = tuple(NodeName(n) for n in expand_hostlist(nodes_str))
    except SlurmJsonError as exc:
        raise where.error("nodes", str(exc)) from exc
    detail_raw = _require(j, "gres_detail", where)
    if detail_raw is None:
        detail_raw = []
    if not isinstance(detail_raw, list) or not all(d is None or isinstance(d, str) for d in detail_raw):
        raise where.error("gres_detail", f"must be a list of strings, got {detail_raw!r}")
    try:
        gpus = parse_gres_detail(detail_raw, nodes, where="gres_detail")
    except SlurmJsonError as exc:
        raise where.error("gres_detail", str(exc)) from exc
    req: dict[str, int | None] = {}
    gtype = ""
    for key in ("tres_per_node", "tres_per_job", "tres_per_task"):
        text = _str(_require(j, key, where), key, where)
        try:
            count, t = parse_tres_gpus(text, key)
        except SlurmJsonError as exc:
            raise where.error(key, str(exc)) from exc
        req[key] = count
        gtype = gtype or t
    node_count = _int(_require(j, "node_count", where), "node_count", where) or len(nodes)
    batch_host = _str(_require(j, "batch_host", where), "batch_host", where) or None
    return JobRecord(
        job_id=display, slurm_job_id=jid,
        name=_str(j.get("name"), "name", where),
        user=_str(_require(j, "user_name", where), "user_name", where),
        account=_str(_require(j, "account", where), "account", where),
        partition=_str(_require(j, "partition", where), "partition", where),
        state=state, slurm_state=states,
        submit_time=_time(_require(j, "submit_time", where), "submit_time", where),
        start_time=_time(_require(j, "start_time", where), "start_time", where),
        resize_time=_time(_require(j, "resize_time", where), "resize_time", where),
        nodes=nodes, node_count=node_count, tasks=_int(j.get("tasks"), "tasks", where), gpus=gpus,
        gpu_request=GpuRequest(req["tres_per_node"], req["tres_per_job"], req["tres_per_task"], gtype),
        admin_comment=_str(_require(j, "admin_comment", where), "admin_comment", where),
        comment=_str(_require(j, "comment", where), "comment", where),
        batch_host=batch_host, restart_count=restart,
        array_job_id=array_id, array_task_id=task_id, het_job_id=het_id, het_job_offset=offset,
    )


# --------------------------------------------------------------------------------------------------
# Accounting

_SACCT_EMPTY = ("Nothing found",)


def parse_sacct(doc: Mapping[str, Any]) -> list[AccountingRecord]:
    """Read jobs from ``sacct --json`` (22.05 ``openapi/dbv0.0.38`` or 25.11 ``data_parser/v0.0.44``).

    22.05 reports an empty result as the error ``Nothing found``; that gives ``[]``. A resized job
    appears once per shape under the same id: the earlier records say ``RESIZING`` and are mapped to
    ``FINISHED`` (closed segments, each with its own GPUs, nodes and times); ids are therefore not
    unique in the result.

    Raises:
        UnsupportedSlurmVersion: unknown dialect.
        SlurmJsonError: a missing key or malformed value (named with the job id), or Slurm errors.
    """
    kind = DocKind.SACCT
    version = detect_version(doc, kind)
    _check_errors(doc, kind, tolerate=_SACCT_EMPTY)
    jobs = _list_of_objects(doc.get("jobs") or [], "jobs", _Where(kind, "document"))
    return [_sacct_job(j, version) for j in jobs]


def _sacct_job(j: Mapping[str, Any], version: SlurmJsonVersion) -> AccountingRecord:
    kind = DocKind.SACCT
    where = _Where(kind, f"job {_raw_id(j)}")
    display, jid, *_ = _job_ids(j, where, array_key="array.job_id", task_key="array.task_id",
                                task_str_key=None, het_key="het.job_id", offset_key="het.job_offset")
    if j.get("array") and isinstance(j["array"], Mapping):
        tasks = _str(j["array"].get("task"), "array.task", where)
        if display == str(jid) and tasks and (_int(j["array"].get("job_id"), "array.job_id", where) or 0):
            display = JobId(f"{j['array']['job_id']}_[{tasks}]")
    where = _Where(kind, f"job {display}")
    current = _get_path(j, "state.current", where)
    if version.is_legacy:
        states: tuple[str, ...] = (_str(current, "state.current", where).upper(),)
    else:
        states = tuple(s.upper() for s in _str_list(current, "state.current", where))
    try:
        # A resized job has one record per shape; the earlier ones say RESIZING and are closed.
        state = JobState.FINISHED if "RESIZING" in states else map_job_state(states, 0)
    except SlurmJsonError as exc:
        raise where.error("state.current", str(exc)) from exc
    tres = _get_path(j, "tres.allocated", where)
    gpus = 0
    for i, t in enumerate(_list_of_objects(tres if tres is not None else [], "tres.allocated", where)):
        if t.get("type") == "gres" and t.get("name") == "gpu":
            c = _int(_require(t, "count", _Where(kind, f"job {display} tres.allocated[{i}]")), "count", where)
            gpus = c or 0
    nodes_str = _str(_require(j, "nodes", where), "nodes", where)
    try:
        nodes = tuple(NodeName(n) for n in expand_hostlist(nodes_str if nodes_str != "None assigned" else ""))
    except SlurmJsonError as exc:
        raise where.error("nodes", str(exc)) from exc
    return AccountingRecord(
        job_id=display, slurm_job_id=jid, name=_str(j.get("name"), "name", where),
        user=_str(_require(j, "user", where), "user", where),
        account=_str(_require(j, "account", where), "account", where),
        partition=_str(_require(j, "partition", where), "partition", where),
        state=state, slurm_state=states,
        submit_time=_time(_get_path(j, "time.submission", where), "time.submission", where),
        start_time=_time(_get_path(j, "time.start", where), "time.start", where),
        end_time=_time(_get_path(j, "time.end", where), "time.end", where),
        elapsed=_int(_get_path(j, "time.elapsed", where), "time.elapsed", where) or 0,
        allocated_gpus=gpus, nodes=nodes,
        admin_comment=_str(_get_path(j, "comment.administrator", where), "comment.administrator", where),
    )


# --------------------------------------------------------------------------------------------------
# The elastic contract in AdminComment

_RANGE = re.compile(r"^(\d+):(\d+)$")


def parse_elastic_request(admin_comment: str, *, job_id: str = "?") -> ElasticRequest | None:
    """Read the elastic contract ``slurm-elastic gpus=MIN:MAX [batch=MIN:MAX] [mode=exo|endo]``.

    Rules: the first token is literally ``slurm-elastic``; tokens are ``key=value`` separated by
    blanks, each key at most once, keys among ``gpus`` (required), ``batch``, ``mode``; ranges are
    ``MIN:MAX`` integers with ``MIN >= 1`` and ``MAX = 0`` (no maximum) or ``MAX >= MIN``; ``mode`` is
    ``exo`` (default) or ``endo``.

    Args:
        admin_comment: the job's AdminComment.
        job_id: named in error messages.

    Returns:
        The request, or ``None`` when the comment does not start with ``slurm-elastic`` (a rigid job)
        or is a satellite's (``slurm-elastic satellite-of=JOBID``, set by the daemon: fixed load
        unless folded into its job).

    Raises:
        SlurmJsonError: the comment starts with ``slurm-elastic`` but breaks a rule (the message names
            the job id, the value and the rule).
    """
    tokens = admin_comment.split()
    if not tokens or tokens[0] != ELASTIC_TAG or (len(tokens) == 2 and tokens[1].startswith(SATELLITE_KEY)):
        return None

    def bad(value: str, rule: str) -> SlurmJsonError:
        return SlurmJsonError(f"job {job_id}: AdminComment {admin_comment!r}: {value!r}: {rule}")

    seen: dict[str, str] = {}
    for tok in tokens[1:]:
        key, sep, value = tok.partition("=")
        if not sep or not key or not value:
            raise bad(tok, "must be key=value")
        if key not in ("gpus", "batch", "mode"):
            raise bad(tok, "unknown key (rule: gpus, batch or mode)")
        if key in seen:
            raise bad(tok, f"{key} given twice")
        seen[key] = value
    if "gpus" not in seen:
        raise bad(admin_comment, "gpus=MIN:MAX is required")

    def rng(key: str) -> tuple[int, int | None]:
        m = _RANGE.match(seen[key])
        if not m:
            raise bad(f"{key}={seen[key]}", "must be MIN:MAX with integers")
        lo, hi = int(m.group(1)), int(m.group(2))
        if lo < 1:
            raise bad(f"{key}={seen[key]}", "MIN must be >= 1")
        if hi != 0 and hi < lo:
            raise bad(f"{key}={seen[key]}", "MAX must be 0 (no maximum) or >= MIN")
        return lo, (hi or None)

    min_gpus, max_gpus = rng("gpus")
    min_batch: int | None = None
    max_batch: int | None = None
    if "batch" in seen:
        min_batch, max_batch = rng("batch")
    mode_s = seen.get("mode", "exo")
    try:
        mode = ElasticMode(mode_s)
    except ValueError as exc:
        raise bad(f"mode={mode_s}", "must be exo or endo") from exc
    return ElasticRequest(min_gpus, max_gpus, min_batch, max_batch, mode)


# --------------------------------------------------------------------------------------------------
# Snapshot

SATELLITE_KEY = "satellite-of="
_FALLBACK_MODEL_DEFAULTS = (32, 10_000)
_DEFAULT_LR = 0.1


def build_snapshot(
    nodes: Sequence[NodeRecord],
    jobs: Sequence[JobRecord],
    *,
    now: float,
    profiles: Mapping[str, ThroughputModel],
    default_model: str = "cifar10",
    progress: Mapping[str, JobRuntime] | None = None,
) -> ClusterSnapshot:
    """Turn parsed nodes and jobs into the core's :class:`ClusterSnapshot` (pure).

    Rules:

    * Nodes: GPU indices ``0..gpus-1``; a GPU is free unless ``gres_used`` lists it or a job in
      ``jobs`` holds it (``squeue`` and ``sinfo`` are two calls; a GPU either says is busy is busy).
    * Finished jobs (completing included) are left out; their GPUs stay busy through ``gres_used``.
    * Only GPUs on the given nodes count: a job's GPUs elsewhere (other partitions) are dropped.
    * Rigid jobs (no ``slurm-elastic`` AdminComment) become ``Job(elastic=False)`` with
      ``min = max = requested =`` the GPUs they hold (running) or ask for (waiting), batch 1 per GPU;
      rigid jobs without GPUs on these nodes (CPU jobs, jobs elsewhere) are left out.
    * Elastic jobs: GPU range from the request, ``max`` clamped to the snapshot's GPUs (no maximum
      means all of them) and never below ``min``. ``requested_gpus`` is the GPUs held when running,
      else the GPU request clamped into the range (``min`` when there is none). Model, epoch size,
      progress and learning rate come from ``progress[job_id]`` when given, else ``default_model``
      with its :data:`MODEL_DEFAULTS` per-GPU batch ``b`` (capped by the profile's
      ``max_local_batch``) and epoch size, and learning rate 0.1. The batch range is the request's,
      else ``b * min_gpus : b * max_gpus``; the base batch is ``b * requested_gpus`` clamped into it.
      A running job's per-GPU batch is the reported one, else ``ceil(global / gpus)`` capped by
      ``max_local_batch`` (global = base batch). A job that reports its per-GPU batch and declared
      no batch range keeps that per-GPU batch: it is ``b`` and the job's ``max_local_batch``.
      Run time is the reported one, else ``now - start``.

    Args:
        nodes: from :func:`parse_nodes` (already filtered to the managed partitions).
        jobs: from :func:`parse_jobs` (already filtered to the managed partitions).
        now: the snapshot instant, seconds since the epoch.
        profiles: throughput models by model key.
        default_model: model assumed for elastic jobs without a reported one.
        progress: what the daemon knows per job id beyond Slurm.

    Raises:
        SlurmJsonError: a malformed elastic AdminComment; a running elastic job with no GPU on these
            nodes; a job holding a GPU index its node does not have; an unknown model.
    """
    progress = progress or {}
    node_gpus = {n.name: n.gpus for n in nodes}
    total_gpus = sum(node_gpus.values())
    held: dict[str, set[int]] = {}
    out_jobs: list[Job] = []
    for rec in jobs:
        if rec.state is JobState.FINISHED:
            continue
        running = rec.state is JobState.RUNNING
        slots: list[tuple[str, int]] = []
        if running:
            for node, idx in rec.gpus:
                if node not in node_gpus:
                    continue
                bad = [g for g in idx if g >= node_gpus[node]]
                if bad:
                    raise SlurmJsonError(f"{DocKind.SQUEUE.value}: job {rec.job_id}: key 'gres_detail': GPU "
                                         f"indices {bad} on node {node} beyond its {node_gpus[node]} GPUs")
                slots.extend((node, g) for g in idx)
        for held_node, g in slots:
            held.setdefault(held_node, set()).add(g)
        request = parse_elastic_request(rec.admin_comment, job_id=rec.job_id)
        if request is None:
            job = _rigid_job(rec, slots, running, now)
        else:
            job = _elastic_job(rec, request, slots, running, now=now, total_gpus=total_gpus, profiles=profiles,
                               default_model=default_model, runtime=progress.get(rec.job_id))
        if job is not None:
            out_jobs.append(job)
    out_nodes = []
    for n in sorted(nodes, key=lambda r: r.name):
        gpus = tuple(range(n.gpus))
        busy = set(n.used_gpus) | held.get(n.name, set())
        out_nodes.append(Node(n.name, gpus, tuple(g for g in gpus if g not in busy), n.state))
    out_jobs.sort(key=lambda j: (j.submit_time, _id_key(j.job_id)))
    return ClusterSnapshot(now=now, nodes=tuple(out_nodes), jobs=tuple(out_jobs), profiles=dict(profiles))


def _id_key(job_id: str) -> tuple[int, str]:
    head = re.match(r"^\d+", job_id)
    return (int(head.group(0)) if head else 0, job_id)


def _rigid_job(rec: JobRecord, slots: list[tuple[str, int]], running: bool, now: float) -> Job | None:
    k = len(slots) if running else rec.requested_gpus
    if k < 1:
        return None
    start = float(rec.start_time) if running and rec.start_time else None
    return Job(
        job_id=rec.job_id, user=rec.user, account=rec.account, submit_time=float(rec.submit_time or 0),
        state=rec.state, min_gpus=k, max_gpus=k, min_batch=k, max_batch=k, base_batch=k, base_lr=_DEFAULT_LR,
        requested_gpus=k, max_local_batch=1, elastic=False, placement=Placement.of(slots),
        local_batch=1 if running else 0, start_time=start,
        run_time=max(0.0, now - start) if start is not None else 0.0,
    )


def _elastic_job(rec: JobRecord, req: ElasticRequest, slots: list[tuple[str, int]], running: bool, *,
                 now: float, total_gpus: int, profiles: Mapping[str, ThroughputModel], default_model: str,
                 runtime: JobRuntime | None) -> Job:
    if running and not slots:
        raise SlurmJsonError(f"{DocKind.SQUEUE.value}: job {rec.job_id}: key 'gres_detail': the elastic job "
                             "runs but holds no GPU on the managed nodes (rule: elastic jobs run on GPUs)")
    rt = runtime or JobRuntime()
    model = rt.model or default_model
    if model not in profiles:
        raise SlurmJsonError(f"job {rec.job_id}: model {model!r} has no throughput profile "
                             f"(known: {sorted(profiles)})")
    b_default, epoch_default = MODEL_DEFAULTS.get(model, _FALLBACK_MODEL_DEFAULTS)
    max_local = max(1, profiles[model].max_local_batch)
    b = max(1, min(b_default, max_local))
    if req.min_batch is None and rt.local_batch:
        # A launcher job that declared no batch range keeps its own per-GPU batch (the launcher's
        # policy): the planner sees it as both the job's per-GPU batch and its limit.
        b = max_local = rt.local_batch
    min_gpus = req.min_gpus
    max_gpus = max(min_gpus, min(req.max_gpus or total_gpus, total_gpus) if total_gpus else min_gpus)
    k = len(slots)
    asked = rec.requested_gpus
    requested = k if running else min(max(asked or min_gpus, min_gpus), max_gpus)
    min_batch = req.min_batch if req.min_batch is not None else b * min_gpus
    if req.max_batch is not None:
        max_batch = req.max_batch
    elif req.min_batch is not None:
        max_batch = max(req.min_batch, b * max_gpus)
    else:
        max_batch = b * max_gpus
    base_batch = min(max(b * requested, min_batch), max_batch)
    local = 0
    if running:
        local = rt.local_batch or min(max_local, max(1, math.ceil(base_batch / k)))
    start = float(rec.start_time) if rec.start_time and rec.state is not JobState.PENDING else None
    run_time = rt.run_time if rt.run_time is not None else (max(0.0, now - start) if running and start else 0.0)
    last_change = rt.last_change_time
    if last_change is None and running:
        last_change = float(rec.resize_time or rec.start_time or now)
    return Job(
        job_id=rec.job_id, user=rec.user, account=rec.account, submit_time=float(rec.submit_time or 0),
        state=rec.state, min_gpus=min_gpus, max_gpus=max_gpus, min_batch=min_batch, max_batch=max_batch,
        base_batch=base_batch, base_lr=rt.base_lr or _DEFAULT_LR, requested_gpus=requested,
        max_local_batch=max_local, mode=req.mode, elastic=True, epoch_size=rt.epoch_size or epoch_default,
        samples_processed=rt.samples_processed, target_epochs=rt.target_epochs,
        observed_throughput=rt.observed_throughput, placement=Placement.of(slots), local_batch=local,
        start_time=start, run_time=run_time, last_change_time=last_change,
        samples_at_last_change=rt.samples_at_last_change, model=model, progress=rt.progress,
        shrink_sizes=_shrink_sizes(k, rec.release_blocks) if running else None,
    )


def _shrink_sizes(k: int, blocks: tuple[int, ...] | None) -> tuple[int, ...] | None:
    """The counts below ``k`` reachable by freeing whole blocks (``None`` when any count can go)."""
    if blocks is None:
        return None
    sums = {0}
    for b in blocks:
        sums |= {s + b for s in sums}
    return tuple(sorted(k - s for s in sums if 0 < s < k))
