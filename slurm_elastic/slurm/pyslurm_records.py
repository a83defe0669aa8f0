"""pyslurm 25.11's ``Job`` and ``Node`` objects read into the same records as Slurm's JSON.

This module owns the slice of pyslurm's API the backend reads (typed as protocols: pyslurm ships no
stubs) and :func:`job_record` / :func:`node_records`, which reduce pyslurm's objects to
:class:`~slurm_elastic.slurm.records.JobRecord` / :class:`~slurm_elastic.slurm.records.NodeRecord`
with the JSON readers' own rules (:func:`~slurm_elastic.slurm.dialects.map_job_state`,
:func:`~slurm_elastic.slurm.dialects.map_node_state`, :func:`~slurm_elastic.slurm.hostlist.parse_index_list`,
:func:`~slurm_elastic.slurm.hostlist.expand_hostlist`). It never imports pyslurm (the objects are
handed in) and runs no command.

What pyslurm 25.11 gives and how it is read (where it differs from the JSON):

* GPU indices held by a job: ``Job.get_resource_layout_per_node()[node]["gres"]``
  (``{"gpu:v100": {"count": 2, "indexes": "0-1"}}``, the job's ``gres_detail``). ``Job.tres_per_node``
  and ``tres_per_job`` are not read: pyslurm 25.11 returns None for GPU requests (it splits ``k=v``
  but the string is ``gres/gpu:2``).
* GPU request: per node from ``Job.gres_per_node`` (``{"gres/gpu": 2}``); otherwise per job from
  ``Job.gpus`` (requested TRES while pending, allocated while running). ``Job.gpus`` is empty unless
  slurmdbd tracks ``gres/gpu`` (``AccountingStorageTRES``): without it, a pending rigid job that asked
  ``--gpus=N``/``--gpus-per-task`` reads as asking no GPU and is left out of the snapshot (the CLI
  backend sees it). Running jobs are unaffected (they are sized by the GPUs they hold).
* GPUs busy on a node: pyslurm has no ``gres_used`` (``Node.allocated_gres`` has counts, no indices,
  and only when ``gres/gpu`` is tracked), so a node's used GPUs are the union of the layouts of all
  jobs that hold resources (running, suspended, configuring, completing…), in every partition.
* Job state: ``Job.state`` is one word in which a flag hides the base state (``COMPLETING``,
  ``REQUEUED``…), as in 22.05's JSON; :func:`map_job_state` reads both. Node state:
  ``Node.state`` is ``BASE+FLAG+…`` (``MIXED+PLANNED``), split on ``+``.
* Array task 0: pyslurm reads ``array_task_id`` 0 as unset; a record with an array id, no task id and
  no pending-task string is taken as task 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from slurm_elastic.core.model import JobId, NodeName
from slurm_elastic.slurm.dialects import SlurmJsonError, map_job_state, map_node_state, restart_count_error
from slurm_elastic.slurm.hostlist import expand_hostlist, parse_index_list
from slurm_elastic.slurm.records import GpuRequest, JobRecord, NodeRecord

# pyslurm's one-word job state (flags shadow the base state): the words of a job holding its nodes.
_HOLDING_STATES = frozenset({
    "RUNNING", "SUSPENDED", "COMPLETING", "STAGE_OUT", "CONFIGURING", "RESIZING", "SIGNALING", "STOPPED",
})


# --------------------------------------------------------------------------------------------------
# The slice of pyslurm 25.11's API read here (pyslurm ships no type stubs).


class PyslurmGpu(Protocol):
    """A value of ``Job.gpus`` (pyslurm's ``GPU``)."""

    @property
    def count(self) -> int: ...


class PyslurmJob(Protocol):
    """The attributes of ``pyslurm.Job`` (25.11) read here; strings are None when unset."""

    @property
    def id(self) -> int: ...
    @property
    def name(self) -> str | None: ...
    @property
    def user_name(self) -> str | None: ...
    @property
    def account(self) -> str | None: ...
    @property
    def partition(self) -> str | None: ...
    @property
    def state(self) -> str | None: ...
    @property
    def num_nodes(self) -> int | None: ...
    @property
    def ntasks(self) -> int | None: ...
    @property
    def allocated_nodes(self) -> str | None: ...
    @property
    def batch_host(self) -> str | None: ...
    @property
    def comment(self) -> str | None: ...
    @property
    def admin_comment(self) -> str | None: ...
    @property
    def submit_time(self) -> int | None: ...
    @property
    def start_time(self) -> int | None: ...
    @property
    def resize_time(self) -> int | None: ...
    @property
    def requeue_count(self) -> int | None: ...
    @property
    def array_id(self) -> int | None: ...
    @property
    def array_task_id(self) -> int | None: ...
    @property
    def array_tasks_waiting(self) -> str | None: ...
    @property
    def heterogeneous_id(self) -> int | None: ...
    @property
    def heterogeneous_offset(self) -> int | None: ...
    @property
    def gres_per_node(self) -> Mapping[str, object]: ...
    @property
    def gpus(self) -> Mapping[str, PyslurmGpu]: ...

    def get_resource_layout_per_node(self) -> Mapping[str, Mapping[str, object]]: ...


class PyslurmNode(Protocol):
    """The attributes of ``pyslurm.Node`` (25.11) read here."""

    @property
    def name(self) -> str | None: ...
    @property
    def state(self) -> str | None: ...
    @property
    def configured_gres(self) -> Mapping[str, object]: ...
    @property
    def partitions(self) -> Sequence[str] | None: ...
    @property
    def reason(self) -> str | None: ...


# --------------------------------------------------------------------------------------------------
# Reading pyslurm objects


def _bad(subject: str, attr: str, rule: str) -> SlurmJsonError:
    return SlurmJsonError(f"pyslurm {subject}: attribute {attr!r}: {rule}")


def _s(value: object, subject: str, attr: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _bad(subject, attr, f"must be a string or None, got {type(value).__name__} {value!r}")
    return value


def _i(value: object, subject: str, attr: str) -> int | None:
    """An integer or None; pyslurm's ``"UNLIMITED"`` reads as None."""
    if value is None or value == "UNLIMITED":
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(subject, attr, f"must be an integer or None, got {type(value).__name__} {value!r}")
    return value


def _t(value: object, subject: str, attr: str) -> int | None:
    t = _i(value, subject, attr)
    return t if t else None


def _gres_key(key: str) -> tuple[str, str]:
    """``gres/gpu:v100`` / ``gres:gpu`` / ``gpu:v100`` -> (``gpu``, ``v100``)."""
    for prefix in ("gres/", "gres:"):
        if key.startswith(prefix):
            key = key[len(prefix):]
    name, _, gtype = key.partition(":")
    return name, gtype


def _gres_count(value: object, subject: str, attr: str) -> int:
    if isinstance(value, Mapping):
        value = value.get("count")
    n = _i(value, subject, attr)
    if n is None or n < 0:
        raise _bad(subject, attr, f"GPU count must be an integer >= 0, got {value!r}")
    return n


def _mapping(value: object, subject: str, attr: str) -> Mapping[str, object]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise _bad(subject, attr, f"must be a dict with string keys, got {value!r}")
    return value


def _layout_gpus(job: PyslurmJob, subject: str,
                 nodes: Sequence[NodeName]) -> tuple[tuple[NodeName, tuple[int, ...]], ...]:
    """Per node (in ``nodes`` order, then any other), the GPU indices from the resource layout."""
    attr = "get_resource_layout_per_node()"
    layout = _mapping(job.get_resource_layout_per_node(), subject, attr)
    found: dict[str, tuple[int, ...]] = {}
    for node, per_node in layout.items():
        gres = _mapping(_mapping(per_node, subject, f"{attr}[{node!r}]").get("gres"), subject,
                        f"{attr}[{node!r}]['gres']")
        idx: set[int] = set()
        for key, entry in gres.items():
            if _gres_key(key)[0] != "gpu":
                continue
            where = f"{attr}[{node!r}]['gres'][{key!r}]"
            count = _gres_count(entry, subject, where)
            raw = entry.get("indexes") if isinstance(entry, Mapping) else None
            if raw is None:
                if count:
                    raise _bad(subject, where, f"{entry!r} has no GPU indexes (rule: GPUs must be configured "
                                               "with File= so Slurm tracks indices)")
                continue
            try:
                got = parse_index_list(_s(raw, subject, f"{where}['indexes']"))
            except SlurmJsonError as exc:
                raise _bad(subject, where, str(exc)) from exc
            if len(got) != count:
                raise _bad(subject, where, f"count {count} != {len(got)} indexes {raw!r}")
            idx.update(got)
        if idx:
            found[node] = tuple(sorted(idx))
    ordered = [n for n in nodes if n in found] + sorted(n for n in found if n not in nodes)
    return tuple((NodeName(n), found[n]) for n in ordered)


def _gpu_request(job: PyslurmJob, subject: str) -> GpuRequest:
    per_node: int | None = None
    gtype = ""
    for key, value in _mapping(job.gres_per_node, subject, "gres_per_node").items():
        name, t = _gres_key(key)
        if name == "gpu":
            per_node = (per_node or 0) + _gres_count(value, subject, f"gres_per_node[{key!r}]")
            gtype = gtype or t
    if per_node is not None:
        return GpuRequest(per_node=per_node, gpu_type=gtype)
    gpus = _mapping(job.gpus, subject, "gpus")
    if not gpus:
        return GpuRequest()
    counts = {k: _gres_count(getattr(v, "count", v), subject, f"gpus[{k!r}].count") for k, v in gpus.items()}
    typed = {_gres_key(k)[1]: c for k, c in counts.items() if _gres_key(k)[1]}
    total = counts["gpu"] if "gpu" in counts else sum(typed.values())
    return GpuRequest(per_job=total, gpu_type=next(iter(typed)) if len(typed) == 1 else "")


def job_record(job: PyslurmJob) -> JobRecord:
    """One pyslurm ``Job`` as a :class:`JobRecord` (the ids, states and GPUs the CLI backend reads).

    Raises:
        SlurmJsonError: a value of the wrong type, an unknown state, a malformed hostlist or GPU layout
            (the message names the job and the attribute).
    """
    jid = _i(job.id, "Job ?", "id")
    if jid is None:
        raise _bad("Job ?", "id", "must be set")
    subject = f"Job {jid}"
    array_id = _i(job.array_id, subject, "array_id") or None
    task_id = _i(job.array_task_id, subject, "array_task_id")
    waiting = _s(job.array_tasks_waiting, subject, "array_tasks_waiting")
    het_id = _i(job.heterogeneous_id, subject, "heterogeneous_id") or None
    offset = _i(job.heterogeneous_offset, subject, "heterogeneous_offset")
    if het_id is not None:
        offset = offset or 0
        display = f"{het_id}+{offset}"
    elif array_id is not None:
        if task_id is None and not waiting:
            task_id = 0  # pyslurm reads array_task_id 0 as unset
        display = f"{array_id}_{task_id}" if task_id is not None else f"{array_id}_[{waiting}]"
    else:
        display = str(jid)
    subject = f"Job {display}"
    word = _s(job.state, subject, "state").upper()
    restart = _i(job.requeue_count, subject, "requeue_count") or 0
    if (bad := restart_count_error(restart)) is not None:
        raise _bad(subject, "requeue_count", bad)
    try:
        state = map_job_state((word,), restart)
    except SlurmJsonError as exc:
        raise _bad(subject, "state", str(exc)) from exc
    hostlist = _s(job.allocated_nodes, subject, "allocated_nodes")
    try:
        nodes = tuple(NodeName(n) for n in expand_hostlist(hostlist))
    except SlurmJsonError as exc:
        raise _bad(subject, "allocated_nodes", str(exc)) from exc
    return JobRecord(
        job_id=JobId(display), slurm_job_id=jid, name=_s(job.name, subject, "name"),
        user=_s(job.user_name, subject, "user_name"), account=_s(job.account, subject, "account"),
        partition=_s(job.partition, subject, "partition"), state=state, slurm_state=(word,),
        submit_time=_t(job.submit_time, subject, "submit_time"),
        start_time=_t(job.start_time, subject, "start_time"),
        resize_time=_t(job.resize_time, subject, "resize_time"),
        nodes=nodes, node_count=_i(job.num_nodes, subject, "num_nodes") or len(nodes),
        tasks=_i(job.ntasks, subject, "ntasks"), gpus=_layout_gpus(job, subject, nodes),
        gpu_request=_gpu_request(job, subject),
        admin_comment=_s(job.admin_comment, subject, "admin_comment"),
        comment=_s(job.comment, subject, "comment"),
        batch_host=_s(job.batch_host, subject, "batch_host") or None, restart_count=restart,
        array_job_id=array_id, array_task_id=task_id if array_id is not None else None,
        het_job_id=het_id, het_job_offset=offset if het_id is not None else None,
        work_dir=_s(getattr(job, "working_directory", None), subject, "working_directory"),
    )


def node_records(nodes: Iterable[PyslurmNode], jobs: Iterable[JobRecord],
                 refused: dict[str, str] | None = None) -> list[NodeRecord]:
    """pyslurm ``Node`` objects as :class:`NodeRecord`, sorted by name.

    A node's used GPUs are those the given jobs hold while their state holds the node
    (``RUNNING``, ``SUSPENDED``, ``CONFIGURING``, ``COMPLETING`` …): pass every job, not only the
    managed partitions' ones. With ``refused``, a node that does not convert is left out and its
    reason stored there under its name (``record <i>`` when the name is unreadable), as
    :func:`~slurm_elastic.slurm.json_records.parse_nodes` does.

    Raises:
        SlurmJsonError: without ``refused``: a missing name or state, malformed GRES, a node listed
            twice, or a job holding a GPU index beyond its node's GPUs.
    """
    used: dict[str, set[int]] = {}
    for rec in jobs:
        if rec.slurm_state and rec.slurm_state[0] in _HOLDING_STATES:
            for held_on, idx in rec.gpus:
                used.setdefault(held_on, set()).update(idx)
    out: dict[str, NodeRecord] = {}
    odd: dict[str, str] = {}
    for i, n in enumerate(nodes):
        try:
            node = _node_record(n, used, out)
        except (SlurmJsonError, ValueError, TypeError, LookupError, AttributeError) as exc:
            if refused is None:
                raise
            raw = getattr(n, "name", None)
            name = raw if isinstance(raw, str) and 0 < len(raw) <= 256 and raw.isprintable() else ""
            odd.setdefault(name or f"record {i}", str(exc) if isinstance(exc, SlurmJsonError)
                           else f"Node {name or '?'}: {exc!r}")
            continue
        out[node.name] = node
    if refused is not None:
        refused.update(odd)
    return [out[k] for k in sorted(out) if k not in odd]


def _node_record(n: PyslurmNode, used: Mapping[str, set[int]], seen: Mapping[str, NodeRecord]) -> NodeRecord:
    """One node (see :func:`node_records`)."""
    name = _s(n.name, "Node ?", "name")
    if not name:
        raise _bad("Node ?", "name", "must not be empty")
    subject = f"Node {name}"
    if name in seen:
        raise _bad(subject, "name", "listed twice (rule: one record per node)")
    states = tuple(s.strip().upper() for s in _s(n.state, subject, "state").split("+") if s.strip())
    if not states:
        raise _bad(subject, "state", "is empty (rule: BASE[+FLAG…])")
    total = 0
    types: set[str] = set()
    for key, value in _mapping(n.configured_gres, subject, "configured_gres").items():
        gname, gtype = _gres_key(key)
        if gname == "gpu":
            total += _gres_count(value, subject, f"configured_gres[{key!r}]")
            if gtype:
                types.add(gtype)
    idx = tuple(sorted(used.get(name, ())))
    beyond = [g for g in idx if g >= total]
    if beyond:
        raise _bad(subject, "configured_gres", f"jobs hold GPU indices {beyond} beyond the node's {total} GPUs")
    parts = n.partitions or ()
    if isinstance(parts, str) or not all(isinstance(p, str) for p in parts):
        raise _bad(subject, "partitions", f"must be a list of strings, got {parts!r}")
    state = map_node_state(states[0], states[1:], gpus_in_use=bool(idx))
    return NodeRecord(NodeName(name), state, states, total, tuple(sorted(types)), idx,
                      tuple(sorted(set(parts))), _s(n.reason, subject, "reason"))

