"""The ``min-jct`` policy: GPUs and batch sizes chosen over the whole cluster to finish jobs soonest.

This module owns the ``min-jct`` planner (our own policy) and the solver behind it,
:func:`solve_hulls`. Pure: no I/O, no clock, no randomness (``rng`` is unused); what it learns
between calls lives in its memo (:class:`MinJctMemo`).

**Remaining work.** Each active elastic job ``j`` has ``R_j`` expected remaining samples: to its
declared epochs; else to the mean of the ended jobs of its kind (:class:`WorkHistory`: the same
user, model, epoch size and ranges, i.e. a script submitted again), while it has done less; else,
before it starts, the mean ended job's time at its smallest size (a mean over users of each user's
mean, so that no user's many jobs move it for everyone); else the ONES progress estimate
of :mod:`~slurm_elastic.core.remaining`. ``X_j(k)`` is its throughput on ``k`` GPUs at the batch
that maximises it (the IBM optimizer's ``b_opt(k)``; an endo-elastic job keeps its batch),
corrected by what the job measured.

**Admission: shortest first.** Running jobs keep at least their smallest feasible size (they are
not preempted, as in ``dp``), at sizes Slurm can free (``Job.unreachable_sizes``). Waiting jobs
are admitted at their smallest size while the GPUs last, in ascending expected time at that size
``R_j / X_j(kmin)`` (SRPT's order), except the jobs already late: those whose finish-time
fairness, were they started now at their requested size, would exceed ``ftf_bound`` go first,
latest first.

**Sizes: efficiency, less the price of a resize.** With the admitted set fixed, the planner
chooses one size per job maximising

    ``sum_j  T~_j(k_j)  *  (R_j / X_j(k_j)) / (c_j(k_j) + R_j / X_j(k_j))``

where ``T~_j(k) = T_j(b_opt(k), k) / T_j(b_max, 1)`` is ``dp``'s scaling factor (the job's rate
in units of its model's peak rate on one GPU, the batch chosen with the size), each job's term
reduced by the share of its remaining time ``R_j / X_j(k)`` that the pause ``c_j(k)`` to get there
would take: the launcher's measured pause to grow or shrink in place, a checkpoint-restart for a
job without the launcher (``can_rebatch`` false) or a preempted job that resumes, nothing to keep
its size. A resize is made only when it pays for its pause. (Normalising by the job's own rate at
its smallest size instead, each job's first GPU worth 1, was 5-9% worse on ``philly-like`` at load
1.2; weighting the terms by the inverse remaining time, SRPT in the sizes too, was worse wherever
the remaining-work estimate is poor.)

**Fairness.** Each admitted job gets at least the smallest size that keeps its estimated
finish-time fairness within ``ftf_bound`` (the simulator's definition: its time so far plus its
remaining time at that size, over its time alone at its requested size stretched to its share
among the jobs active now), the latest jobs first, while the GPUs last.

**Search.** The sizes are a multiple-choice knapsack over the whole cluster (one size per job,
``K`` GPUs). :func:`solve_hulls` solves its linear relaxation exactly (each job's upper concave
hull, hull segments taken in descending slope: Sinha and Zoltners 1979) and keeps the integral
part: optimal when every job's values are concave from its start, otherwise within one hull
segment's value of the optimum (tests check both against brute force). Cost ``O(S log S)`` for
``S`` hull segments.

When the running jobs' smallest sizes no longer fit (nodes lost), the most recently started are
preempted until they do.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from slurm_elastic.core import fairness, sizing
from slurm_elastic.core.dynprog import throughput_table
from slurm_elastic.core.model import ClusterSnapshot, ElasticMode, Job, JobId, JobState
from slurm_elastic.core.planner import PlanResult, build_plan
from slurm_elastic.core.remaining import expected_remaining, progress_shapes
from slurm_elastic.errors import ConfigError

FloatArr = NDArray[np.float64]
NEG = -np.inf

LAUNCHER_GROW_S = 2.7
"""The launcher's measured pause to grow in place (../shared/PYTHON-STACK-FACTS.md)."""
LAUNCHER_SHRINK_S = 0.9
"""The launcher's measured pause to shrink in place."""
RESTART_S = 30.0
"""A checkpoint-restart (Pollux's figure): a job without the launcher, or a preempted job resuming."""


