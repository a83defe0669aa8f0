"""The site's training history: the ONES progress model learned from the jobs Slurm saw complete.

This module owns :func:`history_of` (a finished launcher job's progress rows as the
:class:`~slurm_elastic_predictor.progress.JobHistory` ONES fits on) and :class:`ProgressLearner`,
which the daemon's observer asks for the model at every observation, with Slurm's records of that
read: it notes the jobs Slurm shows completed (its ledger, kept in the store), refits when they
have grown enough (:func:`~slurm_elastic_predictor.progress.refit_due`: the simulator's rule too),
keeps the model and its fit error in the store, so a restarted daemon starts from it, and says
what it knows (:meth:`ProgressLearner.summary`, for ``status`` and ``/metrics``).

Choices (the paper fits on "completed jobs' training logs" and says no more):

* a job's history is its rank-0 progress rows that carry a loss, with the samples done, the loss
  and the last validation metric (0 before the first, as the model's features require); its
  total is the samples of its ``end`` row; a job with no end, no positive first loss, or no row
  before the end has no history;
* the model is shared by every user's jobs, and a job's reports are its user's word (signed, within
  bounds, but chosen by them), so a history counts only when **Slurm agrees the job ended**: its
  record in a read shows the base state ``COMPLETED`` (the job's script exited 0, and Slurm is done
  with it) after its launcher's ``end`` report was stored. The end report alone, a job still
  running, cancelled, failed or timed out, or one that left the queue while the daemon did not
  read it, is not history. The job's user is Slurm's (the record's), never the report's;
* **each user weighs at most one job** in a fit: the latest :data:`USER_HISTORIES` completed jobs of
  each of the latest :data:`HISTORY_USERS` users to complete one enter it, a user's histories share
  :data:`POINTS_PER_USER` points (evenly spaced over each job's rows), and the fit's uniform sample
  keeps the shares. One user's 100 jobs weigh as much as another user's one; with ``U`` users, one
  user's points are at most ``1 / U`` of the fit (a site of one user can mislead only itself);
* at most :data:`HISTORY_USERS` x :data:`USER_HISTORIES` jobs are read for a fit, and the ledger
  keeps no more;
* a quarantined job's reports are not trusted, so they are never history.

Passive: it reads the store's rows and Slurm's records the view read, and writes only the ledger
and the fitted model (``meta``); nothing in Slurm.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from slurm_elastic.errors import ProfileError
from slurm_elastic.slurm.dialects import has_settled
from slurm_elastic.slurm.records import JobRecord
from slurm_elastic.store import ProgressRow, Store
from slurm_elastic_predictor.progress import MIN_HISTORIES, BetaProgressModel, JobHistory, learn, refit_due

log = logging.getLogger(__name__)

POINTS_PER_JOB = 50
"""Points of one job's history a fit uses at most (evenly spaced over its rows)."""
POINTS_PER_USER = POINTS_PER_JOB
"""Points of one user's histories a fit uses at most, shared evenly by their jobs: one job's worth."""
USER_HISTORIES = 5
"""A user's latest completed jobs a fit uses."""
HISTORY_USERS = 100
"""The latest users to complete a job whose histories a fit uses."""
META_KEY = "progress_model"
LEDGER_KEY = "progress_ledger"
"""The store's ``meta`` key of the ledger: the jobs Slurm showed completed, with their users."""


def history_of(rows: Sequence[ProgressRow], points_at_most: int = POINTS_PER_JOB) -> JobHistory | None:
    """The training log of a finished job from its rows (oldest first), or ``None`` (see the module),
    with at most ``points_at_most`` points (at least 1), evenly spaced over its rows."""
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
    cap = max(1, points_at_most)
    if len(points) > cap:
        picks = np.linspace(0, len(points) - 1, cap).round().astype(int)
        points = [points[i] for i in picks]
    return JobHistory(float(epoch_size), float(losses[0].loss), float(total), tuple(points))


