"""The users' subcommands: ``submit`` an elastic job, ``status`` of the elastic jobs."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slurm_elastic.cli.common import view, with_backend
from slurm_elastic.core.model import JobId, JobPlan
from slurm_elastic.core.remaining import outlook
from slurm_elastic.errors import ConfigError

if TYPE_CHECKING:
    from slurm_elastic.observe.job_reports import WhatRuns

log = logging.getLogger(__name__)


def cmd_status(args: argparse.Namespace) -> int:
    """``status``: each elastic job's GPUs now and planned, batch, state and outlook; a job whose
    script runs other epochs or another per-worker batch than it was submitted with says so (what
    runs is what it is planned from)."""
    from slurm_elastic.config import load
    from slurm_elastic.observe.job_reports import what_runs
    from slurm_elastic.slurm.records import run_start_of
    from slurm_elastic.store import Store, StoreError

    cfg = with_backend(load(args.config), args.backend)
    store = None
    if cfg.daemon.store.exists():
        try:  # the daemon's store, read only: satellites folded in, what the jobs reported
            store = Store(cfg.daemon.store, read_only=True)
        except StoreError as exc:
            log.warning("status from Slurm alone (satellites' GPUs and reported batches not shown): %s", exc)
    cluster = view(cfg, store)
    cluster.writes_store = False
    snap = cluster.observe()
    learned = cluster.learner.summary() if cluster.learner is not None else None
    planned: dict[JobId, JobPlan] = {}
    quarantined: dict[str, str] = {}
    runs: dict[str, WhatRuns | None] = {}
    if store is not None:
        last = store.last_round()
        if last is not None:
            planned = last.plan.by_job()
        quarantined = {j: r for j, r in store.quarantined().items() if j in cluster.records}
        runs = {j.job_id: what_runs(store.progress_of(j.job_id), run_start_of(cluster.records[j.job_id]))
                for j in snap.elastic_jobs() if j.job_id in cluster.records}
        store.close()
    quarantined.update(cluster.left_out)
    rows = [{"job_id": j.job_id, "user": j.user, "state": j.state.value, "gpus": j.num_gpus,
             "planned_gpus": planned[j.job_id].num_gpus if j.job_id in planned else 0,
             "range": f"{j.min_gpus}:{j.max_gpus}", "batch": j.global_batch,
             "planned_batch": planned[j.job_id].global_batch if j.job_id in planned else 0,
             "mode": j.mode.value, "quarantine": quarantined.get(j.job_id, ""), **outlook(snap, j),
             **_configured(j.target_epochs, runs.get(j.job_id))}
            for j in snap.elastic_jobs()]
    shown = {r["job_id"] for r in rows}
    rows += [{"job_id": jid, "user": cluster.records[jid].user if jid in cluster.records else "?",
              "state": "left out", "gpus": 0, "planned_gpus": 0, "range": "", "batch": 0, "planned_batch": 0,
              "mode": "", "quarantine": reason} for jid, reason in sorted(quarantined.items()) if jid not in shown]
    rows += [{"job_id": "", "node": name, "user": "", "state": "left out", "gpus": 0, "planned_gpus": 0,
              "range": "", "batch": 0, "planned_batch": 0, "mode": "", "quarantine": reason}
             for name, reason in sorted(cluster.nodes_left_out.items())]
    read_from = f"Slurm read through {getattr(cluster.source, 'dialect', '') or '?'}"
    if args.json:
        print(read_from, file=sys.stderr)
        print(json.dumps(rows, indent=2))
        return 0
    print(read_from)
    print(f"{'JOBID':>8} {'USER':<10} {'STATE':<9} {'GPUS':>4} {'PLAN':>4} {'RANGE':>7} "
          f"{'BATCH':>6} {'PBATCH':>6} {'MODE':<4} {'SAMPLES/S':>9} {'PREDICTED':>9} {'LEFT':>7} MODEL")
    for r in rows:
        if r.get("node"):
            print(f"{'':>8} node {r['node']} left out: {r['quarantine']}")
            continue
        print(f"{r['job_id']:>8} {r['user']:<10} {r['state']:<9} {r['gpus']:>4} {r['planned_gpus']:>4} "
              f"{r['range']:>7} {r['batch']:>6} {r['planned_batch']:>6} {r['mode']:<4} "
              f"{_figure(r.get('measured_throughput')):>9} {_figure(r.get('predicted_throughput')):>9} "
              f"{_duration(r.get('remaining_s')):>7} {_model(r)}")
        if r["quarantine"]:
            print(f"{'':>8} quarantined: {r['quarantine']}")
        if r.get("configured_twice"):
            print(f"{'':>8} configured twice: {r['configured_twice']}")
    if learned and learned["source"] == "fitted":
        print(f"progress model: fitted from {learned['jobs']} finished jobs ({learned['points']} points), "
              f"mean |predicted - true progress| {learned['error']}")
    return 0


def _configured(planned_epochs: float | None, runs: WhatRuns | None) -> dict[str, Any]:
    """A job's ``epochs`` (those it is planned with: what its reports say it trains), ``submitted``
    (``{"epochs", "local_batch"}`` of ``slurm-elastic submit`` where its script runs others, else
    ``None``) and ``configured_twice`` (the line that says so, else ``""``), from its reports'
    :class:`~slurm_elastic.observe.job_reports.WhatRuns` (``None``: it has not reported)."""
    said = None
    if runs is not None and runs.submitted_epochs is not None:
        said = {"epochs": runs.submitted_epochs, "local_batch": runs.submitted_local_batch}
    return {"epochs": planned_epochs, "submitted": said,
            "configured_twice": (runs.configured_twice() if runs is not None else None) or ""}


def _figure(value: Any) -> str:
    return "-" if value is None else f"{value:.1f}"


def _duration(seconds: Any) -> str:
    if seconds is None or seconds != seconds or seconds == float("inf"):
        return "-"
    minutes = int(seconds // 60)
    return f"{minutes // 60}h{minutes % 60:02d}m" if minutes >= 60 else f"{minutes}m{int(seconds % 60):02d}s"


def _model(row: dict[str, Any]) -> str:
    if not row.get("model"):
        return ""
    source = f"fitted from {row['model_points']} sizes" if row["model_points"] else "prior"
    return f"{row['model']} ({source}; progress {row['progress_model']})"


def cmd_submit(args: argparse.Namespace) -> int:
    from slurm_elastic.submit import new_secret_file, submit
    from slurm_elastic.templates import JobRequest, command_words, render

    lo, hi = _range("--elastic", "gpus", args.elastic)
    if args.batch:
        _range("--batch", "batch", args.batch)
    if hi is None:
        raise ConfigError(f"--elastic {args.elastic!r}: submit needs a maximum (MIN:MAX with 1 <= MIN <= MAX, "
                          "e.g. --elastic 2:8)")
    req = JobRequest(command=command_words(args.train_command), min_gpus=lo, max_gpus=hi,
                     gpus_per_node=args.gpus_per_node, batch=args.batch, mode=args.mode,
                     local_batch=args.local_batch, epochs=args.epochs, cpus_per_task=args.cpus_per_task,
                     name=args.job_name, time=args.time,
                     account=args.account, partition=args.partition, output=args.output,
                     secret_file=str(new_secret_file(Path.home() / ".slurm-elastic" / "secrets")))
    if args.dry_run:
        print(render(args.template, req), end="")
        return 0
    print(submit(args.template, req))
    return 0


def cmd_rehearse(args: argparse.Namespace) -> int:
    """``slurm-elastic rehearse [options] -- COMMAND``: the user's script as local workers through a sequence of
    resizes, a lost worker and a requeue, then judged (docs/rehearse.md). Exit 0 if no check failed, 1 if one
    did, 2 on bad input, 130 on Ctrl-C (every worker is killed)."""
    from slurm_elastic.rehearse import DEFAULT, Options, parse, run
    from slurm_elastic.templates import command_words

    command = list(command_words(args.train_command))
    if not command:
        raise ConfigError("rehearse: no command: give it after --, e.g. slurm-elastic rehearse -- python train.py")
    sequence = parse(args.sequence or DEFAULT)
    options = Options(timeout_s=float(args.timeout), settle_steps=args.settle_steps, pace_s=args.pace,
                      seed=args.seed, device=args.device, cpus_per_task=args.cpus_per_task)
    try:
        outcome = run(command, sequence, options, work=args.workdir, baseline=not args.no_baseline,
                      loss_tolerance=args.loss_tolerance, script_checkpoint=args.script_checkpoint,
                      checkpoint_key=args.checkpoint_key)
    except FileExistsError as exc:
        raise ConfigError(str(exc)) from None
    except KeyboardInterrupt:
        print("slurm-elastic rehearse: interrupted; every worker was killed", file=sys.stderr)
        return 130
    if args.json:
        print(json.dumps({"sequence": sequence.text, "command": command, **outcome.to_json()}, indent=2))
    else:
        print(f"rehearsal of {' '.join(command)}")
        print(f"sequence {sequence.text}; logs in {outcome.work}")
        width = max(len(v.name) for v in outcome.verdicts)
        for v in outcome.verdicts:
            print(f"  {v.status.upper():11}  {v.name:{width}}  {v.detail}")
        print("PASSED: no check failed" if outcome.passed else "FAILED: " + ", ".join(
            v.name for v in outcome.verdicts if v.status == "fail"))
    return 0 if outcome.passed else 1


def _range(option: str, key: str, text: str) -> tuple[int, int | None]:
    """``MIN:MAX`` of ``--elastic`` or ``--batch`` by the one grammar the SPANK plugin, job_submit.lua
    and :func:`slurm_elastic.contract.read_range` share.

    Raises:
        ConfigError: the option, the value and the rule (the CLI prints it in one line, exit 2).
    """
    from slurm_elastic.contract import ContractError, read_range

    try:
        return read_range(key, text)
    except ContractError as exc:
        raise ConfigError(f"{option}: {exc}") from None


def cmd_completion(args: argparse.Namespace) -> int:
    """Print the completion script of ``args.shell`` (:mod:`slurm_elastic.cli.completion`)."""
    from slurm_elastic.cli.completion import bash_completion
    from slurm_elastic.cli.parser import build_parser

    print(bash_completion(build_parser()), end="")
    return 0
