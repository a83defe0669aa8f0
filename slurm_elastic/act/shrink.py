"""SHRINK of a launcher job in place: the leavers ordered out, then the freed nodes given back.

This module owns everything a shrink does, from the order to the node release:

* **The order** (:func:`shrink`): the workers on the GPUs to free are ordered out (a step
  boundary; :func:`~slurm_elastic.slurm.satellites.leaving` picks them). Satellites whose workers
  all left end by themselves (their batch script ends with their task).
* **The node release**, when the job's own allocation loses nodes: durable and deferred, so the
  daemon never blocks and a killed leaver never fails the job. The order journals the release as
  owed (the store's releases); :func:`release_due_nodes`, at every poll, tells Slurm
  ``scontrol update JobId=J NodeList=<kept nodes>`` once every leaver reported it left the group
  (plus :data:`EXIT_GRACE_S` for its process to exit), or without such reports
  :data:`SWITCH_GRACE_S` after the job reports training in its new world, and at most
  :data:`RELEASE_TIMEOUT_S` after the order. A release still owed when Slurm requeued the job and
  started it again is dropped: the new run's workers started again, on the nodes of its new
  allocation, and the nodes the earlier run kept are not the new run's to keep.
* **Lost workers given back** (:func:`give_back_lost`): workers a running job's recovery report
  names lost are ordered out of its world (the survivors already train without them), and a node
  of the job's own allocation (never the batch host) whose workers were all lost is released like
  a shrink's, journaled as a SHRINK. A GPU of a node that keeps other workers (or of a satellite
  that keeps other workers) cannot be freed: Slurm frees none of a node but the whole node. It is
  handed to ``replace`` (:meth:`slurm_elastic.act.replace.Replacements.replace`), which starts a
  new worker on it (docs/slurm-acting.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial

from slurm_elastic.act.context import Hands
from slurm_elastic.act.launcher import batch_of, channel_of, current_workers
from slurm_elastic.channel import Channel
from slurm_elastic.core.actions import Action, ActionKind
from slurm_elastic.core.model import JobState, Placement
from slurm_elastic.errors import ElasticError
from slurm_elastic.slurm.records import JobRecord, run_start_of
from slurm_elastic.slurm.satellites import leaving
from slurm_elastic.slurm.steps import Steps

EXIT_GRACE_S = 3.0
"""Seconds a leaver that reported it left has to exit before its node is released."""
SWITCH_GRACE_S = 20.0
"""Seconds after the job first reports training in its new world, when the leavers sent no report."""
RELEASE_TIMEOUT_S = 60.0
"""The longest wait between the order and the node release."""


def shrink(hands: Hands, a: Action, rec: JobRecord, channel: Channel, steps: Steps) -> str:
    """Carry out a SHRINK: the order, and the node release owed when the job's own nodes shrink; the note."""
    current = current_workers(hands, rec, channel)
    plan = leaving(rec, current, hands.store.workers_of(a.job_id), a.before, a.after)
    stay = [w for w in current if w not in plan.workers]
    keep = list(plan.parent_nodes) if tuple(sorted(n for n, _ in rec.gpus)) != plan.parent_nodes else None
    seq = steps.run("order", partial(channel.send, "resize", stay, batch_of(a, rec)), stay=stay,
                    leaving=list(plan.workers), keep=keep)
    note = f"order {seq}: {','.join(plan.workers)} leave"
    if keep is not None:
        _owe_release(hands, steps, a.job_id, keep, len(stay), len(plan.workers))
        note += f"; the job keeps {','.join(keep)} once they have left"
    return note + (f"; satellites {','.join(plan.satellites)} end" if plan.satellites else "")


def _owe_release(hands: Hands, steps: Steps, job_id: str, keep: list[str], world: int, leavers: int) -> None:
    ordered = hands.clock()
    steps.run("owe-release", partial(hands.store.add_release, job_id, keep, world, leavers, ordered),
              keep=keep, world=world, leaving=leavers, ordered=ordered)


