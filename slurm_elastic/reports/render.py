"""The shared rendering of the report pages: plots, HTML, CSV writing and number formatting.

This module owns what :mod:`slurm_elastic.reports.simulation` and
:mod:`slurm_elastic.reports.allocation` draw and write alike: the page's HTML frame, style sheet,
embedded figures and tables, the CSV writer and its cell format, the time units and decimals of
numbers, and the matplotlib figure helpers. It shapes no data: every function takes what it
renders ready-made, and the pages' own tables, plots and captions stay in their modules.

matplotlib is imported lazily inside the drawing functions, so importing this module stays cheap,
and the global pyplot backend is never touched: figures are drawn on an explicit Agg canvas, under
matplotlib's default style (:func:`plot_style`), so a user's ``matplotlibrc`` does not change a
report.
"""

from __future__ import annotations

import base64
import contextlib
import csv
import datetime as dt
import html
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "CSS",
    "DPI",
    "UNIT_NAMES",
    "colours",
    "csv_value",
    "decimals",
    "format_value",
    "html_figure",
    "html_page",
    "html_table",
    "iso_utc",
    "mpl_label",
    "new_figure",
    "no_data",
    "plot_style",
    "save_png",
    "step_cdf",
    "time_unit",
    "write_csv",
]

DPI = 110
"""Resolution of every report figure (dots per inch)."""

UNIT_NAMES: dict[str, str] = {"s": "seconds", "min": "minutes", "h": "hours"}
"""The long name of each unit :func:`time_unit` picks."""

CSS = """
body { font-family: sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.5em; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { border: 1px solid #bbb; padding: 0.3em 0.5em; text-align: right; white-space: nowrap; }
th { background: #eee; } td.label { text-align: left; font-weight: bold; }
.swatch { display: inline-block; width: 0.8em; height: 0.8em; margin-right: 0.4em; vertical-align: middle; }
figure { margin: 1.5em 0; } figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption { font-size: 0.9em; color: #444; max-width: 900px; }
.note { font-size: 0.85em; color: #555; }
"""
"""The style sheet every report page embeds."""


# --------------------------------------------------------------------------------------------------
# Numbers
# --------------------------------------------------------------------------------------------------


def time_unit(seconds: float) -> tuple[str, float]:
    """The unit that shows a typical duration with 1–3 integer digits.

    Args:
        seconds: the typical duration.

    Returns:
        The unit's short name (a key of :data:`UNIT_NAMES`) and its length in seconds.
    """
    if seconds < 120:
        return "s", 1.0
    if seconds < 120 * 60:
        return "min", 60.0
    return "h", 3600.0


def decimals(values: Sequence[float]) -> int:
    """Decimals that show a column's largest value with about three significant digits (none if all are whole).

    Args:
        values: the column's numbers, at least one.

    Returns:
        The number of decimals, 0 to 3.
    """
    if all(v == int(v) for v in values):
        return 0
    mag = max(abs(v) for v in values)
    if mag >= 100:
        return 0
    if mag >= 10:
        return 1
    if mag >= 1:
        return 2
    return 3


def format_value(value: Any, places: int) -> str:
    """A table cell as text: "–" for unknown, yes/no, thousands separators, list entries joined by " / ".

    Args:
        value: the cell (``None``, a boolean, a number, a string, or a list or tuple of those).
        places: decimals of a float.

    Returns:
        The cell's text (not HTML-escaped).
    """
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.{places}f}"
    if isinstance(value, list | tuple):
        return " / ".join(format_value(v, places) for v in value)
    return str(value)


def iso_utc(t: float) -> str:
    """A time (seconds since the epoch) as ``YYYY-MM-DD HH:MM:SS UTC``."""
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _numbers(value: Any) -> list[float]:
    """The numbers of a cell (a list cell's entries), booleans excluded."""
    if isinstance(value, list | tuple):
        return [x for v in value for x in _numbers(v)]
    return [float(value)] if isinstance(value, int | float) and not isinstance(value, bool) else []


# --------------------------------------------------------------------------------------------------
# HTML
# --------------------------------------------------------------------------------------------------


def html_page(title: str, body: Sequence[str]) -> str:
    """A standalone HTML page: the escaped ``title`` as title and heading, :data:`CSS`, then ``body``.

    Args:
        title: the page title (plain text).
        body: HTML lines after the heading (already escaped).

    Returns:
        The page's text, lines joined by newlines, ending with one.
    """
    esc = html.escape
    head = ["<!DOCTYPE html>", '<html lang="en">', '<head><meta charset="utf-8">', f"<title>{esc(title)}</title>",
            f"<style>{CSS}</style>", "</head>", "<body>", f"<h1>{esc(title)}</h1>"]
    return "\n".join([*head, *body, "</body>", "</html>", ""])


