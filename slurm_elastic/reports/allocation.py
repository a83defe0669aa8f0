"""The center managers' allocation report: who used the GPUs, how well, and how fairly, from ``sacct``.

This module owns two layers:

* pure tables (:func:`group_jobs`, :func:`job_scaling`, :func:`allocation_tables`): from
  :class:`AccountingRecord` lists (``sacct --json``), optionally the daemon's action journal, the
  launchers' progress rows and the daemon's satellite map (all three from the store), to one
  JSON-ready dict of tables;
* rendering (:func:`write_json`, :func:`write_csv`, :func:`write_html`): ``allocation.json``, one
  CSV per table, or ``index.html`` with this page's PNG plots, drawn and written with the shared
  helpers of :mod:`slurm_elastic.reports.render`.

It must not run Slurm commands, open the store or read the clock: the caller hands it the records,
the journal, the progress rows, the satellite map and the window (``slurm-elastic report`` does that).

Definitions (times are seconds since the epoch, durations seconds):

* **Job.** One Slurm job id. Slurm 22.05 lists a resized job once per shape under the same id; the
  earlier shapes say ``RESIZING``. Those *segments* are one job. A *satellite* allocation is counted
  as part of its parent job: its GPU-hours go to the parent's account and user (and to the
  satellite's own partition), and it counts as one resize of that job. A record is a satellite of
  ``<jobid>`` when its AdminComment is ``slurm-elastic satellite-of=<jobid> ...``
  (:func:`slurm_elastic.contract.satellite_parent` reads it; what the daemon
  sets with ``scontrol update JobId=<sat> AdminComment="slurm-elastic satellite-of=<jobid>"``, see
  :func:`slurm_elastic.slurm.satellites.mark_argv`), or, failing that, when the daemon's store lists
  its id as a satellite of ``<jobid>`` (``satellites``: the AdminComment can be missing from the
  ``sacct`` record: 22.05 writes it to the database only when the job ends, and the ``scontrol``
  that sets it may have failed). A *GPU job* is one with a segment that held at least one GPU;
  other jobs are counted in the summary and left out of the tables.
* **Elastic.** The primary job's AdminComment starts with the token ``slurm-elastic`` (22.05 writes
  the AdminComment to the database when the job ends; a still running elastic job may read as rigid).
* **GPU-hours.** Sum over segments of ``allocated GPUs x elapsed``, clipped to the report window
  (a segment spanning ``[start, end]`` contributes the share of its ``elapsed`` that lies inside the
  window; a running segment ends at ``start + elapsed``).
* **Utilization.** GPUs held (step function over segment starts and ends, window-clipped) against
  the cluster's GPUs when known (``total_gpus``; the caller reads it from ``sinfo`` *now*, so a
  cluster that changed size during the window is misreported).
* **JCT** = end of the last segment - submission of the first; **queue time** = first start - first
  submission; distributions (count, p50, p90, max; percentiles by linear interpolation, as numpy)
  over finished GPU jobs (JCT) and started GPU jobs (queue time).
* **Resizes.** Three counts that measure different things, side by side in the ``resizes`` table:
  ``resizes_slurm`` = RESIZING segments + satellites (what Slurm saw); ``resizes_journaled`` =
  SHRINK/GROW/MOVE actions the daemon journaled (with a store), whose cost (``mean_cost_s``,
  ``max_cost_s``) is the journaled action's wall time (``finished - started``: the daemon's
  ``scontrol``/``sbatch`` commands plus the order handshake, as the *daemon* timed them);
  ``resizes_reported`` = the job's own ``resize`` reports (in-place resizes and recoveries from a
  lost worker, as the launcher's rank 0 saw them), whose cost (``mean_pause_s``, ``max_pause_s``)
  is the report's ``pause_s``: seconds from the step boundary where the job switched to training
  again at the new size, the pause the *training* saw. Without a store the journaled and reported figures are
  unknown (null); a job without launcher reports has null reported figures.
* **Scaled-job efficiency** (from the launcher's progress rows, over the job's whole life, not
  clipped to the window). A row of kind ``progress`` or ``end`` with a positive ``throughput``
  measures the window since the job's previous row (of any kind), ``dt = t - t_prev``, all at the
  row's ``world`` (= workers = GPUs: every resize writes a row, which starts a new window, so a window
  never spans two sizes; ``resize`` rows, whose window includes the pause, measure nothing). At
  each measured size ``k``: ``T(k)`` = summed ``dt`` (training seconds), and the throughput
  ``X(k) = sum(throughput x dt) / T(k)`` (samples/s: samples trained at ``k`` over seconds trained
  at ``k``). With ``k0`` the smallest measured size, the efficiency at ``k`` is
  ``E(k) = (X(k) / k) / (X(k0) / k0)``, the throughput per GPU relative to that at ``k0`` (1 at
  ``k0``; 1 everywhere is linear scaling). The job's mean efficiency is GPU-seconds weighted over
  its measured sizes: ``sum(k T(k) E(k)) / sum(k T(k))``; an account's (and the summary's) is the
  same weighting over the sizes of all its jobs that ran at two or more measured sizes. It is
  null, with a note, for a job without launcher reports (no store, or a job not run by the
  launcher), without a measured window, or measured at one size only. The efficiency is what the
  training saw: where the global batch changed with the size it includes the batch's effect on
  throughput, not the communication cost alone.
* **Finish-time fairness** (Themis, as the simulator's metric): ``FTF = JCT / JCT_fair`` with
  ``JCT_fair = exec x max(1, N_avg x g / G)``, ``exec`` the job's summed elapsed, ``g`` its mean GPUs
  held (GPU-seconds / exec), ``G`` the cluster's GPUs and ``N_avg`` the time-average number of GPU jobs
  in the system (submitted, not ended) during the job's life. It assumes the job would have run
  alone in ``exec`` at its size and slowed down linearly below it. Per account: jobs with a known
  FTF, mean, max, and the share with FTF > 1. Unknown (null, with a note) when ``G`` is unknown or
  no job of the account finished.
* **Predictor error** (:mod:`~slurm_elastic.reports.prediction`): for each launcher job, each
  configuration it measured in the window predicted by the profile alone (``prior``) and by the
  job's own model fitted from the configurations it measured before (``online``: what the daemon
  knew when it chose the size); per job the median absolute percentage error of each, and in the
  summary the median and 90th percentile over every configuration.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from slurm_elastic.errors import ElasticError
from slurm_elastic.reports import prediction, render
from slurm_elastic.reports.scaling import (
    JobScaling,
    SizeThroughput,
    job_scaling,
    scaling_table_rows,
    weighted_efficiency,
)
from slurm_elastic.reports.usage import (
    JobUsage,
    Segment,
    clipped_gpu_seconds,
    finish_time_fairness,
    group_jobs,
    group_rows,
    hours,
    in_system,
    journal_stats,
    percentile,
    time_mean_held,
    utilization,
)
from slurm_elastic.slurm.records import AccountingRecord

if TYPE_CHECKING:
    from slurm_elastic.store import JournalEntry, ProgressRow
    from slurm_elastic_predictor.throughput import ThroughputModel

__all__ = [
    "CSV_TABLES",
    "JobScaling",
    "JobUsage",
    "ReportDataError",
    "Segment",
    "SizeThroughput",
    "allocation_tables",
    "group_jobs",
    "job_scaling",
    "write_csv",
    "write_html",
    "write_json",
]


# Tables written as CSV (one file each, <name>.csv), in this order, with their columns.
CSV_TABLES: dict[str, tuple[str, ...]] = {
    "summary": ("since", "until", "total_gpus", "jobs", "gpu_jobs", "elastic_jobs", "jobs_without_gpus",
                "gpu_hours", "elastic_gpu_hours", "rigid_gpu_hours", "mean_gpus_held", "mean_utilization",
                "resizes_slurm", "resizes_journaled", "resizes_reported", "mean_efficiency", "predicted_jobs",
                "prior_predictions", "prior_median_ape", "prior_p90_ape", "online_predictions", "online_median_ape",
                "online_p90_ape"),
    "by_account": ("account", "jobs", "elastic_jobs", "gpu_hours", "elastic_gpu_hours", "rigid_gpu_hours", "share"),
    "by_user": ("user", "jobs", "elastic_jobs", "gpu_hours", "elastic_gpu_hours", "rigid_gpu_hours", "share"),
    "by_partition": ("partition", "jobs", "elastic_jobs", "gpu_hours", "elastic_gpu_hours", "rigid_gpu_hours",
                     "share"),
    "utilization": ("t", "gpus_held", "total_gpus", "utilization"),
    "distributions": ("metric", "jobs", "n", "p50", "p90", "max"),
    "resizes": ("job_id", "account", "elastic", "resizes_slurm", "satellites", "resizes_journaled",
                "journaled_failed", "mean_cost_s", "max_cost_s", "resizes_reported", "mean_pause_s", "max_pause_s"),
    "scaling": ("job_id", "user", "account", "elastic", "sizes", "measured_s", "throughput", "throughput_per_gpu",
                "efficiency", "mean_efficiency", "note"),
    "scaling_by_account": ("account", "jobs", "jobs_reporting", "jobs_scaled", "measured_gpu_hours",
                           "mean_efficiency", "min_efficiency", "note"),
    "fairness": ("account", "jobs", "jobs_with_ftf", "mean_ftf", "max_ftf", "unfair_fraction", "note"),
    "prediction": prediction.COLUMNS,
    "jobs": ("job_id", "user", "account", "partition", "elastic", "state", "submit", "start", "end", "queue",
             "jct", "exec", "gpus_first", "gpu_hours", "segments", "resizes_slurm", "satellites",
             "resizes_journaled", "resizes_reported", "efficiency", "ftf"),
}

PLOTS: tuple[str, ...] = ("utilization_over_time.png", "gpu_hours_by_account.png", "jct_queue_cdf.png")


class ReportDataError(ElasticError):
    """The report's input breaks a rule (a window that ends before it starts, a negative GPU count)."""


