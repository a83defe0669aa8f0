"""The gene-level loops of the ONES operators, compiled (numba): one pass per member, not per array.

This module owns the work that touches every gene of every candidate schedule in
:mod:`~slurm_elastic.core.evolutionary`: counting, breeding (crossover and mutation), repair, the
start of new jobs, one pass of the fill step, reorder, and the score's per-job terms. Each kernel
walks a member's genes once in GPU order; the whole-array numpy version of the same operators made
about a hundred passes over the ``K x G`` genomes per generation, which was 70 % of a ONES
simulation.

The kernels hold no state and draw no random numbers: the caller draws (with the planner's
``numpy.random.Generator``, in the same order as before) and passes the draws in, so a seed gives
the same plan. Floating-point arithmetic is written in numpy's order and follows numpy's rules (no
``fastmath``; a division by zero gives infinity, not an exception), so costs compare exactly as
they did; the score's sum over jobs stays a numpy product. Genomes are ``int32`` or ``int64`` (one
gene per GPU, the job's index, ``-1`` idle); counts and spans are ``int64`` (member x job).

Compiled code is cached (see :func:`_jit`); the first call in a fresh installation compiles (about
5 s for all the kernels).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

import numpy as np
from numpy.typing import NDArray

IntArr = NDArray[np.signedinteger[Any]]
FloatArr = NDArray[np.float64]
BoolArr = NDArray[np.bool_]
F = TypeVar("F", bound=Callable[..., Any])


class _Kernel:
    """A kernel compiled by numba at its first call (:func:`_jit`). numba is imported then, not with
    this module, so a process that never plans with ONES (the CLI, a daemon running another policy)
    never loads it (about 65 MiB and 0.15 s). Kernels therefore cannot call each other."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.dispatcher: Any = None  # numba's, once compiled
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any) -> Any:
        if self.dispatcher is None:
            self.dispatcher = _jit(self.fn)
        return self.dispatcher(*args)


def _compiled(fn: F) -> F:
    return cast(F, _Kernel(fn))


def _jit(fn: Callable[..., Any]) -> Callable[..., Any]:
    """numba's compiled ``fn``, kept in numba's cache where one is writable: ``NUMBA_CACHE_DIR`` (the
    systemd unit sets it in the daemon's state directory), else beside this file, else the user's
    cache directory. Where none is (a read-only system, as the unit makes it), numba refuses to
    cache, and the kernel is compiled in each process instead (a few seconds, once)."""
    import numba

    options: dict[str, Any] = {"nogil": True, "error_model": "numpy"}
    try:
        return cast(Callable[..., Any], numba.njit(cache=True, **options)(fn))
    except RuntimeError:  # "cannot cache function ...: no locator available"
        return cast(Callable[..., Any], numba.njit(**options)(fn))


@_compiled
def count_genes(genomes: IntArr, n_jobs: int) -> IntArr:
    """``out[r, j]``: the genes of member ``r`` that hold job ``j``."""
    k, g = genomes.shape
    out = np.zeros((k, n_jobs), dtype=np.int64)
    for r in range(k):
        for p in range(g):
            x = genomes[r, p]
            if x >= 0:
                out[r, x] += 1
    return out


@_compiled
def breed(genomes: IntArr, counts: IntArr, pairs: IntArr, mask: BoolArr, picked: IntArr,
          hit: BoolArr) -> tuple[IntArr, IntArr]:
    """Uniform crossover and mutation: ``2k`` children, then ``k`` mutants, with their counts.

    Child ``i`` takes parent ``pairs[i, 0]``'s gene where ``mask[i]`` is set and ``pairs[i, 1]``'s
    elsewhere; child ``k + i`` the other way round. Mutant ``i`` is member ``picked[i]`` without the
    jobs ``hit[i]`` marks (their genes idle).
    """
    g = genomes.shape[1]
    j = counts.shape[1]
    k = pairs.shape[0]
    out = np.empty((3 * k, g), dtype=genomes.dtype)
    cnt = np.zeros((3 * k, j), dtype=np.int64)
    for i in range(k):
        a, b = pairs[i, 0], pairs[i, 1]
        for p in range(g):
            if mask[i, p]:
                u, v = genomes[a, p], genomes[b, p]
            else:
                u, v = genomes[b, p], genomes[a, p]
            out[i, p] = u
            out[k + i, p] = v
            if u >= 0:
                cnt[i, u] += 1
            if v >= 0:
                cnt[k + i, v] += 1
    for i in range(k):
        s = picked[i]
        m = 2 * k + i
        for p in range(g):
            x = genomes[s, p]
            out[m, p] = -1 if x >= 0 and hit[i, x] else x
        for x in range(j):
            cnt[m, x] = 0 if hit[i, x] else counts[s, x]
    return out, cnt


