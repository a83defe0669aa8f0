"""Unit tests of the ONES planner: refresh, operators, gate and update."""

from __future__ import annotations

import numpy as np
import pytest

from slurm_elastic import policies
from slurm_elastic.core import scaling_policy as sp
from slurm_elastic.core.constraints import validate_plan
from slurm_elastic.core.evolutionary import (
    OnesMemo,
    OnesPlanner,
    _counts,
    _Ctx,
    _fill,
    _new_jobs,
    _refresh,
    _reorder,
    _repair,
    _scores,
)
from slurm_elastic.core.model import JobId, JobState
from slurm_elastic.testing import make_job, make_nodes, make_snapshot, random_snapshot


def _plan(snap, memo=None, seed=0, **kw):  # type: ignore[no-untyped-def]
    return OnesPlanner(**kw).plan(snap, memo, np.random.default_rng(seed))


def test_new_jobs_start_on_one_gpu_and_idle_gpus_are_filled() -> None:
    jobs = [make_job(i, max_gpus=8, submit_time=i) for i in range(3)]
    snap = make_snapshot(make_nodes(2), jobs)
    res = _plan(snap)
    validate_plan(snap, res.plan)
    # Start rule: every new job is limited to one GPU, so 3 of 8 GPUs are used.
    assert sorted(p.num_gpus for p in res.plan.jobs) == [1, 1, 1]


def test_limits_grow_after_epochs_and_jobs_fill_the_cluster() -> None:
    jobs = [make_job(i, max_gpus=8, placement=[("n000", i)], epochs_done=3.0, epochs_since_change=3.0,
                     run_time=60.0) for i in range(2)]
    snap = make_snapshot(make_nodes(2), jobs)
    memo = OnesMemo(limits={JobId(str(i)): sp.LimitState(128, 0, 128) for i in range(2)},
                    seen=frozenset({JobId("0"), JobId("1")}))
    res = _plan(snap, memo)
    validate_plan(snap, res.plan)
    # three epochs each: R = 128 * 2^3 = 1024 -> up to 8 GPUs each; 8 GPUs in the cluster.
    assert sum(p.num_gpus for p in res.plan.jobs) == 8


def test_new_arrival_takes_gpus_from_longest_running_job() -> None:
    old = make_job("old", max_gpus=8, placement=[("n000", g) for g in range(4)], epochs_done=9,
                   epochs_since_change=5, run_time=5000)
    young = make_job("young", max_gpus=8, placement=[("n001", g) for g in range(4)], epochs_done=9,
                     epochs_since_change=5, run_time=100)
    first = make_snapshot(make_nodes(2), [old, young])
    memo = _plan(first).memo
    newcomer = make_job("new", submit_time=10)
    snap = make_snapshot(make_nodes(2), [old, young, newcomer], now=10)
    res = _plan(snap, memo)
    validate_plan(snap, res.plan)
    got = {p.job_id: p.num_gpus for p in res.plan.jobs}
    assert got.get(JobId("new")) == 1


def test_gate_holds_running_jobs_mid_epoch_but_starts_waiting_jobs_on_idle_gpus() -> None:
    run = make_job("run", max_gpus=8, placement=[("n000", 0)], epochs_done=5, epochs_since_change=0.2)
    snap = make_snapshot(make_nodes(1), [run, make_job("w", submit_time=5)])
    memo = OnesMemo(limits={JobId("run"): sp.LimitState(1024, 5, 1024)}, seen=frozenset({JobId("run")}))
    res = _plan(snap, memo)
    validate_plan(snap, res.plan)
    got = res.plan.by_job()
    assert got[JobId("run")].placement == run.placement
    assert got[JobId("w")].num_gpus == 1
    assert res.plan.notes and "update gated" in res.plan.notes[0]


def test_same_seed_same_plan_different_seed_may_differ() -> None:
    snap = random_snapshot(np.random.default_rng(3), 8, 4, 30)
    a = _plan(snap, seed=7, gate=False).plan
    b = _plan(snap, seed=7, gate=False).plan
    assert a == b


