"""Progress reports from a job to the daemon: signed JSON lines appended to the job's report file.

This module owns the report fields and the writer rank 0 uses; the wire form and its signing are
:mod:`.orders`' (:func:`.orders.sign_report`; the daemon checks with :func:`.orders.verify_report`).
A report says what the job measured since the previous one: the steps and samples done, the world
size and batch they were done at, the throughput (samples/s), the mean training loss, and for a
resize the pause it cost.
These are the inputs of the daemon's throughput and progress predictors, and of the allocation
report's resize costs and scaled-job efficiency.

Wire form (the contract with ``slurm_elastic.channel.Channel.reports``): one line of sorted,
compact JSON whose ``mac`` is the hex HMAC-SHA256, keyed with the job's secret, of the same JSON
without ``mac``. Every report names its job (``job_id``); the daemon refuses a report that names
another job or whose MAC does not match, so a report can only speak for its own job.

A worker a resize drops writes one ``"left"`` report of its own (with its ``worker`` id) once it
has left the group, just before it exits: the daemon gives its node back only after that.

Fields: ``job_id``, ``kind`` (``"progress"``, ``"resize"``, ``"end"`` or ``"left"``), ``t`` (seconds since
the epoch), ``step``, ``samples`` (samples trained since the start, all workers), ``epoch``,
``epoch_size``, ``world``, ``local_batch``, ``global_batch``, ``throughput`` (samples/s over the
window since the previous report, 0 if none), ``loss`` (mean per-sample loss on rank 0 over that
window, or null), ``metric`` (the job's validation metric at its last epoch end, or null),
``pause_s`` (resize reports: seconds from the switch to training again), ``lost`` (a resize report
after a recovery: the ids of the workers the survivors went on without; absent otherwise),
``members`` (rank 0's reports: the worker ids of the world in rank order, so the daemon knows which
nodes the measured throughput ran on; absent in a ``left`` report), ``model`` (rank 0's reports: the
name the user gave the model, ``ElasticJob.model_name`` or ``SLURM_ELASTIC_MODEL``, matching
:data:`.orders.MODEL_NAME`; absent when none was given, and in a ``left`` report) and ``params``
(rank 0's reports: the model's parameter count, :func:`parameter_count`, an integer in
``1..``:data:`.orders.PARAMS_MAX`; absent when it cannot be counted, and in a ``left`` report). The
daemon matches a job to a throughput profile (and, later, to similar jobs) by them. ``epochs``
(rank 0's reports: the epochs the job trains, what the script passed to ``world.epochs(n)``, or
``SLURM_ELASTIC_EPOCHS`` under ``run()``; absent in a ``left`` report) and, in the first report of a
run whose script trains other epochs or another per-worker batch than ``slurm-elastic submit``'s
``--epochs``/``--local-batch`` said, ``submitted`` (``{"epochs": E, "local_batch": L}``, the flags'
values: what runs is the script's, and ``local_batch`` is what it runs now).
It must not import torch.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .orders import PARAMS_MAX, REPORT_KINDS, identity_problem, sign_report


def parameter_count(model: Any) -> int | None:
    """The parameter count of a ``torch.nn.Module`` (``sum(p.numel() for p in model.parameters())``,
    shared parameters once), or ``None`` when ``model`` has no parameters to count, none at all, or
    more than a report may carry (:data:`.orders.PARAMS_MAX`). Duck-typed: torch is not imported."""
    parameters = getattr(model, "parameters", None)
    if not callable(parameters):
        return None
    try:
        count = sum(int(p.numel()) for p in parameters())
    except (TypeError, ValueError, AttributeError, RuntimeError):
        return None
    return count if 0 < count <= PARAMS_MAX else None


@dataclass
class Reporter:
    """Rank 0's report writer: at most one progress report every ``every_s`` seconds.

    Args:
        path: the report file (appended to; created 0600 if missing).
        job_id: the job reports name.
        secret: the job's HMAC key.
        every_s: least seconds between two progress reports.
        metric: the latest validation metric (set by the agent at each epoch end), or None.
        model: the model's name for the reports' ``model``, or None (not reported).
        params: the model's parameter count for the reports' ``params``, or None (not reported).
        epochs: the epochs the job trains, for the reports' ``epochs``, or None (not reported).
        submitted: the submit flags' epochs and per-worker batch where the script runs others, for
            the next report's ``submitted`` (sent once), or None.

    Raises:
        ValueError: ``model`` or ``params`` breaks the rule the daemon checks (:func:`.orders.identity_problem`).
    """

    path: str
    job_id: str
    secret: bytes
    every_s: float
    metric: float | None = None
    model: str | None = None
    params: int | None = None
    epochs: int | None = None
    submitted: dict[str, int] | None = None
    _last_t: float | None = field(default=None, repr=False)
    _last_samples: int = field(default=0, repr=False)
    _loss_sum: float = field(default=0.0, repr=False)
    _loss_n: int = field(default=0, repr=False)

    def __post_init__(self) -> None:
        problem = identity_problem(self.model, self.params)
        if problem is not None:
            raise ValueError(problem)

    def add_loss(self, loss_sum: float, samples: int) -> None:
        """Account one step's summed loss over ``samples`` of rank 0's samples."""
        self._loss_sum += loss_sum
        self._loss_n += samples

    def due(self, t: float) -> bool:
        """Whether a progress report is due at ``t``."""
        return self._last_t is None or t - self._last_t >= self.every_s

    def write(self, kind: str, t: float, *, step: int, samples: int, epoch: int, epoch_size: int, world: int,
              local_batch: int, pause_s: float = 0.0, worker: str = "", lost: Sequence[str] = (),
              members: Sequence[str] = ()) -> None:
        """Append one report and start a new window."""
        if kind not in REPORT_KINDS:
            raise ValueError(f"report kind {kind!r}: must be one of {', '.join(REPORT_KINDS)}")
        window = 0.0 if self._last_t is None else t - self._last_t
        throughput = (samples - self._last_samples) / window if window > 0 else 0.0
        body: dict[str, Any] = {
            "job_id": self.job_id, "kind": kind, "t": round(t, 3), "step": step, "samples": samples,
            "epoch": epoch, "epoch_size": epoch_size, "world": world, "local_batch": local_batch,
            "global_batch": world * local_batch, "throughput": round(throughput, 3),
            "loss": round(self._loss_sum / self._loss_n, 6) if self._loss_n else None,
            "metric": self.metric, "pause_s": round(pause_s, 4),
        }
        if worker:
            body["worker"] = worker
        if lost:
            body["lost"] = list(lost)
        if members:
            body["members"] = list(members)
        if kind != "left":
            if self.model is not None:
                body["model"] = self.model
            if self.params is not None:
                body["params"] = self.params
            if self.epochs is not None:
                body["epochs"] = self.epochs
            if self.submitted is not None:
                body["submitted"], self.submitted = dict(self.submitted), None
        line = sign_report(body, self.secret) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
        self._last_t, self._last_samples = t, samples
        self._loss_sum, self._loss_n = 0.0, 0