def allocation_tables(records: Sequence[AccountingRecord], *, since: float | None = None,
                      until: float | None = None, total_gpus: int | None = None,
                      journal: Mapping[str, Sequence[JournalEntry]] | None = None,
                      progress: Mapping[str, Sequence[ProgressRow]] | None = None,
                      satellites: Mapping[str, str] | None = None,
                      profiles: Mapping[str, ThroughputModel] | None = None,
                      default_model: str = "cifar10") -> dict[str, Any]:
    """Every table of the allocation report (definitions in the module docstring). Pure.

    Args:
        records: ``sacct --json`` records (every segment of a resized job, satellites included).
        since, until: the report window (seconds since the epoch); each defaults to the earliest start
            / latest end among the records. GPU-hours and utilization are clipped to it.
        total_gpus: GPUs in the cluster, ``None`` if unknown (utilization and FTF are then null).
        journal: the daemon's journaled actions by job id (:meth:`Store.actions_of`), ``None`` without
            a store.
        progress: the launchers' progress rows by job id (:meth:`Store.progress_of`; a job absent or
            with no rows has no launcher reports), ``None`` without a store.
        satellites: satellite job id -> parent job id (:meth:`Store.satellites` with
            ``include_ended=True``), for satellites whose AdminComment is missing; ``None`` without a store.
        profiles, default_model: the throughput models the daemon plans with and the model of jobs
            that name none (the ``prediction`` table, :mod:`~slurm_elastic.reports.prediction`);
            without ``profiles`` the predictor's error is not computed.

    Returns:
        A JSON-ready dict: ``summary`` (one dict), ``by_account``, ``by_user``, ``by_partition``,
        ``utilization``, ``distributions``, ``resizes``, ``fairness``, ``scaling``,
        ``scaling_by_account``, ``prediction``, ``jobs`` (lists of row dicts with the columns of :data:`CSV_TABLES`; in
        ``scaling`` the per-size columns are lists, one entry per measured size), and ``notes`` (what
        could not be computed and why).

    Raises:
        ReportDataError: ``until`` before ``since``, or ``total_gpus < 1``.
    """
    if total_gpus is not None and total_gpus < 1:
        raise ReportDataError(f"total_gpus {total_gpus}: must be >= 1 (or unknown)")
    all_jobs = group_jobs(records, satellites)
    jobs = [j for j in all_jobs if j.has_gpus]
    starts = [s.start for j in jobs for s in j.segments if s.start is not None]
    ends = [s.end for j in jobs for s in j.segments if s.end is not None]
    lo = since if since is not None else (min(starts) if starts else 0.0)
    hi = until if until is not None else (max(ends) if ends else lo)
    if hi < lo:
        raise ReportDataError(f"report window ends at {hi} before it starts at {lo} (rule: until >= since)")
    notes: list[str] = []
    seconds = {(j.job_id, k): clipped_gpu_seconds(s, lo, hi) for j in jobs for k, s in enumerate(j.segments)}
    total_s = sum(seconds.values())
    by_id = {j.job_id: j for j in jobs}
    elastic_s = sum(v for (jid, _), v in seconds.items() if by_id[jid].elastic)
    points = utilization(jobs, lo, hi, total_gpus)
    mean_held = time_mean_held(points, lo, hi)
    if total_gpus is None:
        notes.append("cluster GPU count unknown: utilization and finish-time fairness are not computed")

    ts, cum = in_system(jobs, hi)
    ftf = {j.job_id: finish_time_fairness(j, ts, cum, total_gpus) for j in jobs}
    stats = {j.job_id: journal_stats(journal.get(j.job_id, ())) for j in jobs} if journal is not None else {}
    if journal is None:
        notes.append("no store given: daemon-journaled resizes and their measured cost are unknown")
    scaling: dict[str, JobScaling | None] = {
        j.job_id: job_scaling(rows) if progress is not None and (rows := progress.get(j.job_id)) else None
        for j in jobs}
    if progress is None:
        notes.append("no store given: launcher reports (scaled-job efficiency, resize pauses the jobs measured) "
                     "are unknown")
    elif silent := sum(1 for j in jobs if j.elastic and scaling[j.job_id] is None):
        notes.append(f"{silent} elastic job(s) without launcher reports: their efficiency and measured resize "
                     "pauses are null")

    summary = {
        "since": lo, "until": hi, "total_gpus": total_gpus, "jobs": len(all_jobs), "gpu_jobs": len(jobs),
        "elastic_jobs": sum(1 for j in jobs if j.elastic), "jobs_without_gpus": len(all_jobs) - len(jobs),
        "gpu_hours": hours(total_s), "elastic_gpu_hours": hours(elastic_s),
        "rigid_gpu_hours": hours(total_s - elastic_s), "mean_gpus_held": mean_held,
        "mean_utilization": mean_held / total_gpus if mean_held is not None and total_gpus else None,
        "resizes_slurm": sum(j.resizes_slurm for j in jobs),
        "resizes_journaled": sum(s[0] for s in stats.values()) if journal is not None else None,
        "resizes_reported": sum(sc.resizes for sc in scaling.values() if sc is not None)
        if progress is not None else None,
        "mean_efficiency": weighted_efficiency(sc for sc in scaling.values() if sc is not None),
    }
    predicted: list[dict[str, Any]] = []
    if progress is not None and profiles is not None:
        reported = {j.job_id: progress[j.job_id] for j in jobs if j.job_id in progress}
        predicted = prediction.prediction_rows(reported, profiles, default_model, lo, hi)
    elif progress is not None:
        notes.append("no throughput profiles given: the predictor's error is not computed")
    summary.update(prediction.prediction_summary(predicted))
    dists = []
    for cls, members in (("all", jobs), ("elastic", [j for j in jobs if j.elastic]),
                         ("rigid", [j for j in jobs if not j.elastic])):
        for metric in ("jct", "queue"):
            vals = [v for j in members if (v := getattr(j, metric)) is not None]
            dists.append({"metric": metric, "jobs": cls, "n": len(vals), "p50": percentile(vals, 50),
                          "p90": percentile(vals, 90), "max": max(vals) if vals else None})
    resizes = []
    for j in jobs:
        n_j, failed, mean_c, max_c = stats.get(j.job_id, (0, 0, None, None))
        sc = scaling[j.job_id]
        if j.resizes_slurm or n_j or (sc is not None and sc.resizes):
            resizes.append({"job_id": j.job_id, "account": j.account, "elastic": j.elastic,
                            "resizes_slurm": j.resizes_slurm, "satellites": j.satellites,
                            "resizes_journaled": n_j if journal is not None else None,
                            "journaled_failed": failed if journal is not None else None,
                            "mean_cost_s": mean_c, "max_cost_s": max_c,
                            "resizes_reported": sc.resizes if sc is not None else None,
                            "mean_pause_s": float(np.mean(sc.pauses)) if sc is not None and sc.pauses else None,
                            "max_pause_s": max(sc.pauses) if sc is not None and sc.pauses else None})
    fairness = []
    for account in sorted({j.account for j in jobs}):
        mine = [j for j in jobs if j.account == account]
        known = [f for j in mine if (f := ftf[j.job_id]) is not None]
        note = ""
        if total_gpus is None:
            note = "cluster GPU count unknown"
        elif not known:
            note = "no finished job"
        elif len(known) < len(mine):
            note = f"{len(mine) - len(known)} job(s) not finished"
        fairness.append({"account": account, "jobs": len(mine), "jobs_with_ftf": len(known),
                         "mean_ftf": float(np.mean(known)) if known else None,
                         "max_ftf": max(known) if known else None,
                         "unfair_fraction": sum(1 for f in known if f > 1.0) / len(known) if known else None,
                         "note": note})
    job_rows = []
    for j in jobs:
        journaled = stats[j.job_id][0] if journal is not None else None
        job_rows.append({
            "job_id": j.job_id, "user": j.user, "account": j.account, "partition": j.partition,
            "elastic": j.elastic, "state": j.state, "submit": j.submit, "start": j.start, "end": j.end,
            "queue": j.queue, "jct": j.jct, "exec": j.exec_seconds, "gpus_first": j.first_gpus,
            "gpu_hours": hours(sum(seconds[j.job_id, k] for k in range(len(j.segments)))),
            "segments": len(j.segments), "resizes_slurm": j.resizes_slurm, "satellites": j.satellites,
            "resizes_journaled": journaled,
            "resizes_reported": sc.resizes if (sc := scaling[j.job_id]) is not None else None,
            "efficiency": sc.mean_efficiency if sc is not None else None, "ftf": ftf[j.job_id],
        })
    scaling_rows, scaling_accounts = scaling_table_rows(jobs, scaling, progress is not None)
    return {
        "summary": summary,
        "by_account": group_rows("account", jobs, seconds, "account", total_s),
        "by_user": group_rows("user", jobs, seconds, "user", total_s),
        "by_partition": group_rows("partition", jobs, seconds, "partition", total_s),
        "utilization": points,
        "distributions": dists,
        "resizes": resizes,
        "fairness": fairness,
        "scaling": scaling_rows,
        "scaling_by_account": scaling_accounts,
        "prediction": [{k: v for k, v in r.items() if not k.startswith("_")} for r in predicted],
        "jobs": job_rows,
        "notes": notes,
    }