MAX_KINDS = 4096
"""Kinds of work :class:`WorkHistory` remembers: the kinds come from what users submit, so their
number is bounded here, not by them. Past it, the least recently ended kind of the user who holds
the most kinds is forgotten (one user's new kinds push out only their own)."""
MAX_USERS = 4096
"""Users whose mean time alone :class:`WorkHistory` remembers (the least recently ended forgotten first)."""

WorkClass = tuple[Any, ...]
"""Jobs of one kind: the same user, model, epoch size, ranges and mode (a script submitted again)."""


def work_class(job: Job) -> WorkClass:
    """The kind of work a job is, for :class:`WorkHistory`."""
    return (job.user, job.model, job.epoch_size, job.min_batch, job.max_batch, job.min_gpus, job.max_gpus, job.mode)


@dataclass(frozen=True, slots=True)
class Sighting:
    """A running job as last seen: its kind, samples, samples/s, when, and its samples/s at its smallest size."""

    kind: WorkClass
    samples: float
    rate: float
    time: float
    smallest_rate: float


def _forget_a_kind(work: dict[WorkClass, tuple[int, float]]) -> None:
    """Forget the least recently ended kind of the user who holds the most kinds (``work`` is in the
    order the kinds last ended; ties: the user whose such kind ended first)."""
    held: dict[Any, int] = {}
    for kind in work:
        held[kind[0]] = held.get(kind[0], 0) + 1
    most = max(held.values())
    del work[next(kind for kind in work if held[kind[0]] == most)]


def _mean_over_users(users: dict[str, tuple[int, float]]) -> tuple[int, float]:
    """``(their jobs, the mean of their means)``, the means summed as a running mean in the order the
    users last ended: with one user it is that user's mean, with one job per user the running mean
    over the jobs, each to the bit."""
    mean, jobs = 0.0, 0
    for n, (ended, user_mean) in enumerate(users.values(), start=1):
        mean += (user_mean - mean) / n
        jobs += ended
    return jobs, mean


@dataclass(frozen=True, slots=True)
class WorkHistory:
    """What the jobs that left taught: the mean samples of each kind, and the mean time a job
    needs at its smallest size (over every kind), each user weighing as one.

    A running job that leaves the snapshot has ended; its samples are those last seen plus its rate
    over the time since (the planner runs when jobs end, so that is their end). A cancelled job
    counts as ended too: the learned means are estimates, never promises. A kind includes its user,
    so a user who cancels short jobs of a kind moves only the estimate of their own jobs of that
    kind (which are then admitted earlier, until each outlives the mean; the fairness floor bounds
    what the others lose). The time alone, which every user's jobs of a kind never seen are planned
    with, is the mean over users of each user's mean (:attr:`users`), so one user's 100 jobs move it
    as much as one user's one job. At most :data:`MAX_KINDS` kinds are kept, a user who holds the
    most losing their least recent kind first, and :data:`MAX_USERS` users.

    Attributes:
        seen: the elastic jobs running at the last snapshot, as seen then.
        work: per kind, ``(jobs ended, mean samples)``, in the order the kinds last ended.
        alone: ``(jobs ended, the mean over their users of each user's mean time alone in seconds)``:
            with one user, or one job per user, the plain mean over the jobs, to the bit (the
            pinned simulations' workloads).
        users: per user, ``(jobs ended, mean time alone in seconds)``, in the order they last ended.
    """

    seen: dict[JobId, Sighting] = field(default_factory=dict)
    work: dict[WorkClass, tuple[int, float]] = field(default_factory=dict)
    alone: tuple[int, float] = (0, 0.0)
    users: dict[str, tuple[int, float]] = field(default_factory=dict)

    def updated(self, snapshot: ClusterSnapshot, smallest_rate: dict[JobId, float]) -> WorkHistory:
        """The history after ``snapshot``: the jobs last seen running and now gone are learned."""
        present = {j.job_id for j in snapshot.jobs}
        work = dict(self.work)
        users = dict(self.users)
        learned = False
        for job_id, last in self.seen.items():
            if job_id in present:
                continue
            total = last.samples + last.rate * max(0.0, snapshot.now - last.time)
            n, mean = work.pop(last.kind, (0, 0.0))
            work[last.kind] = (n + 1, mean + (total - mean) / (n + 1))  # the most recent last
            while len(work) > MAX_KINDS:
                _forget_a_kind(work)
            if last.smallest_rate > 0:
                user = str(last.kind[0])
                n, mean = users.pop(user, (0, 0.0))
                users[user] = (n + 1, mean + (total / last.smallest_rate - mean) / (n + 1))
                while len(users) > MAX_USERS:
                    del users[next(iter(users))]
                learned = True
        alone = _mean_over_users(users) if learned else self.alone
        seen = {j.job_id: Sighting(work_class(j), float(j.samples_processed), float(j.observed_throughput or 0.0),
                                   snapshot.now, smallest_rate.get(j.job_id, 0.0))
                for j in snapshot.elastic_jobs() if j.state is JobState.RUNNING}
        return WorkHistory(seen, work, alone, users)


