"""DL2's own teacher, DRF, is imitated by the supervised warm-up once the inputs are standardised.

DRF (the loop's max-min chooser) adds a GPU to the allowed slot holding the fewest, ties to the
earlier slot: a function of each slot's ``allocated`` (1/16 per GPU) and ``can_add``, which the
state shows, so the features' ceiling is 1. On the raw state, where inputs DRF ignores reach
7-14, the network stays near the majority baseline; standardised, it imitates DRF.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from slurm_elastic.core.drl import SLOT_FEATURES, forward  # noqa: E402
from slurm_elastic.drl import command  # noqa: E402
from slurm_elastic.drl.train import (  # noqa: E402
    TrainConfig,
    _always,
    _drf,
    _LoopPlanner,
    _mlp,
    _run,
    _samples,
    _Standardise,
    _totals,
    _workload,
    to_weights,
    train,
)
from slurm_elastic.errors import ConfigError  # noqa: E402

SMALL = dict(workload="dl2-simulation", gpus=80, jobs=40, slots=8, hidden=(32,), warmup_traces=2, warmup_epochs=20,
             batch_size=64, teacher="drf", episodes=0, eval_seeds=())


@pytest.fixture(scope="module")
def runs() -> dict[bool, dict[str, Any]]:
    return {st: train(TrainConfig(standardise=st, **SMALL)).summary for st in (False, True)}  # type: ignore[arg-type]


def test_drf_is_a_function_of_the_features_and_no_class_dominates(runs: dict[bool, dict[str, Any]]) -> None:
    for summary in runs.values():
        assert summary["warmup_baselines"]["ceiling"] == 1.0
        assert summary["warmup_baselines"]["majority"] < 0.3


def test_standardised_inputs_imitate_drf_and_raw_ones_do_not(runs: dict[bool, dict[str, Any]]) -> None:
    raw, std = runs[False], runs[True]
    assert std["warmup_accuracy"][-1] >= 0.9
    assert std["warmup_loss"][-1] < 0.2 * std["warmup_loss"][0]
    assert raw["warmup_accuracy"][-1] < 0.5  # the cause: same samples, same network, raw inputs


def test_the_saved_policy_folds_the_standardisation_into_its_first_layer() -> None:
    spec = TrainConfig(**SMALL).spec  # type: ignore[arg-type]
    rng = np.random.default_rng(2)
    mean, std = rng.normal(size=spec.input_size), rng.uniform(0.1, 5.0, size=spec.input_size)
    torch.manual_seed(2)
    net = torch.nn.Sequential(_Standardise(mean, std), *_mlp([spec.input_size, 16, spec.actions]).double())
    x = rng.normal(1.0, 3.0, size=(7, spec.input_size))
    with torch.no_grad():
        want = net(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(forward(to_weights(net, spec), x), want, rtol=1e-9, atol=1e-9)


def test_standardise_is_a_setting_of_the_command_and_needs_warm_up_traces() -> None:
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    args = parser.parse_args(["--out", "m.npz", "--teacher", "drf", "--set", "standardise=true"])
    assert command.config_from_args(args).standardise is True
    assert TrainConfig().standardise is False  # the shipped models were trained without it
    with pytest.raises(ConfigError, match="standardise = True: needs warm-up traces"):
        TrainConfig(standardise=True, warmup_traces=0)
    with pytest.raises(ConfigError, match="standardise = 1: must be true or false"):
        TrainConfig(standardise=1)  # type: ignore[arg-type]


def test_drf_labels_are_read_off_the_state_the_network_sees() -> None:
    """Each label is the slot the state shows holding the fewest GPUs among those it marks
    addable (``allocated``, ``can_add``), ties to the earlier slot, and DRF never says "stop"
    (it fills the cluster): the teacher hides nothing from the student."""
    cfg = TrainConfig(**SMALL)  # type: ignore[arg-type]
    jobs = _workload(cfg, 10_001)
    teacher = _LoopPlanner("teacher-drf", cfg.spec, _always(_drf), _totals(jobs))
    _run(cfg, teacher, jobs, 10_001)
    states, masks, actions = _samples(teacher.rounds)
    assert len(actions) > 1000
    per = cfg.spec.per_slot
    slots = states[:, :cfg.slots * per].reshape(len(states), cfg.slots, per)
    allocated = slots[:, :, SLOT_FEATURES.index("allocated")]
    can_add = slots[:, :, SLOT_FEATURES.index("can_add")] == 1.0
    np.testing.assert_array_equal(can_add, masks[:, :-1])
    np.testing.assert_array_equal(np.where(can_add, allocated, np.inf).argmin(axis=1), actions)
