"""The completed jobs' progress points, as the ONES progress fit draws them, and what a job reports.

This module owns :func:`job_reports`, the (training loss, validation metric) a simulated job
reports after some samples (what the planner's progress model sees of it), and
:class:`ProgressPool`, the completed jobs' histories that
:class:`~slurm_elastic.sim.cluster.VirtualCluster` refits the progress model from, kept as the
jobs rather than their points. It reads no clock and draws only from the generator it is given.
"""

from __future__ import annotations

import bisect
from typing import Any

import numpy as np

from slurm_elastic.sim.workload import SimJobSpec
from slurm_elastic_predictor.errors import ProfileError
from slurm_elastic_predictor.progress import JobHistory, ProgressPoint


def job_reports(spec: SimJobSpec, processed: float, batch: float) -> tuple[float, float]:
    """(training loss, validation metric) a simulated job reports after ``processed`` samples.

    The metric is the measured validation curve of the job's model at the nearest measured batch,
    at the same point of training (relative to the target), so the ONES progress regression sees
    a real, noisy signal and not the true progress. Loss curves are not in the profiles, so the
    loss stays at its initial value (no information, rather than invented information).
    """
    epochs_done = processed / spec.epoch_size / spec.work_scale
    conv = spec.model_truth.convergence
    if spec.epochs is not None or conv is None:  # a set number of epochs: the metric is the share done
        return 1.0, min(1.0, epochs_done / (spec.epochs or 1.0))
    return 1.0, conv.relative_metric(batch or spec.base_batch, epochs_done)


class ProgressPool:
    """The progress points of the completed jobs, as the ONES progress fit draws them, kept as the jobs.

    A completed job's history is one point per epoch it ended (its samples then, the validation
    metric it reported, :func:`job_reports`), all of it a function of the job's spec and the samples it
    processed in all. The pool keeps only those two per job (and the running count of points), not
    the points: a million-job trace ends tens of millions of epochs, and keeping them as objects cost
    about 40 KiB per job. :meth:`sample` draws the fit's points by their place in the pool, as
    :func:`~slurm_elastic_predictor.progress.bounded_uniform_sample` draws them from the pooled list
    (the same random draw, the same points, in the same order), and builds only those.
    """

    def __init__(self) -> None:
        self._jobs: list[tuple[SimJobSpec, float]] = []  # (spec, samples processed), one per history
        self._ends: list[int] = []  # points of the histories up to and including each
        self.malformed = False  # a history the fit refuses (the predictor's ProfileError): no fit from then on

    def __len__(self) -> int:
        """Points in the pool."""
        return self._ends[-1] if self._ends else 0

    @property
    def histories(self) -> int:
        """Histories (completed jobs with at least one point) in the pool."""
        return len(self._jobs)

    @staticmethod
    def _point(spec: SimJobSpec, total: float, epoch: int) -> tuple[float, float, float]:
        """The history point of the ``epoch``-th epoch end (from 1) of a job that processed ``total``."""
        processed = min(total, epoch * spec.epoch_size)
        return (processed, *job_reports(spec, processed, spec.base_batch))

    @staticmethod
    def _count(spec: SimJobSpec, total: float) -> int:
        """Points of the history of a job that processed ``total`` samples: its epoch ends before its end."""
        epochs = max(1, int(total // spec.epoch_size))
        n = 0
        for e in range(1, epochs + 1):
            if min(total, e * spec.epoch_size) >= total:
                break
            n += 1
        return n

    def add(self, spec: SimJobSpec, total: float) -> JobHistory | None:
        """Pool a completed job's history (``None`` when it has no point, and nothing is pooled); a
        history the fit refuses marks the pool :attr:`malformed`."""
        n = self._count(spec, total)
        if not n:
            return None
        history = JobHistory(float(spec.epoch_size), 1.0, float(total),
                             tuple(self._point(spec, total, e) for e in range(1, n + 1)))
        try:
            history.progress_points()  # checked once, as the fit would
        except ProfileError:
            self.malformed = True
        self._jobs.append((spec, total))
        self._ends.append(len(self) + n)
        return history

    def points(self, indices: Any) -> list[tuple[ProgressPoint, float]]:
        """The pooled ``(features, true progress)`` pairs at ``indices`` (ascending), built now."""
        out = []
        for i in indices:
            h = bisect.bisect_right(self._ends, int(i))
            spec, total = self._jobs[h]
            epoch = int(i) - (self._ends[h - 1] if h else 0) + 1
            point = JobHistory(float(spec.epoch_size), 1.0, float(total), (self._point(spec, total, epoch),))
            out.extend(point.progress_points())
        return out

    def sample(self, max_points: int, rng: np.random.Generator) -> list[tuple[ProgressPoint, float]]:
        """What :func:`~slurm_elastic_predictor.progress.bounded_uniform_sample` draws from the pooled
        points with ``rng``: all of them when at most ``max_points``, else ``max_points`` of them drawn
        uniformly without replacement, in pool order."""
        n = len(self)
        if n <= max_points:
            return self.points(range(n))
        return self.points(np.sort(rng.choice(n, size=max_points, replace=False)))