@dataclass(frozen=True, slots=True)
class MinJctMemo:
    """Warm state of ``min-jct``: each job shape's throughput and batch tables, the work history, and the
    profile's predictions behind the throughput corrections."""

    tables: dict[tuple[Any, ...], tuple[FloatArr, NDArray[np.int64], float]] = field(default_factory=dict)
    history: WorkHistory = field(default_factory=WorkHistory)
    predictions: dict[tuple[object, ...], float] = field(default_factory=dict)
    """The profile's predictions at the jobs' configurations (the corrections' denominators)."""


@dataclass(frozen=True, slots=True)
class _Terms:
    """One plan's per-job rows, padded to the widest job (``k = 0..kmax``): corrected samples/s,
    ``dp``'s scaling factor, the sizes the job may take, and the batch at each size."""

    jobs: list[Job]
    rate: FloatArr
    scale: FloatArr
    ok: NDArray[np.bool_]
    batch: NDArray[np.int64]
    width: NDArray[np.int64]


def _hull(v: list[float], start: int) -> list[int]:
    """The vertices of the upper concave hull of ``(k, v[k])`` from ``start`` to the best value
    (feasible ``k >= start`` only, ``-inf`` infeasible; slopes strictly falling and positive)."""
    hull = [start]
    for k in range(start + 1, len(v)):
        vk = v[k]
        if vk == NEG:
            continue
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            if (v[b] - v[a]) * (k - b) <= (vk - v[b]) * (b - a):  # b is not above the chord a-k
                hull.pop()
            else:
                break
        hull.append(k)
    best = max(range(len(hull)), key=lambda i: (v[hull[i]], -i))
    return hull[: best + 1]


def solve_hulls(values: list[FloatArr], starts: list[int], total: int) -> list[int] | None:
    """One size per job maximising ``sum_j values[j][k_j]`` with ``sum_j k_j <= total``.

    Args:
        values: per job, its value at ``k = 0..kmax`` (``-inf`` where infeasible).
        starts: per job, the size it gets at least (feasible: ``values[j][starts[j]]`` finite).
        total: GPUs (``K``).

    Returns:
        The sizes, or ``None`` when the starts alone exceed ``total``. Each job's hull segments are
        taken in descending slope (ties: the job listed first, then its smaller sizes) while they
        fit; a segment that does not fit ends its job's growth along its hull, and the GPUs left
        go by the largest gain of any step up that fits (:func:`_fill`). Optimal when every job's
        values are concave from its start; otherwise within the largest hull segment's value of
        the optimum.
    """
    sizes = [int(s) for s in starts]
    left = total - sum(sizes)
    if left < 0:
        return None
    slope: list[float] = []
    owner: list[int] = []
    step: list[int] = []
    width: list[int] = []
    for j, (row, s) in enumerate(zip(values, sizes, strict=True)):
        v = row.tolist()
        hull = _hull(v, s)
        for i, (a, b) in enumerate(itertools.pairwise(hull)):
            slope.append((v[b] - v[a]) / (b - a))
            owner.append(j)
            step.append(i)
            width.append(b - a)
    if not slope:
        return sizes
    order = np.lexsort((np.asarray(step), np.asarray(owner), -np.asarray(slope)))
    blocked: set[int] = set()
    for idx in order:
        if left <= 0:
            break
        j = owner[idx]
        if j in blocked:
            continue
        if width[idx] > left:
            blocked.add(j)
            continue
        sizes[j] += width[idx]
        left -= width[idx]
    return _fill(values, sizes, left)


