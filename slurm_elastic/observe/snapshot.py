"""The snapshot of one observation: Slurm's records plus what the store knows, turned into the core's terms.

This module owns the one function every observer ends in, :func:`snapshot_of` (records of the managed
partitions, satellites folded into their jobs, the launchers' runtimes, then :func:`build_snapshot`
with the model defaults), the change key the daemon polls (:func:`fingerprint`),
:func:`fold`, which makes a job and its satellite allocations one job, and :class:`SnapshotMemo`,
the jobs of the last snapshot an observer keeps so that an unchanged one is not made again.
Pure: no command, no file, no clock (``now`` is passed in).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from slurm_elastic.channel import COMMENT_KEY
from slurm_elastic.contract import ElasticRequest, parse_elastic_request
from slurm_elastic.core.model import ClusterSnapshot, Job, JobState, Node, NodeName, Placement
from slurm_elastic.errors import ElasticError, SnapshotError
from slurm_elastic.observe.job_reports import JobRuntime
from slurm_elastic.slurm.dialects import DocKind, SlurmJsonError
from slurm_elastic.slurm.records import JobRecord, NodeRecord
from slurm_elastic_predictor.calibrate import StepPoint, calibrate
from slurm_elastic_predictor.profiles import MODEL_DEFAULTS
from slurm_elastic_predictor.progress import BetaProgressModel
from slurm_elastic_predictor.throughput import ThroughputModel


@dataclass(frozen=True, slots=True)
class _Made:
    """One job of a snapshot and what it was made from beside the clock (and the inputs of the
    whole snapshot, :attr:`SnapshotMemo.inputs`); a running job's run time is brought to each
    snapshot's instant when it is reused."""

    record: JobRecord
    slots: tuple[tuple[str, int], ...]
    job: Job | None


@dataclass
class SnapshotMemo:
    """The jobs of an observer's last snapshot, each with what it was made from.

    A job without a runtime in the store is made from its record, the GPUs it holds on the managed
    nodes, the cluster's GPU count, the profiles and the default model, and from the clock only
    through its run time (a running job's is ``now`` minus its start). While its record is the same
    object (the reader's :class:`~slurm_elastic.slurm.read_memo.ReadMemo` hands back the record it
    made last read when Slurm printed the same) and the rest is unchanged, the job made last time
    is the job, its run time brought to ``now``. Every rule that involves other jobs or the nodes
    (a GPU held twice, an index beyond its node's GPUs, a node that does not read) is checked
    again every snapshot. Holds the last snapshot's jobs only.
    """

    jobs: dict[str, _Made] = field(default_factory=dict)
    inputs: tuple[int, Mapping[str, ThroughputModel], str] | None = None
    """The cluster's GPU count, the profiles and the default model the jobs were made with."""
    reused: int = 0
    """Jobs of the last snapshot taken from here."""


def snapshot_of(nodes: Sequence[NodeRecord], jobs: Sequence[JobRecord], *, now: float,
                profiles: Mapping[str, ThroughputModel], partitions: Sequence[str] = (),
                default_model: str = "cifar10", satellites: Mapping[str, str] | None = None,
                runtimes: Mapping[str, JobRuntime] | None = None,
                refused: dict[str, str] | None = None, unreadable_nodes: Collection[str] = (),
                progress_model: BetaProgressModel | None = None,
                memo: SnapshotMemo | None = None) -> ClusterSnapshot:
    """The snapshot of one observation (either backend).

    Args:
        nodes: every node Slurm lists; those of ``partitions`` are managed (all when empty).
        jobs: every job Slurm lists (satellites unfolded).
        now: the snapshot instant, seconds since the epoch.
        profiles: throughput models by model key.
        partitions: the managed partitions.
        default_model: model assumed for elastic jobs without a reported one.
        satellites: satellite job id -> its job's id (the store's).
        runtimes: what the launchers reported, by job id (:func:`~slurm_elastic.observe.job_reports.runtimes`).
        refused: as :func:`build_snapshot`'s (one job's broken record never fails the snapshot).
        unreadable_nodes: as :func:`build_snapshot`'s.
        progress_model: the ONES progress model learned from the site's finished jobs
            (:class:`~slurm_elastic.observe.history.ProgressLearner`), ``None``: priors.
        memo: as :func:`build_snapshot`'s.
    """
    wanted = set(partitions)
    managed_nodes = [n for n in nodes if not wanted or wanted & set(n.partitions)]
    managed = in_partitions(jobs, partitions)
    snap = build_snapshot(managed_nodes, fold(managed, satellites or {}), now=now, profiles=profiles,
                          default_model=default_model, progress=runtimes, refused=refused,
                          unreadable_nodes=unreadable_nodes, memo=memo)
    return replace(snap, progress_model=progress_model) if progress_model is not None else snap


