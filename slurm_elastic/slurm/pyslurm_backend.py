"""The optional pyslurm backend: Slurm's C API through pyslurm, read into the same records as the CLI.

This module owns :class:`PyslurmSource` (the same record-source interface as
:class:`~slurm_elastic.slurm.cli_backend.SlurmCli`: ``read()``, ``jobs()``, ``runner``, ``release``),
the lazy, version-checked import of pyslurm (:func:`load_pyslurm`) and the choice between
the two backends (:func:`choose_source`). It reduces pyslurm's ``Job``/``Node`` objects to
:class:`~slurm_elastic.slurm.records.JobRecord`/:class:`~slurm_elastic.slurm.records.NodeRecord`
with the JSON readers' own rules (:func:`map_job_state`, :func:`map_node_state`,
:func:`parse_index_list`, :func:`expand_hostlist`); :mod:`slurm_elastic.observe` builds the one
snapshot from them, whichever backend read them.

Supported versions:

* CLI backend (:mod:`slurm_elastic.slurm.cli_backend`): Slurm 22.05 and 25.11.
* pyslurm backend (this module): Slurm 25.11 only, with pyslurm 25.11.x (``pip install
  'slurm-elastic[pyslurm]'``, built against that Slurm's headers and libraries). PyPI has no pyslurm
  for 22.05 (only upstream git tags) and pyslurm 25.11 does not build against 22.05, so a 22.05 site
  uses the CLI backend. pyslurm's ``X.Y`` must equal the running Slurm's major.minor
  (``sinfo --version``); anything else is refused before any Slurm API call.

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

Import traps: pyslurm 25.11 runs ``slurm_init()`` at import unless ``PYSLURM_DISABLE_AUTO_INIT`` is
set, and a pyslurm whose libslurm cannot read ``slurm.conf`` exits the interpreter (Slurm's
``fatal()``, not catchable). :func:`load_pyslurm` therefore reads the installed distribution's version
without importing it, checks it against ``sinfo --version``, imports with
``PYSLURM_DISABLE_AUTO_INIT=1``, checks ``slurm_api_version()``, and only then calls ``slurm_init()``.

What this module must not do: import pyslurm at module import (only :func:`load_pyslurm` does), build
a snapshot, or act on jobs (that is
:mod:`slurm_elastic.slurm.actions`).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import logging
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Literal, Protocol, cast

from slurm_elastic.core.model import JobId, NodeName
from slurm_elastic.slurm.cli_backend import SlurmCli
from slurm_elastic.slurm.commands import Runner, SlurmCommandError, run_command, slurm_release
from slurm_elastic.slurm.dialects import SlurmJsonError, map_job_state, map_node_state
from slurm_elastic.slurm.hostlist import expand_hostlist, parse_index_list
from slurm_elastic.slurm.records import GpuRequest, JobRecord, NodeRecord

__all__ = [
    "PYSLURM_RELEASES",
    "PyslurmApi",
    "PyslurmGpu",
    "PyslurmJob",
    "PyslurmNode",
    "PyslurmSource",
    "PyslurmUnavailable",
    "choose_source",
    "job_record",
    "load_pyslurm",
    "node_records",
    "pyslurm_release",
]

log = logging.getLogger(__name__)

PYSLURM_RELEASES = ((25, 11),)
"""Slurm releases (major, minor) the pyslurm backend supports (each with pyslurm of the same X.Y)."""

_DISABLE_AUTO_INIT = "PYSLURM_DISABLE_AUTO_INIT"

# pyslurm's one-word job state (flags shadow the base state): the words of a job holding its nodes.
_HOLDING_STATES = frozenset({
    "RUNNING", "SUSPENDED", "COMPLETING", "STAGE_OUT", "CONFIGURING", "RESIZING", "SIGNALING", "STOPPED",
})


class PyslurmUnavailable(SlurmJsonError):  # noqa: N818 (an outcome the caller falls back on)
    """pyslurm cannot serve this Slurm: not installed, not importable, or built for another release.

    A :class:`~slurm_elastic.slurm.dialects.SlurmJsonError` (hence an
    :class:`~slurm_elastic.errors.ElasticError`), so callers that handle the adapters' errors handle it.
    """


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


class _JobCollection(Protocol):
    def values(self) -> Iterable[PyslurmJob]: ...


class _NodeCollection(Protocol):
    def values(self) -> Iterable[PyslurmNode]: ...


class _JobsLoader(Protocol):
    def load(self) -> _JobCollection: ...


class _NodesLoader(Protocol):
    def load(self) -> _NodeCollection: ...


class PyslurmApi(Protocol):
    """The ``pyslurm`` module as used here: ``pyslurm.Jobs.load()`` and ``pyslurm.Nodes.load()``."""

    @property
    def Jobs(self) -> _JobsLoader: ...  # noqa: N802 (pyslurm's class name)
    @property
    def Nodes(self) -> _NodesLoader: ...  # noqa: N802 (pyslurm's class name)


# --------------------------------------------------------------------------------------------------
# Import and version check


def _major_minor(text: str, what: str) -> tuple[int, int]:
    m = re.match(r"^\s*(\d+)\.(\d+)", text)
    if not m:
        raise PyslurmUnavailable(f"{what} {text!r}: no X.Y version found")
    return int(m.group(1)), int(m.group(2))


def _release_str(rel: Sequence[int]) -> str:
    return ".".join(f"{v:02d}" if i == 1 else str(v) for i, v in enumerate(rel))


def pyslurm_release(module: object) -> tuple[int, int]:
    """The Slurm release (major, minor) an imported pyslurm was built for.

    Reads ``pyslurm.__version__`` (``"25.11.2"``: Slurm 25.11, pyslurm patch 2) and, where present,
    ``pyslurm.slurm_api_version()`` (the Slurm headers it was compiled against); they must agree.

    Raises:
        PyslurmUnavailable: no readable version, or the two disagree.
    """
    version = getattr(module, "__version__", None)
    if not isinstance(version, str):
        raise PyslurmUnavailable(f"pyslurm has no __version__ string (got {version!r})")
    rel = _major_minor(version, "pyslurm.__version__")
    api = getattr(module, "slurm_api_version", None)
    if callable(api):
        got = api()
        if (not isinstance(got, tuple) or len(got) < 2
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in got[:2])):
            raise PyslurmUnavailable(f"pyslurm.slurm_api_version() returned {got!r}, not (major, minor, micro)")
        if (got[0], got[1]) != rel:
            raise PyslurmUnavailable(f"pyslurm {version} was compiled against Slurm {_release_str(got)} "
                                     f"(rule: pyslurm X.Y matches the Slurm it is built against)")
    return rel


def _check_pair(pyslurm_rel: tuple[int, int], pyslurm_text: str, slurm: tuple[int, int, int]) -> None:
    if pyslurm_rel != slurm[:2]:
        raise PyslurmUnavailable(
            f"pyslurm {pyslurm_text} is built for Slurm {_release_str(pyslurm_rel)} but the running Slurm is "
            f"{_release_str(slurm)} (rule: pyslurm X.Y must equal Slurm's major.minor); use the CLI backend")


def load_pyslurm(
    runner: Runner = run_command,
    *,
    importer: Callable[[str], ModuleType] = importlib.import_module,
    dist_version: Callable[[str], str] = importlib.metadata.version,
    module_found: Callable[[], bool] | None = None,
) -> tuple[PyslurmApi, tuple[int, int, int]]:
    """Import pyslurm if it exists and matches the running Slurm; initialise it.

    Steps: find the installed distribution's version without importing it; read the running Slurm's
    release (``sinfo --version`` through ``runner``); refuse a Slurm other than 25.11 and a pyslurm
    whose X.Y differs; import with ``PYSLURM_DISABLE_AUTO_INIT=1`` (restored afterwards); check the
    imported ``__version__``/``slurm_api_version()``; call ``slurm_init()`` if this call imported it.

    Args:
        runner: runs ``sinfo --version`` (default: :func:`~slurm_elastic.slurm.commands.run_command`).
        importer: imports a module by name (tests pass a fake).
        dist_version: the installed version of a distribution (``importlib.metadata.version``).
        module_found: whether a ``pyslurm`` module can be imported although no distribution metadata
            was found (default: ``importlib.util.find_spec``).

    Returns:
        The module (typed as :class:`PyslurmApi`) and the running Slurm's release.

    Raises:
        PyslurmUnavailable: pyslurm is missing or not importable, the Slurm release is not one the
            pyslurm backend supports, or pyslurm's release differs from Slurm's.
        UnsupportedSlurmVersion: Slurm is neither 22.05 nor 25.11 (no backend reads it).
        SlurmCommandError: ``sinfo --version`` failed.
    """
    try:
        dist: str | None = dist_version("pyslurm")
    except importlib.metadata.PackageNotFoundError:
        dist = None
    found = module_found() if module_found is not None else importlib.util.find_spec("pyslurm") is not None
    if dist is None and not found:
        raise PyslurmUnavailable("pyslurm is not installed (pip install 'slurm-elastic[pyslurm]' on a Slurm 25.11 "
                                 "host; it builds against that Slurm's headers and libraries)")
    slurm = slurm_release(runner)
    if slurm[:2] not in PYSLURM_RELEASES:
        known = ", ".join(_release_str(r) for r in PYSLURM_RELEASES)
        raise PyslurmUnavailable(f"the pyslurm backend supports Slurm {known} only, found Slurm "
                                 f"{_release_str(slurm)}; use the CLI backend")
    if dist is not None:
        _check_pair(_major_minor(dist, "installed pyslurm version"), dist, slurm)
    already = "pyslurm" in sys.modules
    previous = os.environ.get(_DISABLE_AUTO_INIT)
    os.environ[_DISABLE_AUTO_INIT] = "1"
    try:
        module = importer("pyslurm")
    except ImportError as exc:
        raise PyslurmUnavailable(f"pyslurm {dist or '(version unknown)'} does not import: {exc}") from exc
    finally:
        if previous is None:
            os.environ.pop(_DISABLE_AUTO_INIT, None)
        else:
            os.environ[_DISABLE_AUTO_INIT] = previous
    _check_pair(pyslurm_release(module), str(getattr(module, "__version__", "?")), slurm)
    if not already:
        init = getattr(module, "slurm_init", None)
        if not callable(init):
            raise PyslurmUnavailable("pyslurm has no slurm_init() (rule: pyslurm 25.11's API)")
        init()
    for attr in ("Jobs", "Nodes"):
        if not hasattr(getattr(module, attr, None), "load"):
            raise PyslurmUnavailable(f"pyslurm has no {attr}.load() (rule: pyslurm 25.11's API)")
    return cast(PyslurmApi, module), slurm


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
    )


def node_records(nodes: Iterable[PyslurmNode], jobs: Iterable[JobRecord]) -> list[NodeRecord]:
    """pyslurm ``Node`` objects as :class:`NodeRecord`, sorted by name.

    A node's used GPUs are those the given jobs hold while their state holds the node
    (``RUNNING``, ``SUSPENDED``, ``CONFIGURING``, ``COMPLETING`` …): pass every job, not only the
    managed partitions' ones.

    Raises:
        SlurmJsonError: a missing name or state, malformed GRES, a node listed twice, or a job holding a
            GPU index beyond its node's GPUs.
    """
    used: dict[str, set[int]] = {}
    for rec in jobs:
        if rec.slurm_state and rec.slurm_state[0] in _HOLDING_STATES:
            for node, idx in rec.gpus:
                used.setdefault(node, set()).update(idx)
    out: dict[str, NodeRecord] = {}
    for n in nodes:
        name = _s(n.name, "Node ?", "name")
        if not name:
            raise _bad("Node ?", "name", "must not be empty")
        subject = f"Node {name}"
        if name in out:
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
        out[name] = NodeRecord(NodeName(name), state, states, total, tuple(sorted(types)), idx,
                               tuple(sorted(set(parts))), _s(n.reason, subject, "reason"))
    return [out[k] for k in sorted(out)]


# --------------------------------------------------------------------------------------------------
# The observer


def _load(what: str, loader: Callable[[], Iterable[object]]) -> list[object]:
    try:
        return list(loader())
    except Exception as exc:  # pyslurm raises RPCError and friends; name them in the adapter's error
        raise SlurmCommandError(f"pyslurm.{what}.load() failed: {type(exc).__name__}: {exc}") from exc


@dataclass
class PyslurmSource:
    """Reads Slurm through pyslurm (Slurm 25.11): the same records as the CLI backend (:class:`SlurmCli`).

    Build it with :meth:`connect` (version-checked import) or pass an ``api`` (tests pass fakes).

    Args:
        api: the pyslurm module (see :func:`load_pyslurm`).
        release: the running Slurm's release, as checked by :func:`load_pyslurm`.
        runner: runs Slurm's commands for the actuator (pyslurm only reads).
    """

    api: PyslurmApi
    release: tuple[int, int, int] = (25, 11, 0)
    runner: Runner = run_command

    @classmethod
    def connect(cls, runner: Runner = run_command) -> PyslurmSource:
        """Import pyslurm (:func:`load_pyslurm`) and build the source.

        Raises:
            PyslurmUnavailable: see :func:`load_pyslurm`.
        """
        api, release = load_pyslurm(runner)
        return cls(api, release, runner)

    def jobs(self) -> list[JobRecord]:
        """Every job Slurm lists (``Jobs.load()``), in Slurm's order."""
        jobs = self.api.Jobs
        return [job_record(cast(PyslurmJob, j)) for j in _load("Jobs", lambda: jobs.load().values())]

    def read(self) -> tuple[list[NodeRecord], list[JobRecord]]:
        """Every node (``Nodes.load()``; used GPUs from the jobs' layouts) and every job, from one job load."""
        all_jobs = self.jobs()
        nodes = self.api.Nodes
        recs = node_records((cast(PyslurmNode, n) for n in _load("Nodes", lambda: nodes.load().values())),
                            all_jobs)
        return recs, all_jobs


