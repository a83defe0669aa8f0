"""Fuzzing every input a user or Slurm controls, through the real entry points.

This package owns the hostile-input generators and the runner behind ``slurm-elastic bench fuzz``
and ``tests/property/test_fuzz_hostile.py``: one family per input, each case a seeded mutation of
a valid input, fed to the entry point the daemon or the command uses, its outcome named:

* **expected**: ``accepted``, or refused with the documented error (``ChannelError``, a report
  line quarantined, ``ContractError``, ``ConfigError``, ``SlurmJsonError``, ``TraceError``, exit
  status 2 from the command …), counted in ``outcomes`` as ``family:name``;
* ``foreign_exceptions``: any other exception that escaped an entry point (a bug), a case that
  ran past its time limit (a hang) or out of memory included;
* ``rounds_failed``: a daemon round over the hostile job's cluster that raised or recorded nothing;
* ``other_jobs_unplanned``: an honest job of that cluster missing from the round's plan (or its
  snapshot), or whose action the actuator did not carry out.

Families (:mod:`.daemon_families`, :mod:`.tool_families`): ``report_lines``, ``order_lines``,
``job_files``, ``admin_comment`` (its ``--elastic*`` values), ``slurm_records`` (a job's record),
``slurm_docs`` (whole ``squeue``/``sinfo``/``sacct`` documents and command output), ``config``,
``trace_csv``, ``cli`` (argument vectors). Case ``i`` of ``run(cases, seed)`` is rebuilt alone by
``run_case(family_of(i), seed, i, command=...)``. Generators use :mod:`random` only (no test dependency).

The ``cli`` family runs the ``slurm-elastic`` command itself, so the caller hands it in (``command``:
:func:`slurm_elastic.cli.main`): the command's ``bench fuzz`` passes its own entry point, and this
package imports nothing of :mod:`slurm_elastic.cli` (no import circle).
"""

from __future__ import annotations

import contextlib
import logging
import random
import resource
import shutil
import signal
import tempfile
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from slurm_elastic.core import ones_kernels
from slurm_elastic.fuzz import daemon_families, tool_families
from slurm_elastic.fuzz.case import CaseResult, CaseTimeout
from slurm_elastic.fuzz.fuzzed_cluster import FuzzCluster, profiles
from slurm_elastic.fuzz.tool_families import Command

WEIGHTS: dict[str, int] = {
    "report_lines": 6, "report_claims": 2, "shared_history": 1, "order_lines": 4, "job_files": 6,
    "admin_comment": 4, "slurm_records": 4, "slurm_docs": 4, "config": 3, "trace_csv": 2, "cli": 1,
}
"""Cases per round of the schedule: the daemon-level families most, the command line least (it is
the slowest per case and the least exposed)."""
SCHEDULE: tuple[str, ...] = tuple(f for f, w in WEIGHTS.items() for _ in range(w))
FAMILIES: tuple[str, ...] = tuple(WEIGHTS)
CASE_LIMIT_S = 5.0
"""A case still running after this long hangs: counted as a foreign exception."""
MEMORY_HEADROOM = 3 << 30
"""Address space a case may add to the process (its soft limit during :func:`run`); past it, MemoryError."""
MAX_FAILURES_SHOWN = 20


def family_of(index: int) -> str:
    """The family of case ``index`` of a run."""
    return SCHEDULE[index % len(SCHEDULE)]


def run_case(family: str, seed: int, index: int = 0, *, command: Command) -> CaseResult:
    """Build and run one case of ``family`` (time-limited when called from the main thread);
    ``command`` is the ``slurm-elastic`` entry point the ``cli`` family calls."""
    rng = random.Random(f"{seed}/{index}/{family}")
    res = CaseResult(family)
    work = Path(tempfile.mkdtemp(prefix="slurm-elastic-fuzz-"))
    cluster: FuzzCluster | None = None
    ones_kernels.compile_all()  # outside the case's time limit: a compile cut short breaks numba
    try:
        with contained(CASE_LIMIT_S):
            if family in daemon_families.FAMILIES:
                cluster = FuzzCluster.build(rng, work, profiles())
                res.outcome = daemon_families.FAMILIES[family](rng, cluster, res)
            else:
                res.outcome = tool_families.families(command)[family](rng, work, res)
    except CaseTimeout as exc:
        res.note_foreign(f"{family} case (hung)", exc)
        res.outcome = "timeout"
    except Exception as exc:  # an entry point the family did not wrap, or the harness itself
        res.note_foreign(f"{family} case", exc)
        res.outcome = "foreign"
    finally:
        if cluster is not None and cluster.view is not None and cluster.view.store is not None:
            cluster.view.store.close()
        shutil.rmtree(work, ignore_errors=True)
    if res.foreign and res.outcome != "timeout":
        res.outcome = "foreign"
    return res


