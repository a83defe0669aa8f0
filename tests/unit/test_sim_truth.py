"""The simulator's ground truth (slurm_elastic.sim.truth)."""

from __future__ import annotations

import numpy as np

from slurm_elastic.sim.truth import MeasuredSpeed, _on_unit_grid


def test_the_metric_curve_is_numpys_interpolation_bit_for_bit() -> None:
    rng = np.random.default_rng(5)
    for n in (1, 2, 7, 90):
        values = rng.uniform(0.1, 0.9, n).tolist()
        xs = [*rng.uniform(-1.0, n + 2.0, 200), 0.0, 1.0, float(n), n + 0.5, *range(1, n + 1)]
        for x in xs:
            assert _on_unit_grid(values, float(x)) == float(np.interp(x, np.arange(1, n + 1, dtype=float), values))


def test_fitted_step_parts_are_the_fitted_step_time_split_bit_for_bit() -> None:
    """``step_parts`` of a shape with no measured curve reuses one ``t_proc`` across shapes; it must equal
    ``t_iter(l k, k, nodes)`` split into ``t_proc(l)`` and the rest, exactly as computed before."""
    checked = 0
    for name in ("cifar10", "ncf", "imagenet", "bert"):
        speed = MeasuredSpeed(name)
        local = np.arange(1, speed.max_local_batch + 300, dtype=np.int64)
        for shape in ((4, 4, 4, 4, 4), (2, 2, 2, 2, 2, 1), (4,) * 8, (1,) * 6, (3, 3, 2, 2, 1, 1, 1)):
            if shape in speed.by_shape or (sum(shape), len(shape)) in speed.by_count:
                continue
            k, nodes = sum(shape), len(shape)
            capped = np.minimum(local.astype(np.float64), speed.max_local_batch)
            total = np.asarray(speed.fitted.t_iter(capped * k, k, nodes), dtype=np.float64)
            proc = np.asarray(speed.fitted.t_proc(capped), dtype=np.float64)
            c, _, inter = speed.speed
            compute, sync = speed.step_parts(local, shape)
            assert np.array_equal(compute, proc / c)
            assert np.array_equal(sync, np.maximum(0.0, total - proc) / (speed.speed[1] if nodes == 1 else inter))
            checked += 1
    assert checked >= 8
