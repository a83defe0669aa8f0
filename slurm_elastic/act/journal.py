"""The journal's reconcile: the actions a previous daemon began and never finished, settled.

Each action is written to the store before its first command and again after its last, and each
of its steps (a command, an order, a satellite's submission with its token, the id it produced)
before it runs (:mod:`slurm_elastic.slurm.steps`), so a daemon that dies in between finds it on
restart. This module owns how it is settled (:func:`reconcile_journal`), judged by its journaled
steps and what the job and Slurm say now: a requeue interrupted after ``requeuehold`` is carried
on (the job is never left held); a grow whose satellites were all submitted (found by id, or in
Slurm by their token) adopts them, else it cancels the ones found and withdraws their workers
from the job's order; a shrink or rebatch whose order the job holds is done, with a shrink's node
release owed again if that was not written; an action with no step journaled is judged by Slurm
alone (:func:`reconcile`, which the read-only tools use too).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from functools import partial

from slurm_elastic.act import commands, replace
from slurm_elastic.act.context import Hands
from slurm_elastic.act.launcher import channel_of, withdraw
from slurm_elastic.contract import satellite_marker, satellite_token
from slurm_elastic.core.actions import Action, ActionKind
from slurm_elastic.core.model import ClusterSnapshot, Job, JobState
from slurm_elastic.errors import ElasticError
from slurm_elastic.slurm.records import JobRecord
from slurm_elastic.slurm.satellites import mark_argv
from slurm_elastic.slurm.steps import Steps, step_of
from slurm_elastic.store import JournalEntry, Step, Store

log = logging.getLogger(__name__)

Journaled = list[Step]


def reconcile_journal(hands: Hands, snapshot: ClusterSnapshot, records: Mapping[str, JobRecord]) -> list[str]:
    """Settle the actions a previous daemon began and never finished (module docstring); one line each."""
    store = hands.store
    jobs = {j.job_id: j for j in snapshot.jobs}
    lines = []
    for entry in store.unfinished_actions():
        a = entry.action
        steps = store.steps_of(entry.id)
        names = [n for n, _, _ in steps]
        try:
            if not steps:
                ok, msg = judged(a, jobs.get(a.job_id))
            elif "order" in names and "replaces" in next(d for n, d, _ in steps if n == "order"):
                ok, msg = replace.settle(hands, a, steps, records)
            elif "order" in names and a.kind is ActionKind.GROW:
                ok, msg = _settle_grow(hands, a, steps, records)
            elif "order" in names:
                ok, msg = _settle_order(hands, a, steps, records)
            else:
                ok, msg = _settle_commands(hands, entry, steps, jobs.get(a.job_id), records.get(a.job_id))
        except ElasticError as exc:
            ok, msg = False, f"could not be settled: {exc}"
        store.finish_action(entry.id, ok, hands.clock(), msg)
        lines.append(f"{a.kind.value} job {a.job_id}: {msg}")
    return lines


def _settle_commands(hands: Hands, entry: JournalEntry, steps: Journaled, job: Job | None,
                     rec: JobRecord | None) -> tuple[bool, str]:
    """A start, preemption, drop, or a resize by requeue: a requeue interrupted after ``requeuehold``
    is carried on from its last journaled command (each after ``requeuehold`` is safe to
    repeat), so the job is never left held; anything else is judged by Slurm."""
    a = entry.action
    names = [n for n, _, _ in steps]
    if "requeuehold" not in names or rec is None or rec.state is JobState.RUNNING:
        return judged(a, job)
    last = list(steps[-1][1]["argv"])
    if step_of(last) == "requeuehold":
        commands.wait_requeued(hands, a.job_id)  # it ran (the job no longer runs): wait until it is back
        todo = _commands_after(hands.store, entry, last, rec)
    else:
        todo = [last, *_commands_after(hands.store, entry, last, rec)]
    run = Steps(hands.store, entry.id, a.kind.value, hands.clock, hands.crash)
    for argv in todo:
        try:
            run.run(step_of(argv), partial(commands.run, hands, argv), argv=argv)
        except ElasticError as exc:
            if step_of(argv) != "release":  # releasing a job that is no longer held fails harmlessly
                raise
            log.info("job %s: %s", a.job_id, exc)
    return True, f"resumed after a restart: {', '.join(step_of(v) for v in todo)} done"


def _commands_after(store: Store, entry: JournalEntry, argv: Sequence[str], rec: JobRecord | None) -> list[list[str]]:
    """The commands of the requeue path that follow ``argv`` (its journaled shape is reused)."""
    a = entry.action
    shaped = next((list(d["argv"]) for n, d, _ in store.steps_of(entry.id) if n == "shape"), None)
    if shaped is None:
        shaped = commands.shape_argv(a.job_id, a.after, rec)
    path = commands.requeue_path(a.job_id, shaped)
    names = [step_of(v) for v in path]
    return path[names.index(step_of(argv)) + 1:]


def _settle_grow(hands: Hands, a: Action, steps: Journaled, records: Mapping[str, JobRecord]) -> tuple[bool, str]:
    """An in-place grow: adopt its satellites when every one was submitted (by journaled id or by
    its token in Slurm), else cancel those found and withdraw the joiners from the job's order."""
    store = hands.store
    order = next(d for n, d, _ in steps if n == "order")
    planned = {str(s["token"]): s for s in order["satellites"]}
    found = {str(d["token"]): str(d["sat_id"]) for n, d, _ in steps if n == "submitted"}
    job = records.get(a.job_id)
    for other in records.values():  # submitted, but the daemon died before it learnt the id
        token = satellite_token(other.comment)
        if token in planned and token not in found and job is not None and other.user == job.user:
            found[token] = other.job_id
    known = store.satellites(include_ended=True)
    if job is not None and job.state is JobState.RUNNING and set(found) == set(planned):
        for token, sat_id in found.items():
            sat = planned[token]
            if sat_id not in known:
                store.add_satellite(sat_id, a.job_id, hands.clock(),
                                    [(str(w), str(sat["node"])) for w in sat["workers"]])
            sat_rec = records.get(sat_id)
            if sat_rec is None or sat_rec.admin_comment != satellite_marker(a.job_id):
                hands.runner(mark_argv(sat_id, a.job_id))
        return True, f"resumed after a restart: satellites {','.join(sorted(found.values()))} adopted"
    for sat_id in sorted(found.values()):
        hands.cancel(sat_id)
    withdrawn = withdraw(hands, job, set(map(str, order["joiners"]))) if job is not None else "job gone"
    return False, (f"undone after a restart: {len(found)} of {len(planned)} satellites submitted"
                   f"{' (cancelled: ' + ','.join(sorted(found.values())) + ')' if found else ''}; {withdrawn}")


