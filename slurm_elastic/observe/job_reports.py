"""Launcher reports into the daemon: each job's signed report lines, as typed progress rows, and what they say now.

This module owns two passive steps of every observation: :func:`ingest` reads the new signed
reports of each started launcher job (:meth:`slurm_elastic.channel.Channel.reports`, from the
offset the store kept) and stores them as :class:`~slurm_elastic.store.ProgressRow` s, and
:func:`runtime_of` turns a job's rows into the :class:`JobRuntime` its snapshot is built with
(samples done, throughput measured at the current size, per-GPU batch, epoch size, the epochs it
trains, losses, last resize); :func:`what_runs` says what a job runs beside what ``slurm-elastic
submit`` said, for ``status``. A job without a channel simply has no reports; a refused line (bad
MAC, another job, a malformed field, a claim outside :mod:`slurm_elastic.observe.bounds`) or a
report file that breaks a rule quarantines the job: it is logged, skipped, never trusted, and the
job is planned from priors, except that one whose end report the act step believes
(:func:`finished_training`) is not offered a grow: the act step would do nothing to it. It changes
nothing in Slurm.
"""

from __future__ import annotations

import itertools
import logging
import math
import re
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from slurm_elastic.channel import Channel, ChannelError, NoChannel
from slurm_elastic.core.model import JobState, ProgressReport
from slurm_elastic.observe.bounds import ReportLimits, ReportOutOfBounds
from slurm_elastic.slurm.records import JobRecord, initial_workers, run_start_of
from slurm_elastic.store import ProgressRow, Store
from slurm_elastic_launcher.orders import identity_problem
from slurm_elastic_predictor.calibrate import StepPoint

log = logging.getLogger(__name__)

REPORT_KINDS = frozenset({"progress", "resize", "end", "left"})
"""The kinds of report a launcher writes (:class:`~slurm_elastic.store.ProgressRow`)."""
REPORT_NUMBER_MAX = 2**62
"""Largest number a report field may hold: every count fits SQLite's 64-bit integers and every
number a float, with room for sums (no honest time, sample count or batch comes near it)."""


class ReportRefused(ValueError):  # noqa: N818 (an outcome: the line is skipped)
    """A verified report line whose fields break a rule (the message names the field and the rule)."""


@dataclass(frozen=True, slots=True)
class JobRuntime:
    """What the daemon knows about a running job beyond Slurm (from its store and the launcher).

    Every field is optional; :func:`~slurm_elastic.observe.snapshot.build_snapshot` falls back to documented defaults.

    Attributes:
        model: the model's name its launcher reported (the user's), which is a throughput-profile key
            (``ClusterSnapshot.profiles``) when the site has a profile of that model; ``None``: the
            site's default model.
        params: the model's parameter count its launcher reported (kept to match similar jobs; no
            planner reads it yet).
        epoch_size: samples per epoch.
        samples_processed: samples trained so far.
        local_batch: per-GPU batch now (samples).
        base_lr: learning rate at the base batch.
        target_epochs: the epochs the job trains, as its latest report that says so gives them (what
            its script runs: ``world.epochs(n)``, or ``--epochs`` under ``run()``), not what
            ``slurm-elastic submit`` said; ``None`` when no report says.
        observed_throughput: samples/s measured at the current placement.
        last_change_time: when the allocation last changed (seconds since the epoch).
        samples_at_last_change: ``samples_processed`` at ``last_change_time``.
        run_time: seconds executed so far (overrides ``now - start_time``).
        progress: latest loss/metric report.
        can_grow: ``False`` when the job runs the launcher but its join script is missing or breaks
            a rule (:meth:`~slurm_elastic.channel.Channel.join_script`): it cannot grow in place.
        step_points: the job's own measured step times, one per (GPUs, nodes, per-GPU batch) it ran
            at (:func:`step_points`): what its throughput model is fitted from.
    """

    model: str | None = None
    params: int | None = None
    epoch_size: int | None = None
    samples_processed: int = 0
    local_batch: int | None = None
    base_lr: float | None = None
    target_epochs: float | None = None
    observed_throughput: float | None = None
    last_change_time: float | None = None
    samples_at_last_change: int = 0
    run_time: float | None = None
    progress: ProgressReport = field(default_factory=ProgressReport)
    can_grow: bool = True
    step_points: tuple[StepPoint, ...] = ()


