"""Comparisons: many policies x seeds over one workload or trace, one simulation per pair.

This module owns :class:`PolicySpec` (a policy to simulate), :func:`parse_seeds` (``--seeds``),
:func:`load_jobs` (a built-in workload or a trace file) and :func:`run_comparison`, what
``simulate`` and ``what-if`` run and what the seed papers' tables (:mod:`.papers`) are made of.
Results are plain dicts (the report schema); no rendering here.

Planners come from :func:`slurm_elastic.policies.build`: :func:`run_comparison` wraps them in the
site guards it is given (``simulate`` and ``what-if`` pass the site's or the shipped default
guards; ``reproduce`` passes none, as the papers had none).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurm_elastic import policies as registry
from slurm_elastic.core.guards import Guards
from slurm_elastic.errors import ConfigError
from slurm_elastic.experiments.pool import Pair, PairPool, Progress
from slurm_elastic.sim.engine import Cadence
from slurm_elastic.sim.workload import SimJobSpec, load_trace
from slurm_elastic.workloads.catalog import builtin
from slurm_elastic.workloads.offered_load import gpus_for_load


@dataclass(frozen=True)
class PolicySpec:
    """A policy to simulate: its name (:mod:`slurm_elastic.policies`), parameters, the label shown in
    results, and its fixed round gap (seconds) when it plans in fixed time slots by design (``None``:
    the run's cadence)."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)
    label: str = ""
    round_gap: float | None = None

    @property
    def shown(self) -> str:
        """The label of its results."""
        return self.label or self.name


SEED_MAX = 2**32 - 1
"""Largest seed (as ``--seed``)."""

MAX_SEEDS = 1000
"""Most seeds one ``--seeds`` may name."""

_SEED = re.compile(r"[0-9]{1,10}", re.ASCII)


def parse_seeds(text: str) -> list[int]:
    """``"1-5"``, ``"3"`` or ``"1,4,9"`` into a list of seeds.

    Seeds are ASCII integers ``0 .. 2**32 - 1``, at most :data:`MAX_SEEDS` of them in all.

    Raises:
        ConfigError: naming the text and the rule.
    """
    rule = f"must look like 1-5, 3 or 1,4,9 (seeds 0..{SEED_MAX} in ASCII digits, at most {MAX_SEEDS} of them)"
    shown = repr(text if len(text) <= 40 else text[:40] + "...")
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        a, dash, b = part.partition("-")
        if not _SEED.fullmatch(a) or (dash and not _SEED.fullmatch(b)):
            raise ConfigError(f"--seeds {shown}: {rule}")
        lo, hi = int(a), int(b) if dash else int(a)
        if hi > SEED_MAX or hi < lo or len(out) + hi - lo + 1 > MAX_SEEDS:
            raise ConfigError(f"--seeds {shown}: {rule}")
        out.extend(range(lo, hi + 1))
    if not out:
        raise ConfigError(f"--seeds {shown}: names no seed")
    return out


def load_jobs(workload: str | None, trace: Path | None, seed: int, gpus: int) -> tuple[str, list[SimJobSpec]]:
    """The jobs of a built-in workload (seeded) or of a trace file, and the name to record."""
    if trace is not None and workload is None:
        return trace.name, load_trace(trace)
    if workload is not None and trace is None:
        return workload, builtin(workload, seed, gpus)
    raise ConfigError("give exactly one of --workload NAME or --trace FILE")


def run_comparison(policies: Sequence[PolicySpec], seeds: Sequence[int], *, workload: str | None = None,
                   trace: Path | None = None, gpus: int = 64, gpus_per_node: int = 4,
                   resize_cost: str = "in-place", round_gap: float | None = None,
                   progress: Progress | None = None, guards: Guards | None = None,
                   loads: Sequence[float] = (), horizon: float | None = None,
                   cadence: Cadence | None = None,
                   physics: Mapping[str, Any] | None = None,
                   pool: PairPool | None = None) -> list[dict[str, Any]]:
    """Simulate every policy on every seed of the workload; one result dict per run, in the order
    seed, load, policy.

    Args:
        gpus: the cluster's GPUs (a built-in workload is generated for that cluster too).
        round_gap: fixed rounds this many seconds apart for every policy (a policy's own
            ``PolicySpec.round_gap`` first); ``None``: ``cadence``.
        cadence: when rounds run (a site's daemon: ``Cadence.of``); ``None``: the daemon's defaults.
        physics: the simulator's physics knobs (``simulate``'s ``overhead_s``, ``equal_start``,
            ``host_cores``) for every run: ``what-if``'s site physics.
        guards: the site guards every policy runs inside (as the daemon runs it); ``None``: the
            bare policies (``reproduce``).
        loads: when given, each seed's workload runs once per load on the cluster sized for it
            (:func:`~slurm_elastic.workloads.offered_load.gpus_for_load`); each result says its ``load``.
        horizon: cut every run at this virtual time (seconds); ``None``: each run ends when its last
            job does (:func:`~slurm_elastic.sim.engine.simulate`).
        pool: the processes the runs share (:class:`~slurm_elastic.experiments.pool.PairPool`: the
            same results in the same order); ``None``: one after the other, here.
    """
    pairs = []
    traced: tuple[str, list[SimJobSpec]] | None = None
    for seed in seeds:
        if trace is not None and workload is None:  # a trace does not depend on the seed: read once
            traced = traced or load_jobs(None, trace, seed, gpus)
            name, jobs = traced
        else:
            name, jobs = load_jobs(workload, trace, seed, gpus)
        sizes: list[tuple[float | None, int]] = [(load, gpus_for_load(jobs, load, gpus_per_node)) for load in loads]
        for load, cluster in sizes or [(None, gpus)]:
            for pol in policies:
                registry.validate(pol.name, pol.params)  # a bad policy or parameter before any run
                at = f" (load {load:g})" if load is not None else ""
                gap = pol.round_gap if pol.round_gap is not None else round_gap
                pairs.append(Pair(
                    jobs, pol.name, pol.params, pol.shown, guards,
                    simulate={"gpus": cluster, "gpus_per_node": gpus_per_node, "resize_cost": resize_cost,
                              "seed": seed, "workload": name, "round_gap": gap, "horizon": horizon,
                              "cadence": cadence, **(physics or {})},
                    extra={} if load is None else {"load": load},
                    label=f"{name} seed {seed}: {pol.shown} on {cluster} GPUs{at} ({len(jobs)} jobs)"))
    return (pool or PairPool(1)).run(pairs, progress)


RunKey = tuple[str, int, int, str, str, float | None]


def run_key(workload: str, gpus: int, seed: int, spec: PolicySpec) -> RunKey:
    """What a bare simulation of a built-in workload depends on: the same key, the same run."""
    return workload, gpus, seed, spec.name, repr(sorted(spec.params.items())), spec.round_gap
