"""Shared builders of nodes, jobs and snapshots for tests, benchmarks and examples.

This module owns the realistic synthetic snapshots built from the shipped measured profiles
(:func:`random_snapshot`), used by the property tests and by ``slurm-elastic bench planner``. It
draws randomness only from the generator it is given. It is importable by the production code
(the benchmark) and therefore depends only on the core and the predictor.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import cache
from typing import Any

import numpy as np

from slurm_elastic.core.constraints import validate_plan
from slurm_elastic.core.model import (
    ClusterSnapshot,
    ElasticMode,
    Job,
    JobId,
    JobState,
    Node,
    NodeName,
    NodeState,
    Placement,
    Plan,
)
from slurm_elastic.core.planner import Planner
from slurm_elastic.observe.bounds import ReportLimits, limits_of
from slurm_elastic.slurm.records import JobRecord
from slurm_elastic_predictor.profiles import MODEL_DEFAULTS, load_models
from slurm_elastic_predictor.throughput import ThroughputModel


@cache
def shipped_profiles() -> Mapping[str, ThroughputModel]:
    """The six shipped (T4-measured) throughput models, fitted once per process."""
    return load_models()


def make_nodes(n_nodes: int, gpus_per_node: int = 4, prefix: str = "n") -> tuple[Node, ...]:
    """``n_nodes`` UP nodes named ``<prefix>000..`` with ``gpus_per_node`` free GPUs each."""
    width = max(3, len(str(n_nodes - 1)))
    gpus = tuple(range(gpus_per_node))
    return tuple(Node(NodeName(f"{prefix}{i:0{width}d}"), gpus, gpus) for i in range(n_nodes))


def make_job(job_id: str | int, model: str = "cifar10", *, state: JobState = JobState.PENDING,
             submit_time: float = 0.0, min_gpus: int = 1, max_gpus: int = 8, requested_gpus: int = 1,
             local_batch: int | None = None, max_local_batch: int | None = None,
             mode: ElasticMode = ElasticMode.EXO, elastic: bool = True,
             placement: Sequence[tuple[str, int]] = (), epochs_done: float = 0.0,
             run_time: float = 0.0, target_epochs: float | None = None,
             epochs_since_change: float | None = None, user: str = "alice", account: str = "proj") -> Job:
    """A job with sensible defaults for ``model`` (see :data:`MODEL_DEFAULTS`)."""
    b_local, epoch = MODEL_DEFAULTS.get(model, (32, 10_000))
    b_local = local_batch or b_local
    if max_local_batch is None:
        max_local_batch = shipped_profiles()[model].max_local_batch if model in MODEL_DEFAULTS else 4 * b_local
    limit = max(max_local_batch, b_local)
    pl = Placement.of(placement)
    running = pl.num_gpus > 0
    processed = int(epochs_done * epoch)
    since = epochs_done if epochs_since_change is None else epochs_since_change
    base_batch = b_local * requested_gpus
    return Job(
        job_id=JobId(str(job_id)), user=user, account=account, submit_time=submit_time,
        state=JobState.RUNNING if running else state, min_gpus=min_gpus, max_gpus=max_gpus,
        min_batch=min(b_local * min_gpus, base_batch), max_batch=max(b_local * max_gpus, base_batch),
        base_batch=base_batch, base_lr=0.1, requested_gpus=requested_gpus, max_local_batch=limit,
        mode=mode, elastic=elastic, epoch_size=epoch, samples_processed=processed,
        target_epochs=target_epochs, placement=pl, local_batch=b_local if running else 0,
        start_time=0.0 if running or state is JobState.PREEMPTED else None, run_time=run_time,
        last_change_time=0.0 if running else None,
        samples_at_last_change=max(0, processed - int(since * epoch)), model=model,
    )


def make_snapshot(nodes: Sequence[Node], jobs: Sequence[Job], *, now: float = 0.0,
                  profiles: Mapping[str, ThroughputModel] | None = None,
                  arrival_rate: float = 0.0) -> ClusterSnapshot:
    """A snapshot whose nodes' free GPUs are those no job holds."""
    held: dict[str, set[int]] = {}
    for j in jobs:
        for n, gs in j.placement.slots:
            held.setdefault(n, set()).update(gs)
    fixed = tuple(
        replace(n, free_gpus=tuple(g for g in n.gpus if g not in held.get(n.name, set()))) for n in nodes
    )
    return ClusterSnapshot(now=now, nodes=fixed, jobs=tuple(jobs),
                           profiles=dict(profiles or shipped_profiles()), arrival_rate=arrival_rate)


