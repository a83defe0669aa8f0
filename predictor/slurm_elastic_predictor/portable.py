"""Arithmetic that gives the same bits on every x86-64 CPU: what a planning decision may rest on.

A plan compares floats (scores, remaining work, logits), so a float that differs in its last bit
from one CPU to another can change a decision, and one changed decision changes a whole
simulation. Three things in the numeric stack differ by CPU:

* **BLAS** (``a @ b``, ``np.dot``, ``np.linalg``, and scipy's solvers built on it: ``nnls``,
  L-BFGS-B): OpenBLAS picks a kernel per CPU (``OPENBLAS_CORETYPE``), and the kernels add in
  different orders, with or without fused multiply-add.
* **numpy's transcendental functions** (``np.exp``, ``np.log``, ``np.log1p``, ``np.log2``, ...):
  numpy dispatches them per CPU (AVX-512 has its own implementations), and they differ in the
  last bit from the AVX2 ones.
* **the C library's** (``math.exp``, ``math.log``, scipy's special functions, which call them):
  glibc has separate variants for CPUs with and without FMA, and they differ too.

What does not differ: IEEE's basic operations (``+ - * /``, ``sqrt``, ``frexp``, ``ldexp``,
``rint``, comparisons), each correctly rounded on every CPU and never fused when numpy applies
them one ufunc at a time; and numpy's reductions (``np.sum``), which add in an order fixed by the
array's shape and strides (pairwise along a contiguous axis, in order along any other), the same
order on every CPU.

So this module builds what planning needs from those alone:

* :func:`exp`, :func:`log`, :func:`log1p`, :func:`log2`: range reduction by ``frexp``/``ldexp``
  (exact) and a fixed polynomial (the Taylor series of ``exp``; of ``2 atanh`` for ``log``),
  within 2 ulp of the correctly rounded result; ``log_float``, ``log2_float`` and ``log1p_float``
  the same for one Python float.
* :func:`lgamma`, :func:`digamma` (positive arguments) and :func:`betaln`: the recurrence up to
  :data:`ASYMPTOTIC_FROM`, then Stirling's series; ``betaln`` of a large argument through the
  difference of the series, so that it does not cancel.
* :func:`matvec`, :func:`vecmat`, :func:`matmul`, :func:`dot`: products summed by numpy's
  reductions, not by BLAS.
* :func:`lstsq` (Householder QR), :func:`box_lstsq` and :func:`nnls` (exact, by the active
  sets of a few columns).
* :func:`minimize`: BFGS with a backtracking line search, for smooth objectives of a few
  parameters (scipy's L-BFGS-B runs its own arithmetic through BLAS).

Each function takes and returns float64 (arrays, or what ``np.asarray`` makes of its argument).
They are slower than their numpy counterparts (tens of ufunc calls instead of one) and are meant
for what a plan depends on, not for bulk numerics. ``tests/unit/test_portable.py`` checks their
accuracy and that each gives the same bits under every CPU configuration this machine can
emulate; ``scripts/portability-check`` runs the plan pins under each.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import TypeVar

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
Real = TypeVar("Real", float, FloatArray)

LN2_HI = 6.93147180369123816490e-01
"""``ln 2`` rounded to 32 significant bits: ``k * LN2_HI`` is exact for any exponent ``k``."""
LN2_LO = 1.90821492927058770002e-10
"""``ln 2 - LN2_HI``."""
INV_LN2 = 1.4426950408889634
"""``1 / ln 2``, rounded."""
SQRT_HALF = 0.7071067811865476
HALF_LOG_2PI = 0.9189385332046728
"""``ln(2 pi) / 2``."""

_EXP_TERMS = tuple(1.0 / math.factorial(n) for n in range(14))
"""Taylor coefficients of ``exp`` to degree 13: on ``|r| <= ln2 / 2`` the remainder is below 5e-18."""
_ATANH_TERMS = tuple(2.0 / (2 * k + 1) for k in range(1, 13))
"""``2 / (2k + 1)``, k = 1..12: ``2 atanh(s) = 2s + s * sum_k (2 / (2k + 1)) s^(2k)``, to 1e-18
for ``|s| <= 3 - 2 sqrt 2`` (``s = f / (2 + f)``, ``1 + f`` in ``[sqrt(1/2), sqrt 2)``)."""
EXP_MAX = 709.782712893384
"""``ln`` of the largest double: above it ``exp`` overflows to inf."""
EXP_MIN = -745.1332191019412
"""Below it ``exp`` underflows to 0."""

ASYMPTOTIC_FROM = 10.0
"""``lgamma`` and ``digamma`` use the recurrence up to this argument, then Stirling's series."""
_BERNOULLI = (1.0 / 6, -1.0 / 30, 1.0 / 42, -1.0 / 30, 5.0 / 66, -691.0 / 2730, 7.0 / 6, -3617.0 / 510)
"""``B_2 .. B_16``: at ``x >= 10`` the series' 8th term is below 1e-17 of the result."""
_LGAMMA_TERMS = tuple(b / ((2 * k + 1) * (2 * k + 2)) for k, b in enumerate(_BERNOULLI))
"""``B_2k / (2k (2k - 1))``: ``lgamma(x) = (x - 1/2) ln x - x + ln(2 pi)/2 + sum_k c_k / x^(2k-1)``."""
_DIGAMMA_TERMS = tuple(b / (2 * k + 2) for k, b in enumerate(_BERNOULLI))
"""``B_2k / 2k``: ``digamma(x) = ln x - 1 / 2x - sum_k c_k / x^(2k)``."""


