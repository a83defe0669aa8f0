"""The simulator's jobs: one job to replay, its times on the simulated machine, and trace CSV files.

This module owns :class:`SimJobSpec` (one job to replay), its times at its request
(:func:`requested_time`, :func:`single_gpu_time`, :func:`scaled_to`) and :func:`load_trace` (the
trace CSV format of ``DESIGN.md``). The seed papers' built-in workloads are not the simulator's:
they are :mod:`slurm_elastic.workloads`, above it. Every malformed trace row is refused with its
line number.

Trace CSV: required ``job_id, submit_time, num_gpus, duration`` (seconds; the duration at the
requested GPU count); optional ``model, batch_size, min_gpus, max_gpus, min_batch, max_batch,
epochs, user, account, status``; unknown columns are ignored. A job without ``model`` gets one by
its GPU-time class, as Pollux and Sia do: < 1 GPU-hour small CV (cifar10, or ncf for every other
job), 1-10 medium (deepspeech2, or bert), 10-100 large (yolov3), > 100 ImageNet-scale
(imagenet). The job's work is scaled so that, on the simulated machine at its requested size and
batch, it takes exactly ``duration``; the measured profiles then say how that changes at other
sizes and batches.

A trace is hostile input: it is read once, by descriptor, only when it is a regular file of at
most :data:`MAX_TRACE_BYTES` bytes of UTF-8 with at most :data:`MAX_TRACE_ROWS` job rows; every
row has one field per header column, every field at most :data:`MAX_FIELD_CHARS` characters, and
every number is an ASCII decimal in its range: GPU counts ``1..65536``, batch sizes
``1..16777216``, ``submit_time`` in ``[0, 1e8)`` seconds (:data:`MAX_SUBMIT_S`, about three years
of history), ``duration`` in ``(0, 1e8]`` seconds. A bad row is a :class:`TraceError` naming the
file, the line, the column, the value and the rule. The simulator's horizon follows the trace
(``sim.engine.simulate``): every job arrives and the run ends when the last one does.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from slurm_elastic.core.model import ElasticMode
from slurm_elastic.errors import TraceError
from slurm_elastic.sim.truth import ModelTruth, truth
from slurm_elastic.textfiles import read_text
from slurm_elastic_predictor.profiles import MODEL_DEFAULTS

GPUS_PER_NODE = 4

SIM_HORIZON_S = 30 * 24 * 3600.0
"""Thirty days: the simulator's horizon before it followed the trace. A run without a horizon of its
own still goes on at least this long past the last arrival before its safety stop
(``sim.engine.simulate``), so a run that ended within 30 days ends exactly as it did."""

MAX_SUBMIT_S = 1e8
"""Latest ``submit_time`` of a trace job, exclusive (about 3.2 years: a site replays a quarter or a
year with room to spare; the same bound as a job's :data:`MAX_DURATION_S`). Times stay far below
``2**53`` ulps: at 1e8 s the virtual clock still resolves 15 ns."""

MAX_HORIZON_S = 1e9
"""Largest horizon a run may be given, and where a run without one stops at the latest (about 31.7
years: ten times :data:`MAX_SUBMIT_S`, room for a queue that drains long after its last arrival;
the clock still resolves 0.12 us there)."""

MAX_TRACE_BYTES = 64 << 20
"""Largest trace file (64 MiB: about a million rows)."""

MAX_TRACE_ROWS = 1_000_000
"""Most job rows in a trace."""

MAX_FIELD_CHARS = 1024
"""Longest field (header names too)."""

MAX_LINE_CHARS = 65536
"""Longest line (below the csv module's own field limit, so that limit is never what refuses)."""

MAX_COLUMNS = 64
"""Most header columns."""

MAX_TRACE_GPUS = 65536
"""Largest GPU count of a trace job (``num_gpus``, ``min_gpus``, ``max_gpus``; the ``--elastic`` limit)."""

MAX_TRACE_BATCH = 2**24
"""Largest global batch of a trace job (the ``--elastic-batch`` limit)."""

MAX_DURATION_S = 1e8
"""Longest job duration in a trace (about three years)."""


@dataclass(frozen=True, slots=True)
class SimJobSpec:
    """One job of a workload.

    Attributes:
        job_id: id.
        submit_time: seconds from the start of the workload.
        model: profile name (see :data:`MODEL_DEFAULTS`).
        requested_gpus: GPUs asked for (what a rigid scheduler gives).
        min_gpus, max_gpus: elastic range.
        base_batch: global batch at the requested size (samples).
        min_batch, max_batch: global batch range.
        epoch_size: samples per epoch.
        work_scale: multiplies the profile's epochs-to-target (1 = the full measured training).
        mode: exo- or endo-elastic.
        user, account: owner and account.
        category: workload-specific class label (for reports).
        max_local_batch: per-GPU memory limit (samples); ``None`` means the profile's largest
            measured per-GPU batch.
        epochs: a set number of epochs the job trains (times ``work_scale``), whatever its batch;
            ``None``: the epochs its model needs to reach its target at its batch (the validation
            curves). A site profile has no curves, so its jobs need it.
        profiles: the site profile folder ``model`` is in (``slurm-elastic profile``); ``None``: the
            shipped profiles.
        measured: counted in the run's metrics; ``False`` for a warm-up job (ONES leaves the first
            5% of its jobs out "to capture steady state"). It is scheduled like any other.
    """

    job_id: str
    submit_time: float
    model: str
    requested_gpus: int
    min_gpus: int
    max_gpus: int
    base_batch: int
    min_batch: int
    max_batch: int
    epoch_size: int
    work_scale: float = 1.0
    mode: ElasticMode = ElasticMode.EXO
    user: str = "user"
    account: str = "account"
    category: str = ""
    max_local_batch: int | None = None
    epochs: float | None = None
    profiles: Path | None = None
    measured: bool = True

    @property
    def model_truth(self) -> ModelTruth:
        """The simulator's physics of the job's model (shipped or site profile)."""
        return truth(self.model, root=self.profiles)

    @property
    def local_limit(self) -> int:
        """The per-GPU batch limit in effect."""
        return self.max_local_batch or self.model_truth.speed.max_local_batch

    def epochs_needed(self, global_batch: float) -> float:
        """Epochs to finish at this global batch."""
        if self.epochs is not None:
            return self.work_scale * self.epochs
        return self.work_scale * self.model_truth.epochs(global_batch)


def requested_time(spec: SimJobSpec) -> float:
    """Seconds the job takes alone at its requested size and batch (packed)."""
    t = spec.model_truth
    k = spec.requested_gpus
    local = math.ceil(spec.base_batch / k)
    accum = max(1, math.ceil(local / spec.local_limit))
    local = math.ceil(spec.base_batch / (k * accum))
    shape = _packed(k, t.speed.planner_model.gpus_per_node)
    tp = t.speed.throughput(spec.base_batch, local, shape, accum)
    return spec.epoch_size * spec.epochs_needed(spec.base_batch) / tp


def _packed(k: int, per_node: int) -> tuple[int, ...]:
    full, rest = divmod(k, per_node)
    return tuple([per_node] * full + ([rest] if rest else []))


def scaled_to(spec: SimJobSpec, duration: float) -> SimJobSpec:
    """The same job with its work scaled so that it runs ``duration`` seconds at its request."""
    base = replace(spec, work_scale=1.0)
    return replace(spec, work_scale=duration / requested_time(base))


def single_gpu_time(spec: SimJobSpec) -> float:
    """Best time of the job alone on one GPU (the IBM paper's optimal scheduled time)."""
    t = spec.model_truth
    best = math.inf
    hi = min(spec.max_batch, spec.local_limit)
    for b in sorted({spec.min_batch, hi, *[int(x) for x in t.speed.planner_model.proc_batch]}):
        if spec.min_batch <= b <= hi:
            tp = t.speed.throughput(b, b, (1,))
            best = min(best, spec.epoch_size * spec.epochs_needed(b) / tp)
    return best


# --- trace files ---------------------------------------------------------------------------------

_REQUIRED = ("job_id", "submit_time", "num_gpus", "duration")


def model_for_gpu_hours(gpu_hours: float, index: int) -> str:
    if gpu_hours < 1:
        return "cifar10" if index % 2 == 0 else "ncf"
    if gpu_hours < 10:
        return "deepspeech2" if index % 2 == 0 else "bert"
    if gpu_hours < 100:
        return "yolov3"
    return "imagenet"


def _shown(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:40] + "...")


def _read(path: Path) -> str:
    """The file's text: opened once, a regular file, at most MAX_TRACE_BYTES of UTF-8."""
    return read_text(path, max_bytes=MAX_TRACE_BYTES, noun="trace", kind_rule="a trace is a regular CSV file",
                     size_rule=f"a trace is at most {MAX_TRACE_BYTES} bytes and {MAX_TRACE_ROWS} rows",
                     error=TraceError)


def _too_long(path: Path, line: int, column: str, value: str) -> TraceError:
    return TraceError(f"{path}:{line}: column {column}: a value of {len(value)} characters ({_shown(value)}): "
                      f"rule: a field is at most {MAX_FIELD_CHARS} characters")


def _lines(path: Path, text: str, header: list[str]) -> Iterator[str]:
    """The physical lines, each at most MAX_LINE_CHARS (a longer one is refused by its longest field)."""
    for number, line in enumerate(io.StringIO(text, newline=""), 1):
        if len(line) > MAX_LINE_CHARS:
            if '"' not in line:  # unquoted: the fields are the comma-separated words
                fields = line.rstrip("\r\n").split(",")
                i = max(range(len(fields)), key=lambda k: len(fields[k]))
                column = header[i] if i < len(header) else f"#{i + 1}" + (" (past the header)" if header else "")
                raise _too_long(path, number, column, fields[i])
            raise TraceError(f"{path}:{number}: a line of {len(line)} characters: rule: a field is at most "
                             f"{MAX_FIELD_CHARS} characters")
        yield line


def load_trace(path: Path, *, elastic_range: float = 4.0) -> list[SimJobSpec]:
    """Read a trace CSV (format and limits in the module docstring).

    Args:
        path: the file.
        elastic_range: when ``max_gpus`` is absent, ``max_gpus = requested * elastic_range``
            (at most 65536; and ``min_gpus = 1`` when absent).

    Raises:
        TraceError: naming the file, the line, the column, the value and the rule broken.
    """
    text = _read(path)
    header: list[str] = []
    reader = csv.reader(_lines(path, text, header))
    jobs: list[SimJobSpec] = []
    seen: set[str] = set()
    index = 0
    while True:
        line = reader.line_num + 1  # where the record starts
        try:
            fields = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            raise TraceError(f"{path}:{line}: not valid CSV: {exc}") from None
        if not header:
            _check_header(path, fields, header)
            continue
        if not fields:
            continue  # a blank line
        if len(fields) != len(header):
            extra = (f": field {len(header) + 1} ({_shown(fields[len(header)])}) has no column"
                     if len(fields) > len(header) else "")
            raise TraceError(f"{path}:{line}: {len(fields)} fields, the header has {len(header)} columns{extra} "
                             "(rule: one field per column; leave a value out as an empty field)")
        if index >= MAX_TRACE_ROWS:
            raise TraceError(f"{path}:{line}: more than {MAX_TRACE_ROWS} job rows (rule: a trace has at most "
                             f"{MAX_TRACE_ROWS} rows)")
        row: dict[str, str] = {}
        for name, value in zip(header, fields, strict=True):
            if len(value) > MAX_FIELD_CHARS:
                raise _too_long(path, line, name, value)
            row[name] = value.strip()
        jobs.append(trace_job(path, line, index, row, elastic_range, seen))
        index += 1
    if not header:
        raise TraceError(f"{path}:1: header lacks required column(s) {', '.join(_REQUIRED)}")
    if not jobs:
        raise TraceError(f"{path}: no job rows")
    jobs.sort(key=lambda j: (j.submit_time, j.job_id))
    return jobs


def _check_header(path: Path, fields: list[str], header: list[str]) -> None:
    if len(fields) > MAX_COLUMNS:
        raise TraceError(f"{path}:1: header has {len(fields)} columns (rule: at most {MAX_COLUMNS})")
    for i, raw in enumerate(fields):
        name = raw.strip()
        if len(raw) > MAX_FIELD_CHARS:
            raise _too_long(path, 1, f"#{i + 1}", raw)
        if name in header:
            raise TraceError(f"{path}:1: header names column {_shown(name)} twice (rule: each column once)")
        header.append(name)
    missing = [c for c in _REQUIRED if c not in header]
    if missing:
        raise TraceError(f"{path}:1: header lacks required column(s) {', '.join(missing)}")


_NUMBER = re.compile(r"[+-]?([0-9]{1,30}(\.[0-9]{0,30})?|\.[0-9]{1,30})([eE][+-]?[0-9]{1,4})?", re.ASCII)


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def _num(path: Path, line: int, row: dict[str, str], col: str, *, integer: bool, minimum: float,
         maximum: float, below: bool = False, default: float | None = None) -> float:
    """A number column: ASCII decimal, finite, ``minimum <= value <= maximum`` (``< maximum`` with
    ``below``), integral when ``integer``; empty gives ``default`` (required when ``None``)."""
    text = row.get(col, "")
    if text == "":
        if default is None:
            raise TraceError(f"{path}:{line}: {col} is required")
        return default
    kind = "an integer" if integer else "a number"
    rule = f"{kind} >= {_fmt(minimum)} and {'<' if below else '<='} {_fmt(maximum)}"
    if col == "submit_time":
        rule += " (seconds from the trace's start: about 3.2 years of history)"
    if not _NUMBER.fullmatch(text):
        raise TraceError(f"{path}:{line}: {col} = {_shown(text)} is not a number (rule: {rule})")
    value = float(text)
    if (not math.isfinite(value) or value < minimum or value > maximum or (below and value == maximum)
            or (integer and value != int(value))):
        raise TraceError(f"{path}:{line}: {col} = {_shown(text)} must be {rule}")
    return value


def _text(path: Path, line: int, row: dict[str, str], col: str) -> str:
    value = row.get(col, "")
    if not value.isprintable():
        raise TraceError(f"{path}:{line}: column {col}: {_shown(value)}: rule: printable characters only")
    return value


def trace_job(path: Path, line: int, index: int, row: dict[str, str], elastic_range: float,
               seen: set[str]) -> SimJobSpec:
    """One trace row as a job to replay (the trace CSV reader's, and what-if's on sacct's rows):
    every field checked, ``seen`` the job ids so far.

    Raises:
        TraceError: the file, the line, the field and the rule.
    """
    if not (math.isfinite(elastic_range) and 0 <= elastic_range <= MAX_TRACE_GPUS):
        raise TraceError(f"{path}: elastic range {elastic_range!r}: must be a finite number >= 0")
    job_id = _text(path, line, row, "job_id")
    if not job_id:
        raise TraceError(f"{path}:{line}: job_id is required")
    if job_id in seen:
        raise TraceError(f"{path}:{line}: job_id {job_id!r} appears twice")
    seen.add(job_id)
    submit = _num(path, line, row, "submit_time", integer=False, minimum=0, maximum=MAX_SUBMIT_S, below=True)
    gpus = int(_num(path, line, row, "num_gpus", integer=True, minimum=1, maximum=MAX_TRACE_GPUS))
    duration = _num(path, line, row, "duration", integer=False, minimum=1e-9, maximum=MAX_DURATION_S)
    model = _text(path, line, row, "model") or model_for_gpu_hours(gpus * duration / 3600, index)
    if model not in MODEL_DEFAULTS:
        raise TraceError(f"{path}:{line}: model {_shown(model)} has no profile; known: "
                         f"{', '.join(sorted(MODEL_DEFAULTS))}")
    local, epoch = MODEL_DEFAULTS[model]
    g_max, b_max = MAX_TRACE_GPUS, MAX_TRACE_BATCH
    lo = int(_num(path, line, row, "min_gpus", integer=True, minimum=1, maximum=g_max, default=1))
    hi = int(_num(path, line, row, "max_gpus", integer=True, minimum=1, maximum=g_max,
                  default=min(g_max, max(gpus, int(gpus * elastic_range)))))
    if not lo <= gpus <= hi:
        raise TraceError(f"{path}:{line}: num_gpus {gpus} must lie in min_gpus:max_gpus {lo}:{hi}")
    batch = int(_num(path, line, row, "batch_size", integer=True, minimum=1, maximum=b_max,
                     default=min(b_max, local * gpus)))
    bmin = int(_num(path, line, row, "min_batch", integer=True, minimum=1, maximum=b_max,
                    default=min(batch, local * lo)))
    bmax = int(_num(path, line, row, "max_batch", integer=True, minimum=1, maximum=b_max,
                    default=max(batch, min(b_max, local * hi))))
    if not bmin <= batch <= bmax:
        raise TraceError(f"{path}:{line}: batch_size {batch} must lie in min_batch:max_batch {bmin}:{bmax}")
    spec = SimJobSpec(job_id, submit, model, gpus, lo, hi, batch, bmin, bmax, epoch,
                      user=_text(path, line, row, "user") or "user",
                      account=_text(path, line, row, "account") or "account")
    return scaled_to(spec, duration)