def completed_in_slurm(rec: JobRecord) -> bool:
    """Whether Slurm's record shows the job completed: the base state ``COMPLETED`` (its script
    exited 0), no longer completing (``scontrol``/``squeue`` print it until ``MinJobAge``)."""
    return rec.slurm_state[:1] == ("COMPLETED",) and has_settled(rec.slurm_state)


@dataclass
class Ledger:
    """The jobs Slurm showed completed after their launcher's end report, with their users.

    Attributes:
        jobs: ``(job id, user)``, oldest first: at most :data:`USER_HISTORIES` per user, of the
            latest :data:`HISTORY_USERS` users.
        completed: every job ever noted (the refit rule's count; the ledger forgets, this does not).
    """

    jobs: list[tuple[str, str]] = field(default_factory=list)
    completed: int = 0

    def add(self, job_id: str, user: str) -> None:
        """Note a job, then forget the user's oldest beyond :data:`USER_HISTORIES` and the users beyond
        :data:`HISTORY_USERS` (those whose latest job is the oldest)."""
        self.jobs.append((job_id, user))
        self.completed += 1
        mine = [i for i, (_, u) in enumerate(self.jobs) if u == user]
        drop = set(mine[:-USER_HISTORIES])
        latest: dict[str, int] = {u: i for i, (_, u) in enumerate(self.jobs)}
        gone = set(sorted(latest, key=latest.__getitem__)[:-HISTORY_USERS])
        drop |= {i for i, (_, u) in enumerate(self.jobs) if u in gone}
        self.jobs = [e for i, e in enumerate(self.jobs) if i not in drop]

    def by_user(self) -> dict[str, list[str]]:
        """Each user's jobs, oldest first, the users in the order their latest job was noted."""
        out: dict[str, list[str]] = {}
        for job_id, user in self.jobs:
            out.setdefault(user, []).append(job_id)
            out[user] = out.pop(user)
        return out

    def to_json(self) -> str:
        """The ledger as the store keeps it."""
        return json.dumps({"completed": self.completed, "jobs": [list(e) for e in self.jobs]})

    @classmethod
    def from_json(cls, raw: str) -> Ledger:
        """A kept ledger.

        Raises:
            ValueError, KeyError, TypeError: not a ledger this module wrote.
        """
        kept = json.loads(raw)
        jobs = [(str(j), str(u)) for j, u in kept["jobs"]]
        return cls(jobs, int(kept["completed"]))


