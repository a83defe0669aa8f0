"""``slurm-elastic profile``: measure the site's own throughput profiles, through Slurm.

This module owns measuring one profile folder. For each model of the launcher's example trainer
(``slurm_elastic_launcher/examples/train_cnn.py --model``), each placement (one digit per node: that node's
GPUs, e.g. ``1``, ``2``, ``11``, ``22``) and each per-GPU batch, it submits one fixed-size launcher
job (``slurm-elastic submit``'s template, ``--elastic=K:K``) through Slurm as the user running the
command, and waits for it to end before the next, so that no two measurements share a node's CPUs
or links. From the job's signed reports (read and checked as the daemon does, through its
channel) it takes the median step time over the job's clean windows
(:func:`~slurm_elastic.observe.job_reports.step_points`, the measure the daemon fits each job's own
model from), so a profile and a job's calibration measure the same thing.

It writes ``<out>/<model>/placements.csv`` (the shipped profiles' format: one row per placement and
batch; ``sync_time`` 0, as the launcher does not time the exposed all-reduce apart), a
``scalability.csv`` with its header only, and ``machine.json`` (GPUs per node of the partition,
its nodes, when, and how the step time was taken). Then it fits each model from the written folder with
the daemon's loader (:func:`slurm_elastic_predictor.profiles.load_model`) and says how far the
fit is from each measured row. ``daemon.profiles`` names the folder; the shipped Longhorn
profiles stay the default for every other model.

A daemon running beside may start a job on other nodes than asked (it plans ``--elastic=K:K``
jobs too): a job that ran on another node count than its placement's (``squeue``'s while it
ran) is not measured, and the summary says so.
"""

from __future__ import annotations

import datetime as dt
import getpass
import json
import os
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from slurm_elastic.argtypes import comma_words
from slurm_elastic.channel import COMMENT_KEY, Channel
from slurm_elastic.errors import ConfigError, ElasticError
from slurm_elastic.observe.job_reports import ReportRefused, row_of, step_points
from slurm_elastic.resources import EXAMPLE_TRAINER
from slurm_elastic.slurm.runner import run_command
from slurm_elastic.submit import new_secret_file, submit
from slurm_elastic.templates import JobRequest
from slurm_elastic_predictor.errors import ProfileError
from slurm_elastic_predictor.profiles import MACHINE_FILE, load_model
from slurm_elastic_predictor.throughput import MultiGpuPoint, fit_error

EXAMPLE = EXAMPLE_TRAINER
MODELS = ("cnn", "resnet18")
"""The models of the example trainer (its ``--model``)."""
REPORT_EVERY_S = 0.25
"""Seconds between two progress reports of a profiling job (each is one window of the median)."""
JOB_TIMEOUT_S = 600.0
"""Longest one profiling job may take, waiting in the queue included; then it is cancelled."""
LONGER_RUNS = 3
"""How many times a job that ended too soon to give a clean window is run again, each with 4x the steps."""
_GRES_GPUS = re.compile(r"gpu(?::[^:,()]+)?:(\d+)")


def parse_placements(text: str) -> tuple[str, ...]:
    """``1,2,11,22`` -> the placements; each is one digit 1..9 per node, all digits equal (Slurm
    gives a job the same GPUs on each of its nodes).

    Raises:
        ConfigError: a placement breaks the rule, or the set cannot be fitted: it needs one GPU
            alone (``1``), GPUs within one node (``2``...) and across nodes (``11``...).
    """
    out = tuple(comma_words(text))
    for p in out:
        if not re.fullmatch(r"[1-9]{1,16}", p) or len(set(p)) != 1:
            raise ConfigError(f"--placements {p!r}: must be one digit 1..9 per node, the same on every node "
                              "(e.g. 1, 2, 11, 22)")
    if "1" not in out or not any(len(p) == 1 and p != "1" for p in out) or not any(len(p) > 1 for p in out):
        raise ConfigError(f"--placements {text!r}: must hold 1 (one GPU), one node with several GPUs (e.g. 2) "
                          "and several nodes (e.g. 11): the model's compute, intra- and inter-node terms")
    return out


def parse_batches(text: str) -> tuple[int, ...]:
    """``32,64`` -> per-GPU batches, each an integer 1..65536.

    Raises:
        ConfigError: a batch breaks the rule.
    """
    out = []
    for b in comma_words(text):
        if not b.isdigit() or not 1 <= int(b) <= 65536:
            raise ConfigError(f"--batches {b!r}: must be integers 1..65536 (per-GPU batch), e.g. 32,64")
        out.append(int(b))
    if not out:
        raise ConfigError(f"--batches {text!r}: name at least one per-GPU batch")
    return tuple(sorted(set(out)))