def run(cases: int, seed: int = 0, *, command: Command,
        progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Run ``cases`` cases (families in :data:`SCHEDULE` order) and count what happened
    (``command``: the ``slurm-elastic`` entry point the ``cli`` family calls).

    Returns:
        ``{"cases", "outcomes", "foreign_exceptions", "rounds_failed", "other_jobs_unplanned",
        "seconds", "families", "places", "failures"}``: ``outcomes`` counts ``family:outcome``;
        ``places`` counts the problems by family and place (for an exception, the project function
        it escaped from: :func:`~slurm_elastic.fuzz.case.place`); ``failures``
        (at most :data:`MAX_FAILURES_SHOWN`) gives, for a case that broke a rule, its family,
        seed and index (to rerun it with :func:`run_case`), its input and what went wrong.
    """
    if cases < 0:
        from slurm_elastic.errors import ConfigError

        raise ConfigError(f"bench fuzz: --cases {cases}: must be >= 0")
    outcomes: Counter[str] = Counter()
    families: Counter[str] = Counter()
    places: Counter[str] = Counter()
    totals = {"foreign_exceptions": 0, "rounds_failed": 0, "other_jobs_unplanned": 0}
    failures: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    with _quiet(), _memory_cap():
        profiles()
        for i in range(cases):
            family = family_of(i)
            res = run_case(family, seed, i, command=command)
            families[family] += 1
            outcomes[f"{family}:{res.outcome}"] += 1
            totals["foreign_exceptions"] += len(res.foreign)
            places.update(f"{family}: {p}" for p in res.places)
            totals["rounds_failed"] += res.rounds_failed
            totals["other_jobs_unplanned"] += res.other_jobs_unplanned
            if (res.foreign or res.rounds_failed or res.other_jobs_unplanned) and len(failures) < MAX_FAILURES_SHOWN:
                failures.append({"family": family, "seed": seed, "index": i, "input": res.described,
                                 "places": res.places, "problems": [*res.foreign, *res.failures]})
            if progress is not None:
                progress(i + 1, cases)
    return {"cases": cases, "outcomes": dict(sorted(outcomes.items())), **totals,
            "seconds": round(time.perf_counter() - t0, 2), "families": dict(sorted(families.items())),
            "places": dict(places.most_common()), "failures": failures}


@contextlib.contextmanager
def contained(seconds: float = CASE_LIMIT_S) -> Iterator[None]:
    """Run a case's code bounded: :class:`CaseTimeout` after ``seconds`` (main thread only), at most
    :data:`MEMORY_HEADROOM` more address space, the project's loggers and numpy's warnings silenced."""
    with _quiet(), _memory_cap(), _deadline(seconds), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numpy's overflow warnings on hostile numbers: outcomes count, not noise
        yield


@contextlib.contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Raise :class:`CaseTimeout` in the case after ``seconds`` (main thread only; elsewhere no limit)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: FrameType | None) -> None:
        raise CaseTimeout(f"the case ran past {seconds:g} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@contextlib.contextmanager
def _memory_cap() -> Iterator[None]:
    """Lower the soft address-space limit to what the process uses now plus :data:`MEMORY_HEADROOM`
    (a read without bound fails the case with MemoryError instead of the machine); restored after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    try:
        with open("/proc/self/status") as fh:
            size = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmSize:"))
    except (OSError, StopIteration, ValueError):
        yield
        return
    cap = size + MEMORY_HEADROOM
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    if soft != resource.RLIM_INFINITY and soft <= cap:
        yield
        return
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The project's loggers silenced (every refused case logs a warning by design)."""
    logger = logging.getLogger("slurm_elastic")
    old, propagate = logger.level, logger.propagate
    logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        logger.setLevel(old)
        logger.propagate = propagate


__all__ = ["FAMILIES", "CaseResult", "CaseTimeout", "Command", "contained", "family_of", "run", "run_case"]
