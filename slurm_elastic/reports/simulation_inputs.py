"""The simulation results a report reads: their schema (metrics, job fields) and its validation.

This module owns :data:`METRIC_KEYS`, :data:`OPTIONAL_METRIC_KEYS`, :data:`JOB_FIELDS`,
:class:`ReportInputError` and turning the result dicts of
:func:`slurm_elastic.experiments.comparison.run_comparison` into validated runs grouped by (workload, policy)
series; every refusal names the run index and the key. Pure: no file, no plot.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from slurm_elastic.errors import ElasticError

# Metrics every run carries (a value may be null, e.g. the JCTs of a run whose jobs were all dropped).
METRIC_KEYS: tuple[str, ...] = (
    "jobs", "jobs_completed", "jobs_dropped", "drop_ratio",
    "avg_jct", "p50_jct", "p99_jct", "avg_queue", "avg_exec",
    "makespan", "gpu_hours", "avg_utilization", "scaling_efficiency",
    "unfair_fraction", "worst_ftf", "resizes_per_job",
)  # fmt: skip
# Metrics a run may lack (results saved before they existed): null when missing, checked when present.
OPTIONAL_METRIC_KEYS: tuple[str, ...] = ("lower_bound_avg_jct", "avg_jct_over_lower_bound")
# Fields every job record carries, in the column order of jobs.csv.
JOB_FIELDS: tuple[str, ...] = (
    "job_id", "model", "user", "submit", "start", "end", "queue", "exec", "jct",
    "gpu_seconds", "resizes", "ftf", "dropped",
)  # fmt: skip
_JOB_STR = ("model", "user")
_JOB_NULLABLE = ("start", "end", "queue", "exec", "jct", "ftf")
_JOB_NUMBER = ("submit", "gpu_seconds", "resizes")
RUN_COLUMNS = ("workload", "policy", "seed", "resize_cost", "gpus")


class ReportInputError(ElasticError):
    """A simulation result handed to the report breaks the result schema (names run index and key)."""





@dataclass(frozen=True)
class Run:
    """One validated run: numbers as floats, unknown values as ``None``."""

    index: int
    workload: str
    policy: str
    seed: int
    gpus: int
    resize_cost: str
    metrics: dict[str, float | None]
    extra_metrics: dict[str, Any]
    jobs: list[dict[str, Any]]
    t: list[float]
    busy_gpus: list[float]
    completed: list[float]

    @property
    def key(self) -> tuple[str, str, int, str]:
        return (self.workload, self.policy, self.gpus, self.resize_cost)

    def values(self, name: str) -> list[float]:
        """The known (non-null) values of job field ``name``."""
        return [j[name] for j in self.jobs if j[name] is not None]


@dataclass
class Series:
    """The runs of one (workload, policy, GPUs, resize cost) combination, ordered by seed."""

    workload: str
    policy: str
    gpus: int
    resize_cost: str
    label: str = ""
    runs: list[Run] = field(default_factory=list)

    def pooled(self, name: str) -> list[float]:
        return [v for r in self.runs for v in r.values(name)]

    @property
    def n_jobs(self) -> int:
        return sum(len(r.jobs) for r in self.runs)


def _fail(run: int, key: str, rule: str) -> ReportInputError:
    return ReportInputError(f"simulation result run {run}: key {key!r} {rule}")


def _get(run: int, obj: Mapping[str, Any], key: str, where: str = "") -> Any:
    if key not in obj:
        raise _fail(run, where + key, "is missing")
    return obj[key]


def _str(run: int, key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise _fail(run, key, f"must be a string, got {value!r}")
    return value


def _int(run: int, key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(run, key, f"must be an integer, got {value!r}")
    return int(value)


def _number(run: int, key: str, value: Any, *, nullable: bool) -> float | None:
    """A finite float; ``None`` for null (and for NaN/inf) where the key may be unknown."""
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        rule = "a number or null" if nullable else "a number"
        raise _fail(run, key, f"must be {rule}, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        if nullable:
            return None
        raise _fail(run, key, f"must be finite, got {value!r}")
    return int(value) if isinstance(value, int) else float(value)  # an int stays an int in the CSVs


def _float(run: int, key: str, value: Any) -> float:
    number = _number(run, key, value, nullable=False)
    assert number is not None  # nullable=False never returns None
    return number


def _mapping(run: int, key: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _fail(run, key, f"must be an object, got {type(value).__name__}")
    return value


def _list(run: int, key: str, value: Any) -> list[Any]:
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise _fail(run, key, f"must be a list, got {type(value).__name__}")
    return list(value)


def _job(run: int, k: int, raw: Any) -> dict[str, Any]:
    where = f"jobs[{k}]."
    job_map = _mapping(run, f"jobs[{k}]", raw)
    job: dict[str, Any] = dict(job_map)  # keeps extra fields for jobs.csv
    job_id = _get(run, job_map, "job_id", where)
    if isinstance(job_id, bool) or not isinstance(job_id, str | int):
        raise _fail(run, where + "job_id", f"must be a string or an integer, got {job_id!r}")
    job["job_id"] = str(job_id)
    for name in _JOB_STR:
        job[name] = _str(run, where + name, _get(run, job_map, name, where))
    for name in _JOB_NUMBER:
        job[name] = _float(run, where + name, _get(run, job_map, name, where))
    for name in _JOB_NULLABLE:
        job[name] = _number(run, where + name, _get(run, job_map, name, where), nullable=True)
    dropped = _get(run, job_map, "dropped", where)
    if not isinstance(dropped, bool):
        raise _fail(run, where + "dropped", f"must be true or false, got {dropped!r}")
    return job


def _validate_run(i: int, raw: Any) -> Run:
    if not isinstance(raw, Mapping):
        raise ReportInputError(f"simulation result run {i}: must be an object, got {type(raw).__name__}")
    gpus = _int(i, "gpus", _get(i, raw, "gpus"))
    if gpus < 1:
        raise _fail(i, "gpus", f"must be >= 1, got {gpus}")
    metrics_raw = _mapping(i, "metrics", _get(i, raw, "metrics"))
    metrics = {
        name: _number(i, "metrics." + name, _get(i, metrics_raw, name, "metrics."), nullable=True)
        for name in METRIC_KEYS
    }
    for name in OPTIONAL_METRIC_KEYS:
        metrics[name] = _number(i, "metrics." + name, metrics_raw.get(name), nullable=True)
    extra_metrics = {k: v for k, v in metrics_raw.items() if k not in metrics}
    jobs = [_job(i, k, j) for k, j in enumerate(_list(i, "jobs", _get(i, raw, "jobs")))]
    timeline = _mapping(i, "timeline", _get(i, raw, "timeline"))
    series: dict[str, list[float]] = {}
    if timeline:  # an empty object is an empty timeline
        for name in ("t", "busy_gpus", "completed"):
            values = _list(i, "timeline." + name, _get(i, timeline, name, "timeline."))
            series[name] = [
                _float(i, f"timeline.{name}[{k}]", v) for k, v in enumerate(values)
            ]
        lengths = {name: len(v) for name, v in series.items()}
        if len(set(lengths.values())) > 1:
            raise _fail(i, "timeline", f"lists must have equal lengths, got {lengths}")
        t = series["t"]
        if any(b < a for a, b in itertools.pairwise(t)):
            raise _fail(i, "timeline.t", "must be non-decreasing")
    return Run(
        index=i,
        workload=_str(i, "workload", _get(i, raw, "workload")),
        policy=_str(i, "policy", _get(i, raw, "policy")),
        seed=_int(i, "seed", _get(i, raw, "seed")),
        gpus=gpus,
        resize_cost=_str(i, "resize_cost", _get(i, raw, "resize_cost")),
        metrics=metrics,
        extra_metrics=extra_metrics,
        jobs=jobs,
        t=series.get("t", []),
        busy_gpus=series.get("busy_gpus", []),
        completed=series.get("completed", []),
    )


def series_of(results: Sequence[Mapping[str, Any]]) -> list[Series]:
    """Validates ``results`` and groups the runs into labelled series (order of first appearance)."""
    if isinstance(results, str | bytes | Mapping) or not isinstance(results, Sequence):
        raise ReportInputError(f"simulation results must be a list of run objects, got {type(results).__name__}")
    if not results:
        raise ReportInputError("simulation results: no runs to report")
    groups: dict[tuple[str, str, int, str], Series] = {}
    seen: dict[tuple[tuple[str, str, int, str], int], int] = {}
    for i, raw in enumerate(results):
        run = _validate_run(i, raw)
        if (run.key, run.seed) in seen:
            raise _fail(i, "seed", f"repeats run {seen[run.key, run.seed]} (same workload, policy, gpus, "
                                   f"resize_cost and seed {run.seed})")
        seen[run.key, run.seed] = i
        if run.key not in groups:
            groups[run.key] = Series(run.workload, run.policy, run.gpus, run.resize_cost)
        groups[run.key].runs.append(run)
    out = list(groups.values())
    varying = {
        "workload": len({s.workload for s in out}) > 1,
        "gpus": len({s.gpus for s in out}) > 1,
        "resize_cost": len({s.resize_cost for s in out}) > 1,
    }
    for s in out:
        s.runs.sort(key=lambda r: r.seed)
        extra = [s.workload] if varying["workload"] else []
        extra += [f"{s.gpus} GPUs"] if varying["gpus"] else []
        extra += [s.resize_cost] if varying["resize_cost"] else []
        s.label = s.policy + (f" ({', '.join(extra)})" if extra else "")
    return out


