"""The site's training history: the ONES progress model learned from the jobs the store saw finish.

This module owns :func:`history_of` (a finished launcher job's progress rows as the
:class:`~slurm_elastic_predictor.progress.JobHistory` ONES fits on) and :class:`ProgressLearner`,
which the daemon's observer asks for the model at every observation: it refits when the history
has grown enough (:func:`~slurm_elastic_predictor.progress.refit_due`: the simulator's rule too),
keeps the model and its fit error in the store, so a restarted daemon starts from it, and says
what it knows (:meth:`ProgressLearner.summary`, for ``status`` and ``/metrics``).

Choices (the paper fits on "completed jobs' training logs" and says no more):

* a job's history is its rank-0 progress rows that carry a loss, with the samples done, the loss
  and the last validation metric (0 before the first, as the model's features require); its
  total is the samples of its ``end`` row; a job with no end, no positive first loss, or no row
  before the end has no history;
* at most :data:`HISTORY_JOBS` jobs (the latest to finish) and :data:`POINTS_PER_JOB` points per
  job (evenly spaced) enter a fit, so no job weighs more than any other and no fit is unbounded;
* a quarantined job's reports are not trusted, so they are never history.

Passive: it reads the store's rows and writes only the fitted model (``meta``); nothing in Slurm.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from slurm_elastic.errors import ProfileError
from slurm_elastic.store import ProgressRow, Store
from slurm_elastic_predictor.progress import MIN_HISTORIES, BetaProgressModel, JobHistory, learn, refit_due

log = logging.getLogger(__name__)

HISTORY_JOBS = 500
"""The latest finished jobs a fit uses."""
POINTS_PER_JOB = 50
"""Points of one job's history a fit uses at most (evenly spaced over its rows)."""
META_KEY = "progress_model"


def history_of(rows: Sequence[ProgressRow]) -> JobHistory | None:
    """The training log of a finished job from its rows (oldest first), or ``None`` (see the module)."""
    rows = [r for r in rows if r.kind != "left"]
    if not rows or rows[-1].kind != "end" or rows[-1].samples <= 0:
        return None
    total = rows[-1].samples
    losses = [r for r in rows if r.loss is not None and math.isfinite(r.loss)]
    if not losses or not losses[0].loss or losses[0].loss <= 0:
        return None
    epoch_size = next((r.epoch_size for r in reversed(rows) if r.epoch_size), None)
    if not epoch_size:
        return None
    points: list[tuple[float, float, float]] = []
    metric = 0.0
    for r in rows:
        metric = r.metric if r.metric is not None and math.isfinite(r.metric) else metric
        if r.loss is not None and math.isfinite(r.loss) and 0 < r.samples < total:
            points.append((float(r.samples), float(r.loss), float(metric)))
    if not points:
        return None
    if len(points) > POINTS_PER_JOB:
        picks = np.linspace(0, len(points) - 1, POINTS_PER_JOB).round().astype(int)
        points = [points[i] for i in picks]
    return JobHistory(float(epoch_size), float(losses[0].loss), float(total), tuple(points))


@dataclass
class ProgressLearner:
    """The progress model the daemon plans with: fitted from the store's finished jobs, kept there.

    Args:
        store: the daemon's store.
        writes: refit and keep the model (the daemon); ``False``: only read the kept one (``status``).
    """

    store: Store
    writes: bool = True
    model: BetaProgressModel | None = None
    histories: int = 0
    """Finished jobs the model was fitted on."""
    error: float | None = None
    """Its mean ``|E[rho] - rho|`` on its training points (fraction of a job)."""
    fitted_at: int = 0
    """Jobs the store had seen finish at the last fit (or the last failed try)."""
    _loaded: bool = False

    def current(self) -> BetaProgressModel | None:
        """The model now: refitted first when the history grew enough (never fails the caller)."""
        if not self._loaded:
            self._load()
        total = self.store.finished_count() if self.writes else 0
        if not self.writes or not refit_due(total, self.fitted_at):
            return self.model
        self.fitted_at = total  # a failed fit is not tried again until the history grows
        quarantined = self.store.quarantined()
        jobs = [j for j in self.store.finished_jobs(HISTORY_JOBS) if j not in quarantined]
        found = [h for h in (history_of(self.store.progress_of(j)) for j in jobs) if h is not None]
        if len(found) < MIN_HISTORIES:
            return self.model
        try:
            model, error = learn(found, self.model, np.random.default_rng(total))
        except (ProfileError, ValueError) as exc:
            log.warning("progress model not refitted from %d finished jobs: %s", len(found), exc)
            return self.model
        self.model, self.histories, self.error = model, len(found), error
        self.store.set_meta(META_KEY, json.dumps({**self.summary(), "fitted_at": total, "weights": list(model.weights),
                                                  "bias": model.bias, "scale": list(model.scale)}))
        log.info("progress model refitted from %d finished jobs (%d points): mean |E[progress] - progress| %.3f",
                 len(found), model.n_train, error)
        return self.model

    def _load(self) -> None:
        self._loaded = True
        raw = self.store.meta(META_KEY)
        if raw is None:
            return
        try:
            kept = json.loads(raw)
            self.model = BetaProgressModel(tuple(float(w) for w in kept["weights"]), float(kept["bias"]),
                                           tuple(float(s) for s in kept["scale"]), int(kept["points"]))
            self.histories, self.error, self.fitted_at = int(kept["jobs"]), kept["error"], int(kept["fitted_at"])
        except (ValueError, KeyError, TypeError) as exc:  # a store written by a newer or broken daemon
            log.warning("kept progress model not read (it is refitted): %s", exc)

    def summary(self) -> dict[str, object]:
        """What the model was learned from: ``{"source", "jobs", "points", "error"}``."""
        if self.model is None:
            return {"source": "prior", "jobs": self.histories, "points": 0, "error": None}
        return {"source": "fitted", "jobs": self.histories, "points": self.model.n_train,
                "error": None if self.error is None else round(float(self.error), 4)}
