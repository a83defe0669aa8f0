"""The allocation report's predictor error: how well the daemon's throughput models predicted the jobs.

This module owns the ``prediction`` table (:func:`prediction_rows`) and its summary figures
(:func:`prediction_summary`). For each launcher job with reports in the window, its measured
configurations are its :func:`~slurm_elastic.observe.job_reports.step_points` over the window's rows
(the median step time of its clean windows at each GPU count, node count and per-GPU batch), in
the order the job first ran them. Each is predicted two ways, with the same model the daemon
plans the job with (:func:`~slurm_elastic.observe.snapshot.job_throughput_model`: the profile of
the model the job names when the site has one, else the default model's):

* ``prior``: the profile alone, as if the job had never reported;
* ``online``: the job's own model fitted from the configurations it measured *before* that one
  (none for its first), that is what the daemon knew when it chose the new size: the error of a
  prediction made before the fact, not of a fit to the point itself.

The error of a prediction is ``|predicted - measured| / measured`` of the step time (the absolute
percentage error; throughput's is the same to first order). Pure: rows and profiles in, rows out.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from slurm_elastic.errors import ElasticError
from slurm_elastic.observe.job_reports import runtime_of, step_points
from slurm_elastic.observe.snapshot import job_throughput_model
from slurm_elastic.reports.usage import percentile
from slurm_elastic.store import ProgressRow
from slurm_elastic_predictor.calibrate import StepPoint
from slurm_elastic_predictor.throughput import ThroughputModel

COLUMNS = ("job_id", "model", "configurations", "prior_median_ape", "online_median_ape", "online_points",
           "note")
"""The columns of the ``prediction`` table."""


def _ape(model: ThroughputModel, p: StepPoint) -> float | None:
    predicted = float(model.t_iter(p.k * p.local_batch, p.k, p.nodes))
    return abs(predicted - p.step_time) / p.step_time if predicted != float("inf") else None


def _median(values: Sequence[float]) -> float | None:
    return round(statistics.median(values), 4) if values else None


def job_errors(job_id: str, rows: Sequence[ProgressRow], profiles: Mapping[str, ThroughputModel],
               default_model: str) -> dict[str, Any] | None:
    """One job's row of the ``prediction`` table (its APEs, prior and online), or ``None`` when it
    measured no configuration in ``rows``."""
    points = step_points(rows)
    if not points:
        return None
    rt = runtime_of(rows)
    named = rt.model if rt is not None else None
    try:
        model, prior, _ = job_throughput_model(job_id, named, (), profiles, default_model)
    except ElasticError as exc:
        return {"job_id": job_id, "model": named, "configurations": len(points), "prior_median_ape": None,
                "online_median_ape": None, "online_points": 0, "note": str(exc), "_prior": [], "_online": []}
    prior_errors = [e for p in points if (e := _ape(prior, p)) is not None]
    online_errors = []
    for i in range(1, len(points)):
        _, fitted, _ = job_throughput_model(job_id, named, points[:i], profiles, default_model)
        if (e := _ape(fitted, points[i])) is not None:
            online_errors.append(e)
    note = "" if online_errors else "one configuration measured: nothing predicted before the fact"
    return {"job_id": job_id, "model": model, "configurations": len(points),
            "prior_median_ape": _median(prior_errors), "online_median_ape": _median(online_errors),
            "online_points": len(online_errors), "note": note, "_prior": prior_errors, "_online": online_errors}


def prediction_rows(progress: Mapping[str, Sequence[ProgressRow]], profiles: Mapping[str, ThroughputModel],
                    default_model: str, since: float, until: float) -> list[dict[str, Any]]:
    """The ``prediction`` table: one row per job with a measured configuration in ``[since, until]``
    (its rows in the window only), by job id. Each row also carries its errors (``_prior``,
    ``_online``) for :func:`prediction_summary`; they are not columns."""
    out = []
    for job_id in sorted(progress, key=lambda j: (len(j), j)):
        rows = [r for r in progress[job_id] if since <= r.t <= until]
        row = job_errors(job_id, rows, profiles, default_model)
        if row is not None:
            out.append(row)
    return out


def prediction_summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The summary's predictor figures over every job's configurations: the median and 90th
    percentile APE of the prior and of the online predictions, and how many of each."""
    prior = [e for r in rows for e in r["_prior"]]
    online = [e for r in rows for e in r["_online"]]

    def p90(values: list[float]) -> float | None:
        value = percentile(values, 90)
        return round(value, 4) if value is not None else None

    return {"predicted_jobs": len(rows), "prior_predictions": len(prior), "prior_median_ape": _median(prior),
            "prior_p90_ape": p90(prior), "online_predictions": len(online), "online_median_ape": _median(online),
            "online_p90_ape": p90(online)}
