"""What-if replay of the cluster's own history, and reading that history from Slurm.

This module owns:

* :func:`history_to_trace`: ``sacct`` records to the simulator's jobs, one per Slurm job id, built
  by the trace loader's own row reader (:mod:`slurm_elastic.sim.workload`), so a replayed history
  obeys exactly the trace format of ``DESIGN.md``;
* :func:`what_if`: that trace replayed under policies with :func:`run_comparison` (same results,
  same report), with the site's own start and end latencies by default (:func:`apply_site_physics`);
* reading the history: :func:`parse_when` (the ``--since``/``--until`` dates), :func:`read_accounting`
  (``sacct --json -a -X -S -E``) and :func:`cluster_gpus` (``sinfo --json``). These run Slurm
  commands through an injectable runner (default :func:`slurm_elastic.slurm.runner.run_command`).

It must not schedule, render or write anywhere but a temporary folder (the trace CSV handed to
:func:`run_comparison`). The clock is read only by the caller (``now`` is an argument).

Job construction (one job per Slurm job id; the segments of a resized job and its satellites are
grouped as in :func:`slurm_elastic.reports.allocation.group_jobs`):

* submit time: the job's first submission, relative to the earliest among the replayed jobs;
* GPUs: allocated GPUs of its first segment; duration: sum of its own segments' elapsed (a job
  still running when ``sacct`` ran contributes its elapsed so far);
* elastic range: from its ``slurm-elastic gpus=MIN:MAX`` AdminComment when it has a valid one
  (``MAX = 0``: the trace default), else the trace default ``1 .. GPUs x elastic_range``;
* model: by GPU-time class, as the trace loader picks it (its helper, in submit order);
* user and account: as in Slurm. Jobs that never held a GPU are skipped (logged, and listed by
  :func:`skipped_jobs`).

Site physics (default; ``site_physics=False``, the CLI's ``--no-site-physics``, leaves them out): the
window's own start and end latencies per node count
(:func:`~slurm_elastic.reports.site_physics.measure_site_physics`: Slurm's start of a job to its
first ``srun`` step, its last step's end to Slurm's end). A job's elapsed time includes them, but
they do not shrink when a policy gives the job more GPUs and they come again at every restart; so
each replayed job's work is its elapsed time less the latency of its node count (at least 1 s, or
its elapsed time when shorter: :func:`apply_site_physics`), and the simulator makes every start
pay the latency of the node count it starts on (``overhead_s`` of
:class:`~slurm_elastic.sim.cluster.VirtualCluster`). Each result says what was applied
(``site_physics``).
"""

from __future__ import annotations

import csv
import datetime as dt
import logging
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from slurm_elastic.contract import ContractError, parse_elastic_request
from slurm_elastic.core.guards import Guards
from slurm_elastic.errors import ConfigError
from slurm_elastic.experiments.comparison import PolicySpec, run_comparison
from slurm_elastic.experiments.pool import PairPool, Progress
from slurm_elastic.reports.allocation import JobUsage, group_jobs
from slurm_elastic.reports.site_physics import SitePhysics, measure_site_physics
from slurm_elastic.sim.costs import Overhead, overhead_for
from slurm_elastic.sim.engine import Cadence
from slurm_elastic.sim.workload import SimJobSpec, trace_job
from slurm_elastic.slurm.json_records import parse_nodes, parse_sacct
from slurm_elastic.slurm.records import AccountingRecord
from slurm_elastic.slurm.runner import Runner, run_command, run_json, slurm_release

log = logging.getLogger(__name__)

__all__ = [
    "MIN_REPLAYED_S",
    "TRACE_COLUMNS",
    "WORKLOAD_NAME",
    "apply_site_physics",
    "cluster_gpus",
    "history_rows",
    "history_to_trace",
    "parse_when",
    "read_accounting",
    "skipped_jobs",
    "what_if",
]