def parse_models(text: str) -> tuple[str, ...]:
    """``cnn,resnet18`` -> models of the example trainer.

    Raises:
        ConfigError: a model it does not have.
    """
    out = tuple(comma_words(text))
    bad = [m for m in out if m not in MODELS]
    if bad or not out:
        raise ConfigError(f"--models {text!r}: must be among {', '.join(MODELS)} (the example trainer's models)")
    return out


def profile_site(out: Path, *, models: Sequence[str], placements: Sequence[str], batches: Sequence[int],
                 steps: int = 200, partition: str = "", env: Mapping[str, str] | None = None,
                 job_timeout_s: float = JOB_TIMEOUT_S, say: Callable[[str], None] = print) -> dict[str, Any]:
    """Measure every model x placement x batch through Slurm, write the profile folder, fit it.

    ``steps``: training steps of each job (its data set is ``steps`` x GPUs x batch samples). A job
    that ends before it gives two reports to pair is run again with 4x, 16x, 64x the steps (a row's
    ``steps`` says which measured it).

    Raises:
        ConfigError: ``out`` holds a profile of one of ``models`` already (never overwritten), or
            Slurm refused a job (its message is included).
    """
    if not re.fullmatch(r"[A-Za-z0-9_.-]{0,128}", partition):
        raise ConfigError(f"--partition {partition[:140]!r}: a partition name is letters, digits and _.- "
                          "(at most 128)")
    out = out.resolve()
    for model in models:
        if (out / model).exists():
            raise ConfigError(f"profile: {out / model} exists; a site profile is never overwritten (choose "
                              "another --out, or remove it)")
    env = dict(env) if env is not None else None
    work = out / ".runs"
    work.mkdir(parents=True, exist_ok=True, mode=0o700)
    gpn = _gpus_per_node(partition, env) or max(int(p[0]) for p in placements)
    nodes = run_command(["sinfo", "-h", "-N", "-o", "%N", *(["-p", partition] if partition else [])], env=env)
    machine = {"gpus_per_node": gpn, "partition": partition, "nodes": sorted(set(nodes.split())),
               "measured": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "by": "slurm-elastic profile",
               "step_time": "median over clean report windows (slurm_elastic.observe.job_reports.step_points)"}
    result: dict[str, Any] = {"out": str(out), "gpus_per_node": gpn, "models": {}}
    for model in models:
        rows: list[dict[str, Any]] = []
        failed: list[str] = []
        for placement in placements:
            for batch in batches:
                what = f"{model} placement {placement} batch {batch}"
                say(f"profiling {what}")
                row = _measure(work, model, placement, batch, steps, partition, env, job_timeout_s)
                for longer in range(1, LONGER_RUNS + 1):
                    if not isinstance(row, _TooShort):
                        break
                    say(f"  {row}; again with {steps * 4 ** longer} steps")
                    row = _measure(work, model, placement, batch, steps * 4 ** longer, partition, env, job_timeout_s)
                if isinstance(row, str):
                    failed.append(f"{what}: {row}")
                    say(f"  not measured: {row}")
                else:
                    rows.append(row)
                    say(f"  {row['step_time']:.4f} s/step on placement {row['placement']}")
        result["models"][model] = write_profile(out / model, rows, failed, machine)
    return result


def _gpus_per_node(partition: str, env: Mapping[str, str] | None) -> int:
    """The most GPUs a node of ``partition`` (every partition when empty) has, by ``sinfo``; 0 if none."""
    argv = ["sinfo", "-h", "-o", "%G", *(["-p", partition] if partition else [])]
    counts = [int(n) for n in _GRES_GPUS.findall(run_command(argv, env=env))]
    return min(max(counts), 9) if counts else 0


class _TooShort(str):
    """Why a job that ran to its end gave no clean window: too few reports to pair (a fast model,
    few steps). Run again with more steps; any other reason is final."""