def _settle_order(hands: Hands, a: Action, steps: Journaled, records: Mapping[str, JobRecord]) -> tuple[bool, str]:
    """A shrink or a rebatch: done when the job holds its order (the latest signed one of its
    run names the journaled workers), with a shrink's node release owed again if that step did
    not run. An order of an earlier run is moot: the requeue ended the workers it named."""
    store = hands.store
    order = next(d for n, d, _ in steps if n == "order")
    workers: list[str] = list(order.get("stay") or order.get("workers") or [])
    channel = channel_of(records.get(a.job_id))
    history = channel.orders_of_run() if channel is not None else []
    if not history or list(history[-1].workers) != workers:
        return False, "not done after a restart: the job never got the order"
    keep: list[str] | None = order.get("keep")
    if keep and a.job_id not in {r.job_id for r in store.releases()}:
        store.add_release(a.job_id, list(keep), len(workers), len(order["leaving"]),
                          next(t for n, _, t in steps if n == "order"))
        return True, (f"done after a restart: the job holds order {history[-1].seq}; it keeps "
                      f"{','.join(keep)} once the leavers have left (release owed again)")
    return True, f"done after a restart: the job holds order {history[-1].seq}"


def judged(a: Action, job: Job | None) -> tuple[bool, str]:
    """Whether Slurm shows ``a`` done: a START or a resize when the job runs at the target GPU count,
    a PREEMPT when it waits, a DROP when it is gone."""
    if a.kind is ActionKind.DROP:
        ok = job is None
    elif a.kind is ActionKind.PREEMPT:
        ok = job is not None and job.state is JobState.PENDING
    else:
        ok = job is not None and job.state is JobState.RUNNING and job.num_gpus == a.after.num_gpus
    return ok, "found done after a restart" if ok else "found not done after a restart"


def reconcile(store: Store, snapshot: ClusterSnapshot, clock: Callable[[], float]) -> list[str]:
    """Settle unfinished actions by what Slurm shows now, alone (no step is resumed or undone; the
    acting daemon uses :func:`reconcile_journal`). Nothing is re-executed.

    Returns:
        One line per settled action.
    """
    jobs = {j.job_id: j for j in snapshot.jobs}
    lines = []
    for entry in store.unfinished_actions():
        ok, msg = judged(entry.action, jobs.get(entry.action.job_id))
        store.finish_action(entry.id, ok, clock(), msg)
        lines.append(f"{entry.action.kind.value} job {entry.action.job_id}: {msg}")
    return lines