TRACE_COLUMNS = ("job_id", "submit_time", "num_gpus", "duration", "min_gpus", "max_gpus", "user", "account")
"""Columns of the trace written from history (the model column is left to the loader)."""
WORKLOAD_NAME = "slurm-history"
"""The workload name of what-if results."""
SACCT_TIMEOUT_S = 120.0
MIN_REPLAYED_S = 1.0
"""Least work (seconds at its GPUs) a replayed job keeps once its latency is taken out (Slurm's
resolution), unless its elapsed time is shorter."""


# --------------------------------------------------------------------------------------------------
# History -> trace
# --------------------------------------------------------------------------------------------------


def skipped_jobs(records: Sequence[AccountingRecord]) -> list[str]:
    """Ids of the jobs :func:`history_to_trace` skips: they never held a GPU."""
    return [j.job_id for j in group_jobs(records) if not _replayable(j)]


def _replayable(job: JobUsage) -> bool:
    return job.first_gpus > 0 and job.exec_seconds > 0 and job.submit is not None


def _range(job: JobUsage, comments: Sequence[str], elastic_range: float) -> tuple[int, int]:
    gpus = job.first_gpus
    default = (1, max(gpus, int(gpus * elastic_range)))
    for comment in comments:
        try:
            req = parse_elastic_request(comment, job_id=job.job_id)
        except ContractError as exc:
            log.warning("job %s: elastic contract unreadable, using the trace default range: %s", job.job_id, exc)
            return default
        if req is not None:
            lo = min(req.min_gpus, gpus)
            hi = max(gpus, req.max_gpus) if req.max_gpus is not None else default[1]
            return lo, hi
    return default


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def history_rows(records: Sequence[AccountingRecord], *, elastic_range: float = 4.0) -> list[dict[str, str]]:
    """The trace CSV rows (columns :data:`TRACE_COLUMNS`, values as text) of the replayable jobs, by submit time.

    Pure. See the module docstring for how a job's row is built.
    """
    jobs = [j for j in group_jobs(records) if _replayable(j)]
    if not jobs:
        return []
    t0 = min(j.submit for j in jobs if j.submit is not None)
    comments: dict[str, list[str]] = {}
    for r in records:
        if r.admin_comment:
            comments.setdefault(str(r.job_id), []).append(r.admin_comment)
    rows = []
    for j in sorted(jobs, key=lambda j: (j.submit or 0.0, j.job_id)):
        lo, hi = _range(j, comments.get(j.job_id, []), elastic_range)
        rows.append({"job_id": j.job_id, "submit_time": _num((j.submit or t0) - t0), "num_gpus": str(j.first_gpus),
                     "duration": _num(j.exec_seconds), "min_gpus": str(lo), "max_gpus": str(hi), "user": j.user,
                     "account": j.account})
    return rows


def history_to_trace(records: Sequence[AccountingRecord], *, elastic_range: float = 4.0) -> list[SimJobSpec]:
    """The simulator's jobs for ``sacct`` records: one per Slurm job id (module docstring).

    Jobs that never held a GPU are skipped; how many is logged at WARNING (see :func:`skipped_jobs`).

    Args:
        records: ``sacct --json`` records (every segment of resized jobs).
        elastic_range: a job without an elastic contract may use 1 .. GPUs x this.

    Returns:
        The jobs in submit order (what :func:`load_trace` gives for :func:`history_rows` written as CSV).

    Raises:
        TraceError: a job breaks the trace rules (e.g. GPUs outside its contract's range).
    """
    rows = history_rows(records, elastic_range=elastic_range)
    skipped = skipped_jobs(records)
    if skipped:
        log.warning("history_to_trace: skipped %d job(s) that never held a GPU: %s", len(skipped),
                    ", ".join(skipped[:10]) + (" ..." if len(skipped) > 10 else ""))
    where = Path("<sacct history>")
    seen: set[str] = set()
    # line k + 2: the row's line in the CSV written by what_if (line 1 is the header)
    return [trace_job(where, k + 2, k, row, elastic_range, seen) for k, row in enumerate(rows)]