def _fill(values: list[FloatArr], sizes: list[int], left: int) -> list[int]:
    """Spend GPUs no whole hull segment fits in: the largest gain of a step up by at most ``left``
    GPUs (to a size below the hull, too), until no step gains."""
    while left > 0:
        best = (0.0, -1, -1)
        for j, (v, k) in enumerate(zip(values, sizes, strict=True)):
            top = min(len(v) - 1, k + left)
            if top <= k:
                continue
            ahead = v[k + 1 : top + 1] - v[k]
            i = int(np.argmax(ahead))
            if ahead[i] > best[0]:
                best = (float(ahead[i]), j, k + 1 + i)
        if best[1] < 0:
            break
        left -= best[2] - sizes[best[1]]
        sizes[best[1]] = best[2]
    return sizes


def _floored(planned: list[Job], kmin: dict[JobId, int], floor: dict[JobId, int], rho: dict[JobId, float],
             total: int) -> dict[JobId, int]:
    """Each planned job's least size: its smallest, raised to its fairness floor, the latest jobs first,
    while the GPUs last."""
    starts = {j.job_id: kmin[j.job_id] for j in planned}
    used = sum(starts.values())
    for job in sorted(planned, key=lambda j: (-rho[j.job_id], j.submit_time, j.job_id)):
        extra = floor[job.job_id] - starts[job.job_id]
        if extra > 0 and used + extra <= total:
            starts[job.job_id] += extra
            used += extra
    return starts


