"""What every part of one worker's agent shares: who it is, the world it is in, and what it writes.

This module owns :class:`WorkerContext`: the worker's identity and the world it is in (generation,
members, rank), its status and the transitions between states, its training state, sampler and
counters (:class:`.counters.Counters`), and its outputs: the event log, rank 0's progress reports and
the one line per change of world in the job's log. It also owns the checked reads of the store's
control keys: a key that fails its MAC or its shape (:mod:`.control`) reads as absent, and the
refusal is logged once per key and payload.

The agent's parts (:mod:`.membership`, :mod:`.resize`, :mod:`.step_driver`) each take the context and
nothing of one another's state.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from . import control
from .agent_types import AgentState, Backend, ElasticJob
from .control import ControlRejectedError
from .counters import Counters
from .env import LauncherEnv
from .order_sources import OrderSource
from .orders import identity_problem
from .reports import Reporter, parameter_count
from .sampler import ElasticSampler, SamplerState
from .state import TrainingState

log = logging.getLogger(__name__)

_T = TypeVar("_T")


class WorkerContext:
    """One worker's shared state (module docstring).

    Args:
        env: parsed launcher environment.
        backend: communication backend.
        job: the user's model, optimizer, dataset and loss.
        source: order source (rank 0 and joiners read it).
        clock: wall clock for event timestamps (seconds).
        carried: more of the user's state to carry, by name (:attr:`.state.TrainingState.carried`).

    Raises:
        ValueError: ``job.loss_reduction`` or ``job.model_name`` breaks its rule (the message names the
            value and the rule).
    """

    def __init__(self, env: LauncherEnv, backend: Backend, job: ElasticJob, source: OrderSource,
                 clock: Callable[[], float], carried: Mapping[str, Any] | None = None) -> None:
        self.env = env
        self.backend = backend
        self.job = job
        self.source = source
        self.clock = clock
        self.me = env.worker_id
        self.job_run = env.run  # the job's run it acts for: Slurm's restart count, a joiner's order's run
        self.sampler = ElasticSampler(len(job.dataset), SamplerState(env.seed))
        self.state = TrainingState(job.model, job.optimizer, job.scheduler, self.sampler, backend.ops)
        self.state.carried = dict(carried or {})
        self.counters = Counters(self.state.extra)
        self.status = AgentState.STARTING
        self.generation = ""
        self.members: tuple[str, ...] = ()
        self.rank = -1
        self.generations: list[str] = []
        self.stop_requested = False
        self._refused: dict[str, int] = {}  # control key -> hash of the payload last refused (logged once)
        self._log: Any = open(env.event_log, "a", buffering=1) if env.event_log else None  # noqa: SIM115
        if job.loss_reduction not in ("sum", "mean"):
            raise ValueError(f"ElasticJob.loss_reduction={job.loss_reduction!r}: must be 'sum' or 'mean'")
        model_name = job.model_name or env.model or None
        problem = identity_problem(model_name, None)
        if problem is not None:
            raise ValueError(f"ElasticJob.model_name: {problem}")
        self.reporter = Reporter(env.reports, env.job_id, env.secret, env.report_every_s, model=model_name,
                                 params=parameter_count(job.model), epochs=env.epochs) if env.reports else None

    # -- state and outputs ---------------------------------------------------------------------
    def transition(self, new: AgentState) -> None:
        """Move to state ``new`` (at a step boundary)."""
        log.debug("%s: %s -> %s", self.me, self.status.value, new.value)
        self.status = new

    def event(self, ev: str, **fields: Any) -> None:
        """One line in the event log (``SLURM_ELASTIC_EVENT_LOG``), if there is one."""
        if self._log is not None:
            rec = {"ev": ev, "t": self.clock(), "worker": self.me, "gen": self.generation, "rank": self.rank}
            rec.update(fields)
            self._log.write(json.dumps(rec) + "\n")

    def close_log(self) -> None:
        """Write the ``exit`` event and close the event log (idempotent)."""
        if self._log is not None:
            self.event("exit", state=self.status.value, step=self.counters.step)
            self._log.close()
            self._log = None

    def say(self, text: str) -> None:
        """Rank 0: one line in the job's output for each change of its world (the job's own log
        shows its resizes; the reports file, the store and ``slurm-elastic report`` have the rest)."""
        if self.rank == 0:
            print(f"slurm-elastic: {text}", file=sys.stderr, flush=True)

    def report(self, kind: str, pause_s: float = 0.0, lost: Sequence[str] = ()) -> None:
        """Rank 0: append a signed report (:mod:`.reports`); a failing write is logged, never fatal.
        ``lost``: the workers a recovery went on without (the daemon gives their GPUs back)."""
        if self.reporter is None or self.rank != 0:
            return
        try:
            self.reporter.write(kind, self.clock(), step=self.counters.step, samples=self.counters.samples,
                                epoch=self.sampler.state.epoch, epoch_size=len(self.job.dataset),
                                world=len(self.members), local_batch=self.counters.local_batch, pause_s=pause_s,
                                lost=lost, members=self.members)
        except OSError as exc:
            log.warning("%s: progress report not written: %s", self.me, exc)

    def report_left(self) -> None:
        """A dropped worker: say it has left the group (any rank; the daemon then frees its node)."""
        if self.reporter is None:
            return
        try:
            self.reporter.write("left", self.clock(), step=self.counters.step, samples=self.counters.samples,
                                epoch=self.sampler.state.epoch, epoch_size=len(self.job.dataset),
                                world=len(self.members), local_batch=self.counters.local_batch, worker=self.me)
        except OSError as exc:
            log.warning("%s: left report not written: %s", self.me, exc)

    # -- the store's control keys ----------------------------------------------------------------
    def read_control(self, key: str, check: Callable[[str], _T]) -> _T | None:
        """The checked payload of a control key (:mod:`.control`), or None if absent or refused.

        The store refuses a value whose MAC fails; ``check`` one of the wrong shape. A refusal is
        logged once per key and payload, naming the key and the rule, and the key reads as absent.
        """
        return self.checked(key, self.backend.store_get(key), check)

    def checked(self, key: str, raw: str | None, check: Callable[[str], _T]) -> _T | None:
        """``check(raw)`` for the value ``raw`` read at ``key``; None if absent or refused (logged once)."""
        if raw is None:
            return None
        try:
            return check(raw)
        except ControlRejectedError as exc:
            if self._refused.get(key) != hash(raw):
                if len(self._refused) >= 1024:
                    self._refused.clear()
                self._refused[key] = hash(raw)
                log.warning("%s: refused store key %r: %s", self.me, key, exc)
                self.event("refused", key=key, reason=str(exc))
            return None

    def wait_control(self, key: str, check: Callable[[str], _T], timeout_s: float) -> _T | None:
        """Poll a control key until it holds a payload that passes ``check``, up to ``timeout_s`` seconds."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = self.read_control(key, check)
            if value is not None or time.monotonic() >= deadline:
                return value
            time.sleep(0.01)

    def read_go(self, seq: int) -> control.Go | None:
        """The go key of order ``seq`` (rank 0's announcement of a switch), if one verifies."""
        return self.read_control(control.go_key(seq), lambda p: control.read_go(p, seq, self.env.job_id,
                                                                                 self.env.secret))