def apply_site_physics(rows: Sequence[dict[str, str]], records: Sequence[AccountingRecord],
                       overhead: Overhead) -> list[dict[str, str]]:
    """The rows of :func:`history_rows` with each job's latency taken out of its work: its elapsed
    time less ``overhead`` at the node count it first started on, at least :data:`MIN_REPLAYED_S`
    (its elapsed time when shorter). Pure."""
    first: dict[int, tuple[int, int]] = {}  # slurm job id -> (start, nodes) of its first shape
    for r in records:
        if r.start_time is not None and (r.slurm_job_id not in first or r.start_time < first[r.slurm_job_id][0]):
            first[r.slurm_job_id] = (r.start_time, len(r.nodes))
    segments = {j.job_id: j.primary or j.segments for j in group_jobs(records)}
    out = []
    for row in rows:
        seg = segments.get(row["job_id"], ())
        nodes = first.get(seg[0].slurm_job_id, (0, 1))[1] if seg else 1
        elapsed = float(row["duration"])
        work = max(min(MIN_REPLAYED_S, elapsed), elapsed - overhead_for(overhead, max(1, nodes)))
        out.append({**row, "duration": _num(work)})
    return out


def what_if(records: Sequence[AccountingRecord], policies: Sequence[PolicySpec], seeds: Sequence[int],
            gpus: int, gpus_per_node: int, *, elastic_range: float = 4.0, resize_cost: str = "in-place",
            round_gap: float | None = None, cadence: Cadence | None = None, progress: Progress | None = None,
            guards: Guards | None = None, site_physics: bool = True,
            pool: PairPool | None = None) -> list[dict[str, Any]]:
    """Replay the history under each policy and seed on a virtual cluster of ``gpus`` GPUs.

    The trace of :func:`history_rows` is written to a temporary CSV and handed to
    :func:`run_comparison`, so the results are exactly ``slurm-elastic simulate --trace``'s (workload
    name :data:`WORKLOAD_NAME`) with the site physics measured from ``records`` (module docstring;
    ``site_physics=False``: none). Each policy runs inside the site ``guards`` as the daemon runs it
    (``None``: bare). Every result's ``site_physics`` says what was applied. Rounds run when the
    site's daemon would run them (``cadence``: :meth:`Cadence.of` its ``[daemon]`` table; ``None``:
    the daemon's defaults), or ``round_gap`` seconds apart when one is given. ``pool``: the
    processes the (policy, seed) pairs run in (the same results; ``None``: one after the other).

    Raises:
        ConfigError: no job to replay, or a job used more GPUs than the virtual cluster has.
        TraceError: a job breaks the trace rules.
    """
    rows = history_rows(records, elastic_range=elastic_range)
    if not rows:
        raise ConfigError(f"what-if: none of the {len(records)} accounting records is a job that held a GPU")
    too_big = [r for r in rows if int(r["num_gpus"]) > gpus]
    if too_big:
        r = too_big[0]
        raise ConfigError(f"what-if --gpus {gpus}: job {r['job_id']} used {r['num_gpus']} GPUs "
                          f"(rule: the virtual cluster must fit every replayed job; {len(too_big)} do not fit)")
    physics: SitePhysics | None = measure_site_physics(records) if site_physics else None
    overhead = physics.overhead_by_nodes() if physics is not None else {}
    if overhead:
        rows = apply_site_physics(rows, records, overhead)
    applied = {"applied": bool(overhead), "described": physics.describe() if physics is not None else
               "site physics: left out (--no-site-physics)", **(physics.as_dict() if physics is not None else {})}
    if physics is not None:
        log.info("what-if: %s", applied["described"])
    with tempfile.TemporaryDirectory(prefix="slurm-elastic-whatif-") as tmp:
        path = Path(tmp) / WORKLOAD_NAME
        with path.open("w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=TRACE_COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
        results = run_comparison(policies, seeds, trace=path, gpus=gpus, gpus_per_node=gpus_per_node,
                                 resize_cost=resize_cost, round_gap=round_gap, cadence=cadence, progress=progress,
                                 guards=guards,
                                 physics={"overhead_s": overhead} if overhead else None, pool=pool)
    for res in results:
        res["site_physics"] = applied
    return results


# --------------------------------------------------------------------------------------------------
# Reading the history from Slurm
# --------------------------------------------------------------------------------------------------

_RELATIVE = re.compile(r"^now(?:([+-])(\d+)(seconds|second|secs|sec|s|minutes|minute|mins|min|hours|hour|h|"
                       r"days|day|d|weeks|week|w)?)?$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_when(text: str, *, flag: str, now: dt.datetime) -> dt.datetime:
    """A ``--since``/``--until`` value as a local, naive datetime.

    Accepted: ``YYYY-MM-DD``, ``YYYY-MM-DDTHH:MM[:SS]`` (or with a blank instead of ``T``), ``today``
    (midnight), ``now`` and ``now-N[unit]`` / ``now+N[unit]`` with unit ``s`` (default), ``min``,
    ``h``, ``d`` or ``w`` (sacct's spellings also: ``minutes``, ``hours``, ``days`` ...).

    Args:
        text: the value.
        flag: the option name, for the error message.
        now: the current local time (naive).

    Raises:
        ConfigError: naming the flag, the value and the accepted forms.
    """
    value = text.strip().lower()
    if value == "today":
        return now.replace(hour=0, minute=0, second=0, microsecond=0)
    m = _RELATIVE.match(value)
    if m:
        if not m.group(1):
            return now.replace(microsecond=0)
        unit = m.group(3) or "s"
        seconds = int(m.group(2)) * _UNIT_S["m" if unit.startswith("min") else unit[0]]
        return (now + dt.timedelta(seconds=seconds if m.group(1) == "+" else -seconds)).replace(microsecond=0)
    try:
        parsed = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is not None:
        raise ConfigError(f"{flag} {text!r}: must be a local date YYYY-MM-DD[THH:MM[:SS]], 'today', 'now' or "
                          "now-N[s|min|h|d|w]")
    return parsed


def _sacct_time(when: dt.datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%S")


def read_accounting(since: dt.datetime, until: dt.datetime, *, account: str | None = None,
                    runner: Runner | None = None, steps: bool = False) -> list[AccountingRecord]:
    """Every job that was pending or running in the window, from ``sacct --json -a -X -S SINCE -E UNTIL [-A A]``.

    ``-X`` drops job steps only: every shape of a resized job (the ``RESIZING`` records) is still
    listed (checked on Slurm 22.05.8). ``-a``: all users (root or an operator sees all).
    ``steps=True`` leaves ``-X`` out: the same jobs, each with its steps (``--json`` nests them in
    their job; with ``-X`` it lists none), which the site physics are measured from.

    Raises:
        ConfigError: ``until`` before ``since``.
        SlurmCommandError: sacct failed.
        SlurmJsonError: its output is not the JSON this project reads.
    """
    if until < since:
        raise ConfigError(f"--until {_sacct_time(until)} is before --since {_sacct_time(since)} (rule: since <= until)")
    argv = ["sacct", "--json", "-a", *(() if steps else ("-X",)), "-S", _sacct_time(since), "-E", _sacct_time(until)]
    if account:
        argv += ["-A", account]
    run = runner or (lambda a: run_command(a, timeout=SACCT_TIMEOUT_S))
    return parse_sacct(run_json(run, argv))


def cluster_gpus(runner: Runner = run_command, partitions: Sequence[str] = ()) -> int:
    """GPUs configured now, summed over nodes (``sinfo --json``; ``sinfo -N --json`` on 25.11).

    Args:
        runner: runs a command, returns stdout.
        partitions: count only nodes of these partitions (empty: all).

    Raises:
        SlurmCommandError, SlurmJsonError, UnsupportedSlurmVersion: sinfo failed or printed something else.
    """
    release = slurm_release(runner)
    argv = ["sinfo", "--json"] if release[:2] == (22, 5) else ["sinfo", "-N", "--json"]
    wanted = set(partitions)
    return sum(n.gpus for n in parse_nodes(run_json(runner, argv)) if not wanted or wanted & set(n.partitions))
