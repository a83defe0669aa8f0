"""The portable arithmetic: accurate, and the same bits under every CPU this machine can play."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.optimize
import scipy.special

from slurm_elastic.dev import cpus
from slurm_elastic_predictor import portable


def _ulps(got: np.ndarray, want: np.ndarray) -> float:
    finite = np.isfinite(want)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])
    return float(np.max(np.abs(got[finite] - want[finite]) / np.spacing(np.abs(want[finite]))))


RNG = np.random.default_rng(7)
ANY = np.concatenate([RNG.uniform(-745, 709, 20_000), RNG.uniform(-1, 1, 20_000), RNG.normal(size=100) * 1e-12,
                      [0.0, -0.0, 709.78, 710.0, -745.2, -1000.0, np.inf, -np.inf, np.nan]])
POSITIVE = np.concatenate([np.exp(RNG.uniform(-700, 700, 20_000)), RNG.uniform(0.5, 2.0, 20_000),
                           [1.0, 2.0, 0.5, 1024.0, 5e-324, 1e-310, np.inf, 0.0, -1.0, np.nan]])


def test_exp_is_within_one_ulp_of_numpy() -> None:
    with np.errstate(over="ignore"):
        assert _ulps(portable.exp(ANY), np.exp(ANY)) <= 1.0


@pytest.mark.parametrize("name", ["log", "log2"])
def test_logarithms_are_within_two_ulps_and_exact_at_powers_of_two(name: str) -> None:
    with np.errstate(divide="ignore", invalid="ignore"):
        want = getattr(np, name)(POSITIVE)
    assert _ulps(getattr(portable, name)(POSITIVE), want) <= 2.0
    powers = 2.0 ** np.arange(-1074, 1024)
    assert np.array_equal(portable.log2(powers), np.arange(-1074, 1024, dtype=np.float64))


def test_log1p_is_within_two_ulps_near_zero_and_far_from_it() -> None:
    x = np.concatenate([RNG.uniform(-0.999, 10, 20_000), RNG.normal(size=1000) * 1e-12, [-1.0, -2.0, np.inf, 1e300]])
    with np.errstate(divide="ignore", invalid="ignore"):
        assert _ulps(portable.log1p(x), np.log1p(x)) <= 2.0


def test_the_float_versions_give_the_array_versions_bits() -> None:
    for x in [*POSITIVE[:2000].tolist(), 1.0, 3.0, 1e-300, 7.5e-310]:
        assert portable.log_float(x) == portable.log(x)
        assert portable.log2_float(x) == portable.log2(x)
        assert portable.log1p_float(x - 0.5) == portable.log1p(x - 0.5)
    assert math.isnan(portable.log_float(-1.0)) and portable.log1p_float(-1.0) == -math.inf


def test_gamma_functions_match_scipy() -> None:
    x = np.concatenate([RNG.uniform(1e-3, 30, 20_000), np.exp(RNG.uniform(0, 18.5, 2000))])
    assert np.allclose(portable.lgamma(x), scipy.special.gammaln(x), rtol=1e-14, atol=1e-14)
    assert np.allclose(portable.digamma(x), scipy.special.digamma(x), rtol=1e-14, atol=1e-14)
    a, b = np.exp(RNG.uniform(0, 18.4, 20_000)), np.exp(RNG.uniform(0, 18.4, 20_000))
    assert np.allclose(portable.betaln(a, b), scipy.special.betaln(a, b), rtol=1e-9)
    assert portable.betaln(1.0, 1e8) == pytest.approx(-math.log(1e8), rel=1e-15)  # no cancellation
    assert np.isnan(portable.lgamma([0.0, -1.0, np.nan])).all() and portable.lgamma(np.inf) == np.inf
    assert np.isnan(portable.betaln([0.0, 1.0], [1.0, np.inf])).all()


def test_products_are_blas_products_up_to_rounding() -> None:
    m, w = RNG.normal(size=(5, 7)), RNG.normal(size=(7, 3))
    assert np.allclose(portable.matmul(m, w), m @ w, rtol=1e-14, atol=1e-14)
    assert np.allclose(portable.matvec(m, w[:, 0]), m @ w[:, 0], rtol=1e-14, atol=1e-14)
    assert np.allclose(portable.vecmat(m[0], w), m[0] @ w, rtol=1e-14, atol=1e-14)
    assert portable.dot(m[0], m[1]) == pytest.approx(float(m[0] @ m[1]), rel=1e-14)


def test_least_squares_and_nnls_find_scipys_optimum() -> None:
    for seed in range(20):
        rng = np.random.default_rng(seed)
        a = np.abs(rng.normal(size=(12, 3)))
        b = rng.normal(size=12) + a @ rng.uniform(-1, 1, 3)
        ours, norm = portable.nnls(a, b)
        theirs, their_norm = scipy.optimize.nnls(a, b)
        assert norm == pytest.approx(their_norm, rel=1e-10)
        assert np.allclose(ours, theirs, atol=1e-9) and (ours >= 0).all()
        assert np.allclose(portable.lstsq(a, b), np.linalg.lstsq(a, b, rcond=None)[0], atol=1e-10)
        boxed, _ = portable.box_lstsq(a, b * 3, 0.5, 2.0)
        bvls = scipy.optimize.lsq_linear(a, b * 3, bounds=(0.5, 2.0), method="bvls")
        assert np.allclose(boxed, bvls.x, atol=1e-9) and ((boxed >= 0.5) & (boxed <= 2.0)).all()
    with pytest.raises(ValueError, match="depends on the others"):
        portable.lstsq(np.ones((4, 2)), np.ones(4))
    with pytest.raises(ValueError, match="at most 6"):
        portable.nnls(np.ones((9, 7)), np.ones(9))
    with pytest.raises(ValueError, match="empty box"):
        portable.box_lstsq(np.eye(2), np.ones(2), 1.0, 0.0)


def test_minimize_reaches_the_minimum_of_a_smooth_function() -> None:
    def rosen(x: np.ndarray) -> tuple[float, np.ndarray]:
        return float(scipy.optimize.rosen(x)), scipy.optimize.rosen_der(x)

    x = portable.minimize(rosen, np.array([-1.2, 1.0, 0.5, -0.3]), gtol=1e-8, ftol=0.0)
    assert np.allclose(x, 1.0, atol=1e-6)


PROBE = """
import hashlib, json, sys
import numpy as np
from slurm_elastic_predictor import portable as p
rng = np.random.default_rng(3)
x = rng.uniform(-50, 50, 5000); y = p.exp(rng.uniform(-50, 50, 5000)); m = rng.normal(size=(40, 300))
quartic = lambda t: (float(np.sum(((t - 1.5) * (t - 1.5)) ** 2)), 4 * (t - 1.5) * (t - 1.5) * (t - 1.5))
ours = [p.exp(x), p.log(y), p.log2(y), p.log1p(y), p.lgamma(y), p.digamma(y), p.betaln(y, y[::-1]),
        p.matvec(m, x[:300]), p.matmul(m[:3, :40], m[:40, :30]), p.nnls(np.abs(m[:, :3]), x[:40])[0],
        p.box_lstsq(m[:, :3], x[:40], -0.1, 0.1)[0],
        p.minimize(quartic, np.zeros(3))]