def _array(x: npt.ArrayLike) -> FloatArray:
    return np.asarray(x, dtype=np.float64)


def _horner(coefs: tuple[float, ...], x: Real) -> Real:
    """``sum_i coefs[i] * x**i``, by Horner's rule from the highest term: the same operations in
    the same order for an array (in place) and for one float, so the same bits."""
    out = coefs[-1] * x
    out += coefs[-2]
    for c in reversed(coefs[:-2]):
        out *= x
        out += c
    return out


def exp(x: npt.ArrayLike) -> FloatArray:
    """``e ** x``: ``x = k ln2 + r`` with ``|r| <= ln2 / 2``, ``e ** r`` by its Taylor series, ``ldexp`` by ``k``."""
    x = _array(x)
    with np.errstate(invalid="ignore", over="ignore"):
        clipped = np.clip(np.nan_to_num(x), EXP_MIN - 1.0, EXP_MAX + 1.0)
        k = np.rint(clipped * INV_LN2)
        r = (clipped - k * LN2_HI) - k * LN2_LO
        out = np.ldexp(_horner(_EXP_TERMS, r), k.astype(np.int64))
        out = np.where(x > EXP_MAX, np.inf, np.where(x < EXP_MIN, 0.0, out))
    return np.asarray(np.where(np.isnan(x), np.nan, out), dtype=np.float64)


def _log_parts(x: FloatArray) -> tuple[FloatArray, FloatArray]:
    """``(e, log(m))`` with ``x = m * 2**e`` and ``m`` in ``[sqrt(1/2), sqrt 2)``, for positive finite ``x``."""
    m, e = np.frexp(x)
    low = m < SQRT_HALF
    m = np.where(low, m * 2.0, m)
    e = np.where(low, e - 1, e).astype(np.float64)
    f = m - 1.0  # exact: m is within a factor 2 of 1
    s = f / (2.0 + f)
    z = s * s
    r = z * _horner(_ATANH_TERMS, z)
    half_f2 = 0.5 * f * f
    return e, f - (half_f2 - s * (half_f2 + r))


def _log_edges(x: FloatArray, out: FloatArray) -> FloatArray:
    """``out`` with the results of ``log`` at 0 (-inf), below 0 (nan), inf and nan."""
    out = np.where(x == 0.0, -np.inf, out)
    out = np.where(x == np.inf, np.inf, out)
    return np.asarray(np.where((x < 0.0) | np.isnan(x), np.nan, out), dtype=np.float64)