def _number(report: Mapping[str, Any], key: str, kind: type, *, optional: bool = False) -> Any:
    value = report.get(key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or (kind is int and not isinstance(value, int)):
        raise ReportRefused(f"{key}={value!r}: must be {'an integer' if kind is int else 'a number'}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ReportRefused(f"{key}={value!r}: must be finite")
    if value < 0:
        raise ReportRefused(f"{key}={value!r}: must be >= 0")
    if value > REPORT_NUMBER_MAX:
        shown = value if isinstance(value, float) or value < 10**30 else f"an integer of {value.bit_length()} bits"
        raise ReportRefused(f"{key}={shown}: out of range (must be <= 2**62)")
    return kind(value)


def row_of(report: Mapping[str, Any], layout: Mapping[str, str] | None = None) -> ProgressRow:
    """The progress row of one verified report (the launcher's wire form: ``world`` workers …).

    ``layout`` (worker id -> node, the daemon's) gives the row its node count from the ``members``
    the report names; a world of one is on one node; otherwise the count is unknown (``None``).

    The job identity (``model``: the model's name, ``params``: its parameter count) is optional;
    when given it must keep the wire rule (:func:`slurm_elastic_launcher.orders.identity_problem`:
    a name of 1 to 64 of ``A-Z a-z 0-9 _ . -``, an integer count in 1..10**13).

    Raises:
        ReportRefused: a field is missing, of the wrong type, negative or not finite, or the kind is
            unknown; a model name or parameter count that breaks its rule.
    """
    kind = report.get("kind")
    if not isinstance(kind, str) or kind not in REPORT_KINDS:
        raise ReportRefused(f"kind={kind!r}: must be one of {', '.join(sorted(REPORT_KINDS))}")
    model, params = report.get("model"), report.get("params")
    problem = identity_problem(model, params)
    if problem is not None:
        raise ReportRefused(problem)
    throughput = _number(report, "throughput", float, optional=True)
    pause = _number(report, "pause_s", float, optional=True) if kind == "resize" else None
    lost = _lost(report) if kind == "resize" else ()
    members = _members(report)
    world = _number(report, "world", int)
    epochs = _number(report, "epochs", float, optional=True) if kind != "left" else None
    said_epochs, said_batch = _submitted(report) if kind != "left" else (None, None)
    return ProgressRow(
        t=_number(report, "t", float), kind=str(kind), samples=_number(report, "samples", int),
        world=world, global_batch=_number(report, "global_batch", int),
        throughput=throughput or None, loss=_number(report, "loss", float, optional=True),
        metric=_number(report, "metric", float, optional=True),
        pause_s=(pause or 0.0) if kind == "resize" else None,
        epoch_size=_number(report, "epoch_size", int, optional=True) or None, lost=lost,
        nodes=1 if world == 1 else nodes_spanned(members, layout or {}),
        model=model, params=params, epochs=epochs, submitted_epochs=said_epochs, submitted_local_batch=said_batch,
    )


def _wire_count(value: Any) -> int | None:
    """``value`` when it is an integer ≥ 1 a report may carry (the wire rule of ``epochs``,
    ``local_batch`` and ``submitted``), else ``None``."""
    ok = isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= REPORT_NUMBER_MAX
    return value if ok else None


def _submitted(report: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """The submit flags' ``(epochs, local_batch)`` a report's ``submitted`` gives, or ``(None, None)``
    when it gives none, or gives them in a form that breaks the wire rule (integers ≥ 1): what the
    flags said is only shown (``status``, the daemon's log), never planned from, so a malformed one
    is left out rather than refused."""
    submitted = report.get("submitted")
    if not isinstance(submitted, dict):
        return None, None
    epochs, batch = _wire_count(submitted.get("epochs")), _wire_count(submitted.get("local_batch"))
    return (epochs, batch) if epochs is not None and batch is not None else (None, None)


def configured_twice(report: Mapping[str, Any]) -> str | None:
    """What a verified report says when its job trains other epochs or another per-worker batch than
    ``slurm-elastic submit``'s ``--epochs``/``--local-batch`` (the launcher sends ``submitted`` in the
    first report of a run where they differ), for the daemon's log; None when it says nothing of
    the kind, or says it in a form that breaks the wire rule (integers ≥ 1). The script's values are
    what runs: the report's ``epochs`` and ``local_batch`` are what the daemon plans the job from."""
    epochs, batch = _wire_count(report.get("epochs")), _wire_count(report.get("local_batch"))
    said_epochs, said_batch = _submitted(report)
    if epochs is None or batch is None or said_epochs is None or said_batch is None:
        return None
    return WhatRuns(float(epochs), batch, said_epochs, said_batch).configured_twice()


@dataclass(frozen=True, slots=True)
class WhatRuns:
    """What a job's reports say it runs, and what ``slurm-elastic submit`` said where that differs.

    Attributes:
        epochs: the epochs the job trains (its script's), ``None`` when its reports do not say.
        local_batch: its per-worker batch now (samples).
        submitted_epochs: the ``--epochs`` it was submitted with, when its current run's first
            report said the flags differ from what runs; ``None`` otherwise.
        submitted_local_batch: likewise, the ``--local-batch`` it was submitted with.
    """

    epochs: float | None
    local_batch: int
    submitted_epochs: int | None = None
    submitted_local_batch: int | None = None

    def configured_twice(self) -> str | None:
        """The one line that says the script and the submit flags disagree (for the daemon's log and
        ``status``), or ``None`` when they agree or the job's reports did not say what it was submitted with."""
        if self.submitted_epochs is None or self.submitted_local_batch is None:
            return None
        epochs = None if self.epochs is None else float(self.epochs)
        runs = "an unreported number of" if epochs is None else str(int(epochs) if epochs.is_integer() else epochs)
        return (f"the script trains {runs} epochs at a per-worker batch of {self.local_batch}, but the job was "
                f"submitted with --epochs {self.submitted_epochs} --local-batch {self.submitted_local_batch}: its "
                "reports (what runs) are what it is planned from")


def what_runs(rows: Sequence[ProgressRow], run_start: float | None = None) -> WhatRuns | None:
    """What a job's progress rows (oldest first) say it runs now (:class:`WhatRuns`), or ``None``
    without a rank-0 row: the epochs of the latest row that gives them, the per-worker batch of the
    latest row, and what the submit flags said as the first report of the current run (written at
    or after ``run_start``, :func:`run_start_of`) gave it."""
    rows = [r for r in rows if r.kind != "left"]
    if not rows:
        return None
    last = rows[-1]
    this_run = [r for r in rows if run_start is None or r.t >= run_start]
    said = next((r for r in reversed(this_run) if r.submitted_epochs is not None), None)
    return WhatRuns(next((r.epochs for r in reversed(rows) if r.epochs is not None), None),
                    max(1, last.global_batch // (last.world or 1)),
                    said.submitted_epochs if said is not None else None,
                    said.submitted_local_batch if said is not None else None)


def nodes_spanned(members: Sequence[str], layout: Mapping[str, str]) -> int | None:
    """How many nodes ``members`` run on by ``layout`` (worker id -> node); ``None`` if one is unknown."""
    nodes = {layout.get(w) for w in members}
    return None if not nodes or None in nodes else len(nodes)


WORKER_ID = re.compile(r"^w[0-9]{1,9}$")
"""A worker id, as the daemon names workers (``w0``, ``w1``, ...; :mod:`slurm_elastic.slurm.satellites`)."""


def _worker_ids(report: Mapping[str, Any], key: str) -> list[str]:
    value = report.get(key, [])
    if (not isinstance(value, list) or len(value) > 4096
            or not all(isinstance(w, str) and WORKER_ID.match(w) for w in value)):
        raise ReportRefused(f"{key}={str(value)[:80]!r}: must be a list of at most 4096 worker ids like 'w3'")
    return value


def _members(report: Mapping[str, Any]) -> tuple[str, ...]:
    value, world = _worker_ids(report, "members"), report.get("world")
    if len(set(value)) != len(value) or (value and isinstance(world, int) and len(value) != world):
        raise ReportRefused(f"members={str(value)[:80]!r} with world={world!r}: must name each of the world's "
                            "workers once")
    return tuple(value)


def _lost(report: Mapping[str, Any]) -> tuple[str, ...]:
    value, world = _worker_ids(report, "lost"), report.get("world")
    if isinstance(world, int) and not isinstance(world, bool) and world < 1 and value:
        raise ReportRefused(f"lost={value!r} with world={world}: a recovery leaves at least one worker")
    return tuple(dict.fromkeys(value))


def ingest(store: Store, records: Iterable[JobRecord], limits: Callable[[JobRecord], ReportLimits],
           now: float) -> int:
    """Append the new reports of every started launcher job to the store; returns how many.

    One job's bad input touches that job only: a refused line (bad MAC, another job's, malformed,
    out of the job's :class:`~slurm_elastic.observe.bounds.ReportLimits`) or a report file that
    breaks a rule puts the job in quarantine (the store keeps the first reason; it is logged),
    the file offset moves past the line, and the next job is read all the same.
    """
    added = 0
    for rec in records:
        if rec.state is JobState.PENDING or not rec.comment:  # finished: its last reports are read once
            continue
        try:
            channel = Channel.open(rec.job_id, rec.user, rec.comment)
        except ChannelError as exc:  # no channel, or a passing problem: the act step refuses and says why
            log.debug("job %s: reports not read: %s", rec.job_id, exc)
            continue
        try:
            reports, offset, refused = channel.reports(store.report_offset(rec.job_id))
        except ChannelError as exc:
            _quarantine(store, rec.job_id, str(exc), now)
            continue
        rows: list[ProgressRow] = []
        previous = _last_rank0_row(store, rec.job_id) if reports else None
        bounds = limits(rec) if reports else None
        layout = _layout(store, rec) if reports else {}
        told = False  # one line per read of the job's reports
        for report in reports:
            try:
                row = row_of(report, layout)
                if bounds is not None:
                    bounds.check(row, previous)
            except (ReportRefused, ReportOutOfBounds) as exc:
                refused.append(str(exc))
                continue
            rows.append(row)
            if row.kind != "left":
                previous = row
            said = configured_twice(report) if not told else None
            if said is not None:
                log.warning("job %s: %s", rec.job_id, said)
                told = True
        for reason in refused[:3]:
            log.warning("job %s: report refused: %s", rec.job_id, reason)
        if refused:
            _quarantine(store, rec.job_id, f"{len(refused)} report line(s) refused; first: {refused[0]}", now)
        if rows or refused or reports:
            store.add_reports(rec.job_id, rows, offset)
            added += len(rows)
    return added


def _layout(store: Store, rec: JobRecord) -> dict[str, str]:
    """Worker id -> node of a launcher job: the store's layout of its run (recorded at its first
    resize), else the one its allocation starts with (:func:`~slurm_elastic.slurm.records.initial_workers`)."""
    recorded = store.workers_of(rec.job_id) if store.workers_run(rec.job_id) == rec.restart_count else {}
    if recorded:
        return {w: node for w, (node, _) in recorded.items()}
    return {w: node for w, node, _ in initial_workers(rec)}


def _quarantine(store: Store, job_id: str, reason: str, now: float) -> None:
    if store.quarantine(job_id, reason, now):
        log.warning("job %s quarantined (planned from priors, its reports ignored): %s", job_id, reason)


def _last_rank0_row(store: Store, job_id: str) -> ProgressRow | None:
    return next((r for r in reversed(store.progress_of(job_id)) if r.kind != "left"), None)


def runtime_of(rows: Sequence[ProgressRow], run_start: float | None = None) -> JobRuntime | None:
    """What a job's progress rows (oldest first) say about it now, or ``None`` without rows.

    Throughput is the mean of the progress windows since the last resize (the current world);
    the last change is the last resize report; the model's name, parameter count and the epochs it
    trains (``target_epochs``: what its script runs, not what the submit flags said) are those of the
    latest report that gives them. A job whose last report says its training ended cannot grow: its
    workers are exiting, and a grow planned for it would only be refused by the actuator. An end
    report written before ``run_start`` (:func:`run_start_of`) is an earlier run's: the stop before a
    requeue; the new run trains on.
    """
    rows = [r for r in rows if r.kind != "left"]  # a dropped worker's farewell says nothing of the job now
    if not rows:
        return None
    last = rows[-1]
    resizes = [r for r in rows if r.kind == "resize"]
    since = rows.index(resizes[-1]) + 1 if resizes else 0
    window = [r.throughput for r in rows[since:]
              if r.kind == "progress" and r.throughput and r.world == last.world]
    losses = [r.loss for r in rows if r.loss is not None]
    world = last.world or 1
    epoch_size = next((r.epoch_size for r in reversed(rows) if r.epoch_size), None)
    metrics = [r.metric for r in rows if r.metric is not None]
    return JobRuntime(
        model=next((r.model for r in reversed(rows) if r.model), None),
        params=next((r.params for r in reversed(rows) if r.params), None),
        step_points=step_points(rows),
        epoch_size=epoch_size,
        samples_processed=last.samples,
        local_batch=max(1, last.global_batch // world),
        target_epochs=next((r.epochs for r in reversed(rows) if r.epochs is not None), None),
        observed_throughput=sum(window) / len(window) if window else None,
        last_change_time=resizes[-1].t if resizes else None,
        samples_at_last_change=resizes[-1].samples if resizes else 0,
        progress=ProgressReport(initial_loss=losses[0] if losses else None,
                                current_loss=losses[-1] if losses else None,
                                val_metric=metrics[-1] if metrics else None),
        can_grow=not _ended(last, run_start),
    )


def step_points(rows: Sequence[ProgressRow]) -> tuple[StepPoint, ...]:
    """The job's measured step times: one point per (world, nodes, per-GPU batch) it ran at, the
    median over its clean windows (oldest first by first seen).

    A clean window is a progress report whose previous report (rank 0's) was at the same world and
    global batch, so no resize pause is in it; its step time is ``global_batch / throughput``. A
    window whose node count is unknown (no ``members`` named, a worker the layout does not know)
    says nothing about placement and is left out.
    """
    rows = [r for r in rows if r.kind != "left"]
    steps: dict[tuple[int, int, int], list[float]] = {}
    for before, r in itertools.pairwise(rows):
        if (r.kind == "progress" and r.throughput and r.nodes and r.world >= 1
                and r.global_batch >= r.world and (before.world, before.global_batch) == (r.world, r.global_batch)):
            step = r.global_batch / r.throughput
            if math.isfinite(step) and step > 0:
                steps.setdefault((r.world, r.nodes, r.global_batch // r.world), []).append(step)
    return tuple(StepPoint(k, nodes, local, statistics.median(times)) for (k, nodes, local), times in steps.items())


def runtimes(store: Store, records: Iterable[JobRecord], now: float | None = None) -> dict[str, JobRuntime]:
    """The runtime of every job in ``records`` that has reported (from the store; nothing is read here).

    A job in quarantine has none: it is planned from priors, as if it had never reported. Except
    that, at ``now`` (when given), a quarantined job whose training ended by the rule the act step
    holds to (:func:`finished_training`) cannot grow: the act step does nothing to such a job
    ("nothing done: the job finished training"), so a grow planned for it was only journaled as
    done and nothing, and its GPUs were kept from the others for the round.
    """
    out: dict[str, JobRuntime] = {}
    quarantined = store.quarantined()
    for rec in records:
        rows = store.progress_of(rec.job_id)
        if rec.job_id in quarantined:
            if now is not None and rec.state is JobState.RUNNING and finished_training(rows, now, run_start_of(rec)):
                out[rec.job_id] = JobRuntime(can_grow=False)
            continue
        rt = runtime_of(rows, run_start_of(rec))
        if rt is not None:
            out[rec.job_id] = rt
    return out


def join_checked(rts: Mapping[str, JobRuntime], records: Iterable[JobRecord]) -> dict[str, JobRuntime]:
    """``rts`` with ``can_grow=False`` for each running launcher job whose join script is missing or
    breaks a rule: such a job is planned at most at its current size, not grown every round and
    refused every round (the reason is logged when the grow is tried, see the actuator)."""
    out = dict(rts)
    for rec in records:
        if rec.state is not JobState.RUNNING or not rec.comment:
            continue
        try:
            Channel.open(rec.job_id, rec.user, rec.comment).join_script()
        except NoChannel:
            continue
        except ChannelError:
            out[rec.job_id] = replace(out.get(rec.job_id) or JobRuntime(), can_grow=False)
    return out


END_REPORT_TRUST_S = 120.0
"""How long a job's end report is believed while Slurm still shows the job running (seconds): its
workers exit and its batch script ends within it. Past it the report disagrees with Slurm, and the
job is resized like any other (a signed end report made a job that trained on unshrinkable)."""


def finished_training(rows: Sequence[ProgressRow], now: float, run_start: float | None = None) -> bool:
    """Whether the job's last report says its training ended (its workers are exiting), no more than
    :data:`END_REPORT_TRUST_S` before ``now`` and not before its current run started (``run_start``,
    :func:`run_start_of`: the stop report of a run that a requeue ended says nothing of the new
    run); a report after it quarantines the job (:mod:`slurm_elastic.observe.bounds`) and is not
    stored."""
    return bool(rows) and _ended(rows[-1], run_start) and now - rows[-1].t <= END_REPORT_TRUST_S


def _ended(row: ProgressRow, run_start: float | None) -> bool:
    return row.kind == "end" and (run_start is None or row.t >= run_start)