@_compiled
def repair(genomes: IntArr, counts: IntArr, cap: IntArr, kmin: IntArr) -> tuple[IntArr, IntArr]:
    """Keep each job's first ``cap`` genes (GPU order), then idle the jobs left under ``kmin``."""
    k, g = genomes.shape
    j = counts.shape[1]
    out = genomes.copy()
    cnt = counts.copy()
    seen = np.zeros(j, dtype=np.int64)
    for r in range(k):
        over = False
        for x in range(j):
            if cnt[r, x] > cap[x]:
                over = True
                break
        if over:
            seen[:] = 0
            for p in range(g):
                x = out[r, p]
                if x >= 0:
                    if seen[x] >= cap[x]:
                        out[r, p] = -1
                    else:
                        seen[x] += 1
            for x in range(j):
                cnt[r, x] = min(cnt[r, x], cap[x])
        small = False
        for x in range(j):
            if 0 < cnt[r, x] < kmin[x]:
                small = True
                break
        if small:
            for p in range(g):
                x = out[r, p]
                if x >= 0 and cnt[r, x] < kmin[x]:
                    out[r, p] = -1
            for x in range(j):
                if cnt[r, x] < kmin[x]:
                    cnt[r, x] = 0
    return out, cnt


@_compiled
def start_new_jobs(genomes: IntArr, counts: IntArr, new: IntArr, kmin: IntArr,
                   longest_first: IntArr) -> tuple[IntArr, IntArr]:
    """Refresh step (3) per member: each new job not running gets ``kmin`` GPUs, in arrival order.

    A member with enough idle GPUs for all of them hands them out in GPU order. Otherwise each new
    job in turn takes GPUs from the jobs of ``longest_first`` (largest executed time first), from
    the victim's last GPUs; a victim that would fall under its ``kmin`` is preempted whole; a new
    job that still does not fit stays out.
    """
    k, g = genomes.shape
    out = genomes.copy()
    cnt = counts.copy()
    nn = new.shape[0]
    need = np.zeros(nn, dtype=np.int64)
    for r in range(k):
        total = 0
        for i in range(nn):
            w = 0 if cnt[r, new[i]] > 0 else kmin[new[i]]
            need[i] = 0 if w > g else w
            total += need[i]
        busy = 0
        for x in range(cnt.shape[1]):
            busy += cnt[r, x]
        row = out[r]
        if total <= g - busy:  # idle GPUs in GPU order, the new jobs in arrival order
            p = 0
            for i in range(nn):
                cnt[r, new[i]] += need[i]
                for _ in range(need[i]):
                    while row[p] >= 0:
                        p += 1
                    row[p] = new[i]
            continue
        idle = g - busy  # counts stay in step with the row as GPUs change hands
        for i in range(nn):
            want = need[i]
            if want == 0:
                continue
            for victim in longest_first:
                if idle >= want:
                    break
                held = cnt[r, victim]
                if held == 0:
                    continue
                drop = want - idle if held - (want - idle) >= kmin[victim] else held
                cnt[r, victim] -= drop
                idle += drop
                p = g - 1
                while drop > 0:
                    if row[p] == victim:
                        row[p] = -1
                        drop -= 1
                    p -= 1
            if idle >= want:
                cnt[r, new[i]] += want
                idle -= want
                p = 0
                while want > 0:
                    if row[p] < 0:
                        row[p] = new[i]
                        want -= 1
                    p += 1
    return out, cnt