def test_never_worse_in_expectation_than_warm_start() -> None:
    snap = random_snapshot(np.random.default_rng(5), 8, 4, 40)
    memo = None
    for seed in range(3):
        res = _plan(snap, memo, seed=seed, gate=False)
        assert res.memo.best_score <= res.memo.warm_score * (1 + 1e-9)
        memo = res.memo


def _ctx(n_jobs: int, caps: list[int], g: int = 8) -> _Ctx:
    kc = max(caps)
    xtab = np.zeros((n_jobs, kc + 1, 2))
    xtab[:, 1:, 0] = np.arange(1, kc + 1) * 10.0
    xtab[:, 1:, 1] = np.arange(1, kc + 1) * 9.0
    return _Ctx(jobs=[make_job(i) for i in range(n_jobs)], gnode=np.arange(g) // 4, gpn=4,
                cap=np.array(caps), kmin=np.ones(n_jobs, dtype=np.int64), xtab=xtab,
                yp=np.full(n_jobs, 1000.0), alpha=np.full(n_jobs, 2.0), beta=np.full(n_jobs, 3.0),
                rng=np.random.default_rng(0))


def test_fill_respects_caps_and_leaves_idle_only_when_every_job_is_capped() -> None:
    ctx = _ctx(2, [3, 2])
    empty = np.full((4, 8), -1)
    out, counts = _fill(ctx, empty, _counts(ctx, empty))
    assert (counts == _counts(ctx, out)).all()
    for row in out:
        assert (row == 0).sum() == 3 and (row == 1).sum() == 2 and (row == -1).sum() == 3


def test_reorder_packs_each_job_contiguously_in_first_occurrence_order() -> None:
    ctx = _ctx(3, [4, 4, 4])
    row = np.array([[2, 0, 2, -1, 0, 1, 2, -1]])
    out, spans = _reorder(ctx, row, _counts(ctx, row))
    assert out.tolist() == [[2, 2, 2, 0, 0, 1, -1, -1]]
    assert spans.tolist() == [[2, 1, 1]]  # GPUs 0-3 on node 0, 4-7 on node 1: job 0 sits on GPUs 3-4


def test_registry_knows_ones_and_dp() -> None:
    assert {"ones", "dp"} <= set(policies.available())
    assert policies.create("ones", generations=2).generations == 2  # type: ignore[attr-defined]


def test_preempted_job_resumes_when_gpus_free() -> None:
    job = make_job("p", state=JobState.PREEMPTED, epochs_done=2.0, max_gpus=4)
    snap = make_snapshot(make_nodes(1), [job])
    res = _plan(snap)
    assert res.plan.by_job()[JobId("p")].num_gpus >= 1


def test_periodic_ones_keeps_allocation_between_searches() -> None:
    run = make_job("run", max_gpus=8, placement=[("n000", 0)], epochs_done=5, epochs_since_change=3)
    snap = make_snapshot(make_nodes(1), [run, make_job("w", submit_time=5)], now=100.0)
    res = OnesPlanner(interval=600).plan(snap, OnesMemo(last_plan_time=0.0), np.random.default_rng(0))
    assert [p.job_id for p in res.plan.jobs] == ["run"]
    assert res.plan.notes == ("between searches: allocation kept",)
    later = make_snapshot(make_nodes(1), [run, make_job("w", submit_time=5)], now=700.0)
    res2 = OnesPlanner(interval=600).plan(later, res.memo, np.random.default_rng(0))
    assert "w" in {p.job_id for p in res2.plan.jobs}


def test_gate_is_per_job_a_slow_job_mid_epoch_does_not_freeze_the_others() -> None:
    # "slow" has not finished an epoch since its last change; "ready" has. The gate protects only
    # "slow": "ready" may still grow into the idle GPUs (before: the whole update was held).
    slow = make_job("slow", max_gpus=8, placement=[("n000", 0)], epochs_done=5, epochs_since_change=0.1)
    ready = make_job("ready", max_gpus=8, placement=[("n000", 1)], epochs_done=5, epochs_since_change=3)
    snap = make_snapshot(make_nodes(2), [slow, ready])
    memo = OnesMemo(limits={JobId("slow"): sp.LimitState(128, 5, 128), JobId("ready"): sp.LimitState(1024, 5, 1024)},
                    seen=frozenset({JobId("slow"), JobId("ready")}))
    res = _plan(snap, memo)
    validate_plan(snap, res.plan)
    got = res.plan.by_job()
    assert got[JobId("slow")].placement == slow.placement
    assert got[JobId("ready")].num_gpus == 7  # every GPU "slow" does not hold (before: 1)
    assert res.plan.notes and "gated" in res.plan.notes[0]