def in_partitions(jobs: Sequence[JobRecord], partitions: Sequence[str]) -> list[JobRecord]:
    """Jobs in (or, while pending, asking for) one of ``partitions``; all jobs when none are given."""
    if not partitions:
        return list(jobs)
    wanted = set(partitions)
    return [j for j in jobs if not j.partition or set(j.partition.split(",")) & wanted]


def fingerprint(jobs: Sequence[JobRecord]) -> tuple[tuple[str, str, str], ...]:
    """Job ids, states and node lists, sorted: changes whenever the queue does."""
    return tuple(sorted((j.job_id, ",".join(j.slurm_state), ",".join(j.nodes)) for j in jobs))


def fold(records: Sequence[JobRecord], satellites: Mapping[str, str]) -> list[JobRecord]:
    """Records with each running satellite's GPUs added to its running parent's, satellites left out.

    A running launcher job also gets its ``release_blocks``: what Slurm can free of it, one whole
    block at a time (a node of its own allocation but the batch host, a whole satellite).

    A satellite whose parent is not running (gone, or requeued) stays as its own record, so its
    GPUs count as busy until the daemon cancels it; a pending satellite is left out (the grow is
    still on its way).
    """
    if not satellites:  # only running launcher jobs change
        return [_folded(r, []) if r.state is JobState.RUNNING and COMMENT_KEY in r.comment else r for r in records]
    by_id: dict[str, JobRecord] = {r.job_id: r for r in records}
    extra: dict[str, list[JobRecord]] = defaultdict(list)
    out = []
    for r in records:
        parent = by_id.get(satellites.get(r.job_id, ""))
        if r.job_id in satellites and parent is not None and parent.state is JobState.RUNNING:
            if r.state is JobState.RUNNING:
                extra[parent.job_id].append(r)
            continue
        out.append(r)
    return [_folded(r, extra.get(r.job_id, [])) for r in out]


def _folded(r: JobRecord, sats: list[JobRecord]) -> JobRecord:
    blocks = None
    if r.state is JobState.RUNNING and COMMENT_KEY in r.comment:
        own = [(n, len(g)) for n, g in r.gpus if n != r.batch_host and g]
        # Satellites are submitted on one node each; one that spans several is never freed.
        blocks = tuple(own + [(s.gpus[0][0], len(s.gpus[0][1])) for s in sats if len(s.gpus) == 1])
    if not sats:
        return r if blocks is None else replace(r, release_blocks=blocks)
    return replace(r, nodes=tuple(dict.fromkeys([*r.nodes, *(n for s in sats for n in s.nodes)])),
                   gpus=r.gpus + tuple(g for s in sats for g in s.gpus), release_blocks=blocks)

_FALLBACK_MODEL_DEFAULTS = (32, 10_000)
_DEFAULT_LR = 0.1