def choose_source(
    runner: Runner = run_command,
    *,
    prefer: Literal["auto", "cli", "pyslurm"] = "auto",
    loader: Callable[[Runner], tuple[PyslurmApi, tuple[int, int, int]]] = load_pyslurm,
) -> SlurmCli | PyslurmSource:
    """The daemon's record source: pyslurm when an importable pyslurm matches the running Slurm, else the CLI.

    Versions: the CLI backend reads Slurm 22.05 and 25.11; the pyslurm backend Slurm 25.11 with
    pyslurm 25.11.x. ``prefer="cli"`` never touches pyslurm; ``prefer="pyslurm"`` raises instead of
    falling back.

    Raises:
        PyslurmUnavailable: ``prefer="pyslurm"`` and pyslurm cannot serve this Slurm.
        UnsupportedSlurmVersion: Slurm is neither 22.05 nor 25.11.
        SlurmCommandError: ``sinfo --version`` failed.
    """
    if prefer != "cli":
        try:
            api, release = loader(runner)
        except PyslurmUnavailable as exc:
            if prefer == "pyslurm":
                raise
            log.info("pyslurm backend unavailable (%s); using the CLI backend", exc)
        else:
            log.info("using the pyslurm backend (Slurm %s)", _release_str(release))
            return PyslurmSource(api, release, runner)
    return SlurmCli(runner)
