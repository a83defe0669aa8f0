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

How pyslurm's objects are read: :mod:`slurm_elastic.slurm.pyslurm_records`.

Import traps: pyslurm 25.11 runs ``slurm_init()`` at import unless ``PYSLURM_DISABLE_AUTO_INIT`` is
set, and a pyslurm whose libslurm cannot read ``slurm.conf`` exits the interpreter (Slurm's
``fatal()``, not catchable). :func:`load_pyslurm` therefore reads the installed distribution's version
without importing it, checks it against ``sinfo --version``, imports with
``PYSLURM_DISABLE_AUTO_INIT=1``, checks ``slurm_api_version()``, and only then calls ``slurm_init()``.

What this module must not do: import pyslurm at module import (only :func:`load_pyslurm` does), build
a snapshot, or act on jobs (that is
:mod:`slurm_elastic.act`).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import logging
import os
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Literal, Protocol, cast

from slurm_elastic.slurm.cli_backend import SlurmCli
from slurm_elastic.slurm.dialects import SlurmJsonError, release_text
from slurm_elastic.slurm.pyslurm_records import PyslurmJob, PyslurmNode, job_record, node_records
from slurm_elastic.slurm.records import JobRecord, NodeRecord
from slurm_elastic.slurm.runner import Runner, SlurmCommandError, run_command, slurm_release

__all__ = [
    "PYSLURM_RELEASES",
    "PyslurmApi",
    "PyslurmSource",
    "PyslurmUnavailable",
    "choose_source",
    "load_pyslurm",
    "pyslurm_release",
]

log = logging.getLogger(__name__)

PYSLURM_RELEASES = ((25, 11),)
"""Slurm releases (major, minor) the pyslurm backend supports (each with pyslurm of the same X.Y)."""

_DISABLE_AUTO_INIT = "PYSLURM_DISABLE_AUTO_INIT"



class PyslurmUnavailable(SlurmJsonError):  # noqa: N818 (an outcome the caller falls back on)
    """pyslurm cannot serve this Slurm: not installed, not importable, or built for another release.

    A :class:`~slurm_elastic.slurm.dialects.SlurmJsonError` (hence an
    :class:`~slurm_elastic.errors.ElasticError`), so callers that handle the adapters' errors handle it.
    """



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
            raise PyslurmUnavailable(f"pyslurm {version} was compiled against Slurm {release_text(got)} "
                                     f"(rule: pyslurm X.Y matches the Slurm it is built against)")
    return rel


def _check_pair(pyslurm_rel: tuple[int, int], pyslurm_text: str, slurm: tuple[int, int, int]) -> None:
    if pyslurm_rel != slurm[:2]:
        raise PyslurmUnavailable(
            f"pyslurm {pyslurm_text} is built for Slurm {release_text(pyslurm_rel)} but the running Slurm is "
            f"{release_text(slurm)} (rule: pyslurm X.Y must equal Slurm's major.minor); use the CLI backend")


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
        runner: runs ``sinfo --version`` (default: :func:`~slurm_elastic.slurm.runner.run_command`).
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
        known = ", ".join(release_text(r) for r in PYSLURM_RELEASES)
        raise PyslurmUnavailable(f"the pyslurm backend supports Slurm {known} only, found Slurm "
                                 f"{release_text(slurm)}; use the CLI backend")
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
    refused: dict[str, str] = field(default_factory=dict)
    """The job records of the last read that did not convert, by job id, with the reason (left out)."""
    refused_nodes: dict[str, str] = field(default_factory=dict)
    """The node records of the last read that did not convert, by node name, with the reason (left out)."""

    @property
    def dialect(self) -> str:
        """What the records are read from, for ``status`` and ``check-config``."""
        return f"pyslurm {getattr(self.api, '__version__', '?')} (Slurm's C API) on Slurm {release_text(self.release)}"

    @classmethod
    def connect(cls, runner: Runner = run_command) -> PyslurmSource:
        """Import pyslurm (:func:`load_pyslurm`) and build the source.

        Raises:
            PyslurmUnavailable: see :func:`load_pyslurm`.
        """
        api, release = load_pyslurm(runner)
        return cls(api, release, runner)

    def jobs(self) -> list[JobRecord]:
        """Every job Slurm lists (``Jobs.load()``), in Slurm's order; one that does not convert is left
        out and named in :attr:`refused`."""
        jobs = self.api.Jobs
        out, self.refused = [], {}
        for i, j in enumerate(_load("Jobs", lambda: jobs.load().values())):
            try:
                out.append(job_record(cast(PyslurmJob, j)))
            except (SlurmJsonError, ValueError, TypeError, LookupError, AttributeError) as exc:
                jid = getattr(j, "id", None)
                self.refused[str(jid) if isinstance(jid, int) else f"record {i}"] = str(exc)
        return out

    def read(self) -> tuple[list[NodeRecord], list[JobRecord]]:
        """Every node (``Nodes.load()``; used GPUs from the jobs' layouts) and every job, from one job load."""
        all_jobs = self.jobs()
        nodes = self.api.Nodes
        refused: dict[str, str] = {}
        recs = node_records((cast(PyslurmNode, n) for n in _load("Nodes", lambda: nodes.load().values())),
                            all_jobs, refused)
        self.refused_nodes = refused
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
            log.info("using the pyslurm backend (Slurm %s)", release_text(release))
            return PyslurmSource(api, release, runner)
    return SlurmCli(runner)
