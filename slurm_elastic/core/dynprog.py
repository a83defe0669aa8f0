"""The IBM elastic-scaling optimizer: a dynamic program over GPU counts, with its autoscaler.

Source: Saxena et al., "Effective Elastic Scaling of Deep Learning Workloads" (MASCOTS 2020),
§III-C (optimizer) and §III-D (autoscaler). This module owns the ``dp`` planner.

Objective (Eq. 3): maximise ``sum_j T~_j(b_opt(k_j), k_j)`` where ``T~_j(b, k) = T_j(b, k) /
T_j(b_max, 1)`` is the throughput scaling factor of job ``j`` over its single-GPU rate at its
largest per-GPU batch, and ``b_opt(k)`` is the batch with the highest throughput on ``k`` GPUs
(:func:`slurm_elastic.core.sizing.best_exo_batch`). Every admitted job gets at least one GPU.

Recurrence (Eq. 4): ``P(j, K) = max_{k} P(j-1, K-k) + T~_j(k)`` with ``P(0, K) = 0`` (GPUs may
stay idle) and ``-inf`` for configurations that are infeasible. ``P(J, K) = -inf`` means
infeasible. Cost ``O(J * K * kmax)`` as in the paper; the forward pass is vectorised over ``K``
and restricted, per job, to the ``K`` that matter (row ``j`` is ``-inf`` below the sum of the
smallest sizes so far and flat above the sum of the largest), and only the argmax of the ``J``
cells on the optimal path is recomputed on the way back. Row ``j`` depends only on the values of
the first ``j`` jobs, so the table is kept in the memo (:class:`Table`) and the next call, whose
jobs begin with the same values (running jobs in start order come first, and most stay from one
event to the next), starts from the last row they share (:func:`fill_table`).

Autoscaler (Fig. 4): jobs already executing stay; waiting jobs are tried one by one in arrival
order and kept when the optimizer still finds a feasible solution, else skipped (the pseudocode
goes on to the next arrival rather than stopping). Feasibility of a set is exactly
``sum_j kmin_j <= K`` (GPUs may stay idle, so each job at its smallest feasible count is a
solution whenever one exists), so the admission test uses that sum and the DP runs once on the
admitted set; a property test checks this equals running the DP per trial.

Sizes Slurm can free (our choice; the paper's jobs shrink to any count): a running job whose GPUs
are released only in whole blocks (``Job.release_blocks``: a launcher job frees a node of its own
allocation or a whole satellite) has ``-inf`` at the counts below its current one that no set of
whole blocks reaches (``Job.unreachable_sizes``), so its ``kmin`` is the smallest reachable one and
the DP shrinks it to a size Slurm can give back (4 GPUs shrinkable only to 2 go to 2 to admit a
waiting job, not to 3, which the guards would round back up to 4).

``mode="drop"`` rejects jobs that do not fit instead of queueing them. When the executing set
itself no longer fits (nodes lost), the most recently started jobs are preempted until it does.

Periodic operation: ``interval`` (seconds, the paper's Delta) makes the planner keep the current
allocation between re-plans; 0 (default) re-plans at every call, i.e. at every event.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from slurm_elastic.core import fairness, sizing
from slurm_elastic.core.model import ClusterSnapshot, ElasticMode, Job, JobId, JobState
from slurm_elastic.core.planner import PlanResult, build_plan, current_counts
from slurm_elastic.errors import ConfigError

NEG = -np.inf

MEMO_TABLE_BYTES = 64 << 20
"""The largest Eq. 4 table the memo keeps (64 MiB: 8,000 jobs x 1,024 GPUs); a larger one, of a
cluster of many thousand GPUs, is made afresh each call rather than held twice over."""


@dataclass(frozen=True, slots=True)
class Table:
    """Eq. 4's table over a sequence of jobs: ``rows[j]`` is ``P(j, 0..total)``.

    Attributes:
        values: the jobs' scaling factors, in row order.
        total: ``K``.
        rows: ``P``, shape ``(len(values) + 1, total + 1)``; never written once made.
        bounds: per row, ``(lo, hi)``: ``P`` is ``-inf`` below ``lo`` and flat from ``hi`` on.
    """

    values: tuple[NDArray[np.float64], ...]
    total: int
    rows: NDArray[np.float64]
    bounds: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class DpMemo:
    """Warm state of the ``dp`` planner: when it last re-planned, its value tables, and its last
    Eq. 4 table (``None`` when the greedy optimum served)."""

    last_plan_time: float | None = None
    tables: dict[tuple[Any, ...], tuple[NDArray[np.float64], NDArray[np.int64]]] = field(default_factory=dict)
    table: Table | None = None
    cuts: dict[tuple[int, tuple[Any, ...]], tuple[NDArray[np.float64], int]] = field(default_factory=dict)
    """By ``(K, job shape)``: the factors cut to the shape's least and reachable sizes (read-only),
    and its least size; the same array object next round lets :func:`fill_table` see a row
    unchanged without comparing it."""


def scaling_values(job: Job, snapshot: ClusterSnapshot, kmax: int) -> NDArray[np.float64]:
    """``T~_j(b_opt(k), k)`` for ``k = 0..kmax`` (``-inf`` where infeasible, and at ``k = 0``)."""
    return _table(job, snapshot, kmax)[0]


def throughput_table(job: Job, snapshot: ClusterSnapshot, kmax: int, fixed: bool = False) -> tuple[
    NDArray[np.float64], NDArray[np.int64], float
]:
    """Uncorrected samples/s and global batch for ``k = 0..kmax`` (0 where infeasible and at ``k = 0``):
    ``b_opt(k)``, the job's own batch if ``fixed`` or endo-elastic; and ``T_j(b_max, 1)``, the model's
    rate on one GPU at the largest per-GPU batch that fits, whatever the job's batch range (the
    scaling factors' denominator; ``min-jct`` uses the same table)."""
    model = snapshot.profiles[job.model]
    base = float(model.throughput(sizing.max_local(job, model), 1))
    tp = np.zeros(kmax + 1)
    batches = np.zeros(kmax + 1, dtype=np.int64)
    if kmax < 1:
        return tp, batches, base
    ks = np.arange(1, kmax + 1, dtype=np.int64)
    if fixed:
        batches[1:] = job.base_batch
        fits = (-(-job.base_batch // ks) <= sizing.max_local(job, model)) & (ks <= job.base_batch)
        tp[1:] = np.where(fits, model.throughput(job.base_batch, ks), 0.0)
    elif job.mode is ElasticMode.ENDO:
        tp[1:] = sizing.throughput_grid(job, model, kmax, corrected=False)[1:, 0]
        batches[1:] = job.base_batch
    else:
        batches[1:], tp[1:] = sizing.best_exo_batches(job, model, ks)
    return tp, batches, base


def _table(job: Job, snapshot: ClusterSnapshot, kmax: int, fixed: bool = False) -> tuple[
    NDArray[np.float64], NDArray[np.int64]
]:
    """Scaling factors and batches for ``k = 0..kmax``: ``b_opt(k)``, or the job's own batch if ``fixed``."""
    tp, batches, base = throughput_table(job, snapshot, kmax, fixed)
    out = np.full(kmax + 1, NEG)
    if base <= 0 or kmax < 1:
        return out, batches
    out[1:] = np.where(tp[1:] > 0, tp[1:] / base, NEG)
    return out, batches


def solve(values: list[NDArray[np.float64]], total: int) -> tuple[float, list[int]]:
    """Solve Eq. 4 exactly (:func:`solve_from` without a prior table).

    When every job's scaling factors are concave over its feasible sizes (one interval, marginal
    gains never rising: the usual shape of a throughput curve), the optimum is reached greedily
    (:func:`solve_concave`, the same ``P(J, K)``); otherwise by the dynamic program of Eq. 4.

    Args:
        values: per job, ``values[j][k]`` = scaling factor on ``k`` GPUs (index 0 unused,
            ``-inf`` infeasible).
        total: GPUs available (K).

    Returns:
        ``(P(J, K), k_j per job)``; ``(-inf, [])`` when infeasible.
    """
    best, ks, _ = solve_from(values, total)
    return best, ks


def solve_from(values: list[NDArray[np.float64]], total: int, prior: Table | None = None) -> tuple[
    float, list[int], Table | None
]:
    """:func:`solve`, whose dynamic program extends ``prior``'s rows (:func:`fill_table`); also returns
    the table it filled (``None`` when the greedy optimum served or no solution exists)."""
    fast = solve_concave(values, total)
    if fast is not None:
        return (*fast, None)
    table = fill_table(values, total, prior)
    return (*read_table(table), table) if table is not None else (NEG, [], None)


def _concave_gains(v: NDArray[np.float64], total: int) -> tuple[int, NDArray[np.float64]] | None:
    """The smallest feasible size and the marginal gains above it, when ``v`` is concave over one
    interval of feasible sizes (``None`` otherwise); no feasible size up to ``total``: ``total + 1``."""
    ok = np.flatnonzero(np.isfinite(v[: total + 1]))
    ok = ok[ok > 0]
    if not len(ok):
        return total + 1, np.empty(0)
    if ok[-1] - ok[0] != len(ok) - 1:
        return None
    gains = np.diff(v[ok[0] : ok[-1] + 1])
    if len(gains) > 1 and np.any(np.diff(gains) > 1e-12 * np.maximum(1.0, np.abs(gains[1:]))):
        return None
    return int(ok[0]), gains


def solve_concave(values: list[NDArray[np.float64]], total: int) -> tuple[float, list[int]] | None:
    """Eq. 4's optimum when every ``values[j]`` is concave over one interval of feasible sizes; ``None`` otherwise.

    With concave factors the marginal gain of each job's next GPU never rises, so the optimum of
    ``max sum_j T~_j(k_j)`` s.t. ``sum_j k_j <= K``, ``k_j`` feasible, is: every job at its smallest
    feasible size, then the ``K - sum kmin`` largest positive marginal gains over all jobs (each
    job's are taken in order, as they never rise; a GPU that adds nothing stays idle). Ties go to
    the job listed first. ``O(M log M)`` for ``M`` marginal gains, against the table's ``O(J K kmax)``;
    jobs with the same factors (the same array) are analysed once.
    """
    seen: dict[int, tuple[int, NDArray[np.float64]] | None] = {}
    base = np.empty(len(values), dtype=np.int64)
    gains: list[NDArray[np.float64]] = []
    for j, v in enumerate(values):
        if id(v) not in seen:
            seen[id(v)] = _concave_gains(v, total)
        shape = seen[id(v)]
        if shape is None:
            return None
        base[j] = shape[0]
        gains.append(shape[1])
    if int(base.sum()) > total:
        return NEG, []
    best = float(sum(float(values[j][base[j]]) for j in range(len(values))))
    if not values:
        return best, []
    flat = np.concatenate(gains)
    owner = np.repeat(np.arange(len(values)), [len(g) for g in gains])
    step = np.concatenate([np.arange(len(g)) for g in gains])
    useful = flat > 0
    flat, owner, step = flat[useful], owner[useful], step[useful]
    order = np.lexsort((step, owner, -flat))[: total - int(base.sum())]
    counts = base + np.bincount(owner[order], minlength=len(values))
    return best + float(flat[order].sum()), [int(k) for k in counts]


def solve_table(values: list[NDArray[np.float64]], total: int) -> tuple[float, list[int]]:
    """Eq. 4 by its dynamic program (see the module docstring); the same contract as :func:`solve`."""
    table = fill_table(values, total)
    return read_table(table) if table is not None else (NEG, [])


def _shared_rows(values: list[NDArray[np.float64]], total: int, prior: Table | None) -> int:
    """How many leading jobs ``values`` shares with ``prior`` (the same factors, the same ``K``)."""
    if prior is None or prior.total != total:
        return 0
    n = 0
    for v, w in zip(values, prior.values, strict=False):
        if v is not w and not np.array_equal(v, w):
            break
        n += 1
    return n


def fill_table(values: list[NDArray[np.float64]], total: int, prior: Table | None = None) -> Table | None:
    """Eq. 4's table over ``values`` (``None``: infeasible), from the rows it shares with ``prior``."""
    n = len(values)
    reuse = _shared_rows(values, total, prior)
    rows = np.empty((n + 1, total + 1))
    bounds: list[tuple[int, int]] = [(0, 0)]  # row j-1 is -inf below lo_prev and flat from hi_prev on
    if prior is not None and reuse:
        rows[: reuse + 1] = prior.rows[: reuse + 1]
        bounds = list(prior.bounds[: reuse + 1])
    else:
        rows[0, :] = 0.0
    rows[reuse + 1 :] = NEG
    lo_prev, hi_prev = bounds[-1]
    for j in range(reuse + 1, n + 1):
        v = values[j - 1]
        prev, cur = rows[j - 1], rows[j]
        sizes = [int(k) for k in np.flatnonzero(np.isfinite(v)) if 0 < k <= total]
        if not sizes:
            return None
        lo = lo_prev + sizes[0]  # every earlier job needs its smallest size: P is -inf below
        hi = min(total, hi_prev + sizes[-1])  # more GPUs than all jobs can use stay idle: P is flat above
        if lo > total:
            return None
        for k in sizes:
            a = max(lo, lo_prev + k)
            if a > hi:
                continue
            np.maximum(cur[a : hi + 1], prev[a - k : hi + 1 - k] + v[k], out=cur[a : hi + 1])
        cur[hi + 1 :] = cur[hi]
        lo_prev, hi_prev = lo, hi
        bounds.append((lo, hi))
    rows.flags.writeable = False
    return Table(tuple(values), total, rows, tuple(bounds))


def read_table(table: Table) -> tuple[float, list[int]]:
    """``(P(J, K), k_j per job)`` from a filled table; ``(-inf, [])`` when infeasible."""
    rows, values, total, n = table.rows, table.values, table.total, len(table.values)
    best = float(rows[n, total])
    if not np.isfinite(best):
        return NEG, []
    ks: list[int] = []
    cap = total
    for j in range(n, 0, -1):
        v = values[j - 1]
        top = min(len(v) - 1, cap)
        if top < 1:  # no size left (never in a feasible table): as the general form fails
            kk = np.arange(1, top + 1)
            cand = rows[j - 1, cap - kk] + v[kk]
            k = int(kk[int(np.argmax(cand))])
        else:  # P(j-1, cap-k) + v[k] for k = 1..top, by slices rather than an index array
            stop = cap - top - 1
            cand = rows[j - 1, cap - 1 : stop if stop >= 0 else None : -1] + v[1 : top + 1]
            k = int(cand.argmax()) + 1
        ks.append(k)
        cap -= k
    ks.reverse()
    return best, ks


class DynamicProgramPlanner:
    """The ``dp`` policy: the IBM optimizer behind its autoscaler.

    Args:
        mode: ``"queue"`` keeps jobs that do not fit waiting; ``"drop"`` rejects them.
        kmax: cap on GPUs per job (the paper's ``k_max``; each job's own ``max_gpus`` applies too).
        interval: seconds between re-plans (the paper's Delta); 0 re-plans at every call.
        batch: ``"optimal"`` (the paper's method: ``b_opt(k)``) or ``"fixed"`` (the paper's baseline:
            each job keeps its own global batch, spread over the GPUs the same optimizer gives it;
            a configuration whose per-GPU batch does not fit is infeasible).
        ftf_bound: finish-time fairness guard (:mod:`~slurm_elastic.core.fairness`): jobs whose
            estimated FTF exceeds it get their requested GPUs before the DP; 0 (default) = off.
    """

    name = "dp"
    interval: float  # the parameter
    epoch_events = False
    uses_progress = False

    def __init__(self, mode: str = "queue", kmax: int | None = None, interval: float = 0.0,
                 batch: str = "optimal", ftf_bound: float = 0.0) -> None:
        if mode not in ("queue", "drop"):
            raise ConfigError(f"dp.mode = {mode!r}: must be 'queue' or 'drop'")
        if kmax is not None and kmax < 1:
            raise ConfigError(f"dp.kmax = {kmax}: must be >= 1")
        if interval < 0:
            raise ConfigError(f"dp.interval = {interval}: must be >= 0 seconds")
        if batch not in ("optimal", "fixed"):
            raise ConfigError(f"dp.batch = {batch!r}: must be 'optimal' or 'fixed'")
        self.mode, self.kmax, self.interval = mode, kmax, interval
        self.fixed = batch == "fixed"
        self.name = "dp-fixed" if self.fixed else "dp"
        self.ftf_bound = fairness.check_bound(self.name, ftf_bound)

    def plan(self, snapshot: ClusterSnapshot, memo: Any, rng: np.random.Generator) -> PlanResult:
        """Admit, solve the DP, and size every admitted job at its ``b_opt`` (behind the FTF guard if set)."""
        if self.ftf_bound:
            return fairness.guarded_plan(self._solve, self.name, self.ftf_bound, snapshot, memo, rng)
        return self._solve(snapshot, memo, rng)

    def _solve(self, snapshot: ClusterSnapshot, memo: Any, rng: np.random.Generator) -> PlanResult:
        m = memo if isinstance(memo, DpMemo) else DpMemo()
        total = len(snapshot.schedulable_gpus())
        if m.last_plan_time is not None and snapshot.now - m.last_plan_time < self.interval:
            counts = current_counts(snapshot)
            plan = build_plan(snapshot, self.name, counts, notes=("between re-plans: allocation kept",))
            return PlanResult(plan, m)
        # Value tables depend only on a job's shape, so identical jobs share one; the memo keeps
        # the tables of the shapes still present.
        tables: dict[tuple[Any, ...], tuple[NDArray[np.float64], NDArray[np.int64]]] = {}
        batch_of: dict[JobId, NDArray[np.int64]] = {}
        vals: dict[JobId, NDArray[np.float64]] = {}
        kmin: dict[JobId, int] = {}
        # Jobs of one shape and smallest size share one array (solve analyses each array once).
        cut: dict[tuple[Any, ...], tuple[NDArray[np.float64], int]] = {}
        for job in snapshot.elastic_jobs():
            kmax = min(job.max_gpus, total, self.kmax or total)
            key = (*sizing.shape_key(job), kmax, self.fixed)
            if key not in tables:
                cached = m.tables.get(key)
                tables[key] = cached if cached is not None else _table(job, snapshot, kmax, self.fixed)
            batch_of[job.job_id] = tables[key][1]
            gaps = job.unreachable_sizes  # a running job whose GPUs go only in whole blocks
            shaped = (*key, job.min_gpus, gaps)
            if shaped not in cut:
                kept_cut = m.cuts.get((total, shaped))
                if kept_cut is not None:
                    cut[shaped] = kept_cut
                else:
                    v = tables[key][0].copy()
                    v[: job.min_gpus] = NEG
                    v[[k for k in gaps if k < len(v)]] = NEG
                    ok = np.flatnonzero(np.isfinite(v))
                    v.flags.writeable = False
                    cut[shaped] = v, int(ok[0]) if len(ok) else total + 1
            vals[job.job_id], kmin[job.job_id] = cut[shaped]
        executing = [j for j in snapshot.elastic_jobs() if j.state is JobState.RUNNING]
        waiting = [j for j in snapshot.elastic_jobs() if j.is_waiting]
        reasons: dict[JobId, str] = {}
        dropped: set[JobId] = set()
        # Keep the executing set feasible: preempt the most recently started first.
        executing.sort(key=lambda j: (j.start_time or 0.0, j.job_id))
        while executing and sum(kmin[j.job_id] for j in executing) > total:
            gone = executing.pop()
            reasons[gone.job_id] = f"preempted by dp: the running jobs need more than the {total} GPUs left"
        used = sum(kmin[j.job_id] for j in executing)
        admitted = list(executing)
        for job in waiting:
            need = kmin[job.job_id]
            if need > total:
                reasons[job.job_id] = f"no feasible size: needs {need} GPUs at least, the cluster schedules {total}"
                continue
            if used + need <= total:
                admitted.append(job)
                used += need
            elif self.mode == "drop":
                reasons[job.job_id] = f"dropped by dp: needs {need} GPUs, {total - used} left after admitted jobs"
                dropped.add(job.job_id)
            else:
                reasons[job.job_id] = f"queued by dp: needs {need} GPUs, {total - used} left after admitted jobs"
        best, ks, table = solve_from([vals[j.job_id] for j in admitted], total, m.table)
        counts = {j.job_id: k for j, k in zip(admitted, ks, strict=True)}

        def choose(job: Job, k: int) -> sizing.Sizing | None:
            if self.fixed:
                b = job.base_batch
                return sizing.Sizing(b, -(-b // k), 1, job.base_lr)
            if job.mode is ElasticMode.ENDO:
                return sizing.size_for(job, k, snapshot.profiles[job.model])
            b = int(batch_of[job.job_id][k])
            return sizing.Sizing(b, -(-b // k), 1, job.base_lr * b / job.base_batch) if b else None

        plan = build_plan(snapshot, self.name, counts, reasons=reasons, choose=choose,
                          score=best if admitted else 0.0)
        if dropped:
            plan = replace(
                plan, unplaced=tuple(replace(u, dropped=u.job_id in dropped) for u in plan.unplaced)
            )
        kept = table if table is not None and table.rows.nbytes <= MEMO_TABLE_BYTES else None
        return PlanResult(plan, DpMemo(snapshot.now, tables, kept, {(total, k): c for k, c in cut.items()}))


def fixed_batch_planner(mode: str = "queue", kmax: int | None = None, interval: float = 0.0,
                        ftf_bound: float = 0.0) -> DynamicProgramPlanner:
    """The IBM paper's baseline: the same optimizer, each job's global batch fixed (Random-BS)."""
    return DynamicProgramPlanner(mode=mode, kmax=kmax, interval=interval, batch="fixed", ftf_bound=ftf_bound)