# --------------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------------


def write_json(tables: Mapping[str, Any], out_dir: Path) -> list[Path]:
    """Write ``allocation.json`` (the :func:`allocation_tables` dict) into ``out_dir``; returns its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "allocation.json"
    path.write_text(json.dumps(tables, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return [path]


def write_csv(tables: Mapping[str, Any], out_dir: Path) -> list[Path]:
    """Write one CSV per table of :data:`CSV_TABLES` (``<name>.csv``; empty cell = unknown); returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, columns in CSV_TABLES.items():
        rows = [tables[name]] if name == "summary" else tables[name]
        path = out_dir / f"{name}.csv"
        render.write_csv(path, columns, rows)
        paths.append(path)
    return paths


def _plot_utilization(path: Path, tables: Mapping[str, Any], span: tuple[str, float]) -> bytes:
    fig, (ax,) = render.new_figure()
    pts = tables["utilization"]
    lo = tables["summary"]["since"]
    total = tables["summary"]["total_gpus"]
    if len(pts) > 1:
        ax.step([(p["t"] - lo) / span[1] for p in pts], [p["gpus_held"] for p in pts], where="post",
                color=render.colours(1)[0], linewidth=1.8, label="GPUs held")
    else:
        render.no_data(ax, "no GPU held in the window")
    if total:
        ax.axhline(total, color="0.3", linestyle="--", linewidth=1.2, label=f"cluster GPUs ({total})")
    ax.set_xlabel(f"time since {render.iso_utc(lo)} ({span[0]})")
    ax.set_ylabel("GPUs held (count)")
    ax.set_ylim(bottom=0)
    ax.set_title("GPUs held over time")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best")
    return render.save_png(fig, path)


