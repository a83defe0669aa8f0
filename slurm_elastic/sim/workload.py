"""Simulated workloads: trace CSV files and the built-in evaluation workloads of the seed papers.

This module owns :class:`SimJobSpec` (one job to replay), :func:`load_trace` (the trace CSV format
of ``DESIGN.md``) and :func:`builtin` (``ones-longhorn``, ``ibm-categories``). Randomness comes
only from the seed passed in. Every malformed trace row is refused with its line number.

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
import functools
import io
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from slurm_elastic.core.model import ElasticMode
from slurm_elastic.errors import TraceError
from slurm_elastic.sim.truth import ModelTruth, truth
from slurm_elastic.textfiles import read_text
from slurm_elastic_predictor import portable
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


def offered_gpus(jobs: Sequence[SimJobSpec]) -> float:
    """The GPUs a workload keeps busy on average: the GPU-time it brings, each job at its request
    (``requested_gpus`` x :func:`requested_time`), over the time it takes to arrive plus one mean
    job length (``last submit - first submit + mean requested_time``: the second term keeps a
    workload that arrives at once finite and is small against a long trace's span).

    A cluster of ``offered_gpus(jobs) / load`` GPUs runs the workload at that ``load`` (1: as many
    GPUs as it asks for on average; above 1 the queue grows while jobs arrive).

    Raises:
        TraceError: no jobs.
    """
    if not jobs:
        raise TraceError("the workload has no jobs: its offered load is undefined")
    times = [requested_time(j) for j in jobs]
    work = sum(j.requested_gpus * t for j, t in zip(jobs, times, strict=True))
    submits = [j.submit_time for j in jobs]
    return work / (max(submits) - min(submits) + sum(times) / len(times))


def gpus_for_load(jobs: Sequence[SimJobSpec], load: float, gpus_per_node: int) -> int:
    """The cluster (whole nodes of ``gpus_per_node``) that runs ``jobs`` at ``load``
    (:func:`offered_gpus` / load, rounded up), never smaller than the largest job's minimum.

    Raises:
        TraceError: no jobs, or a load that is not a finite number > 0.
    """
    if not (math.isfinite(load) and load > 0):
        raise TraceError(f"load {load!r}: must be a finite number > 0")
    need = max(offered_gpus(jobs) / load, max(j.min_gpus for j in jobs))
    return max(1, math.ceil(need / gpus_per_node)) * gpus_per_node


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


def _model_for(gpu_hours: float, index: int) -> str:
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
        jobs.append(_trace_job(path, line, index, row, elastic_range, seen))
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


def _trace_job(path: Path, line: int, index: int, row: dict[str, str], elastic_range: float,
               seen: set[str]) -> SimJobSpec:
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
    model = _text(path, line, row, "model") or _model_for(gpus * duration / 3600, index)
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


# --- built-in workloads --------------------------------------------------------------------------

# ONES Table 2: (dataset profile, model names, dataset sizes in samples).
_ONES_TABLE2: tuple[tuple[str, tuple[str, ...], tuple[int, ...]], ...] = (
    ("imagenet", ("alexnet", "resnet50", "vgg16", "inceptionv3"), tuple(range(10_000, 20_001, 2_000))),
    ("cifar10", ("resnet18", "vgg16", "googlenet"), tuple(range(20_000, 40_001, 5_000))),
    ("bert", ("bert-cola",), (5_000, 6_000, 7_000, 8_000)),
    ("bert", ("bert-mrpc",), (3_600,)),
    ("bert", ("bert-sst2",), tuple(range(10_000, 20_001, 2_000))),
)
ONES_MEAN_INTERARRIVAL = 60.0
ONES_EXTRA_EPOCHS = 10.0
ONES_JOBS = 400
ONES_ARRIVAL_S = 30.0
ONES_WARMUP_FRACTION = 0.05
ONES_REQUESTS = (1, 2, 4)


def _ones_job(job_id: str, t: float, entry: tuple[str, str, int], req: int) -> SimJobSpec:
    """A Table 2 job asking for ``req`` GPUs: the profile's usual per-GPU batch, 1..16 GPUs and 1..16
    times that batch, trained to its target and then 10 epochs more."""
    profile, name, size = entry
    local = MODEL_DEFAULTS[profile][0]
    base_epochs = truth(profile).epochs(local * req)
    return SimJobSpec(
        job_id=job_id, submit_time=round(t, 3), model=profile, requested_gpus=req, min_gpus=1,
        max_gpus=16, base_batch=local * req, min_batch=local, max_batch=local * 16, epoch_size=size,
        work_scale=(base_epochs + ONES_EXTRA_EPOCHS) / base_epochs, category=f"{name}-{size // 1000}k",
    )


def ones_longhorn(seed: int, n_jobs: int = ONES_JOBS) -> list[SimJobSpec]:
    """The ONES experiment as its appendix describes it (SC'21, Artifact Description).

    "We uniformly sampled 400 jobs from the [Microsoft] traces and replace each with one of our
    jobs that has the closest GPU time (# GPUs x execution time). Job arrivals follow a Poisson
    process with an average arrival time interval of 30 seconds. To capture steady state, we do
    not consider the first 5% jobs." The paper runs it on 16 to 64 GPUs (§4.4).

    Choices where the appendix is silent (documented, not tuned): the Microsoft (Philly) trace is
    not shipped, so the 400 jobs are sampled from :func:`philly_like`'s distribution of GPU counts
    and durations (Jeon et al., ATC'19); "our jobs" are the Table 2 jobs (:func:`ones_longhorn_50`'s
    shapes) each asking for 1, 2 or 4 GPUs, their GPU time being the request times their time alone
    at it; "closest" is the smallest absolute difference (the first candidate on a tie). Sampled
    GPU times span minutes to days and Table 2's jobs do not, so the longest and shortest Table 2
    jobs take the tails. The first 5% by arrival are ``measured=False``.

    Args:
        n_jobs: jobs to draw (400; fewer for quick runs).
    """
    if n_jobs < 1:
        raise TraceError(f"ones-longhorn: n_jobs={n_jobs} must be positive")
    rng = np.random.default_rng(seed)
    entries = [(profile, name, size) for profile, names, sizes in _ONES_TABLE2 for name in names for size in sizes]
    cands = [(entry, req) for entry in entries for req in ONES_REQUESTS]
    gpu_time = np.array([req * requested_time(_ones_job("0", 0.0, entry, req)) for entry, req in cands])
    ks, durations = _philly_draw(rng, n_jobs)
    warmup = math.ceil(ONES_WARMUP_FRACTION * n_jobs)
    jobs, t = [], 0.0
    for i in range(n_jobs):
        t += float(rng.exponential(ONES_ARRIVAL_S))
        entry, req = cands[int(np.argmin(np.abs(gpu_time - ks[i] * durations[i])))]
        jobs.append(replace(_ones_job(str(i + 1), t, entry, req), measured=i >= warmup))
    return jobs


def ones_longhorn_50(seed: int) -> list[SimJobSpec]:
    """The 50-job ONES workload of earlier releases (SC'21 §4.1, Table 2): Poisson arrivals, 64 GPUs.

    Choices where the paper is silent (documented, not tuned): arrivals are Poisson with a
    mean inter-arrival of 60 s (50 jobs over about 50 minutes; the paper says only that all jobs
    finish within 2 hours); each job asks for 1, 2 or 4 GPUs (equally likely) at the profile's
    usual per-GPU batch and may use 1..16 GPUs and 1..16 times its per-GPU batch; models on the
    same dataset share that dataset's measured profile (ImageNet subsets: ResNet-50; CIFAR-10:
    ResNet-18; GLUE tasks: BERT). A job trains on its subset until the target accuracy and then
    for 10 more epochs, as ONES stops after 10 epochs above target.
    """
    rng = np.random.default_rng(seed)
    entries = [(profile, name, size) for profile, names, sizes in _ONES_TABLE2 for name in names for size in sizes]
    order = rng.permutation(len(entries))
    t = 0.0
    jobs = []
    for i, idx in enumerate(order):
        t += float(rng.exponential(ONES_MEAN_INTERARRIVAL))
        jobs.append(_ones_job(str(i + 1), t, entries[int(idx)], int(rng.choice(ONES_REQUESTS))))
    return jobs


# IBM Table I, mapped onto the shipped profiles by scaling behaviour (documented in ibm_categories).
_IBM_CATEGORIES: tuple[tuple[str, str, int, int, float, bool, int | None], ...] = (
    # name, profile, min batch, max batch, single-GPU minutes, elastic, per-GPU batch limit
    ("1-compute-bound", "imagenet", 32, 256, 16.0, True, 32),  # Table II: up to 32 per GPU
    ("2-communication-bound", "ncf", 16, 256, 21.0, True, None),
    ("3-balanced", "cifar10", 16, 1024, 41.0, True, None),
    ("4-not-elastic", "cifar10", 128, 128, 27.0, False, None),
)
IBM_KMAX = 10
IBM_OVERLOAD = 1.5


def _ibm_job(job_id: str, t: float, category: tuple[str, str, int, int, float, bool, int | None],
             batch: int) -> SimJobSpec:
    """A job of one IBM category at Random-BS batch ``batch``, its length scaled to the category's."""
    name, profile, bmin, bmax, minutes_1gpu, elastic, limit = category
    spec = SimJobSpec(
        job_id=job_id, submit_time=round(t, 3), model=profile, requested_gpus=1, min_gpus=1,
        max_gpus=IBM_KMAX if elastic else 1, base_batch=batch, min_batch=bmin, max_batch=bmax,
        epoch_size=MODEL_DEFAULTS[profile][1], category=name, max_local_batch=limit,
    )
    return replace(spec, work_scale=60.0 * minutes_1gpu / single_gpu_time(spec))


@functools.cache
def ibm_mean_request_s() -> float:
    """The expected GPU-seconds of an IBM job at its request (one GPU at its Random-BS batch), over
    the categories (uniform) and each category's batches (uniform): the work one arrival brings."""
    per_category = []
    for category in _IBM_CATEGORIES:
        bmin, bmax = category[2], category[3]
        per_category.append(float(np.mean([requested_time(_ibm_job("0", 0.0, category, b))
                                           for b in range(bmin, bmax + 1)])))
    return float(np.mean(per_category))


def ibm_categories(seed: int, gpus: int = 40, arrival: str = "high", minutes: float = 240.0,
                   load: float = IBM_OVERLOAD) -> list[SimJobSpec]:
    """The IBM evaluation workload (MASCOTS'20 §IV-A, Table I).

    Jobs are drawn uniformly from the four categories. Their single-GPU lengths at the largest
    batch that fits are 16, 21, 41 and 27 minutes. The models of Table I (ResNet-50, AlexNet,
    VGG11-BN on CIFAR-100, AlexNet on Food-101) are not in the shipped profiles, so each category
    uses the profile with the same scaling behaviour: compute-bound -> imagenet (ResNet-50),
    communication-bound -> ncf, balanced -> cifar10 (ResNet-18, 11M weights like VGG11's 10M),
    not elastic -> cifar10 at a fixed batch of 128 on one GPU. Batch ranges are Table I's; the
    compute-bound category's per-GPU limit is 32 (Table II's largest per-GPU batch), the others
    keep their profile's measured limit.
    The Random-BS baseline batch (``base_batch``) is uniform in each job's range.

    Arrivals are Poisson. The base rate ``lambda`` is the completion rate of a uniformly drawn job
    on one GPU, ``1 / mean(lengths)``. ``high`` uses ``k_max * lambda`` (``k_max = 10``) per 40
    GPUs, scaled with the cluster size; ``low`` uses ``lambda`` (the paper's formula is garbled in
    our copy; ``lambda`` is our reading, documented as a choice); ``bursty`` alternates high and
    low every 60 minutes.

    Those rates offer little work: ``high`` brings ``k_max`` single-GPU jobs' worth per job length,
    about a quarter of 40 GPUs at the Random-BS batches, so nothing queues for long and admission
    never has to refuse. ``overload`` is our addition, where admission matters: Poisson at
    ``rate = load * gpus / E[w]``, with ``E[w]`` the expected GPU-seconds a job brings at its
    request (:func:`ibm_mean_request_s`: one GPU at its Random-BS batch), so the jobs bring
    ``load`` times the cluster's GPU-time (:data:`IBM_OVERLOAD`, 1.5, by default). Elastic jobs at a
    better batch need less, so the optimizer sees less than ``load``; the fixed-batch baseline sees
    it all.
    """
    if arrival not in ("high", "low", "bursty", "overload"):
        raise TraceError(f"ibm-categories arrival {arrival!r}: must be high, low, bursty or overload")
    if not 0 < load <= 100:
        raise TraceError(f"ibm-categories load {load!r}: must be above 0 and at most 100")
    rng = np.random.default_rng(seed)
    lam = 1.0 / (60.0 * float(np.mean([c[4] for c in _IBM_CATEGORIES])))
    scale = gpus / 40.0
    high, low = IBM_KMAX * lam * scale, lam * scale
    if arrival == "overload":
        high = low = load * gpus / ibm_mean_request_s()
    jobs: list[SimJobSpec] = []
    t = 0.0
    i = 0
    while True:
        bursting = arrival == "bursty" and int(t // 3600) % 2 == 0
        rate = high if arrival in ("high", "overload") or bursting else low
        t += float(rng.exponential(1.0 / rate))
        if t > minutes * 60:
            break
        category = _IBM_CATEGORIES[int(rng.integers(len(_IBM_CATEGORIES)))]
        i += 1
        jobs.append(_ibm_job(str(i), t, category, int(rng.integers(category[2], category[3] + 1))))
    return jobs


IBM_CATEGORY_MINUTES = 30.0


def largest_batch_time(spec: SimJobSpec) -> float:
    """Seconds the job takes alone on one GPU at the largest batch that fits it (no accumulation)."""
    b = min(spec.max_batch, spec.local_limit)
    return spec.epoch_size * spec.epochs_needed(b) / spec.model_truth.speed.throughput(b, b, (1,))


def ibm_category(seed: int, category: int, gpus: int = 40, minutes: float = 240.0,
                 load: float | None = None) -> list[SimJobSpec]:
    """One category of the IBM benchmarks of Fig. 5 (MASCOTS'20 §IV-A and §IV-E).

    "Each benchmark only runs jobs of a single job category; all jobs have the same length
    (execution time) irrespective of the category; it is set such that each job takes about half
    an hour to execute on a single GPU with the maximum feasible batch size." So every job of
    category ``category`` (1-4, Table I, mapped onto the shipped profiles as in
    :func:`ibm_categories`) takes :data:`IBM_CATEGORY_MINUTES` alone on one GPU at the largest
    batch that fits one GPU (:func:`largest_batch_time`), and its Random-BS batch is uniform in
    its category's range. Arrivals are the paper's high rate: Poisson at ``k_max * lambda`` per
    40 GPUs (scaled with the cluster), where ``lambda`` is the completion rate of one job on one
    GPU at the largest batch, here ``1 / 30 min``: 80 jobs expected in 240 minutes on 40 GPUs.

    That rate offers about a fifth of the cluster (as :func:`ibm_categories`' ``high``), so the
    fixed-batch baseline seldom has to drop a job. ``load`` (our addition, as ``overload`` there):
    Poisson at ``load * gpus / E[w]`` instead, ``E[w]`` the category's expected GPU-seconds at a
    job's request (one GPU, its Random-BS batch, gradient accumulation where it does not fit).
    """
    if not 1 <= category <= len(_IBM_CATEGORIES):
        raise TraceError(f"ibm-category {category!r}: must be 1 to {len(_IBM_CATEGORIES)}")
    if load is not None and not 0 < load <= 100:
        raise TraceError(f"ibm-category load {load!r}: must be above 0 and at most 100")
    kind = _IBM_CATEGORIES[category - 1]
    rng = np.random.default_rng(seed)
    if load is None:
        rate = IBM_KMAX / (60.0 * IBM_CATEGORY_MINUTES) * gpus / 40.0
    else:
        rate = load * gpus / _ibm_category_request_s(category)
    jobs: list[SimJobSpec] = []
    t = float(rng.exponential(1.0 / rate))
    while t <= minutes * 60:
        jobs.append(_ibm_category_job(kind, int(rng.integers(kind[2], kind[3] + 1)), str(len(jobs) + 1), t))
        t += float(rng.exponential(1.0 / rate))
    return jobs


@functools.cache
def _ibm_category_request_s(category: int) -> float:
    """The expected GPU-seconds of a job of :func:`ibm_category` at its request, over its batch range."""
    kind = _IBM_CATEGORIES[category - 1]
    return float(np.mean([requested_time(_ibm_category_job(kind, b)) for b in range(kind[2], kind[3] + 1)]))


def _ibm_category_job(kind: tuple[str, str, int, int, float, bool, int | None], batch: int, job_id: str = "0",
                      t: float = 0.0) -> SimJobSpec:
    """A job of one category at Random-BS batch ``batch``, :data:`IBM_CATEGORY_MINUTES` long alone on one GPU at
    the largest batch that fits it."""
    spec = _ibm_job(job_id, t, kind, batch)
    return replace(spec, work_scale=spec.work_scale * 60.0 * IBM_CATEGORY_MINUTES / largest_batch_time(spec))


# Philly-like job shapes (Jeon et al., ATC'19: most jobs use one GPU, few use 8+, and durations
# span minutes to days with a heavy tail).
PHILLY_GPUS = ((1, 0.70), (2, 0.10), (4, 0.10), (8, 0.08), (16, 0.02))
PHILLY_MEDIAN_S = 15 * 60.0
PHILLY_SIGMA = 1.6
PHILLY_MAX_S = 24 * 3600.0


def _philly_sizes(rng: np.random.Generator, n: int) -> NDArray[np.int64]:
    """``n`` jobs' GPU counts drawn from Philly's mix (:data:`PHILLY_GPUS`)."""
    sizes = np.array([g for g, _ in PHILLY_GPUS])
    probs = np.array([p for _, p in PHILLY_GPUS])
    return rng.choice(sizes, size=n, p=probs / probs.sum())


def _philly_draw(rng: np.random.Generator, n: int) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """``n`` jobs' GPU counts and durations (seconds) with Philly's shape."""
    k = _philly_sizes(rng, n)
    dur = np.minimum(PHILLY_MAX_S, PHILLY_MEDIAN_S * portable.exp(PHILLY_SIGMA * rng.standard_normal(n)))
    return k, dur


def philly_like(n_jobs: int, gpus: int, seed: int, load: float = 0.9, window_s: float | None = None) -> list[
        SimJobSpec]:
    """A synthetic trace with Philly's shape: GPU counts from :data:`PHILLY_GPUS`, log-normal
    durations (median 15 min, sigma 1.6, capped at 24 h), Poisson arrivals at a rate that offers
    ``load`` times the cluster's GPU-time on average. Models follow the GPU-time classes (Ares's
    mapping: Small, Medium, Large and X-Large GPU times to the Table 2 models of their class).

    ``window_s``: instead, the jobs are submitted over that window, as a Poisson process with that
    many arrivals in it (uniform times, sorted): Ares samples "160 jobs submitted over 8 hours"
    (:func:`ares_philly`); ``load`` is then unused."""
    if n_jobs < 1 or gpus < 1 or load <= 0 or (window_s is not None and not 0 < window_s < MAX_SUBMIT_S):
        raise TraceError(f"philly-like: n_jobs={n_jobs}, gpus={gpus}, load={load}, window_s={window_s} must all be "
                         f"positive (a window below {MAX_SUBMIT_S:.0f} s)")
    rng = np.random.default_rng(seed)
    k, dur = _philly_draw(rng, n_jobs)
    if window_s is not None:
        submit = np.sort(rng.uniform(0.0, window_s, size=n_jobs))
    else:
        submit = np.cumsum(rng.exponential(float(np.mean(k * dur)) / (load * gpus), size=n_jobs))
    jobs = []
    for i in range(n_jobs):
        req = int(k[i])
        model = _model_for(req * float(dur[i]) / 3600, i)
        local, epoch = MODEL_DEFAULTS[model]
        spec = SimJobSpec(str(i + 1), round(float(submit[i]), 3), model, req, 1, max(req, min(4 * req, 64)),
                          local * req, local, local * max(req, min(4 * req, 64)), epoch)
        jobs.append(scaled_to(spec, float(dur[i])))
    return jobs


ARES_JOBS, ARES_WINDOW_S, ARES_GPUS = 160, 8 * 3600.0, 64


def ares_philly(seed: int) -> list[SimJobSpec]:
    """Ares's simulation setup for its Philly traces (§5.1): a 64-GPU cluster, each trace "160 jobs
    submitted over 8 hours", every record mapped to the Table 2 model of its GPU-time class. The
    Philly records themselves are not shipped: :func:`philly_like` draws them, and each job trains
    its model for the drawn duration at its request."""
    return philly_like(ARES_JOBS, ARES_GPUS, seed, window_s=ARES_WINDOW_S)


DL2_JOBS = 200
"""DL2's simulations submit "200 jobs" (§6.2)."""
DL2_GPUS = 1000
"""DL2's simulated cluster: "500 servers", each with two GPUs as its testbed's servers have."""
DL2_SLOT_S = 1200.0
"""DL2's time slot, "20 minutes"."""
DL2_MEAN_S = 147 * 60.0
"""DL2's trace: "the average job duration is 147 minutes"."""
DL2_MEDIAN_S = 90 * 60.0
"""Our choice: "over a half of jobs run for more than an hour" (Fig. 8b, shown only as a curve)."""
DL2_MAX_S = 3 * 24 * 3600.0
"""Our cap on a duration: "some for days"."""
DL2_CONCURRENT = 40
"""DL2 §6.4: "the maximal number of uncompleted jobs in all time slots is around 40"."""
DL2_MAX_GPUS = 16
"""DL2's largest job: 16 workers, one GPU each here (all-reduce workers, no parameter servers)."""
DL2_MODELS = (("ResNet-50", "imagenet"), ("VGG-16", "imagenet"), ("ResNeXt-110", "cifar10"),
              ("Inception-BN", "imagenet"), ("Seq2Seq", "deepspeech2"), ("CTC", "bert"), ("DSSM", "ncf"),
              ("WLM", "deepspeech2"))
"""DL2's Table 1 models, each with the shipped profile of its kind: ImageNet classifiers train as
``imagenet``, the CIFAR-10 one as ``cifar10``, the recurrent sequence models (translation and
language modelling) as ``deepspeech2``, sentence classification as ``bert`` and the embedding model
(word representation) as ``ncf``. A job's duration is drawn first and its work scaled to it, so the
profile gives the shape of its scaling, not its length."""


def dl2_simulation(seed: int) -> list[SimJobSpec]:
    """DL2's simulation setup as far as its paper gives it (§6.2; docs/planners.md says what we chose):
    :data:`DL2_JOBS` jobs, each a uniformly drawn Table 1 model (:data:`DL2_MODELS`); durations
    log-normal with DL2's mean of 147 minutes (median :data:`DL2_MEDIAN_S`, capped at
    :data:`DL2_MAX_S`), each the job's time at its request; requests from Philly's GPU mix
    (:data:`PHILLY_GPUS`), elastic from 1 to :data:`DL2_MAX_GPUS` GPUs. Arrivals are Poisson: DL2's
    weekly pattern is shown only as a figure, so the rate is the one at which Little's law puts
    DL2's "around 40" uncompleted jobs in the system, each taking the mean duration:
    ``40 / (147 min / 20 min)`` = 5.4 jobs per 20-minute slot."""
    rng = np.random.default_rng(seed)
    req = _philly_sizes(rng, DL2_JOBS)
    sigma = math.sqrt(2 * portable.log_float(DL2_MEAN_S / DL2_MEDIAN_S))
    dur = np.minimum(DL2_MAX_S, DL2_MEDIAN_S * portable.exp(sigma * rng.standard_normal(DL2_JOBS)))
    kind = rng.integers(0, len(DL2_MODELS), size=DL2_JOBS)
    per_slot = DL2_CONCURRENT / (DL2_MEAN_S / DL2_SLOT_S)
    submit = np.cumsum(rng.exponential(DL2_SLOT_S / per_slot, size=DL2_JOBS))
    jobs = []
    for i in range(DL2_JOBS):
        k = int(req[i])
        name, model = DL2_MODELS[int(kind[i])]
        local, epoch = MODEL_DEFAULTS[model]
        spec = SimJobSpec(str(i + 1), round(float(submit[i]), 3), model, k, 1, DL2_MAX_GPUS, local * k, local,
                          local * DL2_MAX_GPUS, epoch, category=name)
        jobs.append(scaled_to(spec, float(dur[i])))
    return jobs


IBM_CATEGORY_WORKLOADS = tuple(f"ibm-category-{i}{tail}" for tail in ("", "-overload")
                               for i in range(1, len(_IBM_CATEGORIES) + 1))
BUILTIN = ("ones-longhorn", "ones-longhorn-50", "ibm-categories", "ibm-categories-bursty", "ibm-categories-low",
           "ibm-categories-overload", *IBM_CATEGORY_WORKLOADS, "philly-like", "ares-philly", "dl2-simulation")


def builtin(name: str, seed: int, gpus: int) -> list[SimJobSpec]:
    """A built-in workload by name (see :data:`BUILTIN`)."""
    if name == "ones-longhorn":
        return ones_longhorn(seed)
    if name == "ones-longhorn-50":
        return ones_longhorn_50(seed)
    if name == "philly-like":
        return philly_like(1000, gpus, seed)
    if name == "ares-philly":
        return ares_philly(seed)
    if name == "dl2-simulation":
        return dl2_simulation(seed)
    if name in IBM_CATEGORY_WORKLOADS:
        category = int(name.removeprefix("ibm-category-").removesuffix("-overload"))
        return ibm_category(seed, category, gpus=gpus, load=IBM_OVERLOAD if name.endswith("-overload") else None)
    if name.startswith("ibm-categories"):
        arrival = {"ibm-categories": "high", "ibm-categories-bursty": "bursty", "ibm-categories-low": "low",
                   "ibm-categories-overload": "overload"}.get(name)
        if arrival:
            return ibm_categories(seed, gpus=gpus, arrival=arrival)
    raise TraceError(f"unknown workload {name!r}; built-in workloads: {', '.join(BUILTIN)}")
