"""The developers' subcommands: ``plan``, ``simulate``, ``reproduce``, ``profiles``, ``bench``,
``train-drl``, ``demo``, ``devcluster``."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from slurm_elastic.argtypes import comma_words
from slurm_elastic.cli.common import ProgressBar, policy_specs, simulation_pool, site_cadence, site_guards
from slurm_elastic.errors import ConfigError

log = logging.getLogger(__name__)


def cmd_plan(args: argparse.Namespace) -> int:
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


def cmd_simulate(args: argparse.Namespace) -> int:
    from slurm_elastic import policies
    from slurm_elastic.experiments.comparison import parse_seeds, run_comparison
    from slurm_elastic.sim.engine import unfinished_names

    seeds = parse_seeds(args.seeds)
    names = ",".join(policies.available()) if args.policy.strip() == "all" else args.policy
    pols = policy_specs(names, args.param)
    guards = site_guards(args)
    if args.load and args.gpus:
        raise ConfigError(f"--load {','.join(f'{x:g}' for x in args.load)} and --gpus {args.gpus}: give one (--load "
                          "sizes the cluster from the workload)")
    gpus = args.gpus or (40 if (args.workload or "").startswith("ibm-") else 64)
    runs = len(seeds) * len(pols) * max(1, len(args.load))
    bar = ProgressBar(runs, enabled=not args.quiet and sys.stderr.isatty())
    with simulation_pool(args) as pool:
        results = run_comparison(pols, seeds, workload=args.workload, trace=args.trace, gpus=gpus,
                                 gpus_per_node=args.gpus_per_node, resize_cost=args.resize_cost,
                                 round_gap=args.round_gap, progress=bar.step, guards=guards, loads=args.load,
                                 horizon=args.horizon, cadence=site_cadence(args), pool=pool)
    for r in results:
        if r["unfinished"]:
            cut = f"cut at --horizon {r['horizon']:g} s" if r["horizon"] is not None else "stopped"
            print(f"slurm-elastic simulate: {r['workload']} seed {r['seed']}, {r['policy']} on {r['gpus']} GPUs: "
                  f"{cut}; {len(r['unfinished'])} job(s) did not end: {unfinished_names(r['unfinished'])}",
                  file=sys.stderr)
    summary = [{"policy": r["policy"], "seed": r["seed"], "gpus": r["gpus"],
                **({"load": r["load"]} if "load" in r else {}), **r["metrics"]} for r in results]
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1, default=float))
    if args.report:
        from slurm_elastic.reports.simulation import write_report

        write_report(results, args.report, title=f"{results[0]['workload']} on {gpus} GPUs")
    print(json.dumps(summary, indent=2, default=float))
    return 0


def cmd_reproduce(args: argparse.Namespace) -> int:
    from slurm_elastic.experiments.comparison import parse_seeds
    from slurm_elastic.experiments.papers import report_groups, reproduce
    from slurm_elastic.reports.simulation import write_report

    seeds = parse_seeds(args.seeds)
    bar = ProgressBar(0, enabled=not args.quiet and sys.stderr.isatty())

    def progress(text: str) -> None:
        if bar.enabled:
            print(f"\r{text[:100]:<100}", end="", file=sys.stderr, flush=True)

    with simulation_pool(args) as pool:
        table, results = reproduce(seeds, quick=args.quick, progress=progress, pool=pool)
    if bar.enabled:
        print(file=sys.stderr)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "reproduce.md").write_text(table)
    (args.out / "results.json").write_text(json.dumps(results, indent=1, default=float))
    for (workload, gpus), runs in report_groups(results).items():
        write_report(runs, args.out / f"{workload}-{gpus}", title=f"{workload} on {gpus} GPUs")
    print(table)
    return 0


def cmd_profiles(args: argparse.Namespace) -> int:
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


def cmd_bench(args: argparse.Namespace, *, command: Callable[[Sequence[str]], int]) -> int:
    """``bench ...``; ``command`` is this command's entry point, which ``bench fuzz``'s ``cli`` family runs."""
    if args.bench in ("resize", "step"):
        try:
            from slurm_elastic_launcher.resize_bench import bench_resize
            from slurm_elastic_launcher.step_bench import bench_step
        except ImportError as exc:
            raise ConfigError(
                f"bench {args.bench} needs the launcher extra: pip install 'slurm-elastic[launcher]' ({exc})"
            ) from exc
        if args.bench == "step":
            figures = bench_step(model=args.model, workers=args.workers, steps=args.steps, batch=args.batch,
                                 dist_backend=args.dist_backend)
        else:
            figures = bench_resize(model=args.model, from_=args.from_, to=args.to, repeat=args.repeat,
                                   api=args.api)
        print(json.dumps(figures, indent=2))
        return 0
    if args.bench == "load":
        from slurm_elastic import policies
        from slurm_elastic.bench.live.load import bench_load

        policies.validate(args.policy, {})
        print(json.dumps(bench_load(root=args.root, jobs=args.jobs, sleep_s=args.sleep, policy=args.policy), indent=2))
        return 0
    if args.bench == "chaos":
        from slurm_elastic.bench.live.chaos import bench_chaos

        points = comma_words(args.points)
        print(json.dumps(bench_chaos(root=args.root, points=points), indent=2))
        return 0
    if args.bench == "fidelity":
        from slurm_elastic.bench.live.fidelity import bench_fidelity, replay_fidelity

        out = (replay_fidelity(args.replay) if args.replay else
               bench_fidelity(root=args.root, policy=args.policy, jobs=args.jobs, seed=args.seed))
        print(json.dumps(out, indent=2))
        return 0
    if args.bench == "observe":
        from slurm_elastic import policies
        from slurm_elastic.bench.observing import bench_observe

        policies.validate(args.policy, {})
        print(json.dumps(bench_observe(nodes=args.nodes, jobs=args.jobs, policy=args.policy, repeat=args.repeat,
                                       seed=args.seed, churn=args.churn), indent=2))
        return 0
    if args.bench == "learn":
        from slurm_elastic.bench.learning import bench_learn

        try:
            sizes = [int(k) for k in args.sizes.split(",") if k.strip()]
        except ValueError:
            raise ConfigError(f"--sizes {args.sizes!r}: must be comma-separated GPU counts, e.g. 1,2") from None
        print(json.dumps(bench_learn(prior=args.prior, first_sizes=sizes), indent=2))
        return 0
    if args.bench == "reaction":
        from slurm_elastic.bench.live.reaction import bench_reaction

        print(json.dumps(bench_reaction(root=args.root, repeat=args.repeat), indent=2))
        return 0
    if args.bench == "fuzz":
        from slurm_elastic import fuzz

        bar = ProgressBar(args.cases, enabled=not args.quiet and sys.stderr.isatty())
        out = fuzz.run(args.cases, seed=args.seed, command=command, progress=lambda done, total: bar.step("fuzz"))
        print(json.dumps(out, indent=2))
        return 0
    if args.bench == "simulate":
        from slurm_elastic.bench.simulating import bench_simulate

        out = bench_simulate(jobs=args.jobs, gpus=args.gpus, policy=args.policy, seed=args.seed,
                             round_gap=args.round_gap)
        print(json.dumps(out, indent=2))
        return 0
    if args.scaling:
        from slurm_elastic.bench.planning import bench_planner_scaling

        rows = bench_planner_scaling(policy=args.policy, gpus_per_node=args.gpus_per_node,
                                     repeat=args.repeat or 3, seed=args.seed, params=dict(args.param))
        print(json.dumps(rows, indent=2))
        return 0
    from slurm_elastic.bench.planning import bench_planner

    result = bench_planner(gpus=args.gpus, gpus_per_node=args.gpus_per_node, jobs=args.jobs,
                           policy=args.policy, repeat=args.repeat or 20, seed=args.seed, params=dict(args.param),
                           reported=args.reported)
    print(json.dumps(result, indent=2))
    return 0


def cmd_train_drl(args: argparse.Namespace) -> int:
    from slurm_elastic.drl.command import run

    return run(args)


def cmd_demo(args: argparse.Namespace) -> int:
    from slurm_elastic.dev.demo import run_demo

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


def cmd_devcluster(args: argparse.Namespace) -> int:
    from slurm_elastic.dev import devcluster

    if args.devcluster == "up":
        info = devcluster.up(nodes=args.nodes, gpus_per_node=args.gpus_per_node, root=args.root,
                             slurm_prefix=args.slurm_prefix)
        print(json.dumps(info, indent=2))
        print(f"dev cluster up in {info['seconds']} s; use it with: export SLURM_CONF={info['slurm_conf']}",
              file=sys.stderr)
    elif args.devcluster == "down":
        print(json.dumps(devcluster.down(args.root), indent=2))
    else:
        print(json.dumps(devcluster.status(args.root), indent=2))
    return 0