def _plot_accounts(path: Path, tables: Mapping[str, Any]) -> bytes:
    rows = tables["by_account"]
    fig, (ax,) = render.new_figure(width=max(8.0, 0.8 * len(rows) + 3))
    if rows:
        names = [render.mpl_label(r["account"]) for r in rows]
        xs = range(len(rows))
        el, rg = render.colours(2)
        ax.bar(xs, [r["rigid_gpu_hours"] for r in rows], color=rg, label="rigid")
        ax.bar(xs, [r["elastic_gpu_hours"] for r in rows], bottom=[r["rigid_gpu_hours"] for r in rows],
               color=el, label="elastic")
        ax.set_xticks(list(xs), names, rotation=20 if len(rows) > 4 else 0, ha="right" if len(rows) > 4 else "center")
        ax.legend(loc="best")
    else:
        render.no_data(ax, "no GPU-hours in the window")
    ax.set_ylabel("GPU-hours")
    ax.set_title("GPU-hours by account (elastic vs rigid)")
    ax.grid(True, axis="y", alpha=0.3)
    return render.save_png(fig, path)


def _plot_cdfs(path: Path, tables: Mapping[str, Any], dur: tuple[str, float]) -> bytes:
    fig, axes = render.new_figure(ncols=2, width=10.0)
    colours = render.colours(2)
    for ax, metric, title in ((axes[0], "jct", "Job completion time"), (axes[1], "queue", "Queue time")):
        drawn = False
        for cls, colour in zip(("elastic", "rigid"), colours, strict=True):
            vals = sorted(v / dur[1] for j in tables["jobs"] if (j["elastic"] == (cls == "elastic"))
                          and (v := j[metric]) is not None)
            if vals:
                render.step_cdf(ax, vals, len(vals), colour, f"{cls} ({len(vals)} jobs)")
                drawn = True
        if drawn:
            ax.legend(loc="lower right")
        else:
            render.no_data(ax, "no values")
        ax.set_xlabel(f"{title.lower()} ({dur[0]})")
        ax.set_ylabel("fraction of jobs")
        ax.set_ylim(0, 1.02)
        ax.set_title(f"{title} CDF")
        ax.grid(True, alpha=0.3)
    return render.save_png(fig, path)


