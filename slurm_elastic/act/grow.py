"""GROW of a launcher job in place: a signed order naming the new world, and one satellite per node.

This module owns how a job that runs the launcher (its comment names an order channel,
:mod:`slurm_elastic.channel`) grows without a restart: one satellite allocation per node with new
GPUs, submitted as the job's user with the job's own join script
(:mod:`slurm_elastic.slurm.satellites`), then marked as the job's; before them a signed order
naming the new world (the old workers keep training until the joiners are ready, and a daemon
that dies before the satellites are submitted leaves no allocation behind, only an order the next
one withdraws). The join script and the environment file are read once, checked, before the
order, and sbatch gets sealed copies of those bytes, never their paths. Each satellite's token
is journaled before its sbatch, so a later daemon finds a satellite whose id was never learnt.

A satellite's sbatch runs as the job's user, who can stall it (stop their own process, make its
working directory hang), so it has :data:`USER_COMMAND_TIMEOUT_S`, and a grow stops at its first
satellite that times out (issue 37, item 2). After such a timeout the grows of every job of that
user are refused at once, without a command, for :data:`USER_BACKOFF_S` (doubling at each further
timeout, at most :data:`USER_BACKOFF_MAX_S`; an sbatch of theirs that answers ends it): the
refusal names the job, the command and until when. Keyed by user, not job: a user with many jobs
stalls the loop once per back-off, not once per job. A timed-out sbatch that reached slurmctld
leaves a satellite carrying its journaled token, which :mod:`slurm_elastic.act.satellite_upkeep`
cancels as an orphan. What becomes of a satellite after its grow is that module's.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable
from functools import partial

from slurm_elastic.act.context import Hands
from slurm_elastic.act.launcher import batch_of, current_workers
from slurm_elastic.channel import Channel, ChannelError
from slurm_elastic.core.actions import Action
from slurm_elastic.errors import ElasticError
from slurm_elastic.slurm.records import JobRecord
from slurm_elastic.slurm.runner import Command, CommandTimeout, sealed_copy
from slurm_elastic.slurm.satellites import (
    Inputs,
    NotExpressible,
    as_user,
    env_file,
    mark_argv,
    new_satellites,
    read_env_file,
    sbatch_argv,
)
from slurm_elastic.slurm.steps import Steps

USER_COMMAND_TIMEOUT_S = 10.0
"""Seconds a command run as a job's user (a satellite's sbatch) may take before it is killed. An
sbatch answers in well under a second on an idle controller; one retrying a busy slurmctld is
stopped here rather than at the 30 s of root's commands (see the module docstring)."""
USER_BACKOFF_S = 60.0
"""Seconds a user's grows are refused after a command of theirs timed out (the first time)."""
USER_BACKOFF_MAX_S = 3600.0
"""The longest back-off: it doubles at each timeout in a row, up to this."""


def job_id_of(sbatch_out: str) -> str:
    """The job id ``sbatch --parsable`` printed (``ID`` or ``ID;CLUSTER``).

    Raises:
        NotExpressible: it printed something else.
    """
    head = sbatch_out.strip().split(";")[0]
    if not head.isascii() or not head.isdigit() or len(head) > 18:
        raise NotExpressible(f"sbatch printed {sbatch_out[:80]!r}, not a job id")
    return head


