"""Report directory of a simulated policy comparison: tables, plots, CSVs and a standalone HTML page.

This module owns the *rendering* of simulation results: it takes the JSON-ready result dicts the
simulator produces (one per policy × seed run) and writes a report directory. It has three layers:

* validation (:func:`summary_table` and :func:`write_report` both start there): every run is checked
  against the result schema and bad input raises :class:`ReportInputError`, naming the run index and
  the key;
* pure tables (:func:`summary_table`, and the HTML text): per-series means and standard deviations
  over seeds, no I/O;
* rendering (:func:`write_report`): this page's PNG plots, CSVs and ``index.html``, drawn and
  written with the shared helpers of :mod:`slurm_elastic.reports.render` (Agg canvas, matplotlib
  imported lazily, default style).

It must not simulate, schedule or talk to Slurm: everything it shows comes from its input.

A *series* is one (workload, policy, GPUs, resize cost) combination; its runs differ only in the
seed. Series are labelled by their policy name, with the attributes that differ between series
added in parentheses, and keep one colour across all plots. Series appear in the order of their
first run in the input.
"""

from __future__ import annotations

import html
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slurm_elastic.reports import render
from slurm_elastic.reports.simulation_inputs import (
    JOB_FIELDS,
    METRIC_KEYS,
    OPTIONAL_METRIC_KEYS,
    RUN_COLUMNS,
    ReportInputError,
    Run,
    Series,
    series_of,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = [
    "FILES",
    "JOB_FIELDS",
    "METRIC_KEYS",
    "OPTIONAL_METRIC_KEYS",
    "ReportInputError",
    "summary_table",
    "write_report",
]


# The files of a report directory, in the order write_report writes (and returns) them.
FILES: tuple[str, ...] = (
    "jct_cdf.png", "queue_exec_box.png", "completed_over_time.png", "utilization_over_time.png",
    "ftf_cdf.png", "jobs.csv", "summary.csv", "index.html",
)  # fmt: skip

_LOG_SPREAD = 100.0  # a CDF gets a log x axis when max/min of its positive values exceeds this


# --------------------------------------------------------------------------------------------------
# Pure tables
# --------------------------------------------------------------------------------------------------


def summary_table(results: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per-series summary over seeds: the rows of the HTML table.

    A series is one (workload, policy, GPUs, resize cost) combination; in the usual comparison (one
    workload, one cluster) that is one row per policy. Pure: no I/O.

    Args:
        results: The simulator's JSON-ready run dicts (one per policy × seed).

    Returns:
        One JSON-ready dict per series, in the order of first appearance: ``label`` (the policy name,
        plus the attributes that differ between series), ``workload``, ``policy``, ``gpus``,
        ``resize_cost``, ``seeds`` (sorted list), ``n_seeds``, and ``metrics``: for each name of
        :data:`METRIC_KEYS` and :data:`OPTIONAL_METRIC_KEYS` a dict ``{"mean", "std", "n"}`` over the
        runs where the metric is known (``n`` of them). ``std`` is the sample standard deviation
        (n − 1), ``None`` below two values; ``mean`` is ``None`` when no run knows the metric. Times
        are in seconds, as in the input.

    Raises:
        ReportInputError: ``results`` breaks the result schema.
    """
    return _summary_rows(series_of(results))


def _summary_rows(series: Sequence[Series]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for s in series:
        metrics: dict[str, dict[str, float | int | None]] = {}
        for name in (*METRIC_KEYS, *OPTIONAL_METRIC_KEYS):
            values = [v for r in s.runs if (v := r.metrics[name]) is not None]
            metrics[name] = {
                "mean": statistics.fmean(values) if values else None,
                "std": statistics.stdev(values) if len(values) > 1 else None,
                "n": len(values),
            }
        rows.append({
            "label": s.label,
            "workload": s.workload,
            "policy": s.policy,
            "gpus": s.gpus,
            "resize_cost": s.resize_cost,
            "seeds": [r.seed for r in s.runs],
            "n_seeds": len(s.runs),
            "metrics": metrics,
        })
    return rows


def _cell(stat: Mapping[str, Any], scale: float, places: int) -> str:
    """``mean ± std`` with ``places`` decimals, the mean alone below two seeds, "–" if unknown."""
    mean, std = stat["mean"], stat["std"]
    if mean is None:
        return "–"
    text = f"{mean / scale:,.{places}f}"
    if std is not None:
        text += f" ± {std / scale:,.{places}f}"
    return text


def _units(rows: Sequence[Mapping[str, Any]], series: Sequence[Series]) -> tuple[tuple[str, float], tuple[str, float]]:
    """(duration unit for JCT/queue/exec, horizon unit for makespan and timelines)."""
    jcts = [m for row in rows if (m := row["metrics"]["avg_jct"]["mean"]) is not None]
    if not jcts:
        jcts = [max(vals) for s in series if (vals := s.pooled("jct"))]
    spans = [m for row in rows if (m := row["metrics"]["makespan"]["mean"]) is not None]
    spans += [r.t[-1] for s in series for r in s.runs if r.t]
    return render.time_unit(max(jcts, default=0.0)), render.time_unit(max(spans, default=0.0))


# (header, metric, scale kind) where scale kind is "dur", "span", a number, or 1.
_COLUMNS: tuple[tuple[str, str, str | float], ...] = (
    ("Avg JCT ({dur})", "avg_jct", "dur"),
    ("LB avg JCT ({dur})", "lower_bound_avg_jct", "dur"),
    ("×LB", "avg_jct_over_lower_bound", 1.0),
    ("P50 JCT ({dur})", "p50_jct", "dur"),
    ("P99 JCT ({dur})", "p99_jct", "dur"),
    ("Avg queue ({dur})", "avg_queue", "dur"),
    ("Avg exec ({dur})", "avg_exec", "dur"),
    ("Makespan ({span})", "makespan", "span"),
    ("Utilization (%)", "avg_utilization", 0.01),
    ("Scaling efficiency", "scaling_efficiency", 1.0),
    ("Unfair fraction", "unfair_fraction", 1.0),
    ("Worst FTF", "worst_ftf", 1.0),
    ("Resizes / job", "resizes_per_job", 1.0),
    ("GPU-hours", "gpu_hours", 1.0),
    ("Drop ratio", "drop_ratio", 1.0),
    ("Jobs completed", "jobs_completed", 1.0),
    ("Jobs", "jobs", 1.0),
)

_CAPTIONS: dict[str, str] = {
    "jct_cdf.png": "Job completion time CDF per policy, seeds pooled. The y axis is the fraction of all "
                   "submitted jobs, so a curve ends below 1 when jobs were dropped or did not finish.",
    "queue_exec_box.png": "Queueing time (left) and execution time (right) per policy, seeds pooled; boxes "
                          "span the quartiles, whiskers 1.5 × IQR, points are outliers.",
    "completed_over_time.png": "Jobs completed over simulated time; the solid line is each policy's lowest "
                               "seed, the faint lines its other seeds.",
    "utilization_over_time.png": "GPU utilization (busy GPUs / cluster GPUs) over simulated time, step-wise "
                                 "between events; solid: lowest seed, faint: other seeds.",
    "ftf_cdf.png": "Finish-time fairness (FTF) CDF per policy over the jobs with a known FTF, seeds pooled; "
                   "jobs right of the dashed line at FTF = 1 were treated unfairly.",
}

def _render_html(title: str, rows: Sequence[Mapping[str, Any]], series: Sequence[Series],
                 colours: Sequence[str], dur: tuple[str, float], span: tuple[str, float],
                 images: Mapping[str, bytes]) -> str:
    """The standalone ``index.html`` text (pure). Images are embedded as data URIs and link to the PNGs."""
    esc = html.escape
    units = {"dur": dur, "span": span}
    head = ["Policy", "Seeds"] + [h.format(dur=dur[0], span=span[0]) for h, _, _ in _COLUMNS]
    lines: list[str] = []
    workloads = sorted({s.workload for s in series})
    clusters = sorted({s.gpus for s in series})
    costs = sorted({s.resize_cost for s in series})
    lines.append(
        f'<p>Workload: {esc(", ".join(workloads))}. Cluster: {esc(", ".join(map(str, clusters)))} GPUs. '
        f'Resize cost: {esc(", ".join(costs))}. {sum(len(s.runs) for s in series)} runs, '
        f"{sum(s.n_jobs for s in series)} job records.</p>"
    )
    lines += ["<h2>Summary</h2>", "<table>", "<thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in head)
              + "</tr></thead>", "<tbody>"]
    scales = [units[kind][1] if isinstance(kind, str) else kind for _, _, kind in _COLUMNS]
    places = [
        render.decimals([m / scale for row in rows if (m := row["metrics"][metric]["mean"]) is not None] or [0.0])
        for (_, metric, _), scale in zip(_COLUMNS, scales, strict=True)
    ]
    for row, colour in zip(rows, colours, strict=True):
        cells = [
            f'<td class="label"><span class="swatch" style="background:{colour}"></span>{esc(row["label"])}</td>',
            f'<td>{row["n_seeds"]} ({esc(", ".join(map(str, row["seeds"])))})</td>',
        ]
        for (_, metric, _), scale, digits in zip(_COLUMNS, scales, places, strict=True):
            cells.append(f"<td>{esc(_cell(row['metrics'][metric], scale, digits))}</td>")
        lines.append("<tr>" + "".join(cells) + "</tr>")
    lines += [
        "</tbody>",
        "</table>",
        f'<p class="note">Each cell is the mean ± sample standard deviation over the seeds of the row '
        f"(mean alone with one seed; – when no run knows the value). JCT, queue and execution times are "
        f"in {esc(render.UNIT_NAMES[dur[0]])}, makespan in {esc(render.UNIT_NAMES[span[0]])}. Utilization is the "
        f"time-averaged share of busy GPUs; FTF is finish-time fairness (time in the shared cluster over "
        f"time with a fair 1/N share; &gt; 1 is unfair). LB avg JCT is a clairvoyant lower bound on the avg JCT "
        f"of the same finished jobs (each job alone at its fastest size and batch, SRPT of their least "
        f"GPU-time on the whole cluster, or the jobs sharing the cluster as a fluid, each holding the least "
        f"GPUs its speed needs, whichever is largest); ×LB is avg JCT over it, per run (≥ 1).</p>",
        "<h2>Plots</h2>",
    ]
    lines += [render.html_figure(name, png, _CAPTIONS[name], link_in_caption=True) for name, png in images.items()]
    lines += [
        "<h2>Data</h2>",
        "<ul>",
        '<li><a href="summary.csv">summary.csv</a>: one row per run with its metrics (times in seconds).</li>',
        '<li><a href="jobs.csv">jobs.csv</a>: one row per job per run (times in seconds; empty cells are '
        "unknown values, e.g. the JCT of a dropped job).</li>",
        "</ul>",
    ]
    return render.html_page(title, lines)


# --------------------------------------------------------------------------------------------------
# CSVs
# --------------------------------------------------------------------------------------------------


def _run_columns(run: Run) -> dict[str, Any]:
    return {"workload": run.workload, "policy": run.policy, "seed": run.seed,
            "resize_cost": run.resize_cost, "gpus": run.gpus}


def _write_jobs_csv(path: Path, series: Sequence[Series]) -> None:
    runs = [r for s in series for r in s.runs]
    extra = sorted({k for r in runs for j in r.jobs for k in j} - set(JOB_FIELDS) - set(RUN_COLUMNS))
    rows = [{**j, **_run_columns(r)} for r in runs for j in r.jobs]
    render.write_csv(path, (*RUN_COLUMNS, *JOB_FIELDS, *extra), rows)


def _write_summary_csv(path: Path, series: Sequence[Series]) -> None:
    runs = [r for s in series for r in s.runs]
    extra = sorted({k for r in runs for k in r.extra_metrics} - set(RUN_COLUMNS))
    rows = [{**r.extra_metrics, **r.metrics, **_run_columns(r)} for r in runs]
    render.write_csv(path, (*RUN_COLUMNS, *METRIC_KEYS, *OPTIONAL_METRIC_KEYS, *extra), rows)


# --------------------------------------------------------------------------------------------------
# Plots (drawn with render's helpers: lazy matplotlib, explicit Agg canvas)
# --------------------------------------------------------------------------------------------------


def _log_if_spread(ax: Axes, values: Sequence[float]) -> bool:
    positive = [v for v in values if v > 0]
    if positive and max(positive) > _LOG_SPREAD * min(positive):
        ax.set_xscale("log")
        return True
    return False


def _plot_jct_cdf(path: Path, series: Sequence[Series], colours: Sequence[str], dur: tuple[str, float]) -> bytes:
    fig, (ax,) = render.new_figure()
    pooled_all: list[float] = []
    for s, colour in zip(series, colours, strict=True):
        values = [v / dur[1] for v in s.pooled("jct")]
        if values and s.n_jobs:
            render.step_cdf(ax, values, s.n_jobs, colour, render.mpl_label(s.label))
            pooled_all += values
        else:
            ax.plot([], [], color=colour, label=render.mpl_label(s.label + " (no job completed)"))
    log = _log_if_spread(ax, pooled_all)
    if not pooled_all:
        render.no_data(ax, "no job completed in any run")
    ax.set_xlabel(f"job completion time ({dur[0]}{', log scale' if log else ''})")
    ax.set_ylabel("fraction of submitted jobs")
    ax.set_ylim(0, 1.02)
    ax.set_title("Job completion time CDF (seeds pooled)")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right")
    return render.save_png(fig, path)


def _plot_queue_exec(path: Path, series: Sequence[Series], colours: Sequence[str],
                     dur: tuple[str, float]) -> bytes:
    fig, axes = render.new_figure(ncols=2, width=max(9.0, 1.6 * len(series) + 4))
    labels = [render.mpl_label(s.label) for s in series]
    for ax, name, title in ((axes[0], "queue", "Queueing time"), (axes[1], "exec", "Execution time")):
        data = [[v / dur[1] for v in s.pooled(name)] for s in series]
        positions = [k + 1 for k, d in enumerate(data) if d]
        if positions:
            box = ax.boxplot([data[p - 1] for p in positions], positions=positions, patch_artist=True, widths=0.6,
                             medianprops={"color": "black"}, flierprops={"markersize": 3, "alpha": 0.5})
            for patch, p in zip(box["boxes"], positions, strict=True):
                patch.set_facecolor(colours[p - 1])
                patch.set_alpha(0.75)
        else:
            render.no_data(ax, "no values")
        ax.set_xticks(range(1, len(series) + 1), labels, rotation=20 if len(series) > 3 else 0,
                      ha="right" if len(series) > 3 else "center")
        ax.set_xlim(0.4, len(series) + 0.6)
        ax.set_ylabel(f"{title.lower()} ({dur[0]})")
        ax.set_title(f"{title} per policy (seeds pooled)")
        ax.grid(True, axis="y", alpha=0.3)
    return render.save_png(fig, path)


def _plot_timeline(path: Path, series: Sequence[Series], colours: Sequence[str], span: tuple[str, float], *,
                   utilization: bool) -> bytes:
    fig, (ax,) = render.new_figure()
    drawn = False
    for s, colour in zip(series, colours, strict=True):
        runs = [r for r in s.runs if r.t]
        for k, run in enumerate(runs):
            t = [v / span[1] for v in run.t]
            y = [100.0 * b / run.gpus for b in run.busy_gpus] if utilization else run.completed
            solid = k == 0
            label = render.mpl_label(s.label + (f" (seed {run.seed})" if len(runs) > 1 else "")) if solid else None
            ax.step(t, y, where="post", color=colour, linewidth=1.8 if solid else 0.9, alpha=1.0 if solid else 0.35,
                    label=label)
            drawn = True
        if not runs:
            ax.plot([], [], color=colour, label=render.mpl_label(s.label + " (no timeline)"))
    if not drawn:
        render.no_data(ax, "no timeline recorded")
    ax.set_xlabel(f"simulated time ({span[0]})")
    if utilization:
        ax.set_ylabel("GPU utilization (% of cluster GPUs busy)")
        ax.set_ylim(0, 105)
        ax.set_title("GPU utilization over time")
    else:
        ax.set_ylabel("jobs completed (count)")
        ax.set_ylim(bottom=0)
        ax.set_title("Jobs completed over time")
    ax.set_xlim(left=0)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right" if not utilization else "best")
    return render.save_png(fig, path)


def _plot_ftf_cdf(path: Path, series: Sequence[Series], colours: Sequence[str]) -> bytes:
    fig, (ax,) = render.new_figure()
    pooled_all: list[float] = []
    for s, colour in zip(series, colours, strict=True):
        values = s.pooled("ftf")
        if values:
            render.step_cdf(ax, values, len(values), colour, render.mpl_label(s.label))
            pooled_all += values
        else:
            ax.plot([], [], color=colour, label=render.mpl_label(s.label + " (no FTF known)"))
    log = _log_if_spread(ax, [*pooled_all, 1.0])
    ax.axvline(1.0, color="0.3", linestyle="--", linewidth=1.2, label="FTF = 1 (fair share)")
    if not pooled_all:
        render.no_data(ax, "no job has a known FTF")
    ax.set_xlabel(f"finish-time fairness ρ (dimensionless{', log scale' if log else ''})")
    ax.set_ylabel("fraction of jobs with known FTF")
    ax.set_ylim(0, 1.02)
    ax.set_title("Finish-time fairness CDF (seeds pooled)")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right")
    return render.save_png(fig, path)


def write_report(results: Sequence[Mapping[str, Any]], out_dir: Path, *, title: str | None = None) -> list[Path]:
    """Writes the report directory of a simulated policy comparison.

    Creates ``out_dir`` (and parents) and writes, overwriting files of the same names: the five PNG
    plots ``jct_cdf.png``, ``queue_exec_box.png``, ``completed_over_time.png``,
    ``utilization_over_time.png``, ``ftf_cdf.png``; ``jobs.csv`` (one row per job per run, columns
    workload, policy, seed, resize_cost, gpus, then :data:`JOB_FIELDS`, then any extra job fields);
    ``summary.csv`` (one row per run: the same run columns, then :data:`METRIC_KEYS` and
    :data:`OPTIONAL_METRIC_KEYS`, then any extra metrics); and ``index.html``, a standalone page (no
    script, no external asset: the plots are embedded as data URIs and link to the PNG files) with the
    :func:`summary_table` rows, the plots with captions and links to the CSVs. Every string from the
    input is HTML-escaped.

    Args:
        results: The simulator's JSON-ready run dicts (one per policy × seed).
        out_dir: The report directory.
        title: The page title; default "Simulation report: <workloads>".

    Returns:
        The written paths, in the order of :data:`FILES`.

    Raises:
        ReportInputError: ``results`` breaks the result schema (nothing is written then).
    """
    series = series_of(results)
    rows = _summary_rows(series)
    dur, span = _units(rows, series)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    colours = render.colours(len(series))
    paths = [out_dir / name for name in FILES]
    images: dict[str, bytes] = {}
    with render.plot_style():
        images["jct_cdf.png"] = _plot_jct_cdf(paths[0], series, colours, dur)
        images["queue_exec_box.png"] = _plot_queue_exec(paths[1], series, colours, dur)
        images["completed_over_time.png"] = _plot_timeline(paths[2], series, colours, span, utilization=False)
        images["utilization_over_time.png"] = _plot_timeline(paths[3], series, colours, span, utilization=True)
        images["ftf_cdf.png"] = _plot_ftf_cdf(paths[4], series, colours)
    _write_jobs_csv(paths[5], series)
    _write_summary_csv(paths[6], series)
    if title is None:
        title = "Simulation report: " + ", ".join(sorted({s.workload for s in series}))
    paths[7].write_text(_render_html(title, rows, series, colours, dur, span, images), encoding="utf-8")
    return paths