def build_snapshot(
    nodes: Sequence[NodeRecord],
    jobs: Sequence[JobRecord],
    *,
    now: float,
    profiles: Mapping[str, ThroughputModel],
    default_model: str = "cifar10",
    progress: Mapping[str, JobRuntime] | None = None,
    refused: dict[str, str] | None = None,
    unreadable_nodes: Collection[str] = (),
    memo: SnapshotMemo | None = None,
) -> ClusterSnapshot:
    """Turn parsed nodes and jobs into the core's :class:`ClusterSnapshot` (pure).

    Rules:

    * Nodes: GPU indices ``0..gpus-1``; a GPU is free unless ``gres_used`` lists it or a job in
      ``jobs`` holds it (``squeue`` and ``sinfo`` are two calls; a GPU either says is busy is busy).
    * Finished jobs (completing included) are left out; their GPUs stay busy through ``gres_used``.
    * Only GPUs on the given nodes count: a job's GPUs elsewhere (other partitions) are dropped.
    * Rigid jobs (no ``slurm-elastic`` AdminComment) become ``Job(elastic=False)`` with
      ``min = max = requested =`` the GPUs they hold (running) or ask for (waiting), batch 1 per GPU;
      rigid jobs without GPUs on these nodes (CPU jobs, jobs elsewhere) are left out.
    * Elastic jobs: GPU range from the request, ``max`` clamped to the snapshot's GPUs (no maximum
      means all of them) and never below ``min``. ``requested_gpus`` is the GPUs held when running,
      else the GPU request clamped into the range (``min`` when there is none). Model, epoch size,
      progress and learning rate come from ``progress[job_id]`` when given (its model: the name the
      job's launcher reported, when ``profiles`` has that model; a job naming one it has not is
      planned as one that names none: its status shows the model it is planned with), else ``default_model``
      with its :data:`MODEL_DEFAULTS` per-GPU batch ``b`` (capped by the profile's
      ``max_local_batch``) and epoch size, and learning rate 0.1. The batch range is the request's,
      else ``b * min_gpus : b * max_gpus``; the base batch is ``b * requested_gpus`` clamped into it.
      A running job's per-GPU batch is the reported one, else ``ceil(global / gpus)`` capped by
      ``max_local_batch`` (global = base batch). A job that reports its per-GPU batch and declared
      no batch range keeps that per-GPU batch: it is ``b`` and the job's ``max_local_batch``.
      Run time is the reported one, else ``now - start``.
    * A job whose launcher measured its own step times (``JobRuntime.step_points``) is planned with
      its own throughput model: its profile calibrated by them
      (:func:`~slurm_elastic_predictor.calibrate.calibrate`, the profile as the prior), added to
      the snapshot's profiles as ``<model>~job<id>``; ``Job.model_points`` says from how many
      configurations (0: the prior as is).

    Args:
        nodes: from :func:`~slurm_elastic.slurm.json_records.parse_nodes` (already filtered to the managed partitions).
        jobs: from :func:`~slurm_elastic.slurm.json_records.parse_jobs` (already filtered to the managed partitions).
        now: the snapshot instant, seconds since the epoch.
        profiles: throughput models by model key.
        default_model: model assumed for elastic jobs without a reported one.
        progress: what the daemon knows per job id beyond Slurm.
        refused: when given, a job that breaks a rule below is left out (the GPUs it holds stay
            busy) and its reason stored here by job id; when ``None``, it raises.
        unreadable_nodes: nodes whose record Slurm printed oddly (left out of ``nodes``): an
            elastic job running on one is left out too (what it holds there is unknown, so it is
            neither resized nor counted at a smaller size); a rigid job keeps its GPUs elsewhere.
        memo: the jobs of the caller's last snapshot (:class:`SnapshotMemo`): a job whose inputs
            are unchanged is taken from there; replaced by this snapshot's. ``None``: every job is
            made afresh (the same snapshot, slower).

    Raises:
        ContractError: a malformed elastic AdminComment.
        SlurmJsonError: a running elastic job with no GPU on these
            nodes; a job holding a GPU index its node does not have; an unknown model.
        SnapshotError: a GPU held by two jobs; an elastic job running on an unreadable node.
    """
    progress = progress or {}
    fitted: dict[str, ThroughputModel] = {}
    node_gpus = {n.name: n.gpus for n in nodes}
    total_gpus = sum(node_gpus.values())
    held: dict[str, dict[int, str]] = {}  # node -> GPU -> the job holding it
    out_jobs: list[Job] = []
    inputs = memo.inputs if memo is not None else None
    same = inputs is not None and inputs[0] == total_gpus and inputs[1] is profiles and inputs[2] == default_model
    last = memo.jobs if memo is not None and same else {}
    kept: dict[str, _Made] = {}
    reused = 0
    finished, running = JobState.FINISHED, JobState.RUNNING
    for rec in jobs:
        state = rec.state
        if state is finished:
            continue
        runtime = progress.get(rec.job_id) if progress else None
        prior = last.get(rec.job_id) if runtime is None else None
        if prior is not None and prior.record is not rec:
            prior = None
        try:
            slots = _claimed(rec, node_gpus, held)
            if prior is not None and prior.slots == slots:
                job = _reused(prior.job, rec, now=now, unreadable=unreadable_nodes)
            else:
                prior = None
                job = _job_of(rec, slots, now=now, total_gpus=total_gpus, profiles=profiles,
                              default_model=default_model, runtime=runtime, unreadable=unreadable_nodes,
                              fitted=fitted)
        except (ElasticError, ValueError) as exc:
            if refused is None:
                raise
            refused[rec.job_id] = str(exc)
            continue
        reused += prior is not None
        if memo is not None and runtime is None and (state is not running or rec.start_time):
            # a reused job's entry stays as it was: only its run time moved
            kept[rec.job_id] = prior if prior is not None else _Made(rec, slots, job)
        if job is not None:
            out_jobs.append(job)
    if memo is not None:
        memo.jobs, memo.inputs, memo.reused = kept, (total_gpus, profiles, default_model), reused
    out_nodes = []
    for n in sorted(nodes, key=lambda r: r.name):
        gpus = tuple(range(n.gpus))
        busy = set(n.used_gpus) | set(held.get(n.name, {}))
        out_nodes.append(Node(n.name, gpus, tuple(g for g in gpus if g not in busy), n.state))
    out_jobs.sort(key=lambda j: (j.submit_time, _id_key(j.job_id)))
    return ClusterSnapshot(now=now, nodes=tuple(out_nodes), jobs=tuple(out_jobs), profiles={**profiles, **fitted})