def _ln(e: Real, log_m: Real) -> Real:
    """``ln x`` from :func:`_log_parts` (``ln 2`` split so ``e ln2_hi`` is exact)."""
    return e * LN2_HI + (log_m + e * LN2_LO)


def _log2(e: Real, log_m: Real) -> Real:
    """``log2 x`` from :func:`_log_parts`: ``e`` exactly where ``m`` is 1."""
    return e + log_m * INV_LN2


def _logarithm(x: npt.ArrayLike, combine: Callable[[FloatArray, FloatArray], FloatArray]) -> FloatArray:
    """``combine(e, ln m)`` of :func:`_log_parts`, with the edge cases where ``x`` is not
    positive and finite."""
    x = _array(x)
    regular = (x > 0.0) & (x < np.inf)
    if regular.all():
        return combine(*_log_parts(x))
    return _log_edges(x, combine(*_log_parts(np.where(regular, x, 1.0))))


def log(x: npt.ArrayLike) -> FloatArray:
    """Natural logarithm: ``e ln2 + ln m`` (``ln 2`` split so ``e ln2_hi`` is exact)."""
    return _logarithm(x, _ln)


def log2(x: npt.ArrayLike) -> FloatArray:
    """Base-2 logarithm: ``e + ln m / ln 2``, exact at every power of two."""
    return _logarithm(x, _log2)


def log1p(x: npt.ArrayLike) -> FloatArray:
    """``ln(1 + x)``, accurate near 0: ``ln(u) * x / (u - 1)`` with ``u = 1 + x`` (Goldberg's
    correction of the rounding of ``u``); ``x`` where ``u`` rounds to 1."""
    x = _array(x)
    u = 1.0 + x
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(u == 1.0, 1.0, x / np.where(u == 1.0, 1.0, u - 1.0))
        out = np.where(u == 1.0, x, log(u) * ratio)
    return np.asarray(np.where(x == np.inf, np.inf, out), dtype=np.float64)


def _log_parts_float(x: float) -> tuple[float, float]:
    """:func:`_log_parts` of one positive finite float, in Python's IEEE arithmetic (the same
    operations in the same order, so the same bits)."""
    m, e = math.frexp(x)
    if m < SQRT_HALF:
        m, e = m * 2.0, e - 1
    f = m - 1.0
    s = f / (2.0 + f)
    z = s * s
    half_f2 = 0.5 * f * f
    return float(e), f - (half_f2 - s * (half_f2 + z * _horner(_ATANH_TERMS, z)))


def log_float(x: float) -> float:
    """:func:`log` of one float (for a scalar, a hundred times faster than the array function)."""
    if not (x > 0.0 and math.isfinite(x)):
        return float(log(x))
    return _ln(*_log_parts_float(x))


def log2_float(x: float) -> float:
    """:func:`log2` of one float."""
    if not (x > 0.0 and math.isfinite(x)):
        return float(log2(x))
    return _log2(*_log_parts_float(x))


def log1p_float(x: float) -> float:
    """:func:`log1p` of one float."""
    u = 1.0 + x
    if u == 1.0 or not (u > 0.0 and math.isfinite(u)):
        return float(log1p(x))
    return log_float(u) * (x / (u - 1.0))


_STEPS = np.arange(math.ceil(ASYMPTOTIC_FROM), dtype=np.float64)


