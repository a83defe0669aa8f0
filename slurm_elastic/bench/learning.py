"""``slurm-elastic bench learn``: how well a job's own calibrated throughput model predicts it.

This module owns the learning benchmark, a pure function (no Slurm, no clock, no files written):
every shipped profile in turn is taken as the *truth* -- a job whose real step times are that
profile's measured rows (``load_measurements``: single-GPU and multi-GPU rows, every GPU count,
node count and per-GPU batch, not the fitted model). The job reports its step time at its first
sizes, :func:`~slurm_elastic_predictor.calibrate.calibrate` fits its model with a prior profile, and
the benchmark measures the absolute percentage error (APE) of the predicted step time over all the
truth's measured rows, against the prior used as is (how every job was planned before).

Two runs:

* **prior** (``prior``, default ``"cifar10"``): the profile the daemon assumes for a job of unknown
  workload, used as every truth's prior, with the batch stretch (``prior_batch`` = the prior's
  ``MODEL_DEFAULTS`` batch) unless ``stretch_batch=False``. The truth equal to the prior is included.
* **same-model prior**: each truth's own fitted shipped model as its prior (no stretch): the case of
  a job whose workload has a profile.

The job's reports: for each ``k`` in ``first_sizes``, the rows measured at ``k`` GPUs on the fewest
4-GPU nodes that hold them (``ceil(k / 4)``), at the per-GPU batch the daemon uses by default for
that workload (``MODEL_DEFAULTS``); where no row was measured at exactly that batch, the measured
batch nearest to it in ratio (``|log(b / default)|``, ties to the smaller) is used: CIFAR-10 129
for 128, ImageNet 57 for 64, NCF 1025 for 1024. Every row at that configuration is a report
(``calibrate`` averages them). A size with no row on ``ceil(k / 4)`` nodes is not reported.

Rows above the calibrated model's memory limit (``max_local_batch``; its prior's, stretched, or the
largest batch the job ran at) are left out of both errors and counted (``rows_beyond_memory``): a
planner never chooses them. The prior is evaluated with its memory limit raised to the calibrated
model's, so both are compared on the same rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from slurm_elastic.errors import ConfigError
from slurm_elastic_predictor.calibrate import PRIOR_STRENGTH, StepPoint, calibrate
from slurm_elastic_predictor.profiles import (
    MODEL_DEFAULTS,
    PROFILE_GPUS_PER_NODE,
    PROFILE_NAMES,
    Measurement,
    load_measurements,
    load_models,
)
from slurm_elastic_predictor.throughput import ThroughputModel

__all__ = ["bench_learn"]


def _reports(rows: Sequence[Measurement], default_batch: int, first_sizes: Sequence[int]) -> list[StepPoint]:
    out: list[StepPoint] = []
    for k in first_sizes:
        nodes = math.ceil(k / PROFILE_GPUS_PER_NODE)
        at = [m for m in rows if m.k == k and len(m.per_node) == nodes]
        if not at:
            continue
        batch = min({m.local_batch for m in at}, key=lambda b: (abs(math.log(b / default_batch)), b))
        out.extend(StepPoint(k, nodes, batch, m.step_time) for m in at if m.local_batch == batch)
    return out


def _ape(model: ThroughputModel, k: np.ndarray, nodes: np.ndarray, local: np.ndarray,
         step: np.ndarray) -> np.ndarray:
    pred = model.t_proc(local) + model.t_comm(k, nodes)
    return np.asarray(np.abs(pred - step) / step, dtype=np.float64)


def _num(value: float) -> float | None:
    return round(float(value), 4) if math.isfinite(value) else None


def _run(truths: Sequence[str], rows: dict[str, list[Measurement]], priors: dict[str, ThroughputModel],
         prior_batch: dict[str, float | None], first_sizes: Sequence[int], strength: float) -> dict[str, Any]:
    per: dict[str, Any] = {}
    all_prior: list[np.ndarray] = []
    all_cal: list[np.ndarray] = []
    for truth in truths:
        ms = rows[truth]
        default_batch = MODEL_DEFAULTS[truth][0]
        points = _reports(ms, default_batch, first_sizes)
        fit = calibrate(priors[truth], points, name=f"{truth}~job", strength=strength,
                        prior_batch=prior_batch[truth])
        k = np.array([m.k for m in ms], dtype=np.float64)
        nodes = np.array([len(m.per_node) for m in ms], dtype=np.float64)
        local = np.array([m.local_batch for m in ms], dtype=np.float64)
        step = np.array([m.step_time for m in ms], dtype=np.float64)
        keep = local <= fit.model.max_local_batch
        cal = _ape(fit.model, k[keep], nodes[keep], local[keep], step[keep])
        raw = replace(priors[truth], max_local_batch=max(priors[truth].max_local_batch, fit.model.max_local_batch))
        pri = _ape(raw, k[keep], nodes[keep], local[keep], step[keep])
        all_prior.append(pri)
        all_cal.append(cal)
        per[truth] = {
            "prior_median_ape": _num(float(np.median(pri))),
            "calibrated_median_ape": _num(float(np.median(cal))),
            "calibrated_p90_ape": _num(float(np.percentile(cal, 90))),
            "prior_p90_ape": _num(float(np.percentile(pri, 90))),
            "points": fit.points,
            "report_batch": sorted({p.local_batch for p in points}),
            "factors": [_num(f) for f in fit.factors],
            "fit_error": None if fit.error is None else _num(fit.error),
            "rows": int(keep.sum()),
            "rows_beyond_memory": int((~keep).sum()),
        }
    pri_all = np.concatenate(all_prior)
    cal_all = np.concatenate(all_cal)
    overall = {
        "median_ape_prior": _num(float(np.median(pri_all))),
        "median_ape_calibrated": _num(float(np.median(cal_all))),
        "p90_ape_prior": _num(float(np.percentile(pri_all, 90))),
        "p90_ape_calibrated": _num(float(np.percentile(cal_all, 90))),
        "rows": int(cal_all.size),
        "profiles": len(truths),
    }
    return {"profiles": per, "overall": overall}


def bench_learn(
    *,
    prior: str = "cifar10",
    first_sizes: Sequence[int] = (1, 2),
    strength: float = PRIOR_STRENGTH,
    stretch_batch: bool = True,
    truths: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Calibrate every shipped profile's job from its first sizes and measure the prediction error.

    See the module docstring for the method.

    Args:
        prior: the shipped profile used as every job's prior (:data:`PROFILE_NAMES`).
        first_sizes: the GPU counts the job reports at (each >= 1, at most 64: the measured range).
        strength: the calibration's prior strength (:data:`PRIOR_STRENGTH`).
        stretch_batch: stretch ``prior``'s batch axis onto each job's (``calibrate``'s
            ``prior_batch``); the same-model run never stretches.
        truths: the profiles taken as truths; ``None`` for all of :data:`PROFILE_NAMES`.

    Returns:
        A JSON-ready dict: ``prior``, ``first_sizes``, ``strength``, ``stretch_batch``; ``profiles``
        (per truth: ``prior_median_ape``, ``calibrated_median_ape``, ``calibrated_p90_ape``,
        ``prior_p90_ape``, ``points``, ``report_batch``, ``factors``, ``fit_error``, ``rows``,
        ``rows_beyond_memory``) and ``overall`` (``median_ape_prior``, ``median_ape_calibrated``,
        ``p90_ape_prior``, ``p90_ape_calibrated``, ``rows``, ``profiles``: medians over all rows of
        all truths) for the run with ``prior``; ``same_model`` with the same two keys for the run with
        each truth's own model as prior. APEs are fractions rounded to 4 digits.

    Raises:
        ConfigError: On an unknown profile name, an empty ``first_sizes`` or a size outside
            ``[1, 64]``, or a strength that is not a finite number > 0.
    """
    names = list(PROFILE_NAMES if truths is None else truths)
    for name in [prior, *names]:
        if name not in PROFILE_NAMES:
            raise ConfigError(f"bench learn: unknown profile {name!r}; shipped profiles are {', '.join(PROFILE_NAMES)}")
    if not names:
        raise ConfigError("bench learn: truths must name at least one profile")
    sizes = [int(k) for k in first_sizes]
    if not sizes or any(k < 1 or k > 64 for k in sizes):
        raise ConfigError(f"bench learn: first_sizes {list(first_sizes)} must be GPU counts in [1, 64]")
    if not (math.isfinite(strength) and strength > 0):
        raise ConfigError(f"bench learn: strength = {strength!r} must be a finite number > 0")
    models = load_models()
    rows = {name: load_measurements(name) for name in names}
    cross = _run(names, rows, {t: models[prior] for t in names},
                 {t: float(MODEL_DEFAULTS[prior][0]) if stretch_batch else None for t in names},
                 sizes, strength)
    same = _run(names, rows, {t: models[t] for t in names}, dict.fromkeys(names), sizes, strength)
    return {
        "prior": prior,
        "first_sizes": sizes,
        "strength": strength,
        "stretch_batch": stretch_batch,
        **cross,
        "same_model": same,
    }