class MinJctPlanner:
    """The ``min-jct`` policy (module docstring).

    Args:
        ftf_bound: finish-time fairness bound (module docstring): late waiting jobs are admitted
            first and admitted jobs get the size that keeps them within it; 0 = off.
        grow_s, shrink_s: seconds of pause charged to grow or to shrink a launcher job in place.
        restart_s: seconds charged to resize a job without the launcher, or to resume a preempted one.
        kmax: cap on GPUs per job (each job's own ``max_gpus`` applies too).
        default_epochs_to_go: progress prior of jobs that declared no epoch count.
    """

    name = "min-jct"
    interval = 0.0
    epoch_events = False
    uses_progress = True

    def __init__(self, ftf_bound: float = 1.1, grow_s: float = LAUNCHER_GROW_S, shrink_s: float = LAUNCHER_SHRINK_S,
                 restart_s: float = RESTART_S, kmax: int | None = None, default_epochs_to_go: float = 10.0) -> None:
        for key, value in (("grow_s", grow_s), ("shrink_s", shrink_s), ("restart_s", restart_s)):
            if not (value >= 0 and np.isfinite(value)):
                raise ConfigError(f"min-jct.{key} = {value!r}: must be a finite number of seconds >= 0")
        if kmax is not None and kmax < 1:
            raise ConfigError(f"min-jct.kmax = {kmax}: must be >= 1")
        if not default_epochs_to_go >= 1:
            raise ConfigError(f"min-jct.default_epochs_to_go = {default_epochs_to_go!r}: must be >= 1")
        self.ftf_bound = fairness.check_bound(self.name, ftf_bound)
        self.grow_s, self.shrink_s, self.restart_s = float(grow_s), float(shrink_s), float(restart_s)
        self.kmax = kmax
        self.default_epochs_to_go = float(default_epochs_to_go)

    def _remaining(self, snapshot: ClusterSnapshot, jobs: list[Job], history: WorkHistory,
                   smallest_rate: dict[JobId, float]) -> list[float]:
        """Each job's expected remaining samples: to its declared epochs; else to the mean of its kind's
        ended jobs, while it has done less; else, not started, the mean ended job's time at its smallest
        size; else the ONES progress estimate."""
        alpha, beta, yp = progress_shapes(snapshot, jobs, self.default_epochs_to_go)
        estimate = expected_remaining(alpha, beta, yp)
        out = []
        for job, guess in zip(jobs, estimate, strict=True):
            done = float(job.samples_processed)
            learned = history.work.get(work_class(job))
            if job.target_epochs is not None:
                r = job.target_epochs * job.epoch_size - done
            elif learned is not None and learned[1] > done:
                r = learned[1] - done
            elif done == 0 and history.alone[0]:
                r = history.alone[1] * smallest_rate[job.job_id]
            else:
                r = float(guess)
            out.append(max(r, 1.0))
        return out

    def _pauses(self, terms: _Terms) -> FloatArr:
        """Seconds each job pauses to go from its size now to ``k`` GPUs (rows: jobs, columns: ``k``)."""
        jobs = terms.jobs
        ks = np.arange(terms.rate.shape[1])[None, :]
        now = np.array([j.num_gpus for j in jobs])[:, None]
        waiting = np.array([j.is_waiting for j in jobs])[:, None]
        resumed = np.array([j.start_time is not None for j in jobs])[:, None]
        in_place = np.array([j.can_rebatch for j in jobs])[:, None]
        moved = np.where(in_place, np.where(ks > now, self.grow_s, self.shrink_s), self.restart_s)
        running = np.where(ks == now, 0.0, moved)
        return np.where(waiting, np.where(resumed, self.restart_s, 0.0), running)

    def _fairness(self, snapshot: ClusterSnapshot, terms: _Terms, pause: FloatArr, remaining: FloatArr,
                  total: int) -> tuple[FloatArr, NDArray[np.int64]]:
        """Each job's finish-time fairness were it run at its requested size from now, and the smallest
        size that keeps it within ``ftf_bound`` (0 when none is needed or none can).

        Fair time: its time alone at its requested size, stretched to its share of the cluster among
        the jobs active now (the simulator's definition, with ``N`` now); its time so far counts."""
        jobs, rate, rows = terms.jobs, terms.rate, np.arange(len(terms.jobs))
        k0 = np.minimum(terms.width - 1, np.array([fairness.requested_size(j) for j in jobs], dtype=np.int64))
        x0 = rate[rows, k0]
        known = (k0 >= 1) & (x0 > 0)
        x0 = np.where(known, x0, 1.0)
        done = np.array([j.samples_processed for j in jobs], dtype=np.float64)
        stretch = np.maximum(1.0, len(snapshot.elastic_jobs()) * k0 / max(total, 1))
        fair = (done + remaining) / x0 * stretch
        elapsed = np.array([snapshot.now - j.submit_time for j in jobs])
        rho = np.where(known, (elapsed + pause[rows, k0] + remaining / x0) / fair, 0.0)
        if not self.ftf_bound:
            return rho, np.zeros(len(jobs), dtype=np.int64)
        with np.errstate(divide="ignore", invalid="ignore"):
            ahead = remaining[:, None] / np.where(rate > 0, rate, np.nan)
            keeps = terms.ok & (elapsed[:, None] + pause + ahead <= self.ftf_bound * fair[:, None]) & known[:, None]
        return rho, np.where(keeps.any(axis=1), np.argmax(keeps, axis=1), 0)

    def _terms(self, snapshot: ClusterSnapshot, memo: MinJctMemo, total: int) -> tuple[_Terms, MinJctMemo]:
        """Every active elastic job's rates, scaling factors, feasible sizes and batches (one row each)."""
        jobs = list(snapshot.elastic_jobs())
        tables: dict[tuple[Any, ...], tuple[FloatArr, NDArray[np.int64], float]] = {}
        predictions: dict[tuple[object, ...], float] = {}
        widths = [min(j.max_gpus, total, self.kmax or total) + 1 for j in jobs]
        wide = max(widths, default=1)
        rate = np.zeros((len(jobs), wide))
        scale = np.zeros((len(jobs), wide))
        batch = np.zeros((len(jobs), wide), dtype=np.int64)
        for i, (job, width) in enumerate(zip(jobs, widths, strict=True)):
            key = (*sizing.shape_key(job), width - 1)
            if key not in tables:
                cached = memo.tables.get(key)
                tables[key] = cached if cached is not None else throughput_table(job, snapshot, width - 1)
            tp, batch[i, :width], peak = tables[key]
            rate[i, :width] = tp * sizing.correction(job, snapshot.profiles[job.model], memo.predictions, predictions)
            if peak > 0:
                scale[i, :width] = tp / peak
        ks = np.arange(wide)[None, :]
        ok = (rate > 0) & (ks >= np.array([j.min_gpus for j in jobs], dtype=np.int64).reshape(-1, 1))
        for i, job in enumerate(jobs):
            if job.state is JobState.RUNNING:
                ok[i, [k for k in job.unreachable_sizes if k < wide]] = False
                if not job.can_grow:
                    ok[i, job.num_gpus + 1:] = False
        terms = _Terms(jobs, rate, scale, ok, batch, np.array(widths, dtype=np.int64))
        return terms, replace(memo, tables=tables, predictions=predictions)

    def _admit(self, jobs: list[Job], kmin: dict[JobId, int], alone: dict[JobId, float], rho: dict[JobId, float],
               total: int) -> tuple[list[Job], dict[JobId, str]]:
        """The jobs planned (running ones first, the latest started preempted while their smallest sizes
        do not fit; then waiting ones at their smallest size, late ones first, then shortest first),
        and why each other job waits."""
        reasons: dict[JobId, str] = {}
        executing = sorted((j for j in jobs if j.state is JobState.RUNNING),
                           key=lambda j: (j.start_time or 0.0, j.job_id))
        while executing and sum(kmin[j.job_id] for j in executing) > total:
            gone = executing.pop()
            reasons[gone.job_id] = f"preempted by min-jct: the running jobs need more than the {total} GPUs left"
        used = sum(kmin[j.job_id] for j in executing)
        planned = list(executing)
        waiting = [j for j in jobs if j.is_waiting]
        late = {j.job_id for j in waiting if self.ftf_bound and rho[j.job_id] > self.ftf_bound}
        for job in sorted(waiting, key=lambda j: (j.job_id not in late, -rho[j.job_id] if j.job_id in late
                                                  else alone[j.job_id], j.submit_time, j.job_id)):
            need = kmin[job.job_id]
            if need > total:
                reasons[job.job_id] = f"no feasible size: needs {need} GPUs at least, the cluster schedules {total}"
            elif used + need <= total:
                planned.append(job)
                used += need
            else:
                reasons[job.job_id] = (f"queued by min-jct: needs {need} GPUs, {total - used} left after the jobs "
                                       f"expected to finish sooner (it needs about {alone[job.job_id]:.0f} s)")
        return planned, reasons

    def plan(self, snapshot: ClusterSnapshot, memo: Any, rng: np.random.Generator) -> PlanResult:
        """Admit shortest first (late jobs before), then size the admitted jobs (module docstring)."""
        m = memo if isinstance(memo, MinJctMemo) else MinJctMemo()
        total = len(snapshot.schedulable_gpus())
        terms, m = self._terms(snapshot, m, total)
        jobs, rows = terms.jobs, np.arange(len(terms.jobs))
        kmins = np.where(terms.ok.any(axis=1), np.argmax(terms.ok, axis=1), total + 1)
        smallest = np.where(kmins <= total, terms.rate[rows, np.minimum(kmins, terms.rate.shape[1] - 1)], 0.0)
        smallest_rate = {j.job_id: float(x) for j, x in zip(jobs, smallest, strict=True)}
        history = m.history.updated(snapshot, smallest_rate)
        left = np.array(self._remaining(snapshot, jobs, history, smallest_rate))
        pause = self._pauses(terms)
        # dp's objective (the job's rate in peak single GPUs), less the share of the job's remaining
        # time at that size its pause would take.
        with np.errstate(divide="ignore", invalid="ignore"):
            life = left[:, None] / terms.rate
            grid = np.where(terms.ok, terms.scale * life / (pause + life), NEG)
        rho_of, floor_of = self._fairness(snapshot, terms, pause, left, total)
        ids = [j.job_id for j in jobs]
        values = {jid: grid[i, : terms.width[i]] for i, jid in enumerate(ids)}
        batch_of = {jid: terms.batch[i] for i, jid in enumerate(ids)}
        rho = dict(zip(ids, rho_of.tolist(), strict=True))
        floor = dict(zip(ids, floor_of.tolist(), strict=True))
        kmin = dict(zip(ids, kmins.tolist(), strict=True))
        with np.errstate(divide="ignore"):
            alone = dict(zip(ids, np.where(smallest > 0, left / smallest, np.inf).tolist(), strict=True))
        planned, reasons = self._admit(jobs, kmin, alone, rho, total)
        starts = _floored(planned, kmin, floor, rho, total)
        sizes = solve_hulls([values[j.job_id] for j in planned], [starts[j.job_id] for j in planned], total) or []
        counts = {j.job_id: k for j, k in zip(planned, sizes, strict=False)}

        def choose(job: Job, k: int) -> sizing.Sizing | None:
            if job.mode is ElasticMode.ENDO:
                return sizing.size_for(job, k, snapshot.profiles[job.model])
            b = int(batch_of[job.job_id][k])
            return sizing.Sizing(b, -(-b // k), 1, job.base_lr * b / job.base_batch) if b else None

        score = float(sum(values[j.job_id][k] for j, k in zip(planned, sizes, strict=False)))
        plan = build_plan(snapshot, self.name, counts, reasons=reasons, choose=choose, score=score)
        return PlanResult(plan, replace(m, history=history))