def html_figure(name: str, png: bytes, caption: str, *, link_in_caption: bool = False) -> str:
    """A figure embedding a PNG as a data URI, linked to the PNG file of the same name.

    Args:
        name: the PNG's file name, beside the page.
        png: the PNG's bytes.
        caption: the caption (plain text).
        link_in_caption: end the caption with a link to the file too.

    Returns:
        One ``<figure>`` line.
    """
    esc = html.escape
    data = base64.b64encode(png).decode("ascii")
    link = f' (<a href="{esc(name)}">{esc(name)}</a>)' if link_in_caption else ""
    return (f'<figure><a href="{esc(name)}"><img src="data:image/png;base64,{data}" alt="{esc(name)}"></a>'
            f"<figcaption>{esc(caption)}{link}</figcaption></figure>")


def html_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], scale: Mapping[str, float]) -> list[str]:
    """A table of ``rows`` with one column per name, the first column's cells as labels.

    Each column gets the decimals (:func:`decimals`) of its numbers; cells are :func:`format_value`'s
    text, escaped.

    Args:
        rows: row dicts; a missing key is an unknown cell.
        columns: the column names, in order, also the header.
        scale: divisor of a column's numbers (e.g. 3600 to show seconds in hours); other columns as they are.

    Returns:
        The table's HTML lines.
    """
    esc = html.escape
    out = ["<table>", "<thead><tr>" + "".join(f"<th>{esc(c)}</th>" for c in columns) + "</tr></thead>", "<tbody>"]
    places = {}
    for c in columns:
        nums = [v / scale.get(c, 1.0) for r in rows for v in _numbers(r.get(c))]
        places[c] = decimals(nums) if nums else 0
    for r in rows:
        cells = []
        for k, c in enumerate(columns):
            v = r.get(c)
            if isinstance(v, int | float) and not isinstance(v, bool) and c in scale:
                v = float(v) / scale[c]
            cls = ' class="label"' if k == 0 else ""
            cells.append(f"<td{cls}>{esc(format_value(v, places[c]))}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out += ["</tbody>", "</table>"]
    return out


# --------------------------------------------------------------------------------------------------
# CSV
# --------------------------------------------------------------------------------------------------


def csv_value(value: Any) -> Any:
    """A CSV cell: empty for unknown, ``true``/``false``, JSON for a dict or list, else the value."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping | list | tuple):
        return json.dumps(value, sort_keys=True)
    return value


def write_csv(path: Path, columns: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> None:
    """Write a CSV file: a header of ``columns``, then one line per row (cells by :func:`csv_value`).

    Args:
        path: the file, overwritten.
        columns: the column names, in order.
        rows: row dicts; a missing key is an empty cell, keys not in ``columns`` are left out.
    """
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(columns)
        for row in rows:
            writer.writerow([csv_value(row.get(c)) for c in columns])


# --------------------------------------------------------------------------------------------------
# Plots (matplotlib imported lazily, drawn on an explicit Agg canvas)
# --------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def plot_style() -> Iterator[None]:
    """Draw under matplotlib's default style with the reports' font sizes, whatever the user's ``matplotlibrc``."""
    from matplotlib import style

    with style.context(["default", {"font.size": 10, "axes.titlesize": 11, "legend.fontsize": 9}]):
        yield


def mpl_label(label: str) -> str:
    """A legend/tick label matplotlib shows verbatim (no mathtext, not hidden by a leading ``_``)."""
    label = label.replace("$", r"\$")
    return " " + label if label.startswith("_") else label


def colours(n: int) -> list[str]:
    """``n`` distinct colours as hex strings (tab10, or tab20 beyond ten; repeating beyond twenty)."""
    from matplotlib import colormaps
    from matplotlib.colors import to_hex

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    size = 10 if n <= 10 else 20
    return [to_hex(cmap(i % size)) for i in range(n)]


def new_figure(ncols: int = 1, width: float = 8.0) -> tuple[Figure, list[Axes]]:
    """A figure on its own Agg canvas with ``ncols`` axes side by side.

    Args:
        ncols: number of axes.
        width: figure width in inches (height 4.8).

    Returns:
        The figure and its axes, left to right.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, 4.8), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, ncols, squeeze=False)
    return fig, list(axes[0])


def save_png(fig: Figure, path: Path) -> bytes:
    """Write ``fig`` as a PNG (without the software stamp, so the bytes are reproducible); returns them."""
    fig.savefig(path, format="png", metadata={"Software": None})
    return path.read_bytes()


def no_data(ax: Axes, text: str) -> None:
    """Write ``text`` in grey at the centre of axes that have nothing to show."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")


def step_cdf(ax: Axes, values: Sequence[float], denominator: int, colour: str, label: str) -> None:
    """Draw the empirical CDF of ``values`` as a step line rising by ``1 / denominator`` per value.

    Args:
        ax: the axes.
        values: the values, at least one, in any order.
        denominator: the population the fractions are of (``len(values)`` or more: a curve then ends below 1).
        colour: the line colour.
        label: the legend label (as matplotlib takes it; see :func:`mpl_label`).
    """
    xs = sorted(values)
    ys = [(k + 1) / denominator for k in range(len(xs))]
    ax.step([xs[0], *xs], [0.0, *ys], where="post", color=colour, label=label, linewidth=1.8)