class Grows:
    """Grows launcher jobs in place; keeps each user's back-off (module docstring)."""

    def __init__(self, hands: Hands) -> None:
        self.hands = hands
        self.user_command_timeout_s = USER_COMMAND_TIMEOUT_S
        self._backoff: dict[str, tuple[float, float, str]] = {}  # user -> (until, its length in s, why)

    def grow(self, a: Action, rec: JobRecord, channel: Channel, steps: Steps) -> str:
        """Carry out a GROW (module docstring); the note.

        Raises:
            ElasticError: it could not be done (the satellites submitted are cancelled and the
                joiners withdrawn from the job's order first).
        """
        hands = self.hands
        self._backing_off(a.job_id, rec.user)
        try:
            script = channel.read_join_script()
        except ChannelError as exc:
            raise NotExpressible(f"job {a.job_id}: cannot grow in place: {exc}") from exc
        env = read_env_file(rec, env_file(channel.join_path))
        current = current_workers(hands, rec, channel)
        sats = new_satellites(a.before, a.after, hands.store.workers_of(a.job_id))
        joiners = [w for sat in sats for w in sat.workers]
        tokens = [secrets.token_hex(16) for _ in sats]
        seq = steps.run("order", partial(channel.send, "resize", [*current, *joiners], batch_of(a, rec)),
                        current=current, joiners=joiners,
                        satellites=[{"node": s.node, "workers": list(s.workers), "token": t}
                                    for s, t in zip(sats, tokens, strict=True)])
        submitted: list[str] = []
        try:
            with contextlib.ExitStack() as fds:
                inputs = Inputs(_sealed(fds, script, "join"), _sealed(fds, env, "env"), channel.join_path.name)
                for sat, token in zip(sats, tokens, strict=True):
                    argv = Command(sbatch_argv(rec, sat, inputs, as_user=as_user(rec.user, hands.me),
                                               client=hands.client, token=token),
                                   pass_fds=inputs.fds, timeout=self.user_command_timeout_s)
                    out = self._as_user(a.job_id, rec.user, partial(steps.run, "sbatch", partial(hands.runner, argv),
                                                                    token=token, node=sat.node,
                                                                    workers=list(sat.workers)))
                    sat_id = job_id_of(out)
                    steps.note("submitted", token=token, sat_id=sat_id)
                    hands.store.add_satellite(sat_id, a.job_id, hands.clock(), [(w, sat.node) for w in sat.workers])
                    submitted.append(sat_id)
                    steps.run("mark", partial(hands.runner, mark_argv(sat_id, a.job_id)), sat_id=sat_id)
        except ElasticError:
            for sat_id in submitted:
                hands.cancel(sat_id)
            channel.send("resize", current)  # withdraw the joiners
            raise
        return f"order {seq}; satellites {','.join(submitted)} with workers {','.join(joiners)}"

    def _backing_off(self, job_id: str, user: str) -> None:
        """Refuse a grow of ``user``'s job while a command of theirs that timed out backs them off.

        Raises:
            NotExpressible: they are backing off (the message says why and until when).
        """
        now = self.hands.clock()
        until, _, why = self._backoff.get(user, (0.0, 0.0, ""))
        if now < until:
            raise NotExpressible(f"job {job_id}: not grown in place: the grows of user {user} are not tried for "
                                 f"{until - now:.0f} s more (user {user} backs off: {why})")

    def _as_user(self, job_id: str, user: str, run: Callable[[], str]) -> str:
        """Run a command that runs as ``user`` (``run``); a timeout starts or doubles their back-off
        (module docstring), an answer ends it.

        Raises:
            NotExpressible: it timed out (the message names the back-off).
            ElasticError: it failed otherwise.
        """
        try:
            out = run()
        except CommandTimeout as exc:
            _, last, _ = self._backoff.get(user, (0.0, 0.0, ""))
            length = min(USER_BACKOFF_MAX_S, 2 * last) if last else USER_BACKOFF_S
            why = f"job {job_id}'s satellite sbatch gave no answer within {self.user_command_timeout_s:g} s"
            self._backoff[user] = (self.hands.clock() + length, length, why)
            raise NotExpressible(f"job {job_id}: {exc}; the grows of user {user} are not tried for the next "
                                 f"{length:.0f} s") from exc
        self._backoff.pop(user, None)
        return out


def _sealed(stack: contextlib.ExitStack, data: bytes, name: str) -> int:
    """A :func:`~slurm_elastic.slurm.runner.sealed_copy` of ``data``, closed when ``stack`` closes.

    Raises:
        NotExpressible: the copy cannot be made.
    """
    try:
        fd = sealed_copy(data, name)
    except OSError as exc:
        raise NotExpressible(f"cannot copy the job's {name} file for sbatch: {exc}") from exc
    stack.callback(os.close, fd)
    return fd