def test_no_scale_down_without_a_queue() -> None:
    # Two old jobs (run time 100x the arrival interval), nothing waiting: their limits double per
    # epoch instead of collapsing to one GPU and leaving the cluster idle.
    jobs = [make_job(i, max_gpus=8, placement=[("n000", i)], epochs_done=3.0, epochs_since_change=3.0,
                     run_time=6000.0) for i in range(2)]
    snap = make_snapshot(make_nodes(2), jobs, arrival_rate=1 / 60)
    memo = OnesMemo(limits={JobId(str(i)): sp.LimitState(128, 0, 128) for i in range(2)},
                    seen=frozenset({JobId("0"), JobId("1")}))
    res = _plan(snap, memo)
    assert sum(p.num_gpus for p in res.plan.jobs) == 8
    # With a queued job (left waiting by the last update) the scale-down applies.
    queued = make_job("q", state=JobState.PREEMPTED, epochs_done=1.0, max_gpus=8)
    snap2 = make_snapshot(make_nodes(2), [*jobs, queued], arrival_rate=1 / 60)
    memo2 = OnesMemo(limits={**memo.limits, JobId("q"): sp.LimitState(128, 1, 128)},
                     seen=frozenset({JobId("0"), JobId("1"), JobId("q")}), waiting_at_update=frozenset({JobId("q")}))
    res2 = _plan(snap2, memo2)
    assert all(res2.memo.limits[JobId(str(i))].limit == 128 for i in range(2))


def test_a_waiting_job_still_counts_in_the_score() -> None:
    # Eq. 8 over running jobs only would make preempting a job lower the score by its whole
    # remaining utilization; a waiting job is charged at its start size, so leaving a job out is
    # never free.
    ctx = _ctx(2, [4, 4])
    ctx.wait_cost = np.array([0.15, 0.15])
    both = np.array([[0, 0, 1, 1, -1, -1, -1, -1]])
    one = np.array([[0, 0, 0, 0, -1, -1, -1, -1]])
    y = np.array([1000.0, 1000.0])
    s_both, = _scores(ctx, _counts(ctx, both), _reorder(ctx, both, _counts(ctx, both))[1], y)
    s_one, = _scores(ctx, _counts(ctx, one), _reorder(ctx, one, _counts(ctx, one))[1], y)
    # c/X = 0.1 s/sample for a running job at any size; without the charge the one-job schedule
    # would score 100 against 200, as if job 1's 1000 remaining samples had vanished.
    assert s_both[0] == 200.0 and s_one[0] == 100.0 + 150.0


def _reference_reorder(genomes: np.ndarray, j: int) -> np.ndarray:
    """The gene-wise reorder the block-wise one replaced: a stable sort by first occurrence."""
    k, g = genomes.shape
    keys = np.where(genomes < 0, j, genomes)
    first = np.full((k, j + 1), g)
    first[np.arange(k)[:, None], keys[:, ::-1]] = np.arange(g - 1, -1, -1)[None, :]
    first[:, j] = g
    perm = np.argsort(np.take_along_axis(first, keys, axis=1), axis=1, kind="stable")
    return np.take_along_axis(genomes, perm, axis=1)


def _reference_spans(genomes: np.ndarray, gnode: np.ndarray, j: int) -> np.ndarray:
    """Runs of one node per (member, job), counted gene by gene (what the scores read before)."""
    k, _ = genomes.shape
    newpair = np.ones(genomes.shape, dtype=bool)
    newpair[:, 1:] = (genomes[:, 1:] != genomes[:, :-1]) | (gnode[1:] != gnode[:-1])[None, :]
    keys = np.where(genomes < 0, j, genomes) + (np.arange(k) * (j + 1))[:, None]
    return np.bincount(keys[newpair], minlength=k * (j + 1)).reshape(k, j + 1)[:, :j]


