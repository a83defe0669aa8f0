"""The ``slurm-elastic`` command: the only place that parses arguments or configures logging.

Subcommands:

* ``plan``      -- plan a demo cluster with a policy and print the plan (table or ``--json``).
* ``simulate``  -- replay a workload or trace under policies inside the site guards (``--config``,
  default guards, or ``--no-guards``); metrics as JSON, a report directory.
* ``reproduce`` -- the seed papers' comparisons as a markdown table (and a report); no site guards.
* ``profiles``  -- fit the throughput model on the shipped profiles and report its error.
* ``bench planner|simulate`` -- planning latency / simulation speed as JSON.
* ``devcluster up|down|status`` -- a real local Slurm dev cluster (root; see ``dev/devcluster.py``).
* ``install-plugin`` -- build the ``--elastic`` SPANK plugin and print/write its config lines.
* ``daemon``    -- the loop beside slurmctld (shadow mode, or acting through ``scontrol``).
* ``status``    -- elastic jobs: GPUs now and planned, batch, state (like squeue).
* ``check-config`` -- validate an elastic.toml without starting anything.
* ``report``    -- the center's GPU allocation report from ``sacct`` (HTML, CSV or JSON).
* ``what-if``   -- replay a window of the cluster's history under policies in the simulator (site
  guards as ``simulate``).
* ``submit``    -- render an sbatch template for an elastic launcher job and submit it.
* ``train-drl`` -- train the DL2 ``drl`` policy in the simulator and write its model file.
* ``demo``      -- end to end on the dev cluster: daemon, elastic jobs resized in place, report.

Bad input exits with status 2 and one line naming the value and the rule.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from slurm_elastic import __version__
from slurm_elastic.argtypes import int_at_least, param
from slurm_elastic.errors import ConfigError, ElasticError

if TYPE_CHECKING:
    from slurm_elastic.core.guards import Guards

log = logging.getLogger(__name__)


_positive_int = int_at_least(1)
_param = param


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="slurm-elastic", description="Elastic deep-learning scheduling for Slurm.")
    p.add_argument("--version", action="version", version=f"slurm-elastic {__version__}")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    plan = sub.add_parser("plan", help="plan a demo cluster with a policy and print the plan")
    plan.add_argument("--policy", default="ones", help="planner name (see --list-policies)")
    plan.add_argument("--gpus", type=_positive_int, default=64, help="GPUs in the demo cluster (default 64)")
    plan.add_argument("--gpus-per-node", type=_positive_int, default=4, help="GPUs per node (default 4)")
    plan.add_argument("--jobs", type=int, default=24, help="jobs in the demo cluster (default 24)")
    plan.add_argument("--seed", type=int, default=1, help="seed of the demo cluster and the planner")
    plan.add_argument("--rounds", type=_positive_int, default=1, help="plan this many times, carrying the memo")
    plan.add_argument("--param", type=_param, action="append", default=[], metavar="KEY=VALUE",
                      help="planner parameter, e.g. generations=20 (repeatable)")
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.add_argument("--list-policies", action="store_true", help="list the policies and exit")

    sim = sub.add_parser("simulate", help="replay a workload or trace under policies (the same planners as the daemon)",
                         description="Replay a built-in workload or a trace under policies on a virtual cluster. "
                         "Each policy runs inside site guards, as the daemon runs it: those of --config FILE, "
                         "else the shipped default guards (protect_rigid only); --no-guards runs the bare "
                         "policies (as reproduce does).")
    src = sim.add_mutually_exclusive_group(required=True)
    src.add_argument("--workload", help="built-in workload: " + ", ".join(_workloads()))
    src.add_argument("--trace", type=Path, help="trace CSV (job_id, submit_time, num_gpus, duration, ...)")
    sim.add_argument("--gpus", type=_positive_int, default=None, help="cluster GPUs (default: 64, or 40 for ibm-*)")
    sim.add_argument("--gpus-per-node", type=_positive_int, default=4)
    sim.add_argument("--policy", default="ones,tiresias,optimus", help="comma-separated policies")
    sim.add_argument("--seeds", default="1", help="seeds, e.g. 1-5 (workload generation and planner)")
    sim.add_argument("--resize-cost", default="in-place", help="in-place, checkpoint or seconds")
    sim.add_argument("--round-gap", type=float, default=30.0, help="least seconds between rounds (default 30)")
    sim.add_argument("--param", type=_param, action="append", default=[], metavar="POLICY.KEY=VALUE",
                     help="planner parameter for one policy, e.g. ones.generations=20 (repeatable)")
    sim.add_argument("--json", type=Path, metavar="OUT", help="write all results as JSON here")
    sim.add_argument("--report", type=Path, metavar="DIR", help="write the HTML/PNG/CSV report here")
    sim.add_argument("--quiet", action="store_true", help="no progress bar")
    _guard_options(sim)

    rep = sub.add_parser("reproduce", help="the seed papers' comparisons as a markdown table (no site guards)",
                         description="The seed papers' comparisons as a markdown table and reports. Every policy "
                         "runs bare, without site guards: the papers' schedulers had none.")
    rep.add_argument("--seeds", default="1-5")
    rep.add_argument("--out", type=Path, default=Path("reproduce"), help="output folder (default ./reproduce)")
    rep.add_argument("--quick", action="store_true", help="one seed, 40 GPUs only (a smoke run)")
    rep.add_argument("--quiet", action="store_true")

    prof = sub.add_parser("profiles", help="fit the throughput model on the shipped profiles and report its error")
    prof.add_argument("--json", action="store_true", help="print JSON")

    bench = sub.add_parser("bench", help="benchmarks printing JSON")
    bsub = bench.add_subparsers(dest="bench", required=True, metavar="BENCHMARK")
    bp = bsub.add_parser("planner", help="planning latency of one policy on a synthetic cluster")
    bp.add_argument("--gpus", type=_positive_int, default=4096)
    bp.add_argument("--gpus-per-node", type=_positive_int, default=4)
    bp.add_argument("--jobs", type=int, default=1000)
    bp.add_argument("--policy", default="dp")
    bp.add_argument("--repeat", type=_positive_int, default=20)
    bp.add_argument("--seed", type=int, default=0)
    bp.add_argument("--param", type=_param, action="append", default=[], metavar="KEY=VALUE",
                    help="planner parameter, e.g. generations=1 (repeatable)")
    bp.add_argument("--json", action="store_true", help="print JSON (the default; kept for symmetry)")
    bz = bsub.add_parser("resize", help="pause of an in-place resize vs checkpoint-restart (the launcher)")
    bz.add_argument("--model", choices=("resnet18", "cnn"), default="resnet18")
    bz.add_argument("--from", dest="from_", type=_positive_int, default=2)
    bz.add_argument("--to", type=_positive_int, default=4)
    bz.add_argument("--repeat", type=_positive_int, default=1, help="fresh jobs to measure (medians are printed)")
    bz.add_argument("--json", action="store_true", help="print JSON (the default)")
    br = bsub.add_parser("reaction", help="submit -> planned and -> running latency of the acting daemon "
                         "on a running dev cluster")
    br.add_argument("--root", type=Path, default=Path("/tmp/slurm-elastic-dev"), help="the dev cluster's root")
    br.add_argument("--repeat", type=_positive_int, default=5)
    br.add_argument("--json", action="store_true", help="print JSON (the default)")
    bs = bsub.add_parser("simulate", help="wall time of a simulation of a Philly-like trace")
    bs.add_argument("--jobs", type=_positive_int, default=10_000)
    bs.add_argument("--gpus", type=_positive_int, default=1024)
    bs.add_argument("--policy", default="dp")
    bs.add_argument("--seed", type=int, default=1)
    bs.add_argument("--round-gap", type=float, default=30.0)
    bs.add_argument("--json", action="store_true", help="print JSON (the default)")

    dev = sub.add_parser("devcluster", help="bring a real local Slurm dev cluster up or down (root only)")
    dsub = dev.add_subparsers(dest="devcluster", required=True, metavar="ACTION")
    for action, text in (("up", "start the dev cluster and wait until its nodes are idle"),
                         ("down", "stop the dev cluster and remove its namespaces, bridge, route, hosts lines"),
                         ("status", "print the dev cluster's daemons and node states as JSON")):
        da = dsub.add_parser(action, help=text)
        da.add_argument("--root", type=Path, default=Path("/tmp/slurm-elastic-dev"),
                        help="folder owning the cluster's files (default /tmp/slurm-elastic-dev)")
        if action == "up":
            da.add_argument("--nodes", type=_positive_int, default=4, help="nodes (default 4)")
            da.add_argument("--gpus-per-node", type=_positive_int, default=4, help="fake GPUs per node (default 4)")

    dm = sub.add_parser("daemon", help="run the daemon beside slurmctld")
    dm.add_argument("--config", type=Path, default=Path("/etc/slurm/elastic.toml"))
    dm.add_argument("--dry-run", action="store_true", help="shadow mode: plan and log, never act")
    dm.add_argument("--once", action="store_true", help="run one round and exit")

    st = sub.add_parser("status", help="elastic jobs: GPUs now and planned, batch, state")
    st.add_argument("--config", type=Path, default=Path("/etc/slurm/elastic.toml"))
    st.add_argument("--json", action="store_true")

    sb = sub.add_parser("submit", help="render an sbatch template for an elastic job and submit it")
    sb.add_argument("--template", default="pytorch", help="sbatch_templates/<name>.sbatch.j2 (default pytorch)")
    sb.add_argument("--elastic", required=True, metavar="MIN:MAX", help="GPU range")
    sb.add_argument("--batch", default="", metavar="MIN:MAX", help="global batch range")
    sb.add_argument("--mode", default="exo", choices=("exo", "endo"))
    sb.add_argument("--gpus-per-node", type=_positive_int, default=4)
    sb.add_argument("--local-batch", type=_positive_int, default=32)
    sb.add_argument("--epochs", type=_positive_int, default=1)
    sb.add_argument("--job-name", default="elastic")
    sb.add_argument("--time", default="")
    sb.add_argument("--account", default="")
    sb.add_argument("--partition", default="")
    sb.add_argument("--output", default="slurm-%j.out")
    sb.add_argument("--dry-run", action="store_true", help="print the script instead of submitting it")
    sb.add_argument("train_command", nargs=argparse.REMAINDER, metavar="-- COMMAND",
                    help="the training command and its arguments")

    from slurm_elastic.drl import command as drl_command

    td = sub.add_parser("train-drl", help="train the drl (DL2) policy in the simulator and write its model file")
    drl_command.add_arguments(td)

    dm = sub.add_parser("demo", help="end to end on a real local Slurm cluster: daemon, elastic jobs resized "
                        "in place while they train, allocation report (root; a few minutes)")
    dm.add_argument("--out", type=Path, default=Path("out/demo"), help="folder for logs, store and report")
    dm.add_argument("--policy", default="efq", help="planner (default efq: fair sharing makes resizes visible)")
    dm.add_argument("--nodes", type=_positive_int, default=3)
    dm.add_argument("--gpus-per-node", type=_positive_int, default=2)
    dm.add_argument("--timeout", type=float, default=600.0, help="seconds before the demo gives up waiting")
    dm.add_argument("--keep", action="store_true", help="leave the dev cluster running afterwards")

    cc = sub.add_parser("check-config", help="validate an elastic.toml; prints the effective settings")
    cc.add_argument("file", type=Path)

    ar = sub.add_parser("report", help="GPU allocation report from sacct: by account/user/partition, utilization")
    ar.add_argument("--since", required=True, metavar="DATE", help="YYYY-MM-DD[THH:MM[:SS]], today, now-7d ...")
    ar.add_argument("--until", default="now", metavar="DATE", help="end of the window (default now)")
    ar.add_argument("--account", help="only this Slurm account (sacct -A)")
    ar.add_argument("--format", choices=("html", "csv", "json"), default="html", help="output format (default html)")
    ar.add_argument("--out", type=Path, required=True, metavar="DIR", help="report folder")
    ar.add_argument("--store", type=Path, metavar="FILE",
                    help="the daemon's state database (journaled resizes, launcher reports, satellites)")

    wi = sub.add_parser("what-if", help="replay a window of the cluster's history under policies (simulated)",
                        description="Replay a window of the cluster's history (sacct) under policies on a virtual "
                        "cluster. Each policy runs inside site guards, as the daemon runs it: those of "
                        "--config FILE, else the shipped default guards (protect_rigid only); --no-guards runs "
                        "the bare policies.")
    wi.add_argument("--since", required=True, metavar="DATE", help="YYYY-MM-DD[THH:MM[:SS]], today, now-7d ...")
    wi.add_argument("--until", default="now", metavar="DATE", help="end of the window (default now)")
    wi.add_argument("--account", help="only this Slurm account (sacct -A)")
    wi.add_argument("--policy", required=True, help="comma-separated policies")
    wi.add_argument("--gpus", type=_positive_int, required=True, help="GPUs of the virtual cluster")
    wi.add_argument("--gpus-per-node", type=_positive_int, default=4)
    wi.add_argument("--seeds", default="1", help="planner seeds, e.g. 1-3")
    wi.add_argument("--elastic-range", type=float, default=4.0,
                    help="a job without an elastic contract may use 1..GPUs x this (default 4)")
    wi.add_argument("--resize-cost", default="in-place", help="in-place, checkpoint or seconds")
    wi.add_argument("--param", type=_param, action="append", default=[], metavar="POLICY.KEY=VALUE",
                    help="planner parameter for one policy (repeatable)")
    wi.add_argument("--json", type=Path, metavar="OUT", help="write all results as JSON here")
    wi.add_argument("--report", type=Path, metavar="DIR", help="write the HTML/PNG/CSV simulation report here")
    _guard_options(wi)

    ip = sub.add_parser("install-plugin", help="build the --elastic SPANK plugin; print (or write) its config lines")
    ip.add_argument("--out", type=Path, default=Path("build/spank"), help="folder for slurm_elastic.so")
    ip.add_argument("--write", type=Path, metavar="PLUGSTACK_FILE",
                    help="add the plugstack line to this file and copy job_submit.lua next to it")
    return p


def _guard_options(p: argparse.ArgumentParser) -> None:
    """``--config FILE`` | ``--no-guards``: the site guards a simulated policy runs inside."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--config", type=Path, metavar="FILE",
                   help="site configuration (the daemon's elastic.toml): every policy runs inside its [guards] "
                   "table, the rest of the file is only validated (default: the shipped default guards, i.e. "
                   "protect_rigid only)")
    g.add_argument("--no-guards", action="store_true",
                   help="plan without site guards (the bare policies)")


