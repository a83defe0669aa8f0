"""The store's rows, typed: what each table holds as the daemon reads it back, and the JSON codecs of
the actions and plans kept in it (:class:`~slurm_elastic.store.Store` reads and writes them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, NamedTuple

from slurm_elastic.core.actions import Action, ActionKind
from slurm_elastic.core.model import JobId, JobPlan, NodeName, Placement, Plan, Unplaced
from slurm_elastic.errors import ElasticError


class StoreError(ElasticError):
    """The state database is unusable (wrong schema version, corrupt row)."""


@dataclass(frozen=True, slots=True)
class ProgressRow:
    """One verified report of a job's launcher, as stored (the wire form is the launcher's).

    Attributes:
        t: when the launcher wrote it (seconds since the epoch).
        kind: ``progress`` (a window of steps at one size), ``resize`` (the first window of a new
            world; its throughput includes the pause), ``end`` (training finished) or ``left``
            (a dropped worker's farewell).
        samples: samples trained so far by the whole job.
        world: workers (one per GPU) in the job's world when it was written.
        global_batch: samples per optimizer step.
        throughput: samples/s over the window, ``None`` if not measured.
        loss: mean training loss over the window, ``None`` if not reported.
        metric: the validation metric (``ElasticJob.evaluate``), ``None`` if not reported.
        pause_s: a resize report's pause (seconds), else ``None``.
        epoch_size: samples per epoch, ``None`` if not reported.
        lost: a recovery's resize report: the workers the survivors went on without.
        nodes: how many nodes the world ran on (the daemon's layout of the workers the report
            names), ``None`` when unknown.
        model: the model's name the report gives (the user's), ``None`` if it names none.
        params: the model's parameter count the report gives, ``None`` if it gives none.
        epochs: the epochs the job trains, as its report says (what its script runs), ``None`` if
            it does not say.
        submitted_epochs: in the first report of a run whose script trains other epochs or another
            per-worker batch than ``slurm-elastic submit`` said: the ``--epochs`` it was submitted
            with; ``None`` otherwise.
        submitted_local_batch: likewise, the ``--local-batch`` it was submitted with.
    """

    t: float
    kind: str
    samples: int
    world: int
    global_batch: int
    throughput: float | None = None
    loss: float | None = None
    metric: float | None = None
    pause_s: float | None = None
    epoch_size: int | None = None
    lost: tuple[str, ...] = ()
    nodes: int | None = None
    model: str | None = None
    params: int | None = None
    epochs: float | None = None
    submitted_epochs: int | None = None
    submitted_local_batch: int | None = None


PROGRESS_COLUMNS = ("t, kind, samples, world, global_batch, throughput, loss, metric, pause_s, epoch_size, lost, "
                     "nodes, model, params, epochs, submitted_epochs, submitted_local_batch")


def progress_row(r: tuple[Any, ...]) -> ProgressRow:
    (t, kind, samples, world, batch, throughput, loss, metric, pause, epoch_size, lost, nodes, model, params, epochs,
     said_epochs, said_batch) = r
    return ProgressRow(t, kind, samples, world, batch, throughput, loss, metric, pause, epoch_size,
                       tuple(w for w in str(lost).split(",") if w), nodes, model, params, epochs, said_epochs,
                       said_batch)


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One action as journaled."""

    id: int
    round_id: int | None
    action: Action
    state: str
    message: str
    started: float
    finished: float | None


def _placement_json(p: Placement) -> list[list[Any]]:
    return [[node, list(gpus)] for node, gpus in p.slots]


def _placement_from(raw: list[list[Any]]) -> Placement:
    return Placement(tuple((NodeName(str(n)), tuple(int(g) for g in gs)) for n, gs in raw))


def action_to_json(a: Action) -> str:
    """Serialise an action (stable key order)."""
    return json.dumps({
        "kind": a.kind.value, "job_id": a.job_id, "before": _placement_json(a.before),
        "after": _placement_json(a.after), "global_batch": a.global_batch, "local_batch": a.local_batch,
        "accumulation": a.accumulation, "lr": a.lr, "reason": a.reason,
    }, sort_keys=True)


