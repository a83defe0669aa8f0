"""Launcher reports into the daemon: from each job's report file to the store, and to the snapshot.

This module owns two steps of every observation in acting or shadow mode: :func:`ingest` reads the
new signed reports of each running launcher job (:meth:`slurm_elastic.orders.Channel.reports`,
from the offset the store kept) into the store, and :func:`runtimes` turns the store's progress
rows into the :class:`~slurm_elastic.slurm.parse.JobRuntime` the snapshot is built with (samples
done, measured throughput at the current size, per-GPU batch, epoch size, losses, last resize).
A job without a channel, or whose files break a rule, simply has no reports; a refused line
(bad MAC, another job) is logged and skipped, never trusted.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from slurm_elastic.core.model import JobState, ProgressReport
from slurm_elastic.orders import Channel, ChannelError
from slurm_elastic.slurm.parse import JobRecord, JobRuntime
from slurm_elastic.store import Store

log = logging.getLogger(__name__)


def ingest(store: Store, records: Iterable[JobRecord]) -> int:
    """Append the new reports of every started launcher job to the store; returns how many."""
    added = 0
    for rec in records:
        if rec.state is JobState.PENDING or not rec.comment:  # finished: its last reports are read once
            continue
        try:
            channel = Channel.open(rec.job_id, rec.user, rec.comment)
            reports, offset, refused = channel.reports(store.report_offset(rec.job_id))
        except ChannelError:
            continue
        if refused:
            log.warning("job %s: %d report line(s) refused (bad MAC or another job's)", rec.job_id, refused)
        if reports or refused:
            store.add_reports(rec.job_id, reports, offset)
            added += len(reports)
    return added


def runtime_of(rows: Sequence[Mapping[str, Any]]) -> JobRuntime | None:
    """What a job's progress rows (oldest first) say about it now, or ``None`` without rows.

    Throughput is the mean of the progress windows since the last resize (the current world);
    the last change is the last resize report.
    """
    rows = [r for r in rows if r["kind"] != "left"]  # a dropped worker's farewell says nothing of the job now
    if not rows:
        return None
    last = rows[-1]
    resizes = [r for r in rows if r["kind"] == "resize"]
    since = rows.index(resizes[-1]) + 1 if resizes else 0
    window = [float(r["throughput"]) for r in rows[since:]
              if r["kind"] == "progress" and r["throughput"] and r["gpus"] == last["gpus"]]
    losses = [float(r["loss"]) for r in rows if r["loss"] is not None]
    gpus = int(last["gpus"]) or 1
    epoch_size = next((int(r["epoch_size"]) for r in reversed(rows) if r["epoch_size"]), None)
    return JobRuntime(
        epoch_size=epoch_size,
        samples_processed=int(last["samples"]),
        local_batch=max(1, int(last["global_batch"]) // gpus),
        observed_throughput=sum(window) / len(window) if window else None,
        last_change_time=float(resizes[-1]["t"]) if resizes else None,
        samples_at_last_change=int(resizes[-1]["samples"]) if resizes else 0,
        progress=ProgressReport(initial_loss=losses[0] if losses else None,
                                current_loss=losses[-1] if losses else None),
    )


def runtimes(store: Store, records: Iterable[JobRecord]) -> dict[str, JobRuntime]:
    """Ingest new reports, then the runtime of every job that has reported."""
    records = list(records)
    ingest(store, records)
    out: dict[str, JobRuntime] = {}
    for rec in records:
        rt = runtime_of(store.progress_of(rec.job_id))
        if rt is not None:
            out[rec.job_id] = rt
    return out
