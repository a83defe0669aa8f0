"""What DL2's warm-up can reach (majority baseline, the features' ceiling) and the standardisation fold."""

from __future__ import annotations

import numpy as np
import pytest

from slurm_elastic.core.drl import FeatureSpec, PolicyWeights, forward
from slurm_elastic.drl import imitation
from slurm_elastic.drl.imitation import feature_ceiling, fold_standardisation, input_moments, majority_accuracy


def test_majority_accuracy_is_the_share_of_the_most_frequent_action() -> None:
    assert majority_accuracy(np.array([1, 1, 2, 0], dtype=np.int64)) == 0.5
    assert majority_accuracy(np.array([3], dtype=np.int64)) == 1.0
    assert majority_accuracy(np.zeros(0, dtype=np.int64)) == 0.0


def test_the_ceiling_counts_identical_states_answered_differently() -> None:
    states = np.array([[0.0, 1.0], [0.0, 1.0], [0.0, 1.0], [1.0, 0.0]])
    # The first three are one state: two say 2, one says 0; the best any function does is 3 of 4.
    assert feature_ceiling(states, np.array([2, 0, 2, 5], dtype=np.int64)) == 0.75
    assert feature_ceiling(states, np.array([2, 2, 2, 0], dtype=np.int64)) == 1.0
    # States that differ in the last bit are different states.
    near = np.array([[0.1], [np.nextafter(0.1, 1.0)]])
    assert feature_ceiling(near, np.array([0, 1], dtype=np.int64)) == 1.0
    assert feature_ceiling(np.zeros((0, 2)), np.zeros(0, dtype=np.int64)) == 0.0


def test_input_moments_in_chunks_are_the_population_moments(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(4)
    x = rng.normal(3.0, 2.0, size=(11, 4))
    x[:, 2] = 7.0  # a constant input: centred, not scaled
    monkeypatch.setattr(imitation, "_ROWS", 3)  # several chunks
    mean, std = input_moments(x)
    np.testing.assert_allclose(mean, x.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(std[[0, 1, 3]], x.std(axis=0)[[0, 1, 3]], rtol=1e-12)
    assert std[2] == 1.0 and mean[2] == pytest.approx(7.0)
    with pytest.raises(ValueError, match="no sample"):
        input_moments(np.zeros((0, 3)))


def test_a_folded_first_layer_takes_the_raw_state() -> None:
    spec = FeatureSpec(slots=2, models=("a",))
    rng = np.random.default_rng(5)
    n = spec.input_size
    w0, b0 = rng.normal(size=(n, 6)), rng.normal(size=6)
    w1, b1 = rng.normal(size=(6, spec.actions)), rng.normal(size=spec.actions)
    mean, std = rng.normal(size=n), rng.uniform(0.05, 3.0, size=n)
    x = rng.normal(2.0, 4.0, size=(9, n))
    trained_on_standardised = PolicyWeights(spec, ((w0, b0), (w1, b1)))
    folded = PolicyWeights(spec, (fold_standardisation(w0, b0, mean, std), (w1, b1)))
    np.testing.assert_allclose(forward(folded, x), forward(trained_on_standardised, (x - mean) / std),
                               rtol=1e-9, atol=1e-9)
    with pytest.raises(ValueError, match="fold_standardisation"):
        fold_standardisation(w0, b0, mean[:-1], std[:-1])