def action_from_json(text: str) -> Action:
    """Inverse of :func:`action_to_json`.

    Raises:
        StoreError: the text is not a journaled action.
    """
    try:
        d = json.loads(text)
        return Action(ActionKind(d["kind"]), JobId(d["job_id"]), _placement_from(d["before"]),
                      _placement_from(d["after"]), int(d["global_batch"]), int(d["local_batch"]),
                      int(d["accumulation"]), float(d["lr"]), str(d["reason"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise StoreError(f"journaled action is malformed: {exc}: {text[:200]!r}") from exc


def plan_to_json(plan: Plan) -> str:
    """Serialise a plan for the round record."""
    return json.dumps({
        "policy": plan.policy, "score": plan.score, "notes": list(plan.notes),
        "jobs": [{"job_id": p.job_id, "placement": _placement_json(p.placement), "global_batch": p.global_batch,
                  "local_batch": p.local_batch, "accumulation": p.accumulation, "lr": p.lr} for p in plan.jobs],
        "unplaced": [{"job_id": u.job_id, "reason": u.reason, "dropped": u.dropped} for u in plan.unplaced],
    }, sort_keys=True)


def plan_from_json(text: str) -> Plan:
    """Inverse of :func:`plan_to_json`.

    Raises:
        StoreError: the text is not a recorded plan.
    """
    try:
        d = json.loads(text)
        jobs = tuple(JobPlan(JobId(str(j["job_id"])), _placement_from(j["placement"]), int(j["global_batch"]),
                             int(j["local_batch"]), int(j["accumulation"]), float(j["lr"])) for j in d["jobs"])
        unplaced = tuple(Unplaced(JobId(str(u["job_id"])), str(u["reason"]), bool(u["dropped"]))
                         for u in d["unplaced"])
        score = d["score"]
        return Plan(str(d["policy"]), jobs, unplaced, None if score is None else float(score),
                    tuple(str(n) for n in d["notes"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise StoreError(f"recorded plan is malformed: {exc}: {text[:200]!r}") from exc


@dataclass(frozen=True, slots=True)
class RoundRecord:
    """One planning round as recorded (:meth:`Store.record_round`).

    Attributes:
        id: its row id (rounds are numbered in the order they were recorded).
        t: when it ran (seconds since the epoch).
        policy: the name of the policy that planned it.
        summary: the round's one-line summary.
        plan: the plan it made.
        violations: the plan's rule violations the round found (empty for a valid plan).
    """

    id: int
    t: float
    policy: str
    summary: str
    plan: Plan
    violations: tuple[str, ...]


def round_of(r: tuple[Any, ...]) -> RoundRecord:
    try:
        violations = tuple(str(v) for v in json.loads(r[5]))
    except (ValueError, TypeError) as exc:
        raise StoreError(f"round {r[0]}: recorded violations are malformed: {exc}") from exc
    return RoundRecord(int(r[0]), float(r[1]), str(r[2]), str(r[3]), plan_from_json(r[4]), violations)


@dataclass(frozen=True, slots=True)
class Release:
    """A node release a shrink ordered and the daemon still owes (:meth:`Store.add_release`).

    Attributes:
        job_id: the launcher job shrunk.
        nodes: the nodes it keeps once its leavers have left (the others are given back).
        world: the workers of its group after the shrink.
        leaving: how many workers the shrink ordered out.
        ordered: when the shrink's order was written (seconds since the epoch).
    """

    job_id: str
    nodes: tuple[str, ...]
    world: int
    leaving: int
    ordered: float


@dataclass(frozen=True, slots=True)
class ReportInputs:
    """What the allocation report takes from the store (:meth:`Store.report_inputs`), the keyword
    arguments of the same names of :func:`slurm_elastic.reports.allocation.allocation_tables`.

    Attributes:
        journal: each job's journaled actions, oldest first, by job id.
        progress: each job's progress rows, oldest first, by job id (empty: it never reported).
        satellites: every satellite the store knows, ended or not: satellite job id -> parent job id.
    """

    journal: dict[str, list[JournalEntry]]
    progress: dict[str, list[ProgressRow]]
    satellites: dict[str, str]


class Step(NamedTuple):
    """One journaled step of an action (:meth:`Store.add_step`)."""

    name: str
    """The step's name (``sbatch``, ``order``, ...; :mod:`slurm_elastic.slurm.steps`)."""
    detail: dict[str, Any]
    """What it did or looked for (its own JSON object: the Slurm ids it produced, the argv, ...)."""
    t: float
    """When it was journaled (seconds since the epoch)."""
