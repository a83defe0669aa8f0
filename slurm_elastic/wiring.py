"""How the real path is put together: record source, view, store and actor, written once.

This module owns :func:`slurm_daemon`, which the ``daemon`` command, the demo and the benchmarks
use to build a :class:`~slurm_elastic.daemon.Daemon` over real Slurm (the view over a record
source, the Slurm actor acting through that source's runner on the view's observations), and
:func:`default_profiles`, the throughput profiles the real path plans with (the shipped ones
scaled to Longhorn, and the site's own from ``daemon.profiles`` as measured). It builds; it runs nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path

from slurm_elastic.act.actor import SlurmActor
from slurm_elastic.config import Config
from slurm_elastic.daemon import Daemon
from slurm_elastic.observe.view import ClusterView
from slurm_elastic.slurm.cli_backend import SlurmCli
from slurm_elastic.slurm.pyslurm_backend import PyslurmSource
from slurm_elastic.store import Store
from slurm_elastic_predictor.profiles import load_models, v100_longhorn
from slurm_elastic_predictor.throughput import ThroughputModel


def default_profiles(site: Path | None = None) -> dict[str, ThroughputModel]:
    """The shipped throughput models, scaled to a V100 of Longhorn, and the site's profiles in
    ``site`` as measured (``slurm-elastic profile``; a site profile of a shipped name replaces it):
    what the real path plans with.

    Raises:
        ProfileError: a site profile does not load (the configuration checked it at load).
    """
    shipped = {name: v100_longhorn(m) for name, m in load_models().items()}
    return {**shipped, **(load_models(site) if site is not None else {})}


def cluster_view(cfg: Config, source: SlurmCli | PyslurmSource, store: Store | None = None, *,
                 profiles: Mapping[str, ThroughputModel] | None = None,
                 clock: Callable[[], float] = time.time) -> ClusterView:
    """The view of the managed partitions of ``cfg`` through ``source`` (and ``store`` when given)."""
    return ClusterView(source, profiles if profiles is not None else default_profiles(cfg.daemon.profiles), clock,
                       cfg.daemon.partitions, cfg.daemon.default_model, store)


def slurm_daemon(cfg: Config, view: ClusterView, store: Store, *,
                 sleep: Callable[[float], None] = time.sleep, client_env: Mapping[str, str] | None = None) -> Daemon:
    """A daemon over real Slurm seen through ``view`` (:func:`cluster_view`): acting through the view's
    record source's runner on the observations the daemon hands it, unless ``cfg`` says dry run.
    ``client_env``: the environment that runner runs Slurm commands with (``None``: this process's)."""
    actuator = None if cfg.daemon.dry_run else SlurmActor(view.source.runner, store, view.clock, client_env=client_env)
    return Daemon(cfg, view, store, actuator, sleep=sleep, clock=view.clock)
