"""Slurm's records read from its ``--json`` documents (``sinfo``, ``squeue``, ``sacct``, ``scontrol``).

This module owns :func:`parse_nodes`, :func:`parse_jobs` and :func:`parse_sacct`, which read the
typed records of :mod:`slurm_elastic.slurm.records` from a parsed document in any supported dialect
(:mod:`slurm_elastic.slurm.dialects`), and the keys they read (:data:`JOB_KEYS`, :data:`NODE_KEYS`,
:data:`SINFO_ROW_KEYS`: what :mod:`~slurm_elastic.slurm.listing_json` keeps of a listing). Running
the commands is :mod:`slurm_elastic.slurm.runner`'; the same records through pyslurm are
:mod:`slurm_elastic.slurm.pyslurm_records`'. It reads no file, runs no command, reads no clock and
does not log.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from slurm_elastic.core.model import JobId, JobState, NodeName
from slurm_elastic.slurm.dialects import (
    DocKind,
    SlurmJsonError,
    SlurmJsonVersion,
    Where,
    as_int,
    as_states,
    as_str,
    as_str_list,
    as_time,
    check_errors,
    detect_version,
    get_path,
    map_job_state,
    map_node_state,
    require,
    restart_count_error,
    typename,
)
from slurm_elastic.slurm.hostlist import (
    expand_hostlist,
    parse_gres,
    parse_gres_detail,
    parse_tres_gpus,
)
from slurm_elastic.slurm.read_memo import ReadMemo, memoised
from slurm_elastic.slurm.records import AccountingRecord, GpuRequest, JobRecord, NodeRecord

JOB_KEYS = ("job_id", "array_job_id", "array_task_id", "array_task_string", "het_job_id", "het_job_offset",
            "job_state", "restart_cnt", "nodes", "gres_detail", "tres_per_node", "tres_per_job", "tres_per_task",
            "node_count", "batch_host", "name", "user_name", "account", "partition", "submit_time", "start_time",
            "resize_time", "tasks", "admin_comment", "comment", "current_working_directory")
"""Every key of a job record :func:`parse_jobs` reads, in any dialect (what
:mod:`~slurm_elastic.slurm.listing_json` keeps of ``squeue --json``)."""
NODE_KEYS = ("name", "state", "state_flags", "gres", "gres_used", "partitions", "reason")
"""Every key of a node record :func:`parse_nodes` reads (22.05's ``sinfo``, ``scontrol show node``)."""
SINFO_ROW_KEYS = ("nodes.nodes", "node.state", "gres.total", "gres.used", "partition.name", "reason.description")
"""Every key of a ``sinfo -N --json`` row :func:`parse_nodes` reads (23.02 on), inner keys after a dot
(of the partition, 1.5 kB of its settings per row, only its name)."""


_NOT_WORK_STEPS = frozenset({"batch", "extern", "interactive"})


def _sacct_steps(j: Mapping[str, Any], where: Where) -> tuple[tuple[int | None, int | None], ...]:
    """The job's work steps' ``(start, end)`` (``steps[].step.id``: ``batch``/``0`` on 22.05,
    ``{"step_id": "batch"}`` on v0.0.39, ``JOB.batch``/``JOB.0`` later: the part after the last dot)."""
    out = []
    for i, step in enumerate(_list_of_objects(j.get("steps") or [], "steps", where)):
        at = Where(where.kind, f"{where.subject} steps[{i}]")
        sid = get_path(step, "step.id", at)
        if isinstance(sid, Mapping):  # data_parser v0.0.39: {"job_id": 9, "step_id": "batch"}
            sid = sid.get("step_id")
        name = str(sid).rsplit(".", 1)[-1]
        if name in _NOT_WORK_STEPS:
            continue
        out.append((as_time(get_path(step, "time.start", at), "time.start", at),
                    as_time(get_path(step, "time.end", at), "time.end", at)))
    return tuple(out)


def parse_nodes(doc: Mapping[str, Any], refused: dict[str, str] | None = None,
                memo: ReadMemo[NodeRecord] | None = None) -> list[NodeRecord]:
    """Read nodes from ``sinfo --json`` (22.05), ``sinfo -N --json`` or ``scontrol show node --json`` (25.11).

    25.11's ``sinfo -N`` lists a node once per partition; the records are merged (partitions united)
    and must agree on state and GRES. A 25.11 ``sinfo --json`` record grouping several nodes is
    refused: sinfo groups nodes whose GRES totals may differ (it compares them only when its format
    prints them), so per-node GPUs cannot be trusted; use ``sinfo -N --json``.

    Args:
        doc: the parsed document.
        refused: when given, a node record that does not parse (right after slurmctld restarts,
            ``gres_used`` may print ``gpu:v100:4`` without its IDX list) or that disagrees with
            another record of the same node is left out and its reason stored here under the
            node's name (``record <i>`` when even the name is unreadable), so one odd record never
            hides the other nodes; when ``None``, it raises.
        memo: the records of the reader's last read, by raw record (an unchanged record is not read
            again); ``None``: every record is read.

    Returns:
        Nodes sorted by name.

    Raises:
        UnsupportedSlurmVersion: unknown dialect.
        SlurmJsonError: the document's shape is wrong or Slurm reported errors; without ``refused``
            also a missing key, malformed GRES or disagreeing duplicates.
    """
    kind = DocKind.SCONTROL_NODE if "sinfo" not in doc and _command(doc) == "show" else DocKind.SINFO
    version = detect_version(doc, kind)
    check_errors(doc, kind)
    where = Where(kind, "document")
    read: Callable[[Mapping[str, Any], int], NodeRecord]
    if version.is_legacy or "sinfo" not in doc:
        rows = _list_of_objects(require(doc, "nodes", where), "nodes", where)
        legacy = version.is_legacy

        def read_node(n: Mapping[str, Any], i: int) -> NodeRecord:
            return _node_object(n, kind, legacy=legacy)

        read = read_node
    else:
        rows = _list_of_objects(doc["sinfo"], "sinfo", where)
        read = _sinfo_row
    with memoised(memo, (kind, version), read) as read_row:
        return _merged_nodes(rows, read_row, kind, refused)


def _merged_nodes(rows: list[Mapping[str, Any]], read: Callable[[Mapping[str, Any], int], NodeRecord],
                  kind: DocKind, refused: dict[str, str] | None) -> list[NodeRecord]:
    merged: dict[str, NodeRecord] = {}
    odd: dict[str, str] = {}
    for i, row in enumerate(rows):
        try:
            rec = read(row, i)
        except (SlurmJsonError, ValueError, TypeError, LookupError, AttributeError) as exc:
            if refused is None:
                raise
            name = _raw_node_name(row)
            odd.setdefault(name or f"record {i}", str(exc) if isinstance(exc, SlurmJsonError)
                           else f"{kind.value}: node {name or '?'}: {exc!r}")
            continue
        prev = merged.get(rec.name)
        if prev is None:
            merged[rec.name] = rec
            continue
        if (prev.slurm_state, prev.gpus, prev.used_gpus, prev.gpu_types) != (
                rec.slurm_state, rec.gpus, rec.used_gpus, rec.gpu_types):
            error = Where(kind, f"node {rec.name}").error(
                "state/gres", "listed twice with different state or GRES (rule: one snapshot per document)")
            if refused is None:
                raise error
            odd.setdefault(rec.name, str(error))
        parts = tuple(sorted(set(prev.partitions) | set(rec.partitions)))
        merged[rec.name] = NodeRecord(prev.name, prev.state, prev.slurm_state, prev.gpus, prev.gpu_types,
                                      prev.used_gpus, parts, prev.reason)
    if refused is not None:
        refused.update(odd)
    return [merged[k] for k in sorted(merged) if k not in odd]


def _raw_node_name(row: Mapping[str, Any]) -> str:
    """The node name of a record that did not parse, when it can be read (``""`` otherwise)."""
    name = row.get("name")
    if name is None:
        nodes = row.get("nodes")
        listed = nodes.get("nodes") if isinstance(nodes, Mapping) else None
        name = listed[0] if isinstance(listed, list) and len(listed) == 1 else None
    return name if isinstance(name, str) and 0 < len(name) <= 256 and name.isprintable() else ""


def _command(doc: Mapping[str, Any]) -> str:
    meta = doc.get("meta")
    cmd = meta.get("command") if isinstance(meta, Mapping) else None
    return cmd[0] if isinstance(cmd, list) and cmd and isinstance(cmd[0], str) else ""


def _list_of_objects(value: object, key: str, where: Where) -> list[Mapping[str, Any]]:
    if not isinstance(value, list):
        raise where.error(key, f"must be a list, got {typename(value)}")
    for i, v in enumerate(value):
        if not isinstance(v, Mapping):
            raise where.error(f"{key}[{i}]", f"must be an object, got {typename(v)}")
    return value


def _node_gpus(gres: str | None, used: str | None, where: Where) -> tuple[int, tuple[str, ...], tuple[int, ...]]:
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
    name = as_str(require(n, "name", Where(kind, "node ?")), "name", Where(kind, "node ?"))
    if not name:
        raise Where(kind, "node ?").error("name", "must not be empty")
    where = Where(kind, f"node {name}")
    raw_state = require(n, "state", where)
    if legacy:
        base = as_str(raw_state, "state", where)
        flags = as_str_list(n.get("state_flags"), "state_flags", where)
        states = (base.upper(), *(f.upper() for f in flags))
    else:
        states = tuple(s.upper() for s in as_str_list(raw_state, "state", where))
        if not states:
            raise where.error("state", "is an empty list (rule: base state first)")
    gres = as_str(require(n, "gres", where), "gres", where)
    used = as_str(require(n, "gres_used", where), "gres_used", where)
    total, types, used_idx = _node_gpus(gres, used, where)
    parts = as_str_list(require(n, "partitions", where), "partitions", where)
    state = map_node_state(states[0], states[1:], gpus_in_use=bool(used_idx))
    return NodeRecord(NodeName(name), state, states, total, types, used_idx, tuple(sorted(set(parts))),
                      as_str(n.get("reason"), "reason", where))


def _sinfo_row(r: Mapping[str, Any], i: int) -> NodeRecord:
    where = Where(DocKind.SINFO, f"sinfo[{i}]")
    names = as_str_list(get_path(r, "nodes.nodes", where), "nodes.nodes", where)
    if len(names) != 1:
        raise where.error("nodes.nodes", f"lists {len(names)} nodes {list(names)} (rule: one node per record: "
                          "run `sinfo -N --json`; grouped records may merge nodes with different GRES)")
    name = names[0]
    where = Where(DocKind.SINFO, f"node {name}")
    states = tuple(s.upper() for s in as_str_list(get_path(r, "node.state", where), "node.state", where))
    if not states:
        raise where.error("node.state", "is an empty list (rule: base state first)")
    gres = as_str(get_path(r, "gres.total", where), "gres.total", where)
    used = as_str(get_path(r, "gres.used", where), "gres.used", where)
    total, types, used_idx = _node_gpus(gres, used, where)
    part = as_str(get_path(r, "partition.name", where), "partition.name", where)
    reason = r.get("reason")
    desc = as_str(reason.get("description"), "reason.description", where) if isinstance(reason, Mapping) else ""
    state = map_node_state(states[0], states[1:], gpus_in_use=bool(used_idx))
    return NodeRecord(NodeName(name), state, states, total, types, used_idx, (part,) if part else (), desc)


# --------------------------------------------------------------------------------------------------
# Jobs


def parse_jobs(doc: Mapping[str, Any], refused: dict[str, str] | None = None,
               memo: ReadMemo[JobRecord] | None = None) -> list[JobRecord]:
    """Read jobs from ``squeue --json`` (22.05 or 25.11) or ``scontrol show job --json`` (25.11).

    Args:
        doc: the parsed document.
        refused: when given, a job record that does not parse is left out and its reason stored
            here under the job's id (``record <i>`` when even the id is unreadable), so one odd
            record never hides the others; when ``None``, it raises.
        memo: as :func:`parse_nodes`'.

    Returns:
        Jobs in document order.

    Raises:
        UnsupportedSlurmVersion: unknown dialect.
        SlurmJsonError: the document's shape is wrong or Slurm reported errors; without ``refused``
            also a job's missing key (named with the job id), a malformed state, GRES or TRES
            string, or a hostlist that does not parse.
    """
    kind = DocKind.SCONTROL_JOB if _command(doc) == "show" else DocKind.SQUEUE
    version = detect_version(doc, kind)
    check_errors(doc, kind)
    jobs = _list_of_objects(require(doc, "jobs", Where(kind, "document")), "jobs", Where(kind, "document"))
    with memoised(memo, (kind, version), lambda j, _i: _job(j, kind, version)) as read:
        if refused is None:
            return [read(j, i) for i, j in enumerate(jobs)]
        return _jobs_read(jobs, read, kind, refused)


def _jobs_read(jobs: list[Mapping[str, Any]], read: Callable[[Mapping[str, Any], int], JobRecord], kind: DocKind,
               refused: dict[str, str]) -> list[JobRecord]:
    out = []
    for i, j in enumerate(jobs):
        try:
            out.append(read(j, i))
        except (SlurmJsonError, ValueError, TypeError, LookupError, AttributeError) as exc:
            raw = _raw_id(j)
            refused[raw if raw != "?" else f"record {i}"] = (
                str(exc) if isinstance(exc, SlurmJsonError) else f"{kind.value}: job {raw}: {exc!r}")
    return out


def _raw_id(j: Mapping[str, Any]) -> str:
    raw = j.get("job_id")
    if type(raw) is int:
        return str(raw)
    if isinstance(raw, Mapping):
        raw = raw.get("number")
    return str(raw) if isinstance(raw, int) else "?"


def _job_ids(j: Mapping[str, Any], where: Where, *, array_key: str, task_key: str, task_str_key: str | None,
             het_key: str, offset_key: str) -> tuple[JobId, int, int | None, int | None, int | None, int | None]:
    jid = as_int(require(j, "job_id", where), "job_id", where)
    if jid is None:
        raise where.error("job_id", "must be set")
    array_id = as_int(get_path(j, array_key, where), array_key, where) or None
    task_id = as_int(get_path(j, task_key, where), task_key, where)
    if task_id is not None and task_id >= 0xFFFFFFFE:  # NO_VAL / INFINITE printed as plain ints
        task_id = None
    het_id = as_int(get_path(j, het_key, where), het_key, where) or None
    offset = as_int(get_path(j, offset_key, where), offset_key, where)
    if offset is not None and offset >= 0xFFFFFFFE:
        offset = None
    if het_id is not None:
        display = f"{het_id}+{offset or 0}"
    elif array_id is not None and task_id is not None:
        display = f"{array_id}_{task_id}"
    elif array_id is not None:
        tasks = as_str(j.get(task_str_key), task_str_key, where) if task_str_key else ""
        display = f"{array_id}_[{tasks}]" if tasks else str(jid)
    else:
        display = str(jid)
    return JobId(display), jid, array_id, (task_id if array_id is not None else None), het_id, (
        offset if het_id is not None else None)


def _job(j: Mapping[str, Any], kind: DocKind, version: SlurmJsonVersion) -> JobRecord:
    where = Where(kind, f"job {_raw_id(j)}")
    display, jid, array_id, task_id, het_id, offset = _job_ids(
        j, where, array_key="array_job_id", task_key="array_task_id", task_str_key="array_task_string",
        het_key="het_job_id", offset_key="het_job_offset")
    where = Where(kind, f"job {display}")
    raw_state = require(j, "job_state", where)
    if version.is_legacy:
        states: tuple[str, ...] = (as_str(raw_state, "job_state", where).upper(),)
    else:
        states = as_states(raw_state, "job_state", where)
    restart = as_int(j.get("restart_cnt"), "restart_cnt", where) or 0
    if (bad := restart_count_error(restart)) is not None:
        raise where.error("restart_cnt", bad)
    try:
        state = map_job_state(states, restart)
    except SlurmJsonError as exc:
        raise where.error("job_state", str(exc)) from exc
    nodes_str = as_str(require(j, "nodes", where), "nodes", where)
    try:
        nodes = tuple(NodeName(n) for n in expand_hostlist(nodes_str))
    except SlurmJsonError as exc:
        raise where.error("nodes", str(exc)) from exc
    detail_raw = require(j, "gres_detail", where)
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
        text = as_str(require(j, key, where), key, where)
        try:
            count, t = parse_tres_gpus(text, key)
        except SlurmJsonError as exc:
            raise where.error(key, str(exc)) from exc
        req[key] = count
        gtype = gtype or t
    node_count = as_int(require(j, "node_count", where), "node_count", where) or len(nodes)
    batch_host = as_str(require(j, "batch_host", where), "batch_host", where) or None
    return JobRecord(
        job_id=display, slurm_job_id=jid,
        name=as_str(j.get("name"), "name", where),
        user=as_str(require(j, "user_name", where), "user_name", where),
        account=as_str(require(j, "account", where), "account", where),
        partition=as_str(require(j, "partition", where), "partition", where),
        state=state, slurm_state=states,
        submit_time=as_time(require(j, "submit_time", where), "submit_time", where),
        start_time=as_time(require(j, "start_time", where), "start_time", where),
        resize_time=as_time(require(j, "resize_time", where), "resize_time", where),
        nodes=nodes, node_count=node_count, tasks=as_int(j.get("tasks"), "tasks", where), gpus=gpus,
        gpu_request=GpuRequest(req["tres_per_node"], req["tres_per_job"], req["tres_per_task"], gtype),
        admin_comment=as_str(require(j, "admin_comment", where), "admin_comment", where),
        comment=as_str(require(j, "comment", where), "comment", where),
        batch_host=batch_host, restart_count=restart,
        array_job_id=array_id, array_task_id=task_id, het_job_id=het_id, het_job_offset=offset,
        work_dir=as_str(j.get("current_working_directory"), "current_working_directory", where),
    )


# --------------------------------------------------------------------------------------------------
# Accounting

_SACCT_EMPTY = ("Nothing found",)


def parse_sacct(doc: Mapping[str, Any]) -> list[AccountingRecord]:
    """Read jobs from ``sacct --json`` (22.05 ``openapi/dbv0.0.38``, 23.02 to 25.11 ``data_parser/v0.0.39..44``).

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
    check_errors(doc, kind, tolerate=_SACCT_EMPTY)
    jobs = _list_of_objects(doc.get("jobs") or [], "jobs", Where(kind, "document"))
    return [_sacct_job(j, version) for j in jobs]


def _sacct_job(j: Mapping[str, Any], version: SlurmJsonVersion) -> AccountingRecord:
    kind = DocKind.SACCT
    where = Where(kind, f"job {_raw_id(j)}")
    display, jid, *_ = _job_ids(j, where, array_key="array.job_id", task_key="array.task_id",
                                task_str_key=None, het_key="het.job_id", offset_key="het.job_offset")
    if j.get("array") and isinstance(j["array"], Mapping):
        tasks = as_str(j["array"].get("task"), "array.task", where)
        if display == str(jid) and tasks and (as_int(j["array"].get("job_id"), "array.job_id", where) or 0):
            display = JobId(f"{j['array']['job_id']}_[{tasks}]")
    where = Where(kind, f"job {display}")
    current = get_path(j, "state.current", where)
    if version.is_legacy:
        states: tuple[str, ...] = (as_str(current, "state.current", where).upper(),)
    else:
        states = as_states(current, "state.current", where)
    try:
        # A resized job has one record per shape; the earlier ones say RESIZING and are closed.
        state = JobState.FINISHED if "RESIZING" in states else map_job_state(states, 0)
    except SlurmJsonError as exc:
        raise where.error("state.current", str(exc)) from exc
    tres = get_path(j, "tres.allocated", where)
    gpus = 0
    for i, t in enumerate(_list_of_objects(tres if tres is not None else [], "tres.allocated", where)):
        if t.get("type") == "gres" and t.get("name") == "gpu":
            c = as_int(require(t, "count", Where(kind, f"job {display} tres.allocated[{i}]")), "count", where)
            gpus = c or 0
    nodes_str = as_str(require(j, "nodes", where), "nodes", where)
    try:
        nodes = tuple(NodeName(n) for n in expand_hostlist(nodes_str if nodes_str != "None assigned" else ""))
    except SlurmJsonError as exc:
        raise where.error("nodes", str(exc)) from exc
    return AccountingRecord(
        job_id=display, slurm_job_id=jid, name=as_str(j.get("name"), "name", where),
        user=as_str(require(j, "user", where), "user", where),
        account=as_str(require(j, "account", where), "account", where),
        partition=as_str(require(j, "partition", where), "partition", where),
        state=state, slurm_state=states,
        submit_time=as_time(get_path(j, "time.submission", where), "time.submission", where),
        start_time=as_time(get_path(j, "time.start", where), "time.start", where),
        end_time=as_time(get_path(j, "time.end", where), "time.end", where),
        elapsed=as_int(get_path(j, "time.elapsed", where), "time.elapsed", where) or 0,
        allocated_gpus=gpus, nodes=nodes,
        admin_comment=as_str(get_path(j, "comment.administrator", where), "comment.administrator", where),
        steps=_sacct_steps(j, where),
    )