def _claimed(rec: JobRecord, node_gpus: Mapping[NodeName, int],
             held: dict[str, dict[int, str]]) -> tuple[tuple[str, int], ...]:
    """The GPUs a running job holds on the managed nodes, checked against their nodes and the jobs
    before it, and added to ``held`` (``()`` for a job that does not run)."""
    if rec.state is not JobState.RUNNING:
        return ()
    slots: list[tuple[str, int]] = []
    for node, idx in rec.gpus:
        if node not in node_gpus:
            continue
        bad = [g for g in idx if g >= node_gpus[node]]
        if bad:
            raise SlurmJsonError(f"{DocKind.SQUEUE.value}: job {rec.job_id}: key 'gres_detail': GPU "
                                 f"indices {bad} on node {node} beyond its {node_gpus[node]} GPUs")
        slots.extend((node, g) for g in idx)
    twice = [f"{n}:{g} (held by job {held[n][g]})" for n, g in slots if g in held.get(n, {})]
    if twice:
        raise SnapshotError(f"job {rec.job_id}: GPU {', '.join(twice)} (rule: a GPU is held by one job)")
    for held_node, g in slots:
        held.setdefault(held_node, {})[g] = rec.job_id
    return tuple(slots)


def _reused(job: Job | None, rec: JobRecord, *, now: float, unreadable: Collection[str]) -> Job | None:
    """The job made last snapshot from the same record and GPUs (:class:`SnapshotMemo`), at ``now``."""
    if job is None or rec.state is not JobState.RUNNING:
        return job
    if job.elastic:
        _check_readable(rec, unreadable)
    return job.ran_for(max(0.0, now - float(rec.start_time or 0)))