@pytest.mark.parametrize("seed", range(6))
def test_block_reorder_and_spans_equal_the_gene_wise_definition(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_jobs, g = int(rng.integers(1, 12)), int(rng.integers(1, 40))
    ctx = _ctx(n_jobs, [g] * n_jobs, g=g)
    ctx.gnode = rng.permutation(g) // 3 if seed % 2 else np.arange(g) // 4  # odd seeds: nodes out of order
    ctx.__post_init__()
    genomes = rng.integers(-1, n_jobs, size=(7, g))
    out, spans = _reorder(ctx, genomes, _counts(ctx, genomes))
    assert (out == _reference_reorder(genomes, n_jobs)).all()
    assert (spans == _reference_spans(out, ctx.gnode, n_jobs)).all()


@pytest.mark.parametrize("seed", range(4))
def test_refresh_keeps_counts_in_step_with_the_genomes(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_jobs, g = 9, 24
    ctx = _ctx(n_jobs, [int(c) for c in rng.integers(1, 9, size=n_jobs)], g=g)
    ctx.kmin = rng.integers(1, 3, size=n_jobs)
    ctx.wait_cost = np.full(n_jobs, 0.1)
    ctx.new = [2, 5]
    genomes = rng.integers(-1, n_jobs, size=(10, g)).astype(np.int32)
    pop = _refresh(ctx, genomes, _counts(ctx, genomes))
    assert (pop.counts == _counts(ctx, pop.genomes)).all()
    assert (pop.spans == _reference_spans(pop.genomes, ctx.gnode, n_jobs)).all()
    gen = OnesPlanner(mutation_rate=0.3)._generation(ctx, pop, 10)
    assert (gen.counts == _counts(ctx, gen.genomes)).all()
    assert (gen.spans == _reference_spans(gen.genomes, ctx.gnode, n_jobs)).all()


def _reference_repair(genomes: np.ndarray, cap: np.ndarray, kmin: np.ndarray) -> np.ndarray:
    """Gene-wise repair: keep a job's genes of rank (GPU order) below its cap, then drop jobs under kmin."""
    out = np.full_like(genomes, -1)
    for r, row in enumerate(genomes):
        seen: dict[int, int] = {}
        for p, x in enumerate(row):
            if x >= 0 and seen.get(int(x), 0) < cap[x]:
                seen[int(x)] = seen.get(int(x), 0) + 1
                out[r, p] = x
        for p, x in enumerate(out[r]):
            if x >= 0 and seen[int(x)] < kmin[x]:
                out[r, p] = -1
    return out


@pytest.mark.parametrize("seed", range(6))
def test_repair_equals_the_gene_wise_definition(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_jobs, g = int(rng.integers(1, 10)), int(rng.integers(1, 30))
    ctx = _ctx(n_jobs, [int(c) for c in rng.integers(1, 6, size=n_jobs)], g=g)
    ctx.kmin = rng.integers(1, 4, size=n_jobs)
    genomes = rng.integers(-1, n_jobs, size=(9, g))
    out, counts = _repair(ctx, genomes, _counts(ctx, genomes))
    assert (out == _reference_repair(genomes, ctx.cap, ctx.kmin)).all()
    assert (counts == _counts(ctx, out)).all()


# --- the compiled operators against plain, gene-wise definitions ---------------------------------

def _random_ctx(rng: np.random.Generator, n_jobs: int, g: int) -> _Ctx:
    """Jobs with concave, job-specific throughput (few cost ties), random caps, start sizes and run times."""
    caps = [int(c) for c in rng.integers(1, 7, size=n_jobs)]
    ctx = _ctx(n_jobs, caps, g=g)
    ctx.jobs = [make_job(i, run_time=float(rng.integers(0, 5))) for i in range(n_jobs)]  # equal run times tie
    ctx.kmin = np.minimum(rng.integers(1, 3, size=n_jobs), ctx.cap)
    kc = ctx.xtab.shape[1] - 1
    ks = np.arange(1, kc + 1)
    ctx.xtab[:, 1:, 0] = rng.uniform(5, 20, size=(n_jobs, 1)) * ks ** rng.uniform(0.3, 1.0, size=(n_jobs, 1))
    ctx.xtab[:, 1:, 1] = 0.9 * ctx.xtab[:, 1:, 0]
    ctx.xtab[rng.random(n_jobs) < 0.2, 2:, 0] = 0.0  # some jobs cannot run on 2 GPUs or more
    ctx.__post_init__()
    return ctx


def _reference_fill(ctx: _Ctx, genomes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The fill step job by job: each pass draws ``rho`` once; every member still served and with idle
    GPUs grows, in ascending cost (ties by job), each job that fits to ``min(cap, c + idle)``, from its
    first idle GPUs."""
    ref = _Ctx(**{**{f: getattr(ctx, f) for f in ("jobs", "gnode", "gpn", "cap", "kmin", "xtab", "yp", "alpha",
                                                     "beta")}, "rng": rng})
    out = genomes.copy()
    kc = ctx.xtab.shape[1] - 1
    active = [r for r in range(len(out)) if (out[r] < 0).any()]
    for _ in range(64):
        if not active:
            break
        y = ref.draw_y()
        still = []
        for r in active:
            row = out[r]
            free = int((row < 0).sum())
            grows = []
            for x in range(ctx.n_jobs):
                c = int((row == x).sum())
                t = min(int(ctx.cap[x]), c + free)
                xt = ctx.xtab[x, min(t, kc), 0]
                if t > c and (c > 0 or t >= ctx.kmin[x]) and xt > 0:
                    held = c / ctx.xtab[x, min(c, kc), 0] if c else 0.0
                    grows.append(((t / xt - held) * y[x], x, t - c))
            given = 0
            for cost, x, need in sorted(grows, key=lambda e: (e[0], e[1])):
                if not np.isfinite(cost) or given + need > free:  # a -inf first (held where it cannot run) stops all
                    break
                given += need
                row[np.flatnonzero(row < 0)[:need]] = x
            if given and (row < 0).any():
                still.append(r)
        active = still
    return out


@pytest.mark.parametrize("seed", range(8))
def test_fill_equals_the_job_by_job_definition(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_jobs, g = int(rng.integers(1, 10 + 30 * (seed % 2))), int(rng.integers(1, 30 + 90 * (seed % 2)))
    ctx = _random_ctx(rng, n_jobs, g)
    if seed % 2:  # tied costs: alike jobs whose progress draws all clip to the same remaining work
        ctx.xtab[::2] = ctx.xtab[0]
        ctx.cap[::2], ctx.kmin[::2] = ctx.cap[0], ctx.kmin[0]
        ctx.alpha, ctx.beta = np.full(n_jobs, 1e-3), np.full(n_jobs, 1e3)
        ctx.__post_init__()
    genomes, _ = _repair(ctx, *(lambda gen: (gen, _counts(ctx, gen)))(rng.integers(-1, n_jobs, size=(9, g))))
    ctx.rng = np.random.default_rng(seed)
    out, counts = _fill(ctx, genomes, _counts(ctx, genomes))
    assert (out == _reference_fill(ctx, genomes, np.random.default_rng(seed))).all()
    assert (counts == _counts(ctx, out)).all()


def _reference_new_jobs(ctx: _Ctx, genomes: np.ndarray, new: list[int]) -> np.ndarray:
    """Refresh step (3) GPU by GPU: a new job not running gets ``kmin`` GPUs (none when that exceeds the
    cluster), from idle GPUs in GPU order when the member has enough for all new jobs; otherwise, in
    arrival order, from the longest-running jobs' last GPUs (a victim left under its ``kmin`` loses all)."""
    out = genomes.copy()
    g = genomes.shape[1]
    order = sorted((x for x in range(ctx.n_jobs) if x not in new), key=lambda x: (-ctx.jobs[x].run_time, x))
    for row in out:
        need = [0 if (row == x).any() or ctx.kmin[x] > g else int(ctx.kmin[x]) for x in new]
        if sum(need) <= (row < 0).sum():
            for x, n in zip(new, need, strict=True):
                row[np.flatnonzero(row < 0)[:n]] = x
            continue
        for x, want in zip(new, need, strict=True):
            for victim in order:
                short = want - int((row < 0).sum())
                held = np.flatnonzero(row == victim)
                if short <= 0:
                    break
                row[held if len(held) - short < ctx.kmin[victim] else held[len(held) - short:]] = -1
            if want and (row < 0).sum() >= want:
                row[np.flatnonzero(row < 0)[:want]] = x
    return out


@pytest.mark.parametrize("seed", range(8))
def test_new_jobs_start_as_the_gpu_by_gpu_definition(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_jobs, g = int(rng.integers(2, 10)), int(rng.integers(1, 24))
    ctx = _random_ctx(rng, n_jobs, g)
    ctx.kmin = rng.integers(1, 4, size=n_jobs)
    new = [int(x) for x in rng.permutation(n_jobs)[: int(rng.integers(1, n_jobs))]]
    genomes = rng.integers(-1, n_jobs, size=(12, g)).astype(np.int32)
    genomes[rng.random(genomes.shape) < 0.3 * (seed % 3)] = -1  # some seeds leave members room for all
    out, counts = _new_jobs(ctx, genomes, _counts(ctx, genomes), new)
    assert (out == _reference_new_jobs(ctx, genomes, new)).all()
    assert (counts == _counts(ctx, out)).all()


def test_a_job_held_where_its_throughput_is_zero_costs_minus_infinity_not_an_error() -> None:
    """Numpy's division rules in the compiled fill: ``c / X(c)`` with ``X(c) = 0`` is infinite, so the
    member is not served that pass (a compiled division by zero raised ZeroDivisionError before)."""
    ctx = _ctx(2, [6, 2])
    ctx.xtab[0, 3] = 0.0  # job 0 cannot run on exactly 3 GPUs, but can on 4
    ctx.__post_init__()
    held = np.array([[0, 0, 0, -1, -1, -1, -1, -1], [1, -1, -1, -1, -1, -1, -1, -1]])
    out, counts = _fill(ctx, held, _counts(ctx, held))
    assert out[0].tolist() == held[0].tolist()
    assert (counts == _counts(ctx, out)).all() and (out[1] >= 0).sum() > 1


def test_numba_is_loaded_by_the_first_ones_plan_not_by_the_cli_or_the_policy_table() -> None:
    """A daemon running another policy, and every CLI call, never pay for the compiler (about 65 MiB)."""
    import subprocess
    import sys

    code = ("import sys, numpy as np, slurm_elastic.cli, slurm_elastic.policies as p; "
            "from slurm_elastic.testing import random_snapshot; print('numba' in sys.modules); "
            "p.create('dp').plan(random_snapshot(np.random.default_rng(0), 4, 4, 8), None, np.random.default_rng(0)); "
            "print('numba' in sys.modules); "
            "p.create('ones', generations=1).plan(random_snapshot(np.random.default_rng(0), 4, 4, 8), None, "
            "np.random.default_rng(0)); print('numba' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False", "True"]


def test_compile_all_compiles_every_kernel_a_plan_calls() -> None:
    """A caller with a time limit compiles first (the fuzz harness): a compile that a signal cuts
    short leaves numba unusable in the process, so no plan may compile anything afterwards."""
    import subprocess
    import sys

    code = """
import numpy as np
from slurm_elastic.core import ones_kernels
from slurm_elastic.core.evolutionary import OnesPlanner
from slurm_elastic.testing import random_snapshot
ones_kernels.compile_all()
kernels = [k for k in vars(ones_kernels).values() if isinstance(k, ones_kernels._Kernel)]
before = {k.__name__: len(k.dispatcher.signatures) for k in kernels}
for seed in range(4):
    snap, memo = random_snapshot(np.random.default_rng(seed), 6, 4, 20), None
    for _ in range(2):
        memo = OnesPlanner(generations=2, gate=False).plan(snap, memo, np.random.default_rng(seed)).memo
print(len(kernels), before == {k.__name__: len(k.dispatcher.signatures) for k in kernels})
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["7", "True"]
