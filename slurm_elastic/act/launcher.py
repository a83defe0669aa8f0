"""A launcher job's order channel, as the acting step uses it: its workers, its batch, a rebatch.

This module owns what every in-place resize starts from: the job's channel
(:func:`channel_of`: ``None`` for a job that never had the launcher), its current run's initial
workers and their layout (:func:`initial_workers_of`), the batch an order carries
(:func:`batch_of`), the REBATCH order (:func:`rebatch`), and withdrawing workers from the job's
world by a new order (:func:`withdraw`: the latest order wins). Grows are
:mod:`slurm_elastic.act.grow`'s, shrinks :mod:`slurm_elastic.act.shrink`'s.
"""

from __future__ import annotations

from functools import partial

from slurm_elastic.act.context import Hands
from slurm_elastic.channel import Channel, ChannelError, NoChannel
from slurm_elastic.contract import parse_elastic_request
from slurm_elastic.core.actions import Action
from slurm_elastic.core.model import JobState
from slurm_elastic.errors import ElasticError
from slurm_elastic.slurm.records import JobRecord, initial_workers
from slurm_elastic.slurm.satellites import NotExpressible
from slurm_elastic.slurm.steps import Steps


def channel_of(rec: JobRecord | None) -> Channel | None:
    """The job's order channel; ``None`` for a job that never had the launcher.

    Raises:
        NotExpressible: the job was submitted for the launcher but its channel breaks a rule or
            cannot be read now: it is not resized at all (never requeued in its stead).
    """
    if rec is None or not rec.comment:
        return None
    try:
        return Channel.open(rec.job_id, rec.user, rec.comment, rec.restart_count)
    except NoChannel:
        return None
    except ChannelError as exc:
        raise NotExpressible(f"{exc}: its launcher cannot be reached, so it is not resized "
                             "(a launcher job is never requeued instead)") from None


def initial_workers_of(hands: Hands, rec: JobRecord, channel: Channel) -> list[str]:
    """The initial worker ids of the job's run; records the run's worker layout the first time it
    is needed (a requeued job's earlier layout is replaced: its workers started again).

    Raises:
        NotExpressible: the run has orders but no recorded layout.
    """
    store = hands.store
    layout = store.workers_of(rec.job_id)
    if not layout or store.workers_run(rec.job_id) != rec.restart_count:
        if channel.orders_of_run():
            raise NotExpressible(f"job {rec.job_id}: orders were sent but its workers' nodes are unknown")
        store.add_workers(rec.job_id, initial_workers(rec), rec.restart_count)
        layout = store.workers_of(rec.job_id)
    return sorted((w for w, (_, alloc) in layout.items() if alloc == rec.job_id), key=lambda w: int(w[1:]))


def current_workers(hands: Hands, rec: JobRecord, channel: Channel) -> list[str]:
    """The workers of the job's world now: its latest order's of this run, else its initial ones."""
    return channel.workers(initial_workers_of(hands, rec, channel))


def batch_of(a: Action, rec: JobRecord) -> int:
    """The batch an order carries: 0 (keep the job's policy) unless the job declared a batch range."""
    req = parse_elastic_request(rec.admin_comment, job_id=rec.job_id)
    if req is None or req.min_batch is None:
        return 0
    return a.global_batch if req.mode.value == "endo" else a.local_batch * a.accumulation


def rebatch(hands: Hands, a: Action, rec: JobRecord, channel: Channel, steps: Steps) -> str:
    """REBATCH: an order with the same workers and the new batch (only for jobs that declared a
    batch range; others keep their own batch policy); the note."""
    batch = batch_of(a, rec)
    if not batch:
        return "nothing sent: the job declared no batch range, it keeps its own batch policy"
    workers = current_workers(hands, rec, channel)
    seq = steps.run("order", partial(channel.send, "resize", workers, batch), workers=workers, batch=batch)
    return f"order {seq}"


def withdraw(hands: Hands, job: JobRecord, gone: set[str]) -> str:
    """Order ``gone`` out of the running job's world if its latest order names any; what was done."""
    if job.state is not JobState.RUNNING:
        return "the job does not run: nothing to withdraw"
    try:
        channel = channel_of(job)
        if channel is None:
            return "the job has no launcher"
        current = current_workers(hands, job, channel)
        if not gone & set(current):
            return "its workers were not in the job's order"
        channel.send("resize", [w for w in current if w not in gone])
    except ElasticError as exc:
        return f"its workers could not be withdrawn: {exc}"
    return "its workers withdrawn"


def withdraw_satellite(hands: Hands, job: JobRecord, sat_id: str) -> str:
    """Order a satellite's workers out of its job's world (the latest order wins); what was done."""
    return withdraw(hands, job, {w for w, (_, alloc) in hands.store.workers_of(job.job_id).items()
                                 if alloc == sat_id})