def _measure(work: Path, model: str, placement: str, batch: int, steps: int, partition: str,
             env: Mapping[str, str] | None, timeout_s: float) -> dict[str, Any] | str:
    """One profiling job: its measured row, or why there is none."""
    per_node, nodes = int(placement[0]), len(placement)
    k = per_node * nodes
    secret = new_secret_file(work / "secrets")
    req = JobRequest(command=(sys.executable, str(EXAMPLE), "--model", model, "--dataset-size",
                              str(steps * k * batch), "--val-size", "0"),
                     min_gpus=k, max_gpus=k, gpus_per_node=per_node, local_batch=batch, epochs=1,
                     name=f"profile-{model}-{placement}-{batch}", partition=partition,
                     output=str(work / "%x-%j.out"), secret_file=str(secret))
    job_env = {**(env if env is not None else os.environ),
               "SLURM_ELASTIC_REPORT_EVERY_S": str(REPORT_EVERY_S)}
    job_id = submit("pytorch", req, env=job_env)
    deadline = time.monotonic() + timeout_s
    ran_nodes: int | None = None  # the node count squeue showed while the job ran
    while state := run_command(["squeue", "-h", "-j", job_id, "-o", "%T %D"], env=env).split():
        if state[0] == "RUNNING" and len(state) > 1 and state[1].isdigit():
            ran_nodes = int(state[1])
        if time.monotonic() > deadline:
            run_command(["scancel", job_id], env=env)
            return f"job {job_id} did not end within {timeout_s:g} s (cancelled)"
        time.sleep(1.0)
    if ran_nodes is not None and ran_nodes != nodes:
        return f"job {job_id} ran on {ran_nodes} node(s), not the {nodes} of placement {placement}"
    try:
        channel = Channel.open(job_id, getpass.getuser(), f"{COMMENT_KEY}{secret}.orders")
        reports, _, refused = channel.reports()
    except ElasticError as exc:
        return f"job {job_id}: its reports cannot be read: {exc}"
    layout = {f"w{i}": f"node{i // per_node}" for i in range(k)}
    try:
        rows = [row_of(r, layout) for r in reports]
    except ReportRefused as exc:
        return f"job {job_id}: a report was refused: {exc}"
    points = [p for p in step_points(rows) if p.k == k and p.local_batch == batch]
    if not points:
        why = f"; {len(refused)} report line(s) refused" if refused else ""
        reason = (f"job {job_id}: no clean window at {k} GPUs, batch {batch} ({len(reports)} reports{why}; "
                  f"see {work}/profile-{model}-{placement}-{batch}-{job_id}.out)")
        return _TooShort(reason) if not refused and len(reports) < 4 else reason
    return {"placement": placement, "local_bsz": batch, "step_time": points[0].step_time, "job": job_id,
            "steps": steps}


def write_profile(folder: Path, rows: Sequence[dict[str, Any]], failed: Sequence[str],
                  machine: Mapping[str, Any]) -> dict[str, Any]:
    """Write one model's profile folder (``folder``, which must not exist) from its measured rows
    (``placement``, ``local_bsz``, ``step_time``), fit it back with the daemon's loader, and say how
    close the fit is to each row (``fitted_step_time``, the median and largest relative error)."""
    folder.mkdir(parents=True, mode=0o755)
    rows = [dict(r) for r in rows]
    with open(folder / "placements.csv", "w", encoding="utf-8") as fh:
        fh.write("placement,local_bsz,step_time,sync_time\n")
        for r in rows:
            fh.write(f"{r['placement']},{r['local_bsz']},{r['step_time']:.6f},0\n")
    (folder / "scalability.csv").write_text("num_nodes,num_replicas,local_bsz,step_time,sync_time\n",
                                            encoding="utf-8")
    (folder / MACHINE_FILE).write_text(json.dumps(dict(machine), indent=2) + "\n", encoding="utf-8")
    summary: dict[str, Any] = {"folder": str(folder), "rows": rows, "failed": list(failed)}
    try:
        fitted = load_model(folder.name, folder.parent)
    except ProfileError as exc:
        summary["fit"] = f"not fitted: {exc}"
        return summary
    points = [MultiGpuPoint(k=sum(int(d) for d in r["placement"]), nodes=len(r["placement"]),
                            local_batch=r["local_bsz"], step_time=r["step_time"]) for r in rows]
    for r, p in zip(rows, points, strict=True):
        r["fitted_step_time"] = round(float(fitted.t_iter(p.k * p.local_batch, p.k, p.nodes)), 6)
    error = fit_error(fitted, points)  # the fit has a row at least: a profile without rows does not load
    summary.update(fit="fitted", fit_median_ape=round(error["median_ape"], 4), fit_max_ape=round(error["max_ape"], 4))
    return summary
