"""The ``slurm-elastic train-drl`` command: train a ``drl`` model in the simulator and save it.

This module owns the command's arguments (:func:`add_arguments`) and its run (:func:`run`); the
``slurm-elastic`` parser in :mod:`slurm_elastic.cli` mounts them as a subcommand. It imports
torch only inside :func:`run` (through :mod:`slurm_elastic.drl.train`), so ``--help`` and the
rest of the CLI work without torch. It configures no logging (the CLI does). Output: a progress
bar on stderr (when stderr is a terminal and ``--quiet`` is not given), the model file, and with
``--json`` the training summary on stdout; otherwise one line saying what was written.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from slurm_elastic.argtypes import GPUS_MAX, int_in, param, seed
from slurm_elastic.errors import ConfigError

_count = int_in(0, 1_000_000)
_gpus = int_in(1, GPUS_MAX)
_jobs = int_in(1, 100_000)
_param = param


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``train-drl`` arguments to ``parser``."""
    parser.add_argument("--workload", default="ones-longhorn", help="built-in workload to train on "
                        "(default ones-longhorn)")
    parser.add_argument("--gpus", type=_gpus, default=64, help="cluster GPUs (default 64)")
    parser.add_argument("--gpus-per-node", type=_gpus, default=4, help="GPUs per node (default 4)")
    parser.add_argument("--seed", type=seed, default=1, help="the run's one seed, 0..2**32-1 (default 1)")
    parser.add_argument("--episodes", type=_count, default=15,
                        help="actor-critic episodes, one simulated workload each (default 15)")
    parser.add_argument("--warmup-traces", type=_count, default=32,
                        help="teacher runs for the supervised warm-up (default 32)")
    parser.add_argument("--warmup-epochs", type=_count, default=60,
                        help="passes over the warm-up decisions (default 60)")
    parser.add_argument("--teacher", default="optimus",
                        help="policy imitated in the warm-up: drf or a policy (default optimus)")
    parser.add_argument("--teacher-param", type=_param, action="append", default=[], metavar="KEY=VALUE",
                        help="teacher parameter (repeatable; default for optimus: interval=0)")
    parser.add_argument("--jobs", type=_jobs, default=None, help="use only the first N jobs of each workload")
    parser.add_argument("--set", type=_param, action="append", default=[], metavar="KEY=VALUE", dest="settings",
                        help="other training setting of TrainConfig, e.g. entropy=0.05 (repeatable)")
    parser.add_argument("--out", type=Path, required=True, metavar="FILE", help="model file to write (.npz)")
    parser.add_argument("--json", action="store_true", help="print the training summary as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


class _Bar:
    """A one-line progress bar on stderr (the same look as ``simulate``'s)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __call__(self, done: int, total: int, text: str) -> None:
        if not self.enabled:
            return
        width = 30
        fill = int(width * done / max(1, total))
        print(f"\r[{'#' * fill}{'.' * (width - fill)}] {done}/{total} {text[:60]:<60}",
              end="" if done < total else "\n", file=sys.stderr, flush=True)


def config_from_args(args: argparse.Namespace) -> Any:
    """The :class:`~slurm_elastic.drl.train.TrainConfig` the arguments describe.

    Raises:
        ConfigError: an unknown ``--set`` key, or a value that breaks its rule.
    """
    from dataclasses import fields

    from slurm_elastic.drl.train import TrainConfig

    known = {f.name for f in fields(TrainConfig)}
    extra = dict(args.settings)
    for key in extra:
        if key not in known:
            raise ConfigError(f"train-drl --set {key}: unknown setting; known: {', '.join(sorted(known))}")
    for key in ("hidden", "eval_seeds", "models"):
        if key in extra:
            if not isinstance(extra[key], list):
                raise ConfigError(f"train-drl --set {key}={extra[key]!r}: must be a JSON list")
            extra[key] = tuple(extra[key])
    return TrainConfig(
        workload=args.workload, gpus=args.gpus, gpus_per_node=args.gpus_per_node, seed=args.seed,
        jobs=args.jobs, teacher=args.teacher, teacher_params=dict(args.teacher_param) or None,
        warmup_traces=args.warmup_traces, warmup_epochs=args.warmup_epochs, episodes=args.episodes, **extra,
    )


def run(args: argparse.Namespace) -> int:
    """Train, write ``--out``, print the summary (``--json``) or one line; 0 on success.

    Raises:
        ConfigError: bad arguments, torch missing, or the model file cannot be written.
    """
    try:
        from slurm_elastic.drl.train import train
    except ImportError as exc:
        raise ConfigError(f"train-drl needs torch: pip install 'slurm-elastic[launcher]' ({exc})") from exc
    from slurm_elastic.drl.weights import save

    try:
        cfg = config_from_args(args)
    except TypeError as exc:
        raise ConfigError(f"train-drl: {exc}") from exc
    result = train(cfg, _Bar(enabled=not args.quiet and sys.stderr.isatty()))
    save(result.weights, args.out)
    summary = {"out": str(args.out), "bytes": args.out.stat().st_size, **result.summary}
    if args.json:
        print(json.dumps(summary, indent=2, default=float))
    else:
        jct = summary["kept_validation_avg_jct"]
        shown = "n/a" if jct is None else f"{jct:,.0f} s"
        print(f"wrote {args.out} (kept the policy after {summary['kept']}, validation avg JCT {shown})")
    return 0