def _site_guards(args: argparse.Namespace) -> Guards | None:
    """The guards of ``--config`` (or the shipped defaults); ``None`` with ``--no-guards``."""
    from slurm_elastic import policies

    if args.no_guards:
        return None
    if args.config is None:
        return policies.DEFAULT_GUARDS
    from slurm_elastic.config import load

    return load(args.config).guards


def _workloads() -> tuple[str, ...]:
    from slurm_elastic.sim.workload import BUILTIN

    return BUILTIN


class _Bar:
    """A one-line progress bar on stderr (only when stderr is a terminal, unless forced)."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.done, self.enabled = total, 0, enabled

    def step(self, text: str) -> None:
        if not self.enabled:
            return
        self.done += 1
        width = 30
        fill = int(width * self.done / max(1, self.total))
        print(f"\r[{'#' * fill}{'.' * (width - fill)}] {self.done}/{self.total} {text[:60]:<60}",
              end="" if self.done < self.total else "\n", file=sys.stderr, flush=True)


def _cmd_plan(args: argparse.Namespace) -> int:
    from slurm_elastic import policies
    from slurm_elastic.core.constraints import placement_score, validate_plan
    from slurm_elastic.testing import random_snapshot

    if args.list_policies:
        print("\n".join(policies.available()))
        return 0
    if args.jobs < 0:
        raise ConfigError(f"--jobs {args.jobs}: must be >= 0")
    nodes = -(-args.gpus // args.gpus_per_node)
    snap = random_snapshot(np.random.default_rng(args.seed), nodes, args.gpus_per_node, args.jobs)
    planner = policies.create(args.policy, **dict(args.param))
    memo: Any = None
    rng = np.random.default_rng(args.seed)
    for _ in range(args.rounds):
        res = planner.plan(snap, memo, rng)
        memo = res.memo
    plan = res.plan
    validate_plan(snap, plan)
    jobs = {j.job_id: j for j in snap.jobs}
    if args.json:
        out = {
            "policy": plan.policy,
            "score": plan.score,
            "notes": list(plan.notes),
            "placement_score": placement_score(plan, args.gpus_per_node),
            "jobs": [
                {"job_id": p.job_id, "model": jobs[p.job_id].model, "gpus_now": jobs[p.job_id].num_gpus,
                 "gpus": p.num_gpus, "nodes": [n for n, _ in p.placement.slots], "global_batch": p.global_batch,
                 "local_batch": p.local_batch, "accumulation": p.accumulation, "lr": p.lr}
                for p in plan.jobs
            ],
            "waiting": [{"job_id": u.job_id, "reason": u.reason, "dropped": u.dropped} for u in plan.unplaced],
        }
        print(json.dumps(out, indent=2))
        return 0
    print(f"policy {plan.policy}: {len(plan.jobs)} running, {len(plan.unplaced)} waiting, "
          f"{sum(p.num_gpus for p in plan.jobs)}/{len(snap.schedulable_gpus())} GPUs, score {plan.score}")
    for note in plan.notes:
        print(f"note: {note}")
    print(f"{'JOBID':>6} {'MODEL':<12} {'GPUS':>9} {'NODES':>5} {'BATCH':>7} {'LOCAL':>6} {'ACC':>3} {'LR':>8}")
    for p in plan.jobs:
        j = jobs[p.job_id]
        print(f"{p.job_id:>6} {j.model:<12} {j.num_gpus:>4}->{p.num_gpus:<4} {p.placement.num_nodes:>5} "
              f"{p.global_batch:>7} {p.local_batch:>6} {p.accumulation:>3} {p.lr:>8.4g}")
    for u in plan.unplaced:
        print(f"{u.job_id:>6} {jobs[u.job_id].model:<12} {'waiting' if not u.dropped else 'dropped':>9}  {u.reason}")
    return 0


def _policy_specs(names: str, params: list[tuple[str, Any]]) -> list[Any]:
    from slurm_elastic.sim.runner import PolicySpec

    pols = [n.strip() for n in names.split(",") if n.strip()]
    if not pols:
        raise ConfigError(f"--policy {names!r}: names no policy")
    per: dict[str, dict[str, Any]] = {p: {} for p in pols}
    for key, value in params:
        pol, dot, name = key.partition(".")
        if not dot or pol not in per:
            raise ConfigError(f"--param {key}: must be POLICY.KEY=VALUE with POLICY one of {', '.join(pols)}")
        per[pol][name] = value
    return [PolicySpec(p, per[p]) for p in pols]


def _cmd_simulate(args: argparse.Namespace) -> int:
    from slurm_elastic.sim.runner import parse_seeds, run_comparison

    seeds = parse_seeds(args.seeds)
    pols = _policy_specs(args.policy, args.param)
    guards = _site_guards(args)
    gpus = args.gpus or (40 if (args.workload or "").startswith("ibm-") else 64)
    bar = _Bar(len(seeds) * len(pols), enabled=not args.quiet and sys.stderr.isatty())
    results = run_comparison(pols, seeds, workload=args.workload, trace=args.trace, gpus=gpus,
                             gpus_per_node=args.gpus_per_node, resize_cost=args.resize_cost,
                             round_gap=args.round_gap, progress=bar.step, guards=guards)
    summary = [{"policy": r["policy"], "seed": r["seed"], **r["metrics"]} for r in results]
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1, default=float))
    if args.report:
        from slurm_elastic.reports.simulation import write_report

        write_report(results, args.report, title=f"{results[0]['workload']} on {gpus} GPUs")
    print(json.dumps(summary, indent=2, default=float))
    return 0


def _cmd_reproduce(args: argparse.Namespace) -> int:
    from slurm_elastic.reports.simulation import write_report
    from slurm_elastic.sim.runner import parse_seeds, reproduce

    seeds = parse_seeds(args.seeds)
    bar = _Bar(0, enabled=not args.quiet and sys.stderr.isatty())

    def progress(text: str) -> None:
        if bar.enabled:
            print(f"\r{text[:100]:<100}", end="", file=sys.stderr, flush=True)

    table, results = reproduce(seeds, quick=args.quick, progress=progress)
    if bar.enabled:
        print(file=sys.stderr)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "reproduce.md").write_text(table)
    (args.out / "results.json").write_text(json.dumps(results, indent=1, default=float))
    ones = [r for r in results if r["workload"] == "ones-longhorn"]
    write_report(ones, args.out / "ones-longhorn", title="ones-longhorn: ONES vs baselines")
    for gpus in sorted({r["gpus"] for r in results if r["workload"] == "ibm-categories"}):
        ibm = [r for r in results if r["workload"] == "ibm-categories" and r["gpus"] == gpus]
        write_report(ibm, args.out / f"ibm-categories-{gpus}", title=f"ibm-categories on {gpus} GPUs")
    print(table)
    return 0


def _cmd_profiles(args: argparse.Namespace) -> int:
    from slurm_elastic_predictor.profiles import PROFILE_NAMES, load_profile_rows, v100_longhorn
    from slurm_elastic_predictor.throughput import fit_error, fit_profile

    rows: list[dict[str, Any]] = []
    for name in PROFILE_NAMES:
        single, multi = load_profile_rows(name)
        model = fit_profile(name, single, multi)
        err = fit_error(model, multi)
        v100 = v100_longhorn(model)
        rows.append({
            "profile": name, "points": int(err["n"]), "median_ape": err["median_ape"], "p90_ape": err["p90_ape"],
            "max_ape": err["max_ape"], "max_local_batch": model.max_local_batch,
            "t4_samples_per_s_4gpu": float(model.throughput(4 * min(128, model.max_local_batch), 4)),
            "v100_samples_per_s_4gpu": float(v100.throughput(4 * min(128, v100.max_local_batch), 4)),
        })
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'profile':<12} {'points':>6} {'median':>7} {'p90':>7} {'max':>7}  (absolute % error of step time)")
    for r in rows:
        print(f"{r['profile']:<12} {r['points']:>6} {100 * r['median_ape']:>6.1f}% {100 * r['p90_ape']:>6.1f}% "
              f"{100 * r['max_ape']:>6.1f}%")
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    from slurm_elastic.bench import bench_planner, bench_reaction, bench_simulate

    if args.bench == "resize":
        try:
            from slurm_elastic_launcher.bench import bench_resize
        except ImportError as exc:
            raise ConfigError(
                f"bench resize needs the launcher extra: pip install 'slurm-elastic[launcher]' ({exc})"
            ) from exc
        print(json.dumps(bench_resize(model=args.model, from_=args.from_, to=args.to, repeat=args.repeat), indent=2))
        return 0
    if args.bench == "reaction":
        print(json.dumps(bench_reaction(root=args.root, repeat=args.repeat), indent=2))
        return 0
    if args.bench == "simulate":
        out = bench_simulate(jobs=args.jobs, gpus=args.gpus, policy=args.policy, seed=args.seed,
                             round_gap=args.round_gap)
        print(json.dumps(out, indent=2))
        return 0
    result = bench_planner(gpus=args.gpus, gpus_per_node=args.gpus_per_node, jobs=args.jobs,
                           policy=args.policy, repeat=args.repeat, seed=args.seed, params=dict(args.param))
    print(json.dumps(result, indent=2))
    return 0


def _view(cfg: Any, store: Any = None) -> Any:
    import time

    from slurm_elastic.slurm.pyslurm_backend import choose_source
    from slurm_elastic.wiring import cluster_view

    return cluster_view(cfg, choose_source(), store, clock=time.time)


def _cmd_daemon(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from slurm_elastic.config import load
    from slurm_elastic.daemon import install_signal_handlers
    from slurm_elastic.store import Store

    cfg = load(args.config)
    if args.dry_run:
        cfg = replace(cfg, daemon=replace(cfg.daemon, dry_run=True))
    if args.verbose == 0:
        logging.getLogger().setLevel(logging.INFO)
    import time

    from slurm_elastic.slurm.actions import reconcile
    from slurm_elastic.wiring import slurm_daemon

    store = Store(cfg.daemon.store)
    view = _view(cfg, store)
    if not cfg.daemon.dry_run:
        for line in reconcile(store, view.observe(), time.time):
            log.info("reconciled: %s", line)
    daemon = slurm_daemon(cfg, view, store)
    install_signal_handlers(daemon)
    if cfg.daemon.metrics_address:
        from slurm_elastic.metrics import serve

        serve(daemon.metrics, cfg.daemon.metrics_address)
    log.info("slurm-elastic %s: policy %s, partitions %s, %s, store %s", __version__, cfg.daemon.policy,
             ",".join(cfg.daemon.partitions) or "all", "shadow mode" if cfg.daemon.dry_run else "acting",
             cfg.daemon.store)
    daemon.run(max_rounds=1 if args.once else None)
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    from slurm_elastic.config import load
    from slurm_elastic.store import Store

    cfg = load(args.config)
    snap = _view(cfg).observe()
    planned: dict[str, Any] = {}
    if cfg.daemon.store.exists():
        rounds = Store(cfg.daemon.store).rounds()
        if rounds:
            planned = {j["job_id"]: j for j in rounds[-1]["plan"]["jobs"]}
    rows = [{"job_id": j.job_id, "user": j.user, "state": j.state.value, "gpus": j.num_gpus,
             "planned_gpus": sum(len(g) for _, g in planned[j.job_id]["placement"]) if j.job_id in planned else 0,
             "range": f"{j.min_gpus}:{j.max_gpus}", "batch": j.global_batch,
             "planned_batch": planned[j.job_id]["global_batch"] if j.job_id in planned else 0,
             "mode": j.mode.value} for j in snap.elastic_jobs()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'JOBID':>8} {'USER':<10} {'STATE':<9} {'GPUS':>4} {'PLAN':>4} {'RANGE':>7} "
          f"{'BATCH':>6} {'PBATCH':>6} MODE")
    for r in rows:
        print(f"{r['job_id']:>8} {r['user']:<10} {r['state']:<9} {r['gpus']:>4} {r['planned_gpus']:>4} "
              f"{r['range']:>7} {r['batch']:>6} {r['planned_batch']:>6} {r['mode']}")
    return 0


def _cmd_submit(args: argparse.Namespace) -> int:
    from slurm_elastic.submit import new_secret_file, submit
    from slurm_elastic.templates import JobRequest, command_words, render

    lo, sep, hi = args.elastic.partition(":")
    if not sep or not lo.isdigit() or not hi.isdigit():
        raise ConfigError(f"--elastic {args.elastic!r}: expected MIN:MAX with 1 <= MIN <= MAX (e.g. --elastic 2:8)")
    req = JobRequest(command=command_words(args.train_command), min_gpus=int(lo), max_gpus=int(hi),
                     gpus_per_node=args.gpus_per_node, batch=args.batch, mode=args.mode,
                     local_batch=args.local_batch, epochs=args.epochs, name=args.job_name, time=args.time,
                     account=args.account, partition=args.partition, output=args.output,
                     secret_file=str(new_secret_file(Path.home() / ".slurm-elastic" / "secrets")))
    if args.dry_run:
        print(render(args.template, req), end="")
        return 0
    print(submit(args.template, req))
    return 0


def _cmd_train_drl(args: argparse.Namespace) -> int:
    from slurm_elastic.drl.command import run

    return run(args)


def _cmd_demo(args: argparse.Namespace) -> int:
    from slurm_elastic.demo import run_demo

    logging.getLogger().setLevel(logging.INFO)
    logging.getLogger("slurm_elastic.daemon").setLevel(logging.WARNING)  # the demo narrates; no round lines
    summary = run_demo(args.out, nodes=args.nodes, gpus_per_node=args.gpus_per_node, policy=args.policy,
                       timeout_s=args.timeout, keep=args.keep, say=lambda line: print(line, flush=True))
    inexact = [j["job_id"] for j in summary["jobs"] if not j["exact"]]
    unfinished = [f"{j['job_id']} {j['state']}" for j in summary["jobs"] if j["state"] != "COMPLETED"]
    print("every job trained each sample of each epoch exactly once" if not inexact else
          f"NOT the exact sample count for jobs {', '.join(inexact)}: see summary.json", flush=True)
    if unfinished:
        print(f"NOT every job ended COMPLETED: {', '.join(unfinished)} (the job's output is in the jobs folder)",
              flush=True)
    return 0 if not inexact and not unfinished else 1


def _cmd_check_config(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from slurm_elastic.config import load

    cfg = load(args.file)
    print(json.dumps({"daemon": asdict(cfg.daemon), "policy_params": cfg.policy_params}, indent=2, default=str))
    return 0


def _cmd_devcluster(args: argparse.Namespace) -> int:
    from slurm_elastic.dev import devcluster

    if args.devcluster == "up":
        info = devcluster.up(nodes=args.nodes, gpus_per_node=args.gpus_per_node, root=args.root)
        print(json.dumps(info, indent=2))
        print(f"dev cluster up in {info['seconds']} s; use it with: export SLURM_CONF={info['slurm_conf']}",
              file=sys.stderr)
    elif args.devcluster == "down":
        print(json.dumps(devcluster.down(args.root), indent=2))
    else:
        print(json.dumps(devcluster.status(args.root), indent=2))
    return 0


def _window(args: argparse.Namespace) -> tuple[Any, Any]:
    from datetime import datetime

    from slurm_elastic.whatif import parse_when

    now = datetime.now()
    return parse_when(args.since, flag="--since", now=now), parse_when(args.until, flag="--until", now=now)


def _cmd_report(args: argparse.Namespace) -> int:
    from slurm_elastic.reports import allocation
    from slurm_elastic.whatif import cluster_gpus, read_accounting

    since, until = _window(args)
    records = read_accounting(since, until, account=args.account)
    from_store: dict[str, Any] = {}
    if args.store:
        from slurm_elastic.store import Store

        if not args.store.is_file():
            raise ConfigError(f"--store {args.store}: no such file (rule: the daemon's existing state database)")
        store = Store(args.store)
        try:
            from_store = store.report_inputs(str(r.job_id) for r in records)
        finally:
            store.close()
    tables = allocation.allocation_tables(records, since=since.timestamp(), until=until.timestamp(),
                                          total_gpus=cluster_gpus() or None, **from_store)
    if args.format == "html":
        paths = allocation.write_html(tables, args.out)
    else:
        paths = (allocation.write_csv if args.format == "csv" else allocation.write_json)(tables, args.out)
    print(json.dumps({"summary": tables["summary"], "by_account": tables["by_account"],
                      "files": [str(p) for p in paths]}, indent=2))
    return 0


def _cmd_what_if(args: argparse.Namespace) -> int:
    from slurm_elastic.sim.runner import parse_seeds
    from slurm_elastic.whatif import read_accounting, skipped_jobs, what_if

    seeds = parse_seeds(args.seeds)
    pols = _policy_specs(args.policy, args.param)
    guards = _site_guards(args)
    since, until = _window(args)
    records = read_accounting(since, until, account=args.account)
    results = what_if(records, pols, seeds, args.gpus, args.gpus_per_node, elastic_range=args.elastic_range,
                      resize_cost=args.resize_cost, guards=guards)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1, default=float))
    if args.report:
        from slurm_elastic.reports.simulation import write_report

        write_report(results, args.report, title=f"What-if: history {since:%Y-%m-%d %H:%M} – {until:%Y-%m-%d %H:%M} "
                                                 f"on {args.gpus} GPUs")
    skipped = skipped_jobs(records)
    summary = {"replayed_jobs": results[0]["metrics"]["jobs"], "skipped_jobs_without_gpus": len(skipped),
               "runs": [{"policy": r["policy"], "seed": r["seed"], **r["metrics"]} for r in results]}
    print(json.dumps(summary, indent=2, default=float))
    return 0


def _cmd_install_plugin(args: argparse.Namespace) -> int:
    from slurm_elastic.spank.build import JOB_SUBMIT_LUA, build_plugin, install_lines, plugstack_line

    plugin = build_plugin(args.out)
    line = plugstack_line(plugin)
    print(f"# plugstack.conf:\n{line}")
    print("# slurm.conf:\n" + "\n".join(install_lines()))
    if args.write:
        from slurm_elastic.spank.build import write_plugstack

        lua = write_plugstack(args.write, line)
        print(f"wrote {args.write} and {lua} (copy of {JOB_SUBMIT_LUA})", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``slurm-elastic`` console script."""
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `slurm-elastic ... | head` ends quietly
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING - 10 * min(args.verbose, 2),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    handlers = {"plan": _cmd_plan, "simulate": _cmd_simulate, "reproduce": _cmd_reproduce,
                "profiles": _cmd_profiles, "bench": _cmd_bench, "devcluster": _cmd_devcluster,
                "install-plugin": _cmd_install_plugin, "daemon": _cmd_daemon, "status": _cmd_status,
                "check-config": _cmd_check_config, "report": _cmd_report, "what-if": _cmd_what_if,
                "submit": _cmd_submit, "demo": _cmd_demo,
                "train-drl": _cmd_train_drl}
    try:
        return handlers[args.command](args)
    except ElasticError as exc:
        print(f"slurm-elastic {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
