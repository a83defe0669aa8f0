"""Unit tests of the ONES Beta progress model (:mod:`slurm_elastic_predictor.progress`)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from slurm_elastic_predictor.errors import ProfileError
from slurm_elastic_predictor.progress import (
    EPS,
    FEATURES,
    BetaProgressModel,
    JobHistory,
    ProgressPoint,
    bounded_uniform_sample,
    fit_progress_model,
    log_likelihood,
)

# Ground truth of the synthetic workload: total epochs of a job is linear in the transformed
# features, ``E = B0 + C_SIZE * log1p(epoch_size) + C_LOSS * initial_loss + noise``, so the true
# epochs to go at epoch ``e`` are ``E - e``: linear with coefficient -1 on epochs done.
B0, C_SIZE, C_LOSS, NOISE_EPOCHS = 5.0, 2.0, 4.0, 1.5


def synthetic_jobs(rng: np.random.Generator, n: int) -> list[JobHistory]:
    """Histories whose total epochs follow the known linear model above."""
    jobs = []
    for _ in range(n):
        size = float(np.exp(rng.uniform(math.log(1e4), math.log(1e6))))
        loss0 = float(rng.uniform(1.0, 5.0))
        total = C_SIZE * math.log1p(size) + C_LOSS * loss0 + B0 + rng.normal(0.0, NOISE_EPOCHS)
        epochs = max(3, round(total))
        points = []
        for e in range(1, epochs + 1):
            frac = e / epochs
            loss = loss0 * (0.1 + 0.9 * math.exp(-3.0 * frac)) * (1.0 + rng.normal(0.0, 0.02))
            acc = 0.9 * (1.0 - math.exp(-3.0 * frac)) + rng.normal(0.0, 0.01)
            points.append((e * size, loss, acc))
        jobs.append(JobHistory(size, loss0, epochs * size, tuple(points)))
    return jobs


def held_out(jobs: list[JobHistory]) -> tuple[np.ndarray, np.ndarray]:
    """Raw features and true remaining epochs of every non-final point."""
    xs, ys = [], []
    for job in jobs:
        for point, rho in job.progress_points():
            if rho < 1.0:
                xs.append(point.vector())
                ys.append((job.total_samples - point.processed) / job.epoch_size)
    return np.array(xs), np.array(ys)


def point(
    epoch_size: float = 1000.0,
    initial_loss: float = 2.0,
    processed: float = 5000.0,
    loss_ratio: float = 0.5,
    val_metric: float = 0.7,
) -> ProgressPoint:
    return ProgressPoint(epoch_size, initial_loss, processed, loss_ratio, val_metric)


# --- alpha / beta ---------------------------------------------------------------------------


def test_features_order_matches_vector() -> None:
    p = point(1.0, 2.0, 3.0, 4.0, 5.0)
    assert FEATURES == ("epoch_size", "initial_loss", "processed", "loss_ratio", "val_metric")
    np.testing.assert_array_equal(p.vector(), [1.0, 2.0, 3.0, 4.0, 5.0])


def test_alpha_is_epochs_done_thresholded_at_one() -> None:
    model = BetaProgressModel.prior(10.0)
    x = np.array([point(processed=p).vector() for p in (0.0, 300.0, 1000.0, 7500.0)])
    alpha, beta = model.alpha_beta(x)
    np.testing.assert_allclose(alpha, [1.0, 1.0, 1.0, 7.5])
    np.testing.assert_allclose(beta, 10.0)


def test_beta_thresholded_at_one() -> None:
    assert BetaProgressModel.prior(0.2).alpha_beta(point().vector())[1] == 1.0
    assert BetaProgressModel.prior(-5.0).alpha_beta(point().vector())[1] == 1.0
    model = BetaProgressModel((0.0, 0.0, -3.0, 0.0, 0.0), 4.0, (1.0,) * 5)
    x = np.array([point(processed=p).vector() for p in (0.0, 1000.0, 5000.0)])
    np.testing.assert_allclose(model.alpha_beta(x)[1], [4.0, 1.0, 1.0])


def test_beta_uses_scaled_transformed_features() -> None:
    # t(x) = (log1p(size), loss0, epochs done, loss ratio, metric); s = t / scale.
    model = BetaProgressModel((1.0, 2.0, -1.0, 3.0, 4.0), 10.0, (2.0, 1.0, 0.5, 1.0, 2.0))
    p = point(epoch_size=999.0, initial_loss=2.0, processed=1998.0, loss_ratio=0.5, val_metric=1.0)
    expected = math.log1p(999.0) / 2 + 2.0 * 2.0 - 2.0 / 0.5 + 3.0 * 0.5 + 4.0 * 1.0 / 2 + 10.0
    assert model.alpha_beta(p.vector())[1] == pytest.approx(expected)


def test_prior_mean_progress() -> None:
    model = BetaProgressModel.prior(12.0)
    assert model.weights == (0.0,) * 5 and model.bias == 12.0 and model.n_train == 0
    x = np.array([point(processed=e * 1000.0).vector() for e in (2.0, 4.0, 8.0)])
    np.testing.assert_allclose(model.mean_progress(x), [2 / 14, 4 / 16, 8 / 20])


def test_shapes_of_alpha_beta_and_scalar_input() -> None:
    model = BetaProgressModel.prior(3.0)
    x = np.tile(point().vector(), (2, 3, 1))
    alpha, beta = model.alpha_beta(x)
    assert alpha.shape == beta.shape == (2, 3)
    assert model.mean_progress(point().vector()).shape == ()


# --- remaining work -------------------------------------------------------------------------


def test_remaining_samples_formula() -> None:
    assert BetaProgressModel.remaining_samples(100.0, 0.25) == pytest.approx(300.0)
    assert BetaProgressModel.remaining_samples(100.0, 1.0) == 0.0
    got = BetaProgressModel.remaining_samples([100.0, 50.0], [[0.5], [0.1]])
    np.testing.assert_allclose(got, [[100.0, 50.0], [900.0, 450.0]])


def test_expected_remaining_matches_monte_carlo_for_alpha_above_two() -> None:
    model = BetaProgressModel.prior(3.0)
    x = point(epoch_size=1000.0, processed=6000.0).vector()  # alpha = 6, beta = 3
    exact = float(model.expected_remaining(x))
    assert exact == pytest.approx(6000.0 * 3.0 / 5.0)
    rho = model.sample_progress(np.random.default_rng(1), x, size=200_000)
    mc = float(np.mean(BetaProgressModel.remaining_samples(6000.0, rho)))
    assert mc == pytest.approx(exact, rel=0.02)


def test_expected_remaining_fallback_is_finite_and_continuous() -> None:
    model = BetaProgressModel.prior(5.0)
    epochs = np.array([0.5, 1.0, 1.5, 1.999999, 2.0, 2.000001, 4.0])
    x = np.array([point(processed=e * 1000.0).vector() for e in epochs])
    got = model.expected_remaining(x)
    assert np.all(np.isfinite(got))
    # alpha = 1: the mean-progress plug-in Y * beta / alpha.
    assert got[1] == pytest.approx(1000.0 * 5.0)
    # alpha in [1, 2): Y * beta; exact mean Y * beta / (alpha - 1) from alpha = 2 on.
    assert got[2] == pytest.approx(1500.0 * 5.0)
    assert got[3] == pytest.approx(got[4], rel=1e-5) and got[5] == pytest.approx(got[4], rel=1e-5)
    assert got[6] == pytest.approx(4000.0 * 5.0 / 3.0)


# --- sampling -------------------------------------------------------------------------------


def test_sample_progress_shapes_and_determinism() -> None:
    model = BetaProgressModel.prior(4.0)
    x = np.array([point(processed=p).vector() for p in (1000.0, 2000.0, 9000.0)])
    assert model.sample_progress(np.random.default_rng(0), x).shape == (3,)
    assert model.sample_progress(np.random.default_rng(0), x, size=7).shape == (7, 3)
    assert model.sample_progress(np.random.default_rng(0), x, size=(2, 5)).shape == (2, 5, 3)
    assert model.sample_progress(np.random.default_rng(0), x[0], size=4).shape == (4,)
    a = model.sample_progress(np.random.default_rng(42), x, size=10)
    b = model.sample_progress(np.random.default_rng(42), x, size=10)
    np.testing.assert_array_equal(a, b)


def test_sample_progress_per_job_means_follow_each_job() -> None:
    model = BetaProgressModel.prior(4.0)
    x = np.array([point(processed=p).vector() for p in (1000.0, 4000.0, 16000.0)])
    rho = model.sample_progress(np.random.default_rng(3), x, size=50_000)
    assert np.all((rho >= EPS) & (rho <= 1 - EPS))
    np.testing.assert_allclose(rho.mean(axis=0), model.mean_progress(x), atol=0.01)


# --- histories and the bounded training set -------------------------------------------------


def test_progress_points_of_a_history() -> None:
    job = JobHistory(100.0, 4.0, 300.0, ((100.0, 3.0, 0.2), (200.0, 2.0, 0.5), (300.0, 1.0, 0.8)))
    pairs = job.progress_points()
    assert [rho for _, rho in pairs] == pytest.approx([1 / 3, 2 / 3, 1.0])
    first = pairs[0][0]
    assert first == ProgressPoint(100.0, 4.0, 100.0, 0.25, 0.2)


@pytest.mark.parametrize(
    ("job", "rule"),
    [
        (JobHistory(0.0, 1.0, 10.0, ((5.0, 1.0, 0.0),)), "epoch_size"),
        (JobHistory(10.0, 1.0, 10.0, ((11.0, 1.0, 0.0),)), "processed"),
        (JobHistory(10.0, 1.0, 10.0, ((0.0, 1.0, 0.0),)), "processed"),
        (JobHistory(10.0, 1.0, 10.0, ((5.0, math.nan, 0.0),)), "non-finite"),
        (JobHistory(10.0, -1.0, 10.0, ((5.0, 1.0, 0.0),)), "initial_loss"),
    ],
)
def test_malformed_history_raises(job: JobHistory, rule: str) -> None:
    with pytest.raises(ProfileError, match=rule):
        job.progress_points()


def test_bounded_uniform_sample_keeps_everything_when_it_fits() -> None:
    jobs = synthetic_jobs(np.random.default_rng(0), 5)
    count = sum(len(j.points) for j in jobs)
    sample = bounded_uniform_sample(jobs, count, np.random.default_rng(0))
    assert len(sample) == count
    sizes = {p.epoch_size for p, _ in sample}
    assert sizes == {j.epoch_size for j in jobs}  # every history represented


def test_bounded_uniform_sample_is_bounded_deterministic_and_uniform() -> None:
    jobs = [
        JobHistory(10.0, 1.0, n * 10.0, tuple((e * 10.0, 1.0, 0.0) for e in range(1, n + 1)))
        for n in (2, 5, 13)
    ]  # 20 points
    for k in (1, 7, 19):
        assert len(bounded_uniform_sample(jobs, k, np.random.default_rng(k))) == k
    a = bounded_uniform_sample(jobs, 7, np.random.default_rng(9))
    assert a == bounded_uniform_sample(jobs, 7, np.random.default_rng(9))
    rng = np.random.default_rng(5)
    hits: dict[tuple[float, float], int] = {}
    draws = 2000
    for _ in range(draws):
        for p, rho in bounded_uniform_sample(jobs, 5, rng):
            key = (p.processed, rho)
            hits[key] = hits.get(key, 0) + 1
    assert len(hits) == 20
    freq = np.array(list(hits.values())) / draws
    np.testing.assert_allclose(freq, 5 / 20, atol=0.05)  # each point kept w.p. 1/4


def test_bounded_uniform_sample_rejects_nonpositive_bound() -> None:
    with pytest.raises(ValueError, match="max_points"):
        bounded_uniform_sample([], 0, np.random.default_rng(0))


# --- fitting --------------------------------------------------------------------------------


def test_fit_recovers_known_model_and_beats_prior_on_held_out_jobs() -> None:
    rng = np.random.default_rng(2024)
    train, test = synthetic_jobs(rng, 40), synthetic_jobs(rng, 40)
    data = bounded_uniform_sample(train, 600, rng)
    model = fit_progress_model(data)
    assert 0 < model.n_train <= 600

    # Fair baseline: the prior with the best constant, the mean epochs to go of the training set.
    _, train_y = held_out(train)
    prior = BetaProgressModel.prior(float(train_y.mean()))
    x, true_epochs = held_out(test)

    def mae_plugin(m: BetaProgressModel) -> float:
        rem = BetaProgressModel.remaining_samples(x[:, 2], m.mean_progress(x)) / x[:, 0]
        return float(np.mean(np.abs(rem - true_epochs)))

    def mae_expected(m: BetaProgressModel) -> float:
        return float(np.mean(np.abs(m.expected_remaining(x) / x[:, 0] - true_epochs)))

    # Seed 2024: plug-in 1.84 vs 10.10 epochs; expected 5.06 vs 8.95 epochs (the expectation
    # E[1/rho] carries the Beta's spread, so it overshoots for the fitted model too).
    assert mae_plugin(model) < 0.3 * mae_plugin(prior)
    assert mae_expected(model) < 0.65 * mae_expected(prior)
    # Coefficients in transformed units (A / scale) are near the truth (2, 4, -1); loss ratio and
    # metric are collinear with progress, so they take part of the epochs-done slope.
    raw = np.array(model.weights) / np.array(model.scale)
    assert raw[0] == pytest.approx(C_SIZE, abs=0.6)
    assert raw[1] == pytest.approx(C_LOSS, abs=1.0)
    assert raw[2] == pytest.approx(-1.0, abs=0.3)
    assert log_likelihood(model, data) > log_likelihood(prior, data)


def test_fit_is_deterministic() -> None:
    jobs = synthetic_jobs(np.random.default_rng(7), 10)
    a = fit_progress_model(bounded_uniform_sample(jobs, 150, np.random.default_rng(1)))
    b = fit_progress_model(bounded_uniform_sample(jobs, 150, np.random.default_rng(1)))
    assert a == b


def test_fit_never_worse_than_warm_start_prior() -> None:
    jobs = synthetic_jobs(np.random.default_rng(11), 6)
    data = bounded_uniform_sample(jobs, 1000, np.random.default_rng(0))
    prior = BetaProgressModel.prior(7.0)
    model = fit_progress_model(data, prior=prior)
    assert log_likelihood(model, data) >= log_likelihood(prior, data)
    again = fit_progress_model(data, prior=model)  # warm start from a fitted model (rescaled)
    assert log_likelihood(again, data) == pytest.approx(log_likelihood(model, data), rel=1e-3)


def test_final_points_are_dropped() -> None:
    jobs = synthetic_jobs(np.random.default_rng(3), 4)
    data = bounded_uniform_sample(jobs, 1000, np.random.default_rng(0))
    finals = sum(1 for _, rho in data if rho == 1.0)
    assert finals == 4
    non_final = [(p, r) for p, r in data if r < 1.0]
    model = fit_progress_model(data)
    assert model.n_train == len(data) - finals
    assert model == fit_progress_model(non_final)
    assert log_likelihood(model, data) == log_likelihood(model, non_final)
    assert math.isfinite(log_likelihood(model, data))


def test_fit_errors_name_index_and_rule() -> None:
    good = (point(), 0.5)
    with pytest.raises(ProfileError, match="empty"):
        fit_progress_model([])
    with pytest.raises(ProfileError, match=r"data\[2\].*'val_metric'.*finite"):
        fit_progress_model([good, good, (point(val_metric=math.nan), 0.5)])
    with pytest.raises(ProfileError, match=r"data\[1\].*rho.*finite"):
        fit_progress_model([good, (point(), math.inf)])
    with pytest.raises(ProfileError, match=r"data\[0\].*rho.*\(0, 1\]"):
        fit_progress_model([(point(), 1.5)])
    with pytest.raises(ProfileError, match=r"data\[0\].*epoch_size"):
        fit_progress_model([(point(epoch_size=0.0), 0.5)])
    with pytest.raises(ProfileError, match="only final points"):
        fit_progress_model([(point(), 1.0)])
    with pytest.raises(ProfileError, match="empty"):
        log_likelihood(BetaProgressModel.prior(1.0), [])
    with pytest.raises(ValueError, match="l2"):
        fit_progress_model([good], l2=-1.0)


def test_prediction_errors_on_bad_features() -> None:
    model = BetaProgressModel.prior(2.0)
    with pytest.raises(ProfileError, match="'loss_ratio'"):
        model.alpha_beta([[1.0, 1.0, 1.0, math.nan, 0.0]])
    with pytest.raises(ProfileError, match="shape"):
        model.sample_progress(np.random.default_rng(0), np.ones((3, 4)))


def test_model_validates_parameters() -> None:
    with pytest.raises(ValueError, match="entries"):
        BetaProgressModel((0.0,) * 4, 1.0, (1.0,) * 5)
    with pytest.raises(ValueError, match="scale"):
        BetaProgressModel((0.0,) * 5, 1.0, (1.0, 1.0, 0.0, 1.0, 1.0))
    with pytest.raises(ValueError, match="finite"):
        BetaProgressModel((0.0,) * 5, math.nan, (1.0,) * 5)