@_compiled
def fill_pass(genomes: IntArr, counts: IntArr, idle: IntArr, cursor: IntArr, active: IntArr,
              y: FloatArr, cap: IntArr, kmin: IntArr, xtab: FloatArr) -> IntArr:
    """One pass of the fill step, in place, for the members in ``active``; returns those still to serve.

    A member's cost of growing job ``j`` to ``t = min(cap, c + idle)`` GPUs is
    ``(t / X(t) - c / X(c)) * y_j`` (``c / X(c)`` is 0 for a waiting job); jobs that cannot grow,
    or cannot start at ``t``, cost infinity. Jobs are served in ascending cost (ties in job order)
    while their growth fits in the member's idle GPUs, each taking the next idle GPUs in GPU
    order (``cursor[r]``: where member ``r``'s unserved idle GPUs start). A member stays active
    when it served some job and still has idle GPUs.
    """
    j = counts.shape[1]
    kc = xtab.shape[1] - 1
    cost = np.empty(j)  # of the jobs that can grow (the others cost infinity and are never served)
    grows = np.empty(j, dtype=np.int64)
    need = np.empty(j, dtype=np.int64)
    keep = np.zeros(active.shape[0], dtype=np.bool_)
    for a in range(active.shape[0]):
        r = active[a]
        free = idle[r]
        n = 0
        for x in range(j):
            c = counts[r, x]
            t = min(cap[x], c + free)
            xt = xtab[x, min(t, kc), 0]
            if t > c and (c > 0 or t >= kmin[x]) and xt > 0:
                held = c / xtab[x, min(c, kc), 0] if c > 0 else 0.0
                cost[n] = (t / xt - held) * y[x]
                grows[n] = x
                need[n] = t - c
                n += 1
        order = np.argsort(cost[:n], kind="mergesort")  # stable: ties in job order
        given = 0
        p = cursor[r]
        for i in order:
            x = grows[i]
            if not np.isfinite(cost[i]) or given + need[i] > free:
                break
            given += need[i]
            counts[r, x] += need[i]
            for _ in range(need[i]):
                while genomes[r, p] >= 0:
                    p += 1
                genomes[r, p] = x
                p += 1
        cursor[r] = p
        idle[r] -= given
        keep[a] = given > 0 and idle[r] > 0
    return active[keep]


@_compiled
def reorder(genomes: IntArr, counts: IntArr, node_runs: IntArr) -> tuple[IntArr, IntArr]:
    """Pack each job's genes contiguously, jobs in order of first occurrence, idle GPUs last.

    Returns the packed genomes and the nodes each job's block spans (one plus the node changes
    inside it, from ``node_runs``: the node changes along the GPU order up to each GPU).
    """
    k, g = genomes.shape
    j = counts.shape[1]
    out = np.empty_like(genomes)
    out[:] = -1
    spans = np.zeros((k, j), dtype=np.int64)
    placed = np.zeros(j, dtype=np.bool_)
    for r in range(k):
        placed[:] = False
        start = 0
        for p in range(g):
            x = genomes[r, p]
            if x < 0 or placed[x]:
                continue
            placed[x] = True
            c = counts[r, x]
            for q in range(start, start + c):
                out[r, q] = x
            spans[r, x] = 1 + node_runs[start + c - 1] - node_runs[start]
            start += c
    return out, spans


@_compiled
def gpu_time_per_sample(counts: IntArr, spans: IntArr, xtab: FloatArr, wait_cost: FloatArr,
                        gpus_per_node: int) -> FloatArr:
    """``c / X_j(c, spread)`` per (member, job), a waiting job's ``wait_cost``; the score's terms.

    ``X`` is ``xtab[j, min(c, kc)]``, spread (column 1) when the job spans more nodes than
    ``ceil(min(c, kc) / gpus_per_node)``.
    """
    k, j = counts.shape
    kc = xtab.shape[1] - 1
    out = np.empty((k, j))
    for r in range(k):
        for x in range(j):
            c = counts[r, x]
            if c > 0:
                m = min(c, kc)
                out[r, x] = c / xtab[x, m, 1 if spans[r, x] > -(-m // gpus_per_node) else 0]
            else:
                out[r, x] = wait_cost[x]
    return out


def compile_all() -> None:
    """Compile every kernel now, for the types the planner passes (``int32`` genomes, ``int64``
    counts, C-ordered arrays). A first compile takes seconds, and numba interrupted while it
    compiles (a time limit's signal) is left unusable for the rest of the process: a caller that
    bounds a plan's time calls this first, outside the bound."""
    genomes = np.array([[0, -1]], dtype=np.int32)
    counts = np.array([[1]], dtype=np.int64)
    ones = np.ones(1, dtype=np.int64)
    count_genes(genomes, 1)
    breed(genomes, counts, np.zeros((1, 2), dtype=np.int64), np.ones((1, 2), dtype=np.bool_),
          np.zeros(1, dtype=np.int64), np.zeros((1, 1), dtype=np.bool_))
    repair(genomes, counts, ones, ones)
    start_new_jobs(genomes, counts, np.zeros(1, dtype=np.int64), ones, np.zeros(0, dtype=np.int64))
    xtab = np.ones((1, 2, 2))
    fill_pass(genomes.copy(), counts.copy(), ones.copy(), np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64),
              np.ones(1), ones, ones, xtab)
    reorder(genomes, counts, np.zeros(2, dtype=np.int64))
    gpu_time_per_sample(counts, counts, xtab, np.ones(1), 4)
