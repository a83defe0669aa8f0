"""Simulations side by side: the (policy, seed) pairs of a comparison in a pool of processes.

This module owns :class:`Pair` (one simulation: its jobs, its policy and every argument of
:func:`~slurm_elastic.sim.engine.simulate`) and :class:`PairPool`, which runs a list of pairs and
returns their results in the list's order, each exactly what the same pair gives run alone (a
simulation depends only on its inputs and its seed), so a pool's results are the serial run's. A
pool of one process runs the pairs here, one after the other; a larger one starts its worker
processes at its first list of more than one pair (``forkserver``: each worker forks from a server
that imported the simulator once, never from a parent that may hold threads) and keeps them until
it is closed, so every comparison of ``reproduce`` shares them.

Errors are the serial run's: when pairs fail, the one raised is the first failing pair's in the
list's order, the same exception (its type and message) a serial run raises, after every pair
before it has ended; the pool is then stopped. Ctrl-C stops the workers (they ignore SIGINT and
are terminated) and raises ``KeyboardInterrupt`` here. ``progress`` is called once per pair: before
it runs when serial, when it ends in a pool (one bar counts pairs either way).
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import queue
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from slurm_elastic import policies as registry
from slurm_elastic.core.guards import Guards
from slurm_elastic.errors import ConfigError
from slurm_elastic.sim.engine import simulate
from slurm_elastic.sim.workload import SimJobSpec

Progress = Callable[[str], None]

MAX_PROCESSES = 1024
"""Most worker processes a pool may be given (``--processes``)."""


def default_processes() -> int:
    """The CPUs this process may run on (its affinity, as ``os.process_cpu_count`` of Python 3.13)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity on this system
        return max(1, os.cpu_count() or 1)


def check_processes(n: int) -> int:
    """``n`` when it is a number of worker processes ``1 .. MAX_PROCESSES``.

    Raises:
        ConfigError: naming the value and the rule.
    """
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_PROCESSES:
        raise ConfigError(f"--processes {n!r}: must be a whole number of worker processes from 1 to {MAX_PROCESSES}")
    return n


@dataclass(frozen=True)
class Pair:
    """One simulation: ``policy`` (its name, parameters and shown label) on ``jobs``.

    Attributes:
        jobs: the workload.
        policy: the policy's name (:mod:`slurm_elastic.policies`).
        params: its parameters.
        shown: the label its result carries as ``policy``.
        guards: the site guards it runs inside (with ``bare`` false); ``None``: the trust guard only.
        bare: the bare planner (:func:`slurm_elastic.policies.create`, as the papers ran theirs),
            not :func:`~slurm_elastic.policies.build`'s.
        simulate: the keyword arguments of :func:`~slurm_elastic.sim.engine.simulate`.
        extra: keys added to its result (``load``).
        label: what the progress line says of it.
    """

    jobs: Sequence[SimJobSpec]
    policy: str
    params: Mapping[str, Any] = field(default_factory=dict)
    shown: str = ""
    guards: Guards | None = None
    bare: bool = False
    simulate: Mapping[str, Any] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)
    label: str = ""


def run_pair(pair: Pair) -> dict[str, Any]:
    """The result of one pair, as the serial path has always made it."""
    if pair.bare:
        planner = registry.create(pair.policy, **dict(pair.params))
    else:
        planner = registry.build(pair.policy, pair.params, pair.guards)
    res = simulate(pair.jobs, planner, **pair.simulate)
    res["policy"] = pair.shown or pair.policy
    res.update(pair.extra)
    return res


def _worker_start(setup: Sequence[Callable[[], object]]) -> None:
    """A worker leaves Ctrl-C to the parent, which terminates it, and is set up as the parent was."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for step in setup:
        step()


def _in_worker(pair: Pair) -> dict[str, Any]:
    """:func:`run_pair` in a worker; an exception that could not travel back is sent as its text."""
    try:
        return run_pair(pair)
    except Exception as exc:
        try:
            pickle.loads(pickle.dumps(exc))
        except Exception:
            raise RuntimeError(f"{type(exc).__name__}: {exc}") from None
        raise


class PairPool:
    """Runs lists of pairs with ``processes`` worker processes (1: here, serially); a context manager.

    Args:
        processes: worker processes, ``1 .. MAX_PROCESSES``.
        setup: functions each worker calls once when it starts (module-level, so that they travel by
            name): the process-wide settings of the command that made the pool, which a worker does
            not inherit from it (they change its speed, never its results).

    Raises:
        ConfigError: ``processes`` out of range.
    """

    def __init__(self, processes: int = 1, *, setup: Sequence[Callable[[], object]] = ()) -> None:
        self.processes = check_processes(processes)
        self.setup = tuple(setup)
        self._pool: Any = None

    def __enter__(self) -> PairPool:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close(terminate=kind is not None)

    def close(self, *, terminate: bool = False) -> None:
        """Stop the workers: at once with ``terminate``, else after their work (there is none left)."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        if terminate:
            pool.terminate()
        else:
            pool.close()
        pool.join()

    def run(self, pairs: Sequence[Pair], progress: Progress | None = None) -> list[dict[str, Any]]:
        """Every pair's result, in the order of ``pairs`` (module docstring: errors, Ctrl-C, progress)."""
        if self.processes == 1 or len(pairs) <= 1:
            out = []
            for pair in pairs:
                if progress:
                    progress(pair.label)
                out.append(run_pair(pair))
            return out
        try:
            return self._parallel(pairs, progress)
        except BaseException:
            self.close(terminate=True)
            raise

    def _start(self) -> Any:
        if self._pool is None:
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload([__name__])
            self._pool = ctx.Pool(self.processes, initializer=_worker_start, initargs=(self.setup,))
        return self._pool

    def _parallel(self, pairs: Sequence[Pair], progress: Progress | None) -> list[dict[str, Any]]:
        pool = self._start()
        ended: queue.SimpleQueue[tuple[int, bool, Any]] = queue.SimpleQueue()
        for i, pair in enumerate(pairs):
            pool.apply_async(_in_worker, (pair,),
                             callback=lambda res, i=i: ended.put((i, True, res)),
                             error_callback=lambda exc, i=i: ended.put((i, False, exc)))
        results: dict[int, dict[str, Any]] = {}
        failed: dict[int, BaseException] = {}
        while len(results) + len(failed) < len(pairs):
            try:
                i, ok, value = ended.get(timeout=0.2)  # a timeout, so that Ctrl-C is seen at once
            except queue.Empty:
                continue
            if progress:
                progress(pairs[i].label)
            if ok:
                results[i] = value
            else:
                failed[i] = value
            first = min(failed, default=None)
            if first is not None and all(k in results or k in failed for k in range(first)):
                raise failed[first]  # the serial run's error: every pair before it has ended
        return [results[i] for i in range(len(pairs))]