def release_due_nodes(hands: Hands, records: Mapping[str, JobRecord], now: float) -> list[str]:
    """Give Slurm back the nodes of the shrinks whose release fell due (module docstring); one line each."""
    store = hands.store
    lines = []
    for r in store.releases():
        jid = r.job_id
        rec = records.get(jid)
        if rec is None or rec.state is not JobState.RUNNING:
            store.drop_release(jid)
            continue
        start = run_start_of(rec)
        if start is not None and start > r.ordered:  # requeued and started again since the order
            store.drop_release(jid)
            lines.append(f"job {jid}: release of its other nodes dropped: it was requeued and started again "
                         f"since (keeping {','.join(r.nodes)} would shrink its new run)")
            continue
        rows = [p for p in store.progress_of(jid) if p.t >= r.ordered]
        left = [p.t for p in rows if p.kind == "left"]
        switched = [p.t for p in rows if p.kind in ("resize", "progress") and p.world == r.world]
        due = ((len(left) >= r.leaving and now >= max(left, default=r.ordered) + EXIT_GRACE_S)
               or (switched and now >= switched[0] + SWITCH_GRACE_S)
               or now - r.ordered >= RELEASE_TIMEOUT_S)
        if not due:
            continue
        try:
            hands.runner(["scontrol", "update", f"JobId={jid}", f"NodeList={','.join(r.nodes)}"])
            lines.append(f"job {jid} released its other nodes: keeps {','.join(r.nodes)}")
        except ElasticError as exc:
            lines.append(f"job {jid}: releasing nodes failed: {exc}")
        store.drop_release(jid)
    return lines


Replace = Callable[[JobRecord, Channel, Sequence[str], Sequence[str], Sequence[str]], "str | None"]
"""Starts lost workers again: (job, channel, survivors, lost workers, nodes given back) -> a line or None."""


def give_back_lost(hands: Hands, records: Mapping[str, JobRecord], finished: frozenset[str],
                   replace: Replace | None = None) -> list[str]:
    """Give back what workers lost by a running launcher job held (the job's recovery report
    names them, :attr:`~slurm_elastic.store.ProgressRow.lost`; module docstring), then hand the lost
    workers whose GPU was not given back to ``replace``. A job whose training ended (``finished``)
    is left alone. One line per job settled, and one per job whose workers ``replace`` started."""
    lines = []
    for jid, rec in records.items():
        if rec.state is not JobState.RUNNING or not rec.comment:
            continue
        lost = hands.store.lost_workers(jid, run_start_of(rec))
        if not lost or jid in finished:
            continue
        try:
            channel = channel_of(rec)
            if channel is None:
                continue
            current = current_workers(hands, rec, channel)
            gone = [w for w in current if w in lost]
            if not gone:
                continue
            line, stay, freed = _give_back(hands, rec, channel, current, gone)
            lines.append(line)
            again = replace(rec, channel, stay, gone, freed) if replace is not None else None
            if again:
                lines.append(again)
        except ElasticError as exc:
            lines.append(f"job {jid}: lost workers {','.join(sorted(lost))} not settled: {exc}")
    return lines


def _give_back(hands: Hands, rec: JobRecord, channel: Channel, current: list[str],
               gone: list[str]) -> tuple[str, list[str], list[str]]:
    """Order the lost workers out, and release the job's nodes they all ran on; the line, the
    survivors and the nodes given back."""
    store = hands.store
    layout = store.workers_of(rec.job_id)
    stay = [w for w in current if w not in gone]
    own = sorted({layout[w][0] for w in current if w in layout and layout[w][1] == rec.job_id})
    kept = sorted({layout[w][0] for w in stay if w in layout and layout[w][1] == rec.job_id}
                  | ({rec.batch_host} if rec.batch_host else set()))
    freed = [n for n in own if n not in kept]
    after = Placement.of((n, g) for n, gs in rec.gpus if n not in freed for g in gs)
    action = Action(ActionKind.SHRINK, rec.job_id, rec.placement, after, reason=f"workers {','.join(gone)} lost")
    aid = store.begin_action(action, hands.clock())
    steps = Steps(store, aid, ActionKind.SHRINK.value, hands.clock, hands.crash)
    keep = kept if freed else None
    seq = steps.run("order", partial(channel.send, "resize", stay), stay=stay, leaving=gone, keep=keep)
    note = f"order {seq}: lost workers {','.join(gone)} out of the job's order"
    if keep is not None:
        _owe_release(hands, steps, rec.job_id, keep, len(stay), 0)
        note += f"; node {','.join(freed)} given back"
    store.finish_action(aid, True, hands.clock(), note)
    return f"job {rec.job_id}: {note}", stay, freed
