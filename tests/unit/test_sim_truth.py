"""The simulator's ground truth (slurm_elastic.sim.truth)."""

from __future__ import annotations

import numpy as np

from slurm_elastic.sim.truth import _on_unit_grid


def test_the_metric_curve_is_numpys_interpolation_bit_for_bit() -> None:
    rng = np.random.default_rng(5)
    for n in (1, 2, 7, 90):
        values = rng.uniform(0.1, 0.9, n).tolist()
        xs = [*rng.uniform(-1.0, n + 2.0, 200), 0.0, 1.0, float(n), n + 0.5, *range(1, n + 1)]
        for x in xs:
            assert _on_unit_grid(values, float(x)) == float(np.interp(x, np.arange(1, n + 1, dtype=float), values))