_CAPTIONS = {
    "utilization_over_time.png": "GPUs held by jobs over the report window (step-wise between allocation "
                                 "changes); the dashed line is the cluster's GPU count when known.",
    "gpu_hours_by_account.png": "GPU-hours per account in the window, rigid and elastic jobs stacked.",
    "jct_queue_cdf.png": "Job completion time (finished GPU jobs) and queue time (started GPU jobs) CDFs, "
                         "elastic vs rigid jobs.",
}


def write_html(tables: Mapping[str, Any], out_dir: Path, *, title: str = "GPU allocation report") -> list[Path]:
    """Write ``index.html`` with the report's tables and PNG plots (and the PNG files) into ``out_dir``.

    The page is standalone: plots are embedded as data URIs and link to the PNG files. Every string
    from the input is HTML-escaped. The per-job table is left to the CSV/JSON formats.

    Returns:
        The PNG paths (in the order of :data:`PLOTS`), then ``index.html``.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    s = tables["summary"]
    span = render.time_unit(max(0.0, s["until"] - s["since"]))
    dur = render.time_unit(max([j["jct"] for j in tables["jobs"] if j["jct"] is not None], default=0.0))
    paths = [out_dir / name for name in PLOTS]
    with render.plot_style():
        images = {
            PLOTS[0]: _plot_utilization(paths[0], tables, span),
            PLOTS[1]: _plot_accounts(paths[1], tables),
            PLOTS[2]: _plot_cdfs(paths[2], tables, dur),
        }
    esc = html.escape
    util = s["mean_utilization"]
    since, until = render.iso_utc(s["since"]), render.iso_utc(s["until"])
    lines = [f"<p>Window {esc(since)} – {esc(until)}. {s['gpu_jobs']} GPU jobs "
             f"({s['elastic_jobs']} elastic), {s['jobs_without_gpus']} jobs without GPUs left out. "
             f"{s['gpu_hours']:,.2f} GPU-hours ({s['elastic_gpu_hours']:,.2f} elastic, "
             f"{s['rigid_gpu_hours']:,.2f} rigid). Cluster GPUs: {esc(render.format_value(s['total_gpus'], 0))}; mean "
             f"utilization: {'–' if util is None else f'{100 * util:.1f}%'}.</p>"]
    for note in tables["notes"]:
        lines.append(f'<p class="note">Note: {esc(note)}.</p>')
    sections: tuple[tuple[str, str, dict[str, float]], ...] = (
        ("GPU-hours by account", "by_account", {}),
        ("GPU-hours by user", "by_user", {}),
        ("GPU-hours by partition", "by_partition", {}),
        (f"JCT and queue time ({render.UNIT_NAMES[dur[0]]})", "distributions",
         {"p50": dur[1], "p90": dur[1], "max": dur[1]}),
        ("Finish-time fairness per account", "fairness", {}),
        ("Resizes", "resizes", {}),
        ("Scaled-job efficiency per job (sizes in GPUs, throughput in samples/s)", "scaling", {}),
        ("Scaled-job efficiency per account", "scaling_by_account", {}),
        ("Throughput predictor error per job (step time APE: the profile alone, and the job's own model "
         "fitted from what it measured before)", "prediction", {}),
    )
    for heading, name, scale in sections:
        lines.append(f"<h2>{esc(heading)}</h2>")
        if tables[name]:
            lines += render.html_table(tables[name], CSV_TABLES[name], scale)
        else:
            lines.append('<p class="note">None in the window.</p>')
    lines.append('<p class="note">GPU-hours are clipped to the window; share is of all GPU-hours. FTF = JCT / '
                 "JCT with a fair 1/N share of the cluster (&gt; 1 is unfair). Resize cost is the daemon's "
                 "journaled action time in seconds (its commands and the order handshake); resize pause is what "
                 "the job's training measured (seconds from the switch to training again at the new size). "
                 "Efficiency at k GPUs = (X(k)/k) / (X(k0)/k0), X the measured throughput and k0 the smallest "
                 "measured size; the mean is weighted by the GPU-seconds measured at each size.</p>")
    lines.append("<h2>Plots</h2>")
    lines += [render.html_figure(name, png, _CAPTIONS[name]) for name, png in images.items()]
    index = out_dir / "index.html"
    index.write_text(render.html_page(title, lines), encoding="utf-8")
    return [*paths, index]