@dataclass
class ProgressLearner:
    """The progress model the daemon plans with: fitted from the jobs Slurm showed completed, kept
    in the store with the ledger of those jobs.

    Args:
        store: the daemon's store.
        writes: note completed jobs, refit and keep the model (the daemon); ``False``: only read the
            kept one (``status``).
    """

    store: Store
    writes: bool = True
    model: BetaProgressModel | None = None
    histories: int = 0
    """Completed jobs the model was fitted on."""
    error: float | None = None
    """Its mean ``|E[rho] - rho|`` on its training points (fraction of a job)."""
    fitted_at: int = 0
    """Jobs the ledger had noted completed at the last fit (or the last failed try)."""
    ledger: Ledger = field(default_factory=Ledger)
    _noted: set[str] = field(default_factory=set)
    """Jobs of the last read already noted (a completed job stays listed until ``MinJobAge``)."""
    _loaded: bool = False

    def current(self, records: Iterable[JobRecord] = ()) -> BetaProgressModel | None:
        """The model now: the jobs ``records`` (Slurm's, of this read) show completed are noted
        first, and the model is refitted when they grew enough (never fails the caller)."""
        if not self._loaded:
            self._load()
        if not self.writes:
            return self.model
        self._note(records)
        total = self.ledger.completed
        if not refit_due(total, self.fitted_at):
            return self.model
        self.fitted_at = total  # a failed fit is not tried again until the history grows
        found = self._histories()
        if len(found) < MIN_HISTORIES:
            return self.model
        try:
            model, error = learn(found, self.model, np.random.default_rng(total))
        except (ProfileError, ValueError) as exc:
            log.warning("progress model not refitted from %d completed jobs: %s", len(found), exc)
            return self.model
        self.model, self.histories, self.error = model, len(found), error
        self.store.set_meta(META_KEY, json.dumps({**self.summary(), "fitted_at": total, "weights": list(model.weights),
                                                  "bias": model.bias, "scale": list(model.scale)}))
        log.info("progress model refitted from %d completed jobs (%d points): mean |E[progress] - progress| %.3f",
                 len(found), model.n_train, error)
        return self.model

    def _note(self, records: Iterable[JobRecord]) -> None:
        """Add to the ledger the launcher jobs these records show completed, with an end report stored
        and not quarantined (each once: it stays listed a while)."""
        listed: set[str] = set()
        new: list[JobRecord] = []
        for rec in records:
            if rec.comment and completed_in_slurm(rec):  # a launcher job's comment names its channel
                listed.add(rec.job_id)
                if rec.job_id not in self._noted:
                    new.append(rec)
        self._noted &= listed
        if not new:
            return
        kept = {job_id for job_id, _ in self.ledger.jobs}
        new = [rec for rec in new if rec.job_id not in kept]
        self._noted |= kept & listed
        quarantined = self.store.quarantined()
        added = 0
        for rec in new:
            if rec.job_id in quarantined:
                self._noted.add(rec.job_id)
                continue
            last = self.store.latest_progress(rec.job_id)
            if last is None or last.kind not in ("end", "left"):
                continue  # no end report yet: its last reports may come with the next read
            if history_of(self.store.progress_of(rec.job_id)) is None:
                if last.kind == "end":
                    self._noted.add(rec.job_id)  # ended with no usable history: nothing more will come
                continue
            self._noted.add(rec.job_id)
            self.ledger.add(rec.job_id, rec.user)
            added += 1
        if added:
            self.store.set_meta(LEDGER_KEY, self.ledger.to_json())

    def _histories(self) -> list[JobHistory]:
        """The histories of a fit: each user's latest completed jobs, sharing one user's points."""
        quarantined = self.store.quarantined()
        found: list[JobHistory] = []
        for jobs in self.ledger.by_user().values():
            rows = [r for r in (self.store.progress_of(j) for j in jobs if j not in quarantined)
                    if history_of(r) is not None]
            each = POINTS_PER_USER // max(1, len(rows))
            found.extend(h for h in (history_of(r, each) for r in rows) if h is not None)
        return found

    def _load(self) -> None:
        self._loaded = True
        raw_ledger = self.store.meta(LEDGER_KEY)
        ledger_read = False
        if raw_ledger is not None:
            try:
                self.ledger, ledger_read = Ledger.from_json(raw_ledger), True
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("kept ledger of completed jobs not read (it starts again): %s", exc)
        raw = self.store.meta(META_KEY)
        if raw is None:
            return
        try:
            kept = json.loads(raw)
            self.model = BetaProgressModel(tuple(float(w) for w in kept["weights"]), float(kept["bias"]),
                                           tuple(float(s) for s in kept["scale"]), int(kept["points"]))
            self.histories, self.error = int(kept["jobs"]), kept["error"]
            # a model kept without a ledger (an older daemon counted end reports, or the ledger was
            # lost): kept until the first fit from the jobs Slurm shows completed
            self.fitted_at = int(kept["fitted_at"]) if ledger_read else 0
        except (ValueError, KeyError, TypeError) as exc:  # a store written by a newer or broken daemon
            log.warning("kept progress model not read (it is refitted): %s", exc)

    def summary(self) -> dict[str, object]:
        """What the model was learned from: ``{"source", "jobs", "points", "error"}``."""
        if self.model is None:
            return {"source": "prior", "jobs": self.histories, "points": 0, "error": None}
        return {"source": "fitted", "jobs": self.histories, "points": self.model.n_train,
                "error": None if self.error is None else round(float(self.error), 4)}