def _shifted(x: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
    """``(y, product, reciprocal_sum)``: ``y = x + n >= ASYMPTOTIC_FROM`` with ``n`` the fewest
    whole steps, ``product = x (x+1) ... (x+n-1)`` (multiplied in that order) and
    ``reciprocal_sum = sum 1/(x+i)`` (1 and 0 for ``n = 0``), for positive ``x``."""
    flat = x.reshape(-1)
    y = flat.copy()
    product = np.ones_like(flat)
    reciprocals = np.zeros_like(flat)
    below = np.flatnonzero(flat < ASYMPTOTIC_FROM)
    if below.size:
        steps = flat[below, None] + _STEPS  # (m, 10): x + i, each rounded once
        used = steps < ASYMPTOTIC_FROM
        product[below] = np.prod(np.where(used, steps, 1.0), axis=1)
        reciprocals[below] = np.sum(np.where(used, 1.0 / steps, 0.0), axis=1)
        y[below] = np.where(used, steps, -np.inf).max(axis=1) + 1.0
    return y.reshape(x.shape), product.reshape(x.shape), reciprocals.reshape(x.shape)


def _stirling_tail(y: FloatArray) -> FloatArray:
    """``lgamma(y) - ((y - 1/2) ln y - y + ln(2 pi)/2)`` for ``y >= ASYMPTOTIC_FROM``."""
    inv = 1.0 / y
    return inv * _horner(_LGAMMA_TERMS, inv * inv)


def _positive(x: FloatArray) -> FloatArray:
    return np.where((x > 0.0) & np.isfinite(x), x, 1.0)


def _positive_edges(x: FloatArray, out: FloatArray, at_inf: float) -> FloatArray:
    out = np.where(x == np.inf, at_inf, out)
    return np.asarray(np.where((x > 0.0) & ~np.isnan(x), out, np.nan), dtype=np.float64)


def lgamma(x: npt.ArrayLike) -> FloatArray:
    """``ln Gamma(x)`` for ``x > 0`` (nan elsewhere): ``lgamma(x + n) - ln(x (x+1) ... (x+n-1))``."""
    x = _array(x)
    y, product, _ = _shifted(_positive(x))
    out = (y - 0.5) * log(y) - y + HALF_LOG_2PI + _stirling_tail(y) - log(product)
    return _positive_edges(x, out, np.inf)


def digamma(x: npt.ArrayLike) -> FloatArray:
    """``d/dx ln Gamma(x)`` for ``x > 0`` (nan elsewhere): ``digamma(x + n) - sum 1/(x+i)``."""
    x = _array(x)
    y, _, reciprocals = _shifted(_positive(x))
    inv2 = 1.0 / (y * y)
    out = log(y) - 0.5 / y - inv2 * _horner(_DIGAMMA_TERMS, inv2) - reciprocals
    return _positive_edges(x, out, np.inf)


def betaln(a: npt.ArrayLike, b: npt.ArrayLike) -> FloatArray:
    """``ln B(a, b) = lgamma(a) + lgamma(b) - lgamma(a + b)`` for ``a, b > 0`` (nan elsewhere).

    With ``b`` the larger and ``b >= ASYMPTOTIC_FROM``, ``lgamma(b) - lgamma(a + b)`` is taken as
    the difference of Stirling's series, ``-(b - 1/2) log1p(a/b) - a ln(a + b) + a`` plus the
    tails' difference, which does not cancel as the difference of two large ``lgamma`` would.
    """
    a, b = np.broadcast_arrays(_array(a), _array(b))
    shape = a.shape
    a, b = a.reshape(-1), b.reshape(-1)
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    ok = (lo > 0.0) & np.isfinite(hi)
    lo, hi = np.where(ok, lo, 1.0), np.where(ok, hi, 1.0)
    out = lgamma(lo)
    big = hi >= ASYMPTOTIC_FROM
    lo_b, hi_b = lo[big], hi[big]
    total_b = lo_b + hi_b
    out[big] += (-(hi_b - 0.5) * log1p(lo_b / hi_b) - lo_b * log(total_b) + lo_b
                 + (_stirling_tail(hi_b) - _stirling_tail(total_b)))
    small = ~big
    out[small] += lgamma(hi[small]) - lgamma(lo[small] + hi[small])
    return np.asarray(np.where(ok, out, np.nan), dtype=np.float64).reshape(shape)


def matvec(a: npt.ArrayLike, x: npt.ArrayLike) -> FloatArray:
    """``a @ x`` for ``a`` of shape ``(..., n)`` and ``x`` of shape ``(n,)``: each row's products
    summed pairwise by numpy (``np.sum`` along the last axis), not by BLAS."""
    a, x = _array(a), _array(x)
    out: FloatArray = np.sum(a * x, axis=-1)
    return out


def vecmat(x: npt.ArrayLike, w: npt.ArrayLike, out: FloatArray | None = None,
           scratch: FloatArray | None = None) -> FloatArray:
    """``x @ w`` for ``x`` of shape ``(n,)`` and ``w`` of shape ``(n, m)``: the rows of ``w``
    scaled by ``x`` and added in order (``np.sum`` along axis 0), not by BLAS. ``scratch``, of
    ``w``'s shape, saves an allocation where the same product is taken many times."""
    x, w = _array(x), _array(w)
    scaled = np.multiply(x[:, None], w, out=scratch)
    result: FloatArray = np.sum(scaled, axis=0, out=out)
    return result


def matmul(a: npt.ArrayLike, w: npt.ArrayLike) -> FloatArray:
    """``a @ w`` for ``a`` of shape ``(n,)`` or ``(r, n)`` and ``w`` of shape ``(n, m)``, row by
    row through :func:`vecmat`."""
    a, w = _array(a), _array(w)
    if a.ndim == 1:
        return vecmat(a, w)
    out = np.empty((a.shape[0], w.shape[1]), dtype=np.float64)
    for i, row in enumerate(a):
        vecmat(row, w, out=out[i])
    return out


def dot(x: npt.ArrayLike, y: npt.ArrayLike) -> float:
    """``x . y`` for two vectors, summed pairwise by numpy."""
    return float(np.sum(_array(x) * _array(y)))


def lstsq(a: npt.ArrayLike, b: npt.ArrayLike) -> FloatArray:
    """The least-squares solution of ``a x = b`` (``a`` of shape ``(m, n)``, ``m >= n``, full
    column rank) by Householder QR: no normal equations, no LAPACK.

    Raises:
        ValueError: fewer rows than columns, or a column that depends on the others.
    """
    r, y = _array(a).copy(), _array(b).copy()
    m, n = r.shape
    if m < n:
        raise ValueError(f"lstsq: {m} rows cannot determine {n} unknowns")
    scale = max(float(np.max(np.abs(r))) if r.size else 0.0, 1e-300)
    for j in range(n):
        col = r[j:, j]
        norm = math.sqrt(dot(col, col))
        if norm <= 1e-13 * scale:
            raise ValueError(f"lstsq: column {j} depends on the others")
        alpha = -norm if col[0] >= 0.0 else norm
        v = col.copy()
        v[0] -= alpha
        vv = dot(v, v)
        for k in range(j, n):
            r[j:, k] -= v * (2.0 * dot(v, r[j:, k]) / vv)
        y[j:] -= v * (2.0 * dot(v, y[j:]) / vv)
    x = np.zeros(n)
    for j in reversed(range(n)):
        x[j] = (y[j] - dot(r[j, j + 1:], x[j + 1:])) / r[j, j]
    return x


MAX_BOX_COLUMNS = 6
""":func:`box_lstsq` tries every assignment of its columns, up to ``3 ** columns`` of them."""


def box_lstsq(a: npt.ArrayLike, b: npt.ArrayLike, lower: float, upper: float) -> tuple[FloatArray, float]:
    """``argmin ||a x - b||`` over ``lower <= x <= upper`` (each bound may be infinite), and the
    residual's norm, for a few columns.

    The objective is convex, so the optimum is the least-squares solution of its free components
    with the others at a bound, every free component inside the box. It is therefore the best, by
    residual, of those solutions over every assignment of free, at-lower or at-upper to each
    column that comes out inside the box (an assignment whose free columns depend on each other is
    skipped). Exact, and the same bits on every CPU, for up to :data:`MAX_BOX_COLUMNS` columns.
    Ties go to the assignment found first (fewer free columns first).

    Raises:
        ValueError: more than :data:`MAX_BOX_COLUMNS` columns, or an empty box.
    """
    a, b = _array(a), _array(b)
    n = a.shape[1]
    if n > MAX_BOX_COLUMNS:
        raise ValueError(f"box_lstsq: {n} columns; at most {MAX_BOX_COLUMNS} (every assignment is tried)")
    if not lower <= upper:
        raise ValueError(f"box_lstsq: empty box [{lower}, {upper}]")
    bounds = [v for v in (lower, upper) if math.isfinite(v)]
    best, best_norm = None, math.inf
    for size in range(n + 1):
        for free in itertools.combinations(range(n), size):
            fixed = [j for j in range(n) if j not in free]
            for at in itertools.product(bounds, repeat=len(fixed)):
                x = np.zeros(n)
                x[fixed] = at
                rest = b - matvec(a[:, fixed], x[fixed]) if fixed else b
                if free:
                    cols = list(free)
                    try:  # fewer rows than free columns, or columns that depend on each other
                        x[cols] = lstsq(a[:, cols], rest)
                    except ValueError:
                        continue
                    if np.any(x[cols] < lower) or np.any(x[cols] > upper):
                        continue
                residual = b - matvec(a, x)
                norm = math.sqrt(dot(residual, residual))
                if norm < best_norm:
                    best, best_norm = x, norm
    if best is None:  # no bound is finite and no set of columns is independent
        raise ValueError("box_lstsq: the columns depend on each other and no bound is finite")
    return best, best_norm


def nnls(a: npt.ArrayLike, b: npt.ArrayLike) -> tuple[FloatArray, float]:
    """``argmin ||a x - b||`` over ``x >= 0``, and the residual's norm: :func:`box_lstsq` with
    the box ``[0, inf)`` (every support tried; the optimum is the least-squares solution on its
    own support)."""
    return box_lstsq(a, b, 0.0, math.inf)


def minimize(fun: Callable[[FloatArray], tuple[float, FloatArray]], x0: npt.ArrayLike, *,
             gtol: float = 1e-5, ftol: float = 2.220446049250313e-09, max_iter: int = 1000,
             max_halvings: int = 40) -> FloatArray:
    """A local minimum of ``fun`` (value and gradient) from ``x0``, by BFGS: the inverse Hessian
    kept dense (meant for a few parameters), scaled by ``s.y / y.y`` before its first update, and
    an update skipped where the curvature ``s.y`` is not positive; each step halved from 1 until
    it decreases ``fun`` by Armijo's rule (``1e-4`` of the slope).

    It stops, as scipy's L-BFGS-B does with its defaults, when the largest gradient component is
    at most ``gtol``, when a step lowers ``fun`` by at most ``ftol`` of ``max(|f|, |f_new|, 1)``,
    after ``max_iter`` steps, or when no step of ``2 ** -max_halvings`` or more decreases
    ``fun``. Every operation is one of this module's, so the result is the same on every CPU.
    """
    x = _array(x0).copy()
    f, g = fun(x)
    n = x.size
    h = np.eye(n)
    scaled = False
    for _ in range(max_iter):
        if not np.all(np.isfinite(g)) or float(np.max(np.abs(g), initial=0.0)) <= gtol:
            break
        d = -matvec(h, g)
        slope = dot(g, d)
        if not slope < 0.0:  # not a descent direction: start again from steepest descent
            h, scaled = np.eye(n), False
            d, slope = -g, -dot(g, g)
        step = 1.0
        for _ in range(max_halvings):
            x_new = x + step * d
            f_new, g_new = fun(x_new)
            if math.isfinite(f_new) and f_new <= f + 1e-4 * step * slope:
                break
            step *= 0.5
        else:
            break
        s, y = x_new - x, g_new - g
        done = f - f_new <= ftol * max(abs(f), abs(f_new), 1.0)
        x, f, g = x_new, f_new, g_new
        if done:
            break
        sy = dot(s, y)
        if sy > 0.0 and np.all(np.isfinite(y)):
            if not scaled:
                h, scaled = np.eye(n) * (sy / dot(y, y)), True
            hy = matvec(h, y)
            rho = 1.0 / sy
            h = h - rho * (np.outer(s, hy) + np.outer(hy, s)) + (rho * rho * dot(y, hy) + rho) * np.outer(s, s)
    return x
