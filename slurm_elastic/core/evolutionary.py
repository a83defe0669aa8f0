"""ONES: online evolutionary search over GPU-level schedules (Bian et al., SC'21, §3.2).

This module owns the ``ones`` planner. A candidate schedule is a genome with one gene per
schedulable GPU holding the index of the job that runs there (``-1`` idle); a job's GPU count is
its number of genes and its global batch follows (``B = c * b_local``, within ``R_j``; see
:mod:`~slurm_elastic.core.sizing` and :mod:`~slurm_elastic.core.scaling_policy`).

Score (Eq. 8, smaller is better) of a candidate under a draw of progress ``rho_j ~ Be(a_j, b_j)``::

    sum over jobs running in it of  c_j / X_j(c_j, placement) * Y_j,   Y_j = Yp_j (1/rho_j - 1)
    + sum over jobs it leaves waiting of  kmin_j / X_j(kmin_j) * Y_j

The second sum is ours: Eq. 8 sums over running jobs only, so without it a candidate that
preempts a job would drop that job's remaining work from its score and selection would favour
preempting the jobs with the most work left; a waiting job is charged its remaining GPU time at
its start size.

``X_j`` is predicted throughput (samples/s) at the candidate's GPU count, with the inter-node
penalty when the genome spreads the job over more nodes than needed, corrected by the job's
measured throughput. ``Yp_j`` is the samples processed, floored at one epoch like ``alpha`` (the
paper thresholds ``alpha = Yp/|D|`` at 1; without the same floor a job that has not finished an
epoch would have zero remaining work). The *expected* score uses ``E[Y_j]`` instead of a draw,
as :meth:`BetaProgressModel.expected_remaining` estimates it: ``Yp * b / max(a - 1, 1)``, exact
for ``a >= 2`` (the exact mean is infinite at ``a = 1``, where this is the mean-progress plug-in).

Progress distribution: from ``snapshot.progress_model`` (the fitted ONES Beta regression) when
present; before any job completed, ``a = max(epochs done, 1)`` and ``b = max(target epochs -
epochs done, 1)`` for jobs that declared their epochs, else ``b = default_epochs_to_go``.

One call of :meth:`OnesPlanner.plan`:

1. **Refresh** every member of the population carried in the memo (remapped onto today's GPUs
   and jobs): (1) drop finished jobs and lost GPUs; (2) scale every job down to its limit
   ``floor(R_j / b_local)`` GPUs (and drop jobs below ``min_gpus``); (3) give each job that
   arrived since the last executed update its start size, taking GPUs from the jobs with the largest
   executed time when no GPU is idle (new jobs in arrival order while GPUs last); (4) fill idle
   GPUs: repeatedly sample ``rho``, and grow the job with the smallest utilization increase
   ``delta(c/X) * Y_j`` (a waiting job's increase is its whole ``c * T``, so this is SRUF), up to
   its limit. Jobs whose increases fit together in the idle GPUs are taken in one pass in
   ascending order (equivalent to one-by-one picking under the same draw, and vectorised).
2. ``generations`` times (the budget is counted in generations): **uniform crossover** of ``K``
   random parent pairs into ``2K`` children; **uniform mutation** of ``K`` random members (each
   job preempted with probability ``theta``); every offspring is **refreshed** again (steps 1-4;
   the paper lists refresh among the evolution operations, and re-applying step 3 keeps new
   arrivals in every candidate: Eq. 8 sums over running jobs only, so without it selection would
   simply drop them) and **reordered** (each job's workers packed contiguously in order of first
   occurrence); **selection** keeps the ``K`` best of
   parents and offspring under one shared ``rho`` draw, plus the member with the best expected
   score (elitism).
3. **Update**: ``S*`` is chosen by Algorithm 1 (one ``rho`` draw, smallest score) among members
   whose expected score is no worse than the refreshed warm start (the previous ``S*``), so a
   call never returns a plan worse in expectation than its warm start. The one-epoch gate is per
   job (the paper's reason: "each job can finish one epoch"): a running job that has not completed
   an epoch since its allocation last changed keeps it; every other job gets its ``S*`` count as
   far as the remaining GPUs allow (see :func:`_gated_counts`).

The executed placement comes from :func:`~slurm_elastic.core.placement.place` with ``S*``'s GPU
counts, which keeps running workers where they are; the genome's layout is used for scoring.

Population ``K`` defaults to the number of GPUs as the paper suggests, capped at
``population_cap`` (64: the paper's own population on its 64-GPU testbed), so that a 4,096-GPU
cluster stays within the planning-latency budget.

The operators' gene-level loops are compiled (:mod:`~slurm_elastic.core.ones_kernels`); this
module draws every random number and keeps the search's structure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from slurm_elastic.core import fairness, sizing
from slurm_elastic.core import ones_kernels as kernels
from slurm_elastic.core import scaling_policy as sp
from slurm_elastic.core.model import ClusterSnapshot, Job, JobId, JobState, NodeName
from slurm_elastic.core.planner import PlanResult, build_plan, current_counts
from slurm_elastic.core.remaining import expected_remaining, progress_shapes
from slurm_elastic.errors import ConfigError
from slurm_elastic_predictor import portable

IntArr = NDArray[np.signedinteger[Any]]
FloatArr = NDArray[np.float64]
RHO_EPS = 1e-6


@dataclass(frozen=True, slots=True)
class OnesMemo:
    """Everything ONES carries from one call to the next (its warm start).

    Attributes:
        gpus: the GPU order of the genomes.
        job_ids: the job order of the genes' values.
        population: genomes, shape ``(K, len(gpus))``; row 0 is the last ``S*``.
        limits: per-job ``R_j`` state.
        seen: jobs known at the last executed update (later pending arrivals are "new").
        waiting_at_update: jobs left waiting by the last executed update (Resume halving).
        grids: uncorrected throughput grids by (job shape, cap, limit), reused across calls.
        predictions: predicted throughput at the jobs' current configurations (their measured
            correction's denominator) by (model, batch, GPUs, nodes), reused across calls.
        warm_score: expected score of the refreshed warm start in the call that made this memo.
        best_score: expected score of that call's ``S*`` (never above ``warm_score``).
        last_plan_time: when the search last ran (periodic mode).
    """

    gpus: tuple[tuple[NodeName, int], ...] = ()
    job_ids: tuple[JobId, ...] = ()
    population: IntArr = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int32))
    limits: dict[JobId, sp.LimitState] = field(default_factory=dict)
    seen: frozenset[JobId] = frozenset()
    waiting_at_update: frozenset[JobId] = frozenset()
    grids: dict[tuple[object, ...], FloatArr] = field(default_factory=dict)
    predictions: dict[tuple[object, ...], float] = field(default_factory=dict)
    warm_score: float = 0.0
    best_score: float = 0.0
    last_plan_time: float | None = None


@dataclass
class _Ctx:
    """Per-call arrays shared by the operators (job axis J, GPU axis G)."""

    jobs: list[Job]
    gnode: IntArr  # node index of each GPU
    gpn: int  # GPUs per node
    cap: IntArr  # GPU cap per job (from R_j and feasibility)
    kmin: IntArr  # smallest feasible GPU count per job
    xtab: FloatArr  # (J, kc+1, 2) throughput, [:, k, 0] packed, [:, k, 1] spread
    yp: FloatArr  # processed samples, floored at one epoch
    alpha: FloatArr
    beta: FloatArr
    rng: np.random.Generator
    new: list[int] = field(default_factory=list)  # jobs arrived since the last executed update
    wait_cost: FloatArr = field(default_factory=lambda: np.zeros(0))  # c/X of a waiting job
    node_runs: IntArr = field(init=False)  # node changes along the GPU order up to each GPU

    def __post_init__(self) -> None:
        changes = np.zeros(len(self.gnode), dtype=np.int64)
        changes[1:] = self.gnode[1:] != self.gnode[:-1]
        self.node_runs = np.cumsum(changes)

    @property
    def n_jobs(self) -> int:
        return len(self.jobs)

    def draw_y(self) -> FloatArr:
        rho = self.rng.beta(self.alpha, self.beta) if self.n_jobs else np.zeros(0)
        rho = np.clip(rho, RHO_EPS, 1 - RHO_EPS)
        return self.yp * (1.0 / rho - 1.0)

    def expected_y(self) -> FloatArr:
        return expected_remaining(self.alpha, self.beta, self.yp)


@dataclass(slots=True)
class _Pop:
    """A population and what the operators know of it (kept in step, so nothing is recounted).

    ``counts[r, j]`` is member ``r``'s GPU count of job ``j`` (always ``_counts(genomes)``);
    ``spans[r, j]`` the nodes job ``j`` spans in member ``r``, set once the members are reordered
    (each job's genes contiguous), which every member the search keeps is.
    """

    genomes: IntArr
    counts: IntArr
    spans: IntArr


def _counts(ctx: _Ctx, genomes: IntArr) -> IntArr:
    out: IntArr = kernels.count_genes(genomes, ctx.n_jobs)
    return out


def _packed_throughput(ctx: _Ctx, counts: IntArr) -> FloatArr:
    """``xtab[job, min(count, kc), 0]`` per job: each job's throughput at ``counts`` GPUs, packed."""
    kc = ctx.xtab.shape[1] - 1
    out: FloatArr = ctx.xtab[np.arange(ctx.n_jobs), np.minimum(counts, kc), 0]
    return out


def _scores(ctx: _Ctx, counts: IntArr, spans: IntArr, *ys: FloatArr) -> list[FloatArr]:
    """Eq. 8 for each member (its GPU counts and spans) under each remaining-work vector in ``ys``."""
    if ctx.n_jobs == 0:
        return [np.zeros(len(counts)) for _ in ys]
    per_gpu_time = kernels.gpu_time_per_sample(counts, spans, ctx.xtab, ctx.wait_cost, ctx.gpn)
    return [portable.matvec(per_gpu_time, y) for y in ys]  # not BLAS: a score must not depend on the CPU


def _repair(ctx: _Ctx, genomes: IntArr, counts: IntArr) -> tuple[IntArr, IntArr]:
    """Trim every job to its GPU cap (its first ``cap`` genes in GPU order) and drop jobs below
    their smallest feasible count."""
    if ctx.n_jobs == 0:
        return np.full_like(genomes, -1), counts
    out: tuple[IntArr, IntArr] = kernels.repair(genomes, counts, ctx.cap, ctx.kmin)
    return out


def _fill(ctx: _Ctx, genomes: IntArr, counts: IntArr, max_passes: int = 64) -> tuple[IntArr, IntArr]:
    """Refresh step (4): give idle GPUs to the jobs whose growth costs least utilization.

    Each pass draws ``rho`` once for all members and serves, in every member that still has idle
    GPUs, the jobs of smallest utilization increase while they fit (:func:`kernels.fill_pass`).
    """
    g = genomes.copy()
    gg = g.shape[1]
    if ctx.n_jobs == 0 or gg == 0:
        return g, counts
    counts = counts.copy()
    idle = gg - counts.sum(axis=1)
    active = np.flatnonzero(idle > 0)
    cursor = np.zeros(len(g), dtype=np.int64)  # where each member's unserved idle GPUs start
    for _ in range(max_passes):
        if not len(active):
            break
        active = kernels.fill_pass(g, counts, idle, cursor, active, ctx.draw_y(), ctx.cap, ctx.kmin, ctx.xtab)
    return g, counts


def _reorder(ctx: _Ctx, genomes: IntArr, counts: IntArr) -> tuple[IntArr, IntArr]:
    """Pack each job's workers contiguously, jobs in order of their first occurrence.

    Returns the reordered genomes and the nodes each job spans in them.
    """
    out: tuple[IntArr, IntArr] = kernels.reorder(genomes, counts, ctx.node_runs)
    return out


def _new_jobs(ctx: _Ctx, genomes: IntArr, counts: IntArr, new: list[int]) -> tuple[IntArr, IntArr]:
    """Refresh step (3): start each new job at its start size, preempting the longest-running.

    New jobs are served in arrival order while GPUs last, from idle GPUs when a member has enough
    for all of them, otherwise taking GPUs from the jobs with the largest executed time (a victim
    that would fall under its smallest size is preempted whole).
    """
    if not new or genomes.size == 0:
        return genomes, counts
    run_time = np.array([jb.run_time for jb in ctx.jobs])
    is_new = set(new)
    longest_first = np.array([v for v in np.argsort(-run_time, kind="stable").tolist() if v not in is_new],
                             dtype=np.int64)
    out: tuple[IntArr, IntArr] = kernels.start_new_jobs(genomes, counts, np.array(new, dtype=np.int64),
                                                        ctx.kmin, longest_first)
    return out


def _refresh(ctx: _Ctx, genomes: IntArr, counts: IntArr) -> _Pop:
    """The refresh operation (steps 1-4) followed by reorder: every candidate the search keeps
    respects the limits, runs the new arrivals and leaves no GPU idle that some job could use.

    ``counts`` are the members' GPU counts per job (``_counts(genomes)``), kept in step throughout.
    """
    genomes, counts = _repair(ctx, genomes, counts)
    genomes, counts = _new_jobs(ctx, genomes, counts, ctx.new)
    genomes, counts = _fill(ctx, genomes, counts)
    genomes, spans = _reorder(ctx, genomes, counts)
    return _Pop(genomes, counts, spans)


def _gated_counts(ctx: _Ctx, star: IntArr, held: set[JobId],
                  gpus: tuple[tuple[NodeName, int], ...]) -> dict[JobId, int]:
    """The executed GPU counts: ``S*``'s, except that ``held`` jobs keep their allocation.

    The update gate is per job (§3.2.2: "each job can finish one epoch"): a running job that has
    not finished an epoch since its allocation last changed keeps it; every other job gets its
    count in ``S*`` as far as the GPUs the held jobs leave allow. Held jobs are kept first (those
    that must leave unschedulable GPUs only while capacity lasts); then every other job gets what
    ``S*`` keeps of its current allocation (shrinks and preemptions always fit); then ``S*``'s
    starts and growths, new arrivals first (in arrival order, as refresh step 3 prefers them), then
    by smallest expected utilization increase ``delta(c/X) * E[Y]`` (as the fill step), each cut
    to what is left, down to the largest feasible count. With no held job this is ``S*`` exactly.
    """
    sched = set(gpus)
    idle = len(gpus)
    counts: dict[JobId, int] = {}
    jobs = ctx.jobs
    for job in sorted((j for j in jobs if j.num_gpus and j.job_id in held),
                      key=lambda j: (not j.placement.gpu_set() <= sched, j.job_id)):
        if job.num_gpus <= idle:
            counts[job.job_id] = job.num_gpus
            idle -= job.num_gpus
    free = [i for i, j in enumerate(jobs) if j.job_id not in held]
    for i in free:
        base = min(int(star[i]), jobs[i].num_gpus)
        if base and base <= idle:
            counts[jobs[i].job_id] = base
            idle -= base
    grow = [i for i in free if int(star[i]) > counts.get(jobs[i].job_id, 0)]
    if not grow or idle <= 0:
        return counts
    ey = ctx.expected_y()
    cur = np.array([counts.get(j.job_id, 0) for j in jobs], dtype=np.int64)
    x_t = _packed_throughput(ctx, star)
    x_c = _packed_throughput(ctx, cur)
    new = {i: r for r, i in enumerate(ctx.new)}
    with np.errstate(divide="ignore", invalid="ignore"):
        cost = (star / x_t - np.where(cur > 0, cur / x_c, 0.0)) * ey
    grow.sort(key=lambda i: (i not in new, new.get(i, 0), float(cost[i]), i))
    for i in grow:
        have = int(cur[i])
        c = min(int(star[i]), have + idle)
        while c > have and not (c >= ctx.kmin[i] and ctx.xtab[i, min(c, ctx.xtab.shape[1] - 1), 0] > 0):
            c -= 1
        if c > have:
            counts[jobs[i].job_id] = c
            idle -= c - have
        if idle <= 0:
            break
    return counts


class OnesPlanner:
    """The ``ones`` policy.

    Args:
        population: ``K``; ``None`` means the number of schedulable GPUs (capped).
        population_cap: upper bound on the default ``K``.
        generations: evolution iterations per call (the search budget).
        mutation_rate: ``theta``, probability that a job is preempted in a mutant.
        sigma: scale-down factor in 1/s; ``None`` uses the snapshot's arrival rate (the paper's
            suggestion ``sigma = lambda``).
        default_epochs_to_go: progress prior ``beta`` for jobs that declared no epoch count.
        gate: execute ``S*`` only once every running job finished an epoch since its last change.
        interval: seconds between searches (a periodic ONES); 0 (default) searches at every call,
            i.e. at every event. Between searches the allocation is kept.
        ftf_bound: finish-time fairness guard (:mod:`~slurm_elastic.core.fairness`): jobs whose
            estimated FTF exceeds it get their requested GPUs before the search; 0 (default) = off.
    """

    name = "ones"
    interval: float  # the parameter
    epoch_events = True  # ONES re-plans as jobs finish epochs (its update gate and R_j rules)
    uses_progress = True  # reads snapshot.progress_model (the Beta regression)

    def __init__(
        self,
        population: int | None = None,
        population_cap: int = 64,
        generations: int = 10,
        mutation_rate: float = 0.05,
        sigma: float | None = None,
        default_epochs_to_go: float = 10.0,
        gate: bool = True,
        interval: float = 0.0,
        ftf_bound: float = 0.0,
    ) -> None:
        if population is not None and population < 2:
            raise ConfigError(f"ones.population = {population}: must be >= 2")
        if population_cap < 2:
            raise ConfigError(f"ones.population_cap = {population_cap}: must be >= 2")
        if generations < 0:
            raise ConfigError(f"ones.generations = {generations}: must be >= 0")
        if not 0.0 <= mutation_rate <= 1.0:
            raise ConfigError(f"ones.mutation_rate = {mutation_rate}: must lie in [0, 1]")
        if sigma is not None and sigma < 0:
            raise ConfigError(f"ones.sigma = {sigma}: must be >= 0 (1/s)")
        if interval < 0:
            raise ConfigError(f"ones.interval = {interval}: must be >= 0 seconds")
        if default_epochs_to_go < 1:
            raise ConfigError(f"ones.default_epochs_to_go = {default_epochs_to_go}: must be >= 1")
        self.population = population
        self.population_cap = population_cap
        self.generations = generations
        self.mutation_rate = mutation_rate
        self.sigma = sigma
        self.default_epochs_to_go = default_epochs_to_go
        self.gate = gate
        self.interval = interval
        self.ftf_bound = fairness.check_bound("ones", ftf_bound)

    # -- setup ---------------------------------------------------------------------------------

    def _limits(self, snapshot: ClusterSnapshot, m: OnesMemo, jobs: list[Job]) -> dict[JobId, sp.LimitState]:
        sigma = snapshot.arrival_rate if self.sigma is None else self.sigma
        # The convoy effect needs a queue: jobs that the last schedule left waiting and still wait.
        contended = any(j.is_waiting and j.job_id in m.waiting_at_update for j in jobs)
        out = {}
        for job in jobs:
            rejected = job.is_waiting and job.job_id in m.waiting_at_update and job.state is JobState.PREEMPTED
            out[job.job_id] = sp.advance(m.limits.get(job.job_id), job, sigma, rejected, contended)
        return out

    def _context(self, snapshot: ClusterSnapshot, jobs: list[Job], limits: dict[JobId, sp.LimitState],
                 gpus: tuple[tuple[NodeName, int], ...], rng: np.random.Generator,
                 cache: dict[tuple[object, ...], FloatArr], grids_out: dict[tuple[object, ...], FloatArr],
                 known: dict[tuple[object, ...], float], predictions: dict[tuple[object, ...], float]) -> _Ctx:
        node_ix = {n.name: i for i, n in enumerate(snapshot.nodes)}
        gnode = np.array([node_ix[n] for n, _ in gpus], dtype=np.int64)
        gpn = max((len(n.gpus) for n in snapshot.nodes), default=1) or 1
        g = len(gpus)
        caps, kmins, grids = [], [], []
        ranges: dict[tuple[object, ...], tuple[int, int] | None] = {}  # by (shape, min GPUs): the correction keeps it
        for job in jobs:
            model = snapshot.profiles[job.model]
            r = limits[job.job_id].limit
            cap = min(sp.gpu_cap(job, r), g)
            key = (*sizing.shape_key(job), cap, r)
            raw = grids_out.get(key)
            if raw is None:
                raw = cache.get(key)
                if raw is None:
                    raw = sizing.throughput_grid(job, model, cap, r, corrected=False)
                grids_out[key] = raw
            factor = sizing.correction(job, model, known, predictions)
            grid = raw if factor == 1.0 else raw * factor
            if (key, job.min_gpus) not in ranges:
                ranges[(key, job.min_gpus)] = sizing.feasible_span(raw[:, 0], job.min_gpus)
            kmin, cap = ranges[(key, job.min_gpus)] or (g + 1, 0)
            kmins.append(kmin)
            caps.append(cap)
            grids.append(grid)
        kc = max(caps, default=0)
        xtab = np.zeros((len(jobs), kc + 1, 2))
        for i, grid in enumerate(grids):
            n = min(len(grid), kc + 1)
            xtab[i, :n] = grid[:n]
        alpha, beta, yp = progress_shapes(snapshot, jobs, self.default_epochs_to_go)
        kmin_a = np.array(kmins, dtype=np.int64)
        ok = kmin_a <= kc
        wait_cost = np.zeros(len(jobs))
        if ok.any():
            wait_cost[ok] = kmin_a[ok] / xtab[np.flatnonzero(ok), kmin_a[ok], 0]
        return _Ctx(jobs, gnode, gpn, np.array(caps, dtype=np.int64), kmin_a,
                    xtab, yp, alpha, beta, rng, wait_cost=wait_cost)

    # -- the call ------------------------------------------------------------------------------

    def plan(self, snapshot: ClusterSnapshot, memo: Any, rng: np.random.Generator) -> PlanResult:
        """Refresh the population, evolve it, and execute (or hold) ``S*`` (behind the FTF guard if set)."""
        if self.ftf_bound:
            return fairness.guarded_plan(self._search, self.name, self.ftf_bound, snapshot, memo, rng,
                                         self.default_epochs_to_go)
        return self._search(snapshot, memo, rng)

    def _search(self, snapshot: ClusterSnapshot, memo: Any, rng: np.random.Generator) -> PlanResult:
        m = memo if isinstance(memo, OnesMemo) else OnesMemo()
        if m.last_plan_time is not None and snapshot.now - m.last_plan_time < self.interval:
            return PlanResult(build_plan(snapshot, self.name, current_counts(snapshot),
                                         batch_limits={j: s.limit for j, s in m.limits.items()},
                                         notes=("between searches: allocation kept",)), m)
        jobs = list(snapshot.elastic_jobs())
        gpus = snapshot.schedulable_gpus()
        limits = self._limits(snapshot, m, jobs)
        grids: dict[tuple[object, ...], FloatArr] = {}
        predictions: dict[tuple[object, ...], float] = {}  # only this call's are carried, like the grids
        ctx = self._context(snapshot, jobs, limits, gpus, rng, m.grids, grids, m.predictions, predictions)
        jix = {j.job_id: i for i, j in enumerate(jobs)}
        gix = {gpu: i for i, gpu in enumerate(gpus)}
        current = np.full(len(gpus), -1, dtype=np.int32)
        for job in jobs:
            for gpu in job.placement.gpu_set():
                if gpu in gix:
                    current[gix[gpu]] = jix[job.job_id]
        k = self.population or max(2, min(len(gpus), self.population_cap))
        carried = self._carry(m, jix, gix, current, k, ctx)
        ctx.new = [jix[j.job_id] for j in jobs if j.state is JobState.PENDING and j.job_id not in m.seen]
        pop = _refresh(ctx, carried, _counts(ctx, carried))
        warm_expected = float(_scores(ctx, pop.counts[:1], pop.spans[:1], ctx.expected_y())[0][0])
        for _ in range(self.generations):
            pop = self._generation(ctx, pop, k)
        expected, sampled = _scores(ctx, pop.counts, pop.spans, ctx.expected_y(), ctx.draw_y())
        sampled = np.where(expected <= warm_expected * (1 + 1e-12) + 1e-12, sampled, np.inf)
        best = int(np.argmin(sampled))
        star = pop.genomes[best]
        population = np.concatenate([star[None, :], np.delete(pop.genomes, best, axis=0)])
        star_counts = pop.counts[best]

        held = {j.job_id for j in jobs if j.state is JobState.RUNNING and j.epochs_since_change < 1.0}
        held |= {j.job_id for j in jobs if snapshot.in_flight_for(j.job_id) is not None}
        if not self.gate:
            held = set()
        counts = _gated_counts(ctx, star_counts, held, gpus)
        notes: tuple[str, ...] = ()
        if held:
            first = min(held)
            notes = (f"update gated for {len(held)} running job(s) (e.g. {first}) that have not finished an epoch "
                     "since their last change; they keep their allocation",)
        reasons = {
            j.job_id: f"waiting: ONES runs jobs with less remaining GPU time first (limit R={limits[j.job_id].limit})"
            for j in jobs if j.job_id not in counts
        }
        plan = build_plan(snapshot, self.name, counts, reasons=reasons,
                          batch_limits={j: s.limit for j, s in limits.items()},
                          score=float(expected[best]), notes=notes)
        running_now = set(counts)
        new_memo = OnesMemo(
            gpus=gpus,
            job_ids=tuple(j.job_id for j in jobs),
            population=population,
            limits=limits,
            # A new job stays "new" (preferential start in refresh step 3) until it has run.
            seen=frozenset(j.job_id for j in jobs
                           if j.job_id in m.seen or j.job_id in running_now or j.state is not JobState.PENDING),
            waiting_at_update=frozenset(j.job_id for j in jobs if j.job_id not in running_now),
            grids=grids,
            predictions=predictions,
            last_plan_time=snapshot.now,
            warm_score=warm_expected,
            best_score=float(expected[best]),
        )
        return PlanResult(plan, new_memo)

    def _carry(self, m: OnesMemo, jix: dict[JobId, int], gix: dict[tuple[NodeName, int], int],
               current: IntArr, k: int, ctx: _Ctx) -> IntArr:
        """Remap the memo's population onto today's GPUs and jobs, topped up to ``K`` members.

        Row 0 is the previous ``S*`` (the warm start), row 1 the current allocation; new members
        are random-job-per-GPU genomes as in the paper's initialisation.
        """
        rows: list[IntArr] = []
        if m.population.size:
            old_to_new = np.array([jix.get(jid, -1) for jid in m.job_ids] + [-1], dtype=np.int64)
            src = np.array([gix.get(gpu, -1) for gpu in m.gpus], dtype=np.int64)
            keep = src >= 0
            for old in m.population[: k - 1]:
                row = np.full(len(current), -1, dtype=np.int32)
                genes = np.where(old < 0, len(m.job_ids), old)
                row[src[keep]] = old_to_new[genes[keep]]
                rows.append(row)
        rows.insert(min(1, len(rows)), current.copy())
        j = ctx.n_jobs
        while len(rows) < k:
            rows.append(ctx.rng.integers(-1, j, size=len(current), dtype=np.int32) if j else current.copy())
        return np.stack(rows[:k]) if rows and len(current) else np.zeros((k, len(current)), dtype=np.int32)

    def _generation(self, ctx: _Ctx, pop: _Pop, k: int) -> _Pop:
        n, g = pop.genomes.shape
        if g == 0 or ctx.n_jobs == 0:
            return pop
        genomes = pop.genomes
        pairs = ctx.rng.integers(0, n, size=(k, 2))
        mask = ctx.rng.random((k, g)) < 0.5
        picked = ctx.rng.integers(0, n, size=k)
        hit = ctx.rng.random((k, ctx.n_jobs)) < self.mutation_rate
        bred, counts = kernels.breed(genomes, pop.counts, pairs, mask, picked, hit)
        offspring = _refresh(ctx, bred, counts)
        sampled, expected = _scores(ctx, np.concatenate([pop.counts, offspring.counts]),
                                    np.concatenate([pop.spans, offspring.spans]), ctx.draw_y(), ctx.expected_y())
        chosen = list(np.argsort(sampled, kind="stable")[:k])
        elite = int(np.argmin(expected))
        if elite not in chosen:
            chosen[-1] = elite
        chosen.sort(key=lambda i: (i != elite, i))
        sel = np.array(chosen)
        old = sel < n  # the pool is the parents, then the offspring: gather from each without joining them

        def take(a: IntArr, b: IntArr) -> IntArr:
            out = np.empty((len(sel), a.shape[1]), dtype=a.dtype)
            out[old] = a[sel[old]]
            out[~old] = b[sel[~old] - n]
            return out

        return _Pop(take(genomes, offspring.genomes), take(pop.counts, offspring.counts),
                    take(pop.spans, offspring.spans))