theirs = [np.exp(x), np.log(y), np.log1p(y), m @ x[:300], np.linalg.solve(m[:40, :40], x[:40])]
digest = lambda arrays: hashlib.sha256(b"".join(np.asarray(a).tobytes() for a in arrays)).hexdigest()[:16]
print(json.dumps({"portable": digest(ours), "numpy": digest(theirs)}))
"""


def test_the_portable_functions_give_the_same_bits_on_every_cpu_this_machine_plays() -> None:
    """Each emulated CPU (OpenBLAS kernel, numpy dispatch, glibc's libm variant, numba target) gives
    the portable results the same bits, while numpy's own give different ones somewhere (so the
    emulation reaches the code paths, and this test could fail)."""
    played = cpus.emulations()
    if len(played) < 2:
        pytest.skip("this machine can play only one CPU")
    digests = {}
    for cpu in played:
        env = {**os.environ, **cpu.environment(cpus.numpy_dispatch())}
        out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120,
                             check=True)
        digests[cpu.name] = json.loads(out.stdout)
    assert len({d["portable"] for d in digests.values()}) == 1, digests
    assert len({d["numpy"] for d in digests.values()}) > 1, digests


def test_emulations_follow_the_cpu_flags_and_numpys_targets() -> None:
    assert [e.name for e in cpus.emulations(frozenset())] == ["Prescott (SSE only)"]
    avx2 = cpus.emulations(frozenset({"avx", "avx2", "fma"}))
    assert [e.blas for e in avx2] == ["Haswell", "Zen", "Sandybridge", "Prescott"]
    env = avx2[2].environment(["X86_V3", "X86_V4", "AVX512_ICL", "AVX512_SPR"])
    assert env == {"OPENBLAS_CORETYPE": "Sandybridge",
                   "NPY_DISABLE_CPU_FEATURES": "X86_V3 X86_V4 AVX512_ICL AVX512_SPR",
                   "NUMBA_CPU_NAME": "sandybridge", "GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX512F,-AVX2,-FMA",
                   "ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "AVX"}
    old_numpy = avx2[0].environment(["SSE42", "AVX2", "FMA3", "AVX512F", "AVX512_SKX"])
    assert old_numpy["NPY_DISABLE_CPU_FEATURES"] == "AVX512F AVX512_SKX"


def test_a_played_cpu_reaches_torchs_kernels_too() -> None:
    """The launcher trains with torch, which picks its ATen kernels by CPU: a played AVX2 or SSE
    CPU makes torch report that capability, not this machine's."""
    pytest.importorskip("torch")
    played = {e.blas: e for e in cpus.emulations() if e.torch_isa}
    if not played:
        pytest.skip("this machine plays no CPU below its own")
    for blas, cpu in played.items():
        env = {**os.environ, **cpu.environment(cpus.numpy_dispatch())}
        out = subprocess.run([sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
                             env=env, capture_output=True, text=True, timeout=120, check=True)
        wanted = {"avx2": "AVX2", "default": "DEFAULT"}[cpu.torch_isa[0]]
        assert out.stdout.strip().upper() == wanted, (blas, out.stdout)