def _job_of(rec: JobRecord, slots: tuple[tuple[str, int], ...], *, now: float, total_gpus: int,
            profiles: Mapping[str, ThroughputModel], default_model: str, runtime: JobRuntime | None,
            unreadable: Collection[str] = (), fitted: dict[str, ThroughputModel]) -> Job | None:
    """One job of the snapshot, holding ``slots`` (:func:`_claimed`); ``None``: a rigid job without
    GPUs here."""
    running = rec.state is JobState.RUNNING
    request = parse_elastic_request(rec.admin_comment, job_id=rec.job_id)
    if request is None:
        return _rigid_job(rec, slots, running, now)
    if running:
        _check_readable(rec, unreadable)
    job = _elastic_job(rec, request, slots, running, now=now, total_gpus=total_gpus, profiles=profiles,
                       default_model=default_model, runtime=runtime, fitted=fitted)
    if runtime is None:
        return job
    # What its reports changed is the user's word: the trust guard plans from the job without them too.
    unreported = _elastic_job(rec, request, slots, running, now=now, total_gpus=total_gpus, profiles=profiles,
                              default_model=default_model, runtime=None, fitted={})
    return job._unchecked(prior=unreported)


def _check_readable(rec: JobRecord, unreadable: Collection[str]) -> None:
    """A running elastic job is planned only from nodes whose records read."""
    odd = sorted({*rec.nodes, *(n for n, _ in rec.gpus)} & set(unreadable)) if unreadable else []
    if odd:
        raise SnapshotError(f"job {rec.job_id}: runs on node {','.join(odd)}, whose record Slurm printed oddly "
                            "(rule: a job is planned from nodes that read; it is left out until they do)")


def _id_key(job_id: str) -> tuple[int, str]:
    if job_id.isascii() and job_id.isdigit():
        return int(job_id), job_id
    head = re.match(r"^\d+", job_id)
    return (int(head.group(0)) if head else 0, job_id)


def _rigid_job(rec: JobRecord, slots: Sequence[tuple[str, int]], running: bool, now: float) -> Job | None:
    k = len(slots) if running else rec.requested_gpus
    if k < 1:
        return None
    start = float(rec.start_time) if running and rec.start_time else None
    return Job(
        job_id=rec.job_id, user=rec.user, account=rec.account, submit_time=float(rec.submit_time or 0),
        state=rec.state, min_gpus=k, max_gpus=k, min_batch=k, max_batch=k, base_batch=k, base_lr=_DEFAULT_LR,
        requested_gpus=k, max_local_batch=1, elastic=False, placement=Placement.of(slots),
        local_batch=1 if running else 0, start_time=start,
        run_time=max(0.0, now - start) if start is not None else 0.0,
    )


