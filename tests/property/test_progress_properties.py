"""Property tests of the ONES Beta progress model (:mod:`slurm_elastic_predictor.progress`)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_elastic_predictor.progress import (
    SHAPE_MAX,
    BetaProgressModel,
    ProgressPoint,
    fit_progress_model,
    log_likelihood,
)

SETTINGS = settings(max_examples=200, deadline=None)
FIT_SETTINGS = settings(max_examples=100, deadline=None)  # each example runs an optimiser

any_finite = st.floats(allow_nan=False, allow_infinity=False)
moderate = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)

feature_rows = st.lists(st.tuples(*([any_finite] * 5)), min_size=1, max_size=8)

models = st.builds(
    BetaProgressModel,
    weights=st.tuples(*([moderate] * 5)),
    bias=moderate,
    scale=st.tuples(*([st.floats(min_value=1e-6, max_value=1e6)] * 5)),
)


@st.composite
def progress_data(draw: st.DrawFn) -> list[tuple[ProgressPoint, float]]:
    """Plausible training points; at least one has rho < 1, some may be final (rho = 1)."""
    n = draw(st.integers(min_value=1, max_value=25))
    out = []
    for i in range(n):
        size = draw(st.floats(min_value=1.0, max_value=1e6))
        epochs = draw(st.floats(min_value=0.0, max_value=100.0))
        p = ProgressPoint(
            epoch_size=size,
            initial_loss=draw(st.floats(min_value=0.01, max_value=20.0)),
            processed=epochs * size,
            loss_ratio=draw(st.floats(min_value=-2.0, max_value=1.0)),
            val_metric=draw(st.floats(min_value=0.0, max_value=1.0)),
        )
        low = st.floats(min_value=1e-6, max_value=0.999999, exclude_max=False)
        rho = draw(low if i == 0 else st.one_of(low, st.just(1.0)))
        out.append((p, rho))
    return out


@SETTINGS
@given(models, feature_rows)
def test_alpha_beta_at_least_one_and_finite(model: BetaProgressModel, rows: list[tuple]) -> None:
    alpha, beta = model.alpha_beta(np.array(rows))
    assert alpha.shape == beta.shape == (len(rows),)
    for shape in (alpha, beta):
        assert np.all(np.isfinite(shape))
        assert np.all(shape >= 1.0)
        assert np.all(shape <= SHAPE_MAX)


@SETTINGS
@given(models, feature_rows, st.integers(min_value=0, max_value=2**32 - 1))
def test_progress_samples_strictly_inside_unit_interval(
    model: BetaProgressModel, rows: list[tuple], seed: int
) -> None:
    x = np.array(rows)
    rho = model.sample_progress(np.random.default_rng(seed), x, size=3)
    assert rho.shape == (3, len(rows))
    assert np.all((rho > 0.0) & (rho < 1.0))
    remaining = model.expected_remaining(x)
    assert not np.any(np.isnan(remaining))
    assert np.all(remaining >= 0.0)


@FIT_SETTINGS
@given(progress_data(), st.floats(min_value=-5.0, max_value=200.0))
def test_fit_never_worse_than_its_start(
    data: list[tuple[ProgressPoint, float]], epochs_to_go: float
) -> None:
    start = BetaProgressModel.prior(epochs_to_go)  # A = 0, so the L2 penalty is 0 at the start
    model = fit_progress_model(data, prior=start)
    assert log_likelihood(model, data) >= log_likelihood(start, data)
    assert model.n_train == sum(1 for _, rho in data if rho < 1.0)


@FIT_SETTINGS
@given(progress_data())
def test_fit_is_deterministic_and_valid(data: list[tuple[ProgressPoint, float]]) -> None:
    a = fit_progress_model(data)
    assert a == fit_progress_model(data)
    assert np.isfinite(log_likelihood(a, data))
