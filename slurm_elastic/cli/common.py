"""Helpers the subcommands of several audiences share: the site guards of a simulated policy, a report window,
the cluster view."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING, Any

from slurm_elastic.argtypes import comma_words
from slurm_elastic.errors import ConfigError

if TYPE_CHECKING:
    from slurm_elastic.core.guards import Guards


log = logging.getLogger(__name__)


def site_guards(args: argparse.Namespace) -> Guards | None:
    """The guards of ``--config`` (or the shipped defaults); ``None`` with ``--no-guards``."""
    from slurm_elastic import policies

    if args.no_guards:
        return None
    if args.config is None:
        return policies.DEFAULT_GUARDS
    from slurm_elastic.config import load

    return load(args.config).guards


def window(args: argparse.Namespace) -> tuple[Any, Any]:
    from datetime import datetime

    from slurm_elastic.whatif import parse_when

    now = datetime.now()
    return parse_when(args.since, flag="--since", now=now), parse_when(args.until, flag="--until", now=now)


def view(cfg: Any, store: Any = None) -> Any:
    """The view of Slurm the configuration names (``daemon.backend``: auto, cli or pyslurm)."""
    import time

    from slurm_elastic.slurm.pyslurm_backend import choose_source
    from slurm_elastic.wiring import cluster_view

    return cluster_view(cfg, choose_source(prefer=cfg.daemon.backend), store, clock=time.time)


def with_backend(cfg: Any, backend: str | None) -> Any:
    """``cfg`` with ``--backend`` (when given) in place of ``daemon.backend``."""
    from dataclasses import replace

    return cfg if backend is None else replace(cfg, daemon=replace(cfg.daemon, backend=backend))


class ProgressBar:
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


def site_cadence(args: argparse.Namespace) -> Any:
    """When the simulated daemon plans: the ``[daemon]`` poll and ``max_idle`` of ``--config``, else the defaults."""
    from slurm_elastic.config import DaemonConfig, load
    from slurm_elastic.sim.engine import Cadence

    return Cadence.of(load(args.config).daemon if getattr(args, "config", None) else DaemonConfig())


def simulation_pool(args: argparse.Namespace) -> Any:
    """The worker processes of a command's simulations (``--processes``, default the CPUs this process may
    use), each set up as this command's process is (:mod:`slurm_elastic.cli.heap`, the seldom collector)."""
    from slurm_elastic import collector
    from slurm_elastic.cli import heap
    from slurm_elastic.experiments.pool import PairPool, default_processes

    return PairPool(args.processes or default_processes(), setup=(heap.keep_freed_memory, collector.collect_seldom))


def policy_specs(names: str, params: list[tuple[str, Any]]) -> list[Any]:
    """``--policy a,b`` and ``--param POLICY.KEY=VALUE`` as the simulator's policy specs."""
    from slurm_elastic.experiments.comparison import PolicySpec

    pols = comma_words(names)
    if not pols:
        raise ConfigError(f"--policy {names!r}: names no policy")
    per: dict[str, dict[str, Any]] = {p: {} for p in pols}
    for key, value in params:
        pol, dot, name = key.partition(".")
        if not dot or pol not in per:
            raise ConfigError(f"--param {key}: must be POLICY.KEY=VALUE with POLICY one of {', '.join(pols)}")
        per[pol][name] = value
    return [PolicySpec(p, per[p]) for p in pols]