def _elastic_job(rec: JobRecord, req: ElasticRequest, slots: Sequence[tuple[str, int]], running: bool, *,
                 now: float, total_gpus: int, profiles: Mapping[str, ThroughputModel], default_model: str,
                 runtime: JobRuntime | None, fitted: dict[str, ThroughputModel]) -> Job:
    if running and not slots:
        raise SlurmJsonError(f"{DocKind.SQUEUE.value}: job {rec.job_id}: key 'gres_detail': the elastic job "
                             "runs but holds no GPU on the managed nodes (rule: elastic jobs run on GPUs)")
    rt = runtime or JobRuntime()
    model, profile, points = job_throughput_model(rec.job_id, rt.model, rt.step_points, profiles, default_model)
    b_default, epoch_default = MODEL_DEFAULTS.get(model, _FALLBACK_MODEL_DEFAULTS)
    if points:
        fitted[profile.name] = profile
    max_local = max(1, profile.max_local_batch)
    b = max(1, min(b_default, max_local))
    if req.min_batch is None and rt.local_batch:
        # A launcher job that declared no batch range keeps its own per-GPU batch (the launcher's
        # policy): the planner sees it as both the job's per-GPU batch and its limit.
        b = max_local = rt.local_batch
    min_gpus = req.min_gpus
    max_gpus = max(min_gpus, min(req.max_gpus or total_gpus, total_gpus) if total_gpus else min_gpus)
    k = len(slots)
    asked = rec.requested_gpus
    requested = k if running else min(max(asked or min_gpus, min_gpus), max_gpus)
    min_batch = req.min_batch if req.min_batch is not None else b * min_gpus
    if req.max_batch is not None:
        max_batch = req.max_batch
    elif req.min_batch is not None:
        max_batch = max(req.min_batch, b * max_gpus)
    else:
        max_batch = b * max_gpus
    base_batch = min(max(b * requested, min_batch), max_batch)
    local = 0
    if running:
        local = rt.local_batch or min(max_local, max(1, math.ceil(base_batch / k)))
    start = float(rec.start_time) if rec.start_time and rec.state is not JobState.PENDING else None
    run_time = rt.run_time if rt.run_time is not None else (max(0.0, now - start) if running and start else 0.0)
    last_change = rt.last_change_time
    if last_change is None and running:
        last_change = float(rec.resize_time or rec.start_time or now)
    return Job(
        job_id=rec.job_id, user=rec.user, account=rec.account, submit_time=float(rec.submit_time or 0),
        state=rec.state, min_gpus=min_gpus, max_gpus=max_gpus, min_batch=min_batch, max_batch=max_batch,
        base_batch=base_batch, base_lr=rt.base_lr or _DEFAULT_LR, requested_gpus=requested,
        max_local_batch=max_local, mode=req.mode, elastic=True, epoch_size=rt.epoch_size or epoch_default,
        samples_processed=rt.samples_processed, target_epochs=rt.target_epochs,
        observed_throughput=rt.observed_throughput, placement=Placement.of(slots), local_batch=local,
        start_time=start, run_time=run_time, last_change_time=last_change,
        samples_at_last_change=rt.samples_at_last_change, model=profile.name if points else model,
        model_points=points, progress=rt.progress,
        release_blocks=_release_blocks(rec.release_blocks, slots) if running else None,
        can_rebatch=COMMENT_KEY in rec.comment, can_grow=rt.can_grow, preemptions=max(0, rec.restart_count),
    )


def job_throughput_model(job_id: str, named: str | None, measured: Sequence[StepPoint],
                         profiles: Mapping[str, ThroughputModel],
                         default_model: str) -> tuple[str, ThroughputModel, int]:
    """The model a job is planned as, its throughput model, and from how many measured configurations.

    The prior is the profile of the model the job names (``named``, its launcher's report) when
    ``profiles`` has it, else the ``default_model``'s. With measurements (``measured``, the job's
    :func:`~slurm_elastic.observe.job_reports.step_points`) the prior is calibrated from them
    (:func:`~slurm_elastic_predictor.calibrate.calibrate`) and named ``<model>~job<id>``; a job that
    names no profiled model has the default's profile as a stand-in, whose batch axis is stretched
    onto the job's (``prior_batch``: the default's typical per-GPU batch); a named model's profile
    is used as is. Shared by the snapshot and the allocation report's predictor error.

    Raises:
        SlurmJsonError: the default model has no profile.
    """
    own = named if named is not None and named in profiles else None  # named, and the site has it
    model = own or default_model  # named without a profile at the site: as if unnamed
    if model not in profiles:
        raise SlurmJsonError(f"job {job_id}: model {model!r} has no throughput profile (known: {sorted(profiles)})")
    if not measured:
        return model, profiles[model], 0
    fit = calibrate(profiles[model], measured, name=f"{model}~job{job_id}",
                    prior_batch=None if own else MODEL_DEFAULTS.get(model, _FALLBACK_MODEL_DEFAULTS)[0])
    return model, fit.model, fit.points


def _release_blocks(blocks: tuple[tuple[NodeName, int], ...] | None,
                    slots: Sequence[tuple[str, int]]) -> tuple[tuple[NodeName, int], ...] | None:
    """The blocks on the managed nodes (GPUs elsewhere are not the planner's to free)."""
    if blocks is None:
        return None
    nodes = {n for n, _ in slots}
    return tuple(b for b in blocks if b[0] in nodes)