def random_snapshot(rng: np.random.Generator, n_nodes: int, gpus_per_node: int, n_jobs: int, *,
                    running_fraction: float = 0.6, rigid_fraction: float = 0.05,
                    max_gpus_choices: Sequence[int] = (1, 2, 4, 8, 16, 32, 64),
                    down_nodes: int = 0, endo_fraction: float = 0.1) -> ClusterSnapshot:
    """A plausible cluster: running jobs spread over the nodes, the rest waiting.

    Job models are drawn from the shipped profiles; GPU ranges from ``max_gpus_choices``; running
    jobs get random (possibly fragmented) GPUs while free GPUs last.
    """
    models = sorted(MODEL_DEFAULTS)
    nodes = list(make_nodes(n_nodes, gpus_per_node))
    for i in rng.choice(n_nodes, size=min(down_nodes, n_nodes), replace=False):
        nodes[int(i)] = replace(nodes[int(i)], state=NodeState.DOWN if i % 2 == 0 else NodeState.DRAINING)
    free = [(n.name, g) for n in nodes if n.state is not NodeState.DOWN for g in n.gpus]
    order = rng.permutation(len(free))
    free = [free[int(i)] for i in order]
    jobs: list[Job] = []
    for i in range(n_jobs):
        model = models[int(rng.integers(len(models)))]
        hi = int(rng.choice(np.asarray(max_gpus_choices)))
        lo = int(rng.integers(1, min(hi, 2) + 1))
        req = int(rng.integers(lo, hi + 1))
        elastic = rng.random() >= rigid_fraction
        if not elastic:
            lo = hi = req
        want_run = rng.random() < running_fraction
        k = int(rng.integers(lo, hi + 1)) if want_run else 0
        place: list[tuple[NodeName, int]] = []
        if k and len(free) >= k:
            place, free = free[:k], free[k:]
        epochs = float(rng.uniform(0, 20)) if place else (float(rng.uniform(0, 5)) if rng.random() < 0.3 else 0.0)
        state = JobState.PREEMPTED if (not place and epochs > 0) else JobState.PENDING
        jobs.append(make_job(
            i + 1, model, state=state, submit_time=float(i), min_gpus=lo, max_gpus=hi,
            requested_gpus=req, mode=ElasticMode.ENDO if rng.random() < endo_fraction else ElasticMode.EXO,
            elastic=elastic, placement=place, epochs_done=epochs,
            run_time=epochs * 60.0, target_epochs=float(rng.integers(10, 90)) if rng.random() < 0.5 else None,
            epochs_since_change=float(rng.uniform(0, 2)) if place else 0.0,
        ))
    return make_snapshot(nodes, jobs, now=float(n_jobs), arrival_rate=1 / 600)


def snapshot_strategy(max_nodes: int = 6, max_jobs: int = 25) -> Any:
    """A hypothesis strategy of :func:`random_snapshot` clusters (imports hypothesis lazily)."""
    from hypothesis import strategies as st

    @st.composite
    def build(draw: st.DrawFn) -> ClusterSnapshot:
        seed = draw(st.integers(0, 2**32 - 1))
        nodes = draw(st.integers(1, max_nodes))
        jobs = draw(st.integers(0, max_jobs))
        down = draw(st.integers(0, 1))
        return random_snapshot(np.random.default_rng(seed), nodes, 4, jobs, down_nodes=down,
                               max_gpus_choices=(1, 2, 4, 8, 16))

    return build()


def report_limits(now: float, default_model: str = "cifar10") -> Callable[[JobRecord], ReportLimits]:
    """The daemon's bounds on each job's reports at ``now``, with the shipped profiles and jobs
    planned as ``default_model`` (what :meth:`~slurm_elastic.observe.view.ClusterView.read_reports`
    passes to ``ingest``)."""
    return lambda rec: limits_of(rec, now=now, profiles=shipped_profiles(), default_model=default_model)


def checked_plan(planner: Planner, snapshot: ClusterSnapshot, memo: Any = None) -> tuple[Plan, Any]:
    """``planner``'s plan of ``snapshot`` (its rng seeded 0), checked by
    :func:`~slurm_elastic.core.constraints.validate_plan`, and its memo."""
    res = planner.plan(snapshot, memo, np.random.default_rng(0))
    validate_plan(snapshot, res.plan)
    return res.plan, res.memo


def gpu_counts(plan: Plan) -> dict[str, int]:
    """GPUs per planned job, by job id."""
    return {str(p.job_id): p.num_gpus for p in plan.jobs}


def unplaced_reasons(plan: Plan) -> dict[str, str]:
    """The reason of each job the plan does not run, by job id."""
    return {str(u.job_id): u.reason for u in plan.unplaced}
