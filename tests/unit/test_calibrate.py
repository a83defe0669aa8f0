"""Unit tests of per-job calibration (slurm_elastic_predictor.calibrate) and its benchmark
(slurm_elastic.bench.learning.bench_learn)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from slurm_elastic.bench.learning import bench_learn
from slurm_elastic.errors import ConfigError
from slurm_elastic_predictor.calibrate import (
    FACTOR_MAX,
    FACTOR_MIN,
    PRIOR_STRENGTH,
    Calibrated,
    StepPoint,
    calibrate,
)
from slurm_elastic_predictor.errors import ProfileError
from slurm_elastic_predictor.profiles import PROFILE_NAMES, load_model
from slurm_elastic_predictor.throughput import ThroughputModel


@pytest.fixture(scope="module")
def imagenet() -> ThroughputModel:
    return load_model("imagenet")


@pytest.fixture(scope="module")
def cifar10() -> ThroughputModel:
    return load_model("cifar10")


def measured(truth: ThroughputModel, configs: list[tuple[int, int, int]]) -> list[StepPoint]:
    """What a job whose real step times are ``truth`` reports at ``(k, nodes, local_batch)``."""
    return [StepPoint(k, n, b, float(truth.t_iter(k * b, k, n))) for k, n, b in configs]


def step(model: ThroughputModel, k: int, nodes: int, local: int) -> float:
    return float(model.t_iter(k * local, k, nodes))


# --- StepPoint and argument validation ----------------------------------------------------------

GOOD: dict[str, Any] = {"k": 4, "nodes": 1, "local_batch": 32, "step_time": 0.5}


@pytest.mark.parametrize(
    ("change", "value", "rule"),
    [
        ({"k": 0}, "k = 0", "must be an integer >= 1"),
        ({"k": 2.5, "nodes": 1}, "k = 2.5", "must be an integer >= 1"),
        ({"nodes": 0}, "nodes = 0", "must be an integer in [1, k = 4]"),
        ({"k": 2, "nodes": 3}, "nodes = 3", "must be an integer in [1, k = 2]"),
        ({"local_batch": 0}, "local_batch = 0", "must be an integer >= 1"),
        ({"local_batch": 8.0}, "local_batch = 8.0", "must be an integer >= 1"),
        ({"step_time": 0.0}, "step_time = 0.0", "must be a finite number > 0"),
        ({"step_time": -1.0}, "step_time = -1.0", "must be a finite number > 0"),
        ({"step_time": math.nan}, "step_time = nan", "must be a finite number > 0"),
        ({"step_time": math.inf}, "step_time = inf", "must be a finite number > 0"),
        ({"step_time": "0.5"}, "step_time = '0.5'", "must be a finite number > 0"),
    ],
)
def test_a_step_point_names_the_bad_value_and_its_rule(change: dict[str, Any], value: str, rule: str) -> None:
    StepPoint(**GOOD)  # the base point is valid
    with pytest.raises(ProfileError) as err:
        StepPoint(**{**GOOD, **change})
    assert value in str(err.value) and rule in str(err.value)


@pytest.mark.parametrize(
    ("kwargs", "value", "rule"),
    [
        ({"name": ""}, "name = ''", "must be a non-empty string"),
        ({"strength": 0.0}, "strength = 0.0", "must be a finite number > 0"),
        ({"strength": -1.0}, "strength = -1.0", "must be a finite number > 0"),
        ({"strength": math.nan}, "strength = nan", "must be a finite number > 0"),
        ({"prior_batch": 0.0}, "prior_batch = 0.0", "must be a finite number > 0 or None"),
        ({"prior_batch": math.inf}, "prior_batch = inf", "must be a finite number > 0 or None"),
    ],
)
def test_calibrate_names_a_bad_argument_and_its_rule(
    imagenet: ThroughputModel, kwargs: dict[str, Any], value: str, rule: str
) -> None:
    args: dict[str, Any] = {"name": "job", **kwargs}
    with pytest.raises(ProfileError) as err:
        calibrate(imagenet, [StepPoint(1, 1, 57, 0.3)], **args)
    assert value in str(err.value) and rule in str(err.value)


def test_calibrate_refuses_what_is_not_a_step_point(imagenet: ThroughputModel) -> None:
    with pytest.raises(ProfileError, match=r"must be a StepPoint"):
        calibrate(imagenet, [(1, 1, 57, 0.3)], name="job")  # type: ignore[list-item]


# --- the fit --------------------------------------------------------------------------------------


def test_without_points_the_prior_is_the_model_renamed(imagenet: ThroughputModel) -> None:
    for fit in (calibrate(imagenet, [], name="job"), calibrate(imagenet, (), name="job", prior_batch=128)):
        assert fit == Calibrated(replace(imagenet, name="job"), 0, (1.0, 1.0, 1.0), None)


def test_known_multipliers_are_recovered(imagenet: ThroughputModel) -> None:
    """A job 1.7x slower in compute, 3x in intra-node and 0.6x in inter-node all-reduce than its
    prior, measured at 256 configurations: the data outweigh the prior (worth one observation)."""
    truth = imagenet.scaled(compute=1 / 1.7, intra=1 / 3.0, inter=1 / 0.6, name="truth")
    placements = [(k, n) for n in (1, 2, 3, 4, 6, 8, 12, 16) for k in range(n, 4 * n + 1, n)]
    configs = [(k, n, int(b)) for k, n in placements for b in imagenet.proc_batch]
    fit = calibrate(imagenet, measured(truth, configs), name="job")
    assert fit.points == len(configs) == 256
    assert fit.factors == pytest.approx((1.7, 3.0, 0.6), rel=0.06)
    assert fit.model.name == "job" and fit.error is not None and fit.error < 0.01
    # Predictions anywhere (other batches, up to 64 GPUs, spread placements) within 1 %.
    for k, n, b in [(1, 1, 30), (2, 1, 90), (4, 1, 150), (3, 1, 25), (8, 2, 60), (16, 4, 25), (40, 10, 70),
                    (64, 16, 180), (6, 3, 45), (12, 12, 100)]:
        assert step(fit.model, k, n, b) == pytest.approx(step(truth, k, n, b), rel=0.01)


def test_the_job_that_runs_uniformly_slower_is_fitted_exactly_from_two_points(cifar10: ThroughputModel) -> None:
    truth = cifar10.scaled(compute=0.5, intra=0.5, inter=0.5)
    fit = calibrate(cifar10, measured(truth, [(1, 1, 32), (2, 1, 32)]), name="job")
    assert fit.factors == pytest.approx((2.0, 2.0, 2.0), rel=1e-9)
    assert step(fit.model, 16, 4, 64) == pytest.approx(step(truth, 16, 4, 64), rel=1e-9)


def test_duplicate_configurations_are_averaged(imagenet: ThroughputModel) -> None:
    twice = [StepPoint(1, 1, 57, 0.3), StepPoint(2, 1, 57, 0.45), StepPoint(1, 1, 57, 0.5)]
    mean = [StepPoint(2, 1, 57, 0.45), StepPoint(1, 1, 57, 0.4)]
    first = [StepPoint(1, 1, 57, 0.3), StepPoint(2, 1, 57, 0.45)]
    a, b, c = (calibrate(imagenet, pts, name="job") for pts in (twice, mean, first))
    assert a.points == b.points == 2
    assert a.factors == pytest.approx(b.factors, rel=1e-12) and a.model == b.model and a.error == b.error
    assert a.factors != pytest.approx(c.factors, rel=1e-3)


def test_max_local_batch_is_raised_to_the_largest_batch_the_job_ran_at(imagenet: ThroughputModel) -> None:
    assert imagenet.max_local_batch == 200 and math.isinf(imagenet.t_proc(400))
    truth = replace(imagenet, max_local_batch=400).scaled(compute=0.8, intra=0.8, inter=0.8)
    fit = calibrate(imagenet, measured(truth, [(1, 1, 100), (1, 1, 400), (2, 1, 400)]), name="job")
    assert fit.model.max_local_batch == 400 and fit.points == 3
    assert step(fit.model, 2, 1, 400) == pytest.approx(step(truth, 2, 1, 400), rel=1e-6)
    assert math.isinf(step(fit.model, 1, 1, 401))
    # A limit above what the job ran at is kept.
    assert calibrate(imagenet, [StepPoint(1, 1, 50, 0.3)], name="job").model.max_local_batch == 200


def test_a_point_infeasible_for_the_prior_is_skipped(imagenet: ThroughputModel) -> None:
    """8 GPUs on one node cannot happen on the prior's 4-GPU nodes: the point is left out."""
    truth = imagenet.scaled(compute=0.5, intra=0.5, inter=0.5)
    good = measured(truth, [(1, 1, 57), (4, 1, 57), (8, 2, 57)])
    fit = calibrate(imagenet, [*good, StepPoint(8, 1, 57, 0.2)], name="job")
    assert fit.points == 3
    assert fit.factors == pytest.approx((2.0, 2.0, 2.0), rel=1e-9)
    assert fit.error == pytest.approx(0.0, abs=1e-9)
    only_bad = calibrate(imagenet, [StepPoint(8, 1, 57, 0.2)], name="job")
    assert (only_bad.points, only_bad.factors, only_bad.error) == (0, (1.0, 1.0, 1.0), None)
    assert only_bad.model == replace(imagenet, name="job")
    flat = ThroughputModel("flat", (32.0, 64.0), (0.1, 0.18), 64, (0.0, 0.0), (0.0, 0.0, 0.0))
    assert calibrate(flat, [StepPoint(8, 1, 32, 0.2)], name="job").model == replace(flat, name="job")


def test_one_noisy_point_keeps_the_prior_split_many_points_overrule_it(imagenet: ThroughputModel) -> None:
    """The job's intra-node all-reduce is 3x its prior's. One point on 4 GPUs cannot tell that from a
    uniformly slower job: the prior's split (compute vs all-reduce) stays and the point is met by the
    overall speed. Thirty-two single-node points at every batch show it: the intra-node factor is
    then about 3x the compute factor -- unless the prior is made much stronger."""
    truth = imagenet.scaled(intra=1 / 3.0)
    one = calibrate(imagenet, measured(truth, [(4, 1, 20)]), name="job")
    tc, ta, te = one.factors
    assert ta / tc == pytest.approx(1.0, abs=1e-9) and te / tc == pytest.approx(1.0, abs=1e-9)
    assert tc > 1.0  # the point is explained as a slower job ...
    assert one.error == pytest.approx(0.0, abs=1e-9)  # ... that meets it exactly
    configs = [(k, 1, int(b)) for k in (1, 2, 3, 4) for b in imagenet.proc_batch]
    many = calibrate(imagenet, measured(truth, configs), name="job")
    assert many.points == 32
    assert many.factors[1] / many.factors[0] == pytest.approx(3.0, rel=0.1)
    assert many.factors[0] == pytest.approx(1.0, rel=0.02)
    stubborn = calibrate(imagenet, measured(truth, configs), name="job", strength=1000 * PRIOR_STRENGTH)
    assert stubborn.factors[1] / stubborn.factors[0] < 1.3


def test_a_prior_without_communication_still_learns_the_jobs(imagenet: ThroughputModel) -> None:
    """A multiplier cannot scale a zero term: the floor gives the prior a small one to scale."""
    flat = ThroughputModel("flat", (32.0, 64.0), (0.1, 0.18), 64, (0.0, 0.0), (0.0, 0.0, 0.0))
    truth = replace(flat, comm_intra=(0.0, 0.03), comm_inter=(0.0, 0.06, 0.0))
    configs = [(k, 1, b) for k in (1, 2, 3, 4) for b in (32, 48, 64)] + [(8, 2, 32), (12, 3, 64), (16, 4, 48)]
    fit = calibrate(flat, measured(truth, configs), name="job")
    assert fit.error is not None and fit.error < 0.02
    for k, n, b in [(4, 1, 40), (2, 1, 64), (16, 4, 32), (32, 8, 64)]:
        assert step(fit.model, k, n, b) == pytest.approx(step(truth, k, n, b), rel=0.03)
    assert float(flat.t_comm(4, 1)) == 0.0  # the prior itself is not changed


def test_factors_stay_within_their_bounds(imagenet: ThroughputModel) -> None:
    t1 = step(imagenet, 1, 1, 57)
    # The 2-GPU step far faster than the 1-GPU step: a negative all-reduce time, bounded at FACTOR_MIN.
    fit = calibrate(imagenet, [StepPoint(1, 1, 57, t1), StepPoint(2, 1, 57, 0.3 * t1)], name="job",
                    strength=1e-6)
    assert all(FACTOR_MIN <= f <= FACTOR_MAX for f in fit.factors)
    assert fit.factors[1] == pytest.approx(FACTOR_MIN)
    # A job 10^4 times slower than its prior: bounded at FACTOR_MAX.
    slow = calibrate(imagenet, [StepPoint(1, 1, 57, 1e4 * t1)], name="job")
    assert slow.factors == pytest.approx((FACTOR_MAX,) * 3)
    assert slow.error == pytest.approx(0.99, abs=1e-6)


def test_prior_batch_stretches_the_prior_onto_the_jobs_batch(cifar10: ThroughputModel) -> None:
    """A BERT-like job at per-GPU batch 12 with CIFAR-10 (usually run at 128) as prior: the prior's
    batch axis is stretched by 12/128, so the job's batch 6 is the prior's 64, not its flat region."""
    pts = [StepPoint(1, 1, 12, 0.9), StepPoint(2, 1, 12, 0.95)]
    fit = calibrate(cifar10, pts, name="job", prior_batch=128)
    ratio = 12 / 128
    assert fit.model.proc_batch == pytest.approx([b * ratio for b in cifar10.proc_batch])
    assert fit.model.max_local_batch == math.floor(1024 * ratio) == 96
    assert step(fit.model, 1, 1, 12) == pytest.approx(0.9, rel=0.05)
    c = fit.factors[0]
    assert float(fit.model.t_proc(6)) == pytest.approx(c * float(cifar10.t_proc(64)), rel=1e-9)
    plain = calibrate(cifar10, pts, name="job")
    assert plain.model.proc_batch == cifar10.proc_batch
    assert float(plain.model.t_proc(6)) == pytest.approx(plain.factors[0] * float(cifar10.t_proc(6)), rel=1e-9)


# --- bench_learn ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bench() -> dict[str, Any]:
    return bench_learn()


def test_bench_learn_reports_every_profile_with_the_documented_keys(bench: dict[str, Any]) -> None:
    json.dumps(bench, allow_nan=False)  # print-ready
    assert (bench["prior"], bench["first_sizes"], bench["strength"]) == ("cifar10", [1, 2], PRIOR_STRENGTH)
    per_keys = {"prior_median_ape", "calibrated_median_ape", "calibrated_p90_ape", "points"}
    overall_keys = {"median_ape_prior", "median_ape_calibrated", "p90_ape_calibrated", "profiles"}
    for run in (bench, bench["same_model"]):
        assert set(run["profiles"]) == set(PROFILE_NAMES)
        for row in run["profiles"].values():
            assert per_keys <= set(row) and row["points"] == 2
            assert all(isinstance(row[key], float) for key in per_keys - {"points"})
        assert overall_keys <= set(run["overall"]) and run["overall"]["profiles"] == len(PROFILE_NAMES)
    assert bench["profiles"]["imagenet"]["report_batch"] == [57]  # nearest measured to 64


def test_bench_learn_calibration_beats_the_prior(bench: dict[str, Any]) -> None:
    """Measured (docs/throughput-model.md): CIFAR-10 as every job's prior, first sizes 1 and 2:
    median APE 90.4 % -> 22.8 %, p90 2163 % -> 58.5 %. The 10 % goal is not reached with another
    workload's profile as prior: single-node sizes say nothing of the inter-node all-reduce, whose
    ratio to the intra-node one differs 7x across the profiles. With each job's own profile as prior
    (in-sample for the profile fit: 7.3 %) the calibrated model stays at 7.5 %."""
    overall = bench["overall"]
    assert overall["median_ape_calibrated"] < 0.5 * overall["median_ape_prior"]
    assert overall["median_ape_calibrated"] <= 0.25
    assert overall["p90_ape_calibrated"] < overall["p90_ape_prior"]
    for name, row in bench["profiles"].items():
        if name != "cifar10":
            assert row["calibrated_median_ape"] < row["prior_median_ape"]
    same = bench["same_model"]["overall"]
    assert same["median_ape_calibrated"] <= 0.10
    assert same["median_ape_calibrated"] <= same["median_ape_prior"] + 0.01


def test_bench_learn_stretch_and_sizes_are_arguments() -> None:
    plain = bench_learn(stretch_batch=False, truths=("bert",))
    stretched = bench_learn(truths=("bert",))
    assert not plain["stretch_batch"] and list(plain["profiles"]) == ["bert"]
    assert stretched["profiles"]["bert"]["calibrated_median_ape"] < plain["profiles"]["bert"]["calibrated_median_ape"]
    more = bench_learn(first_sizes=(1, 2, 4, 8, 16), truths=("bert",))
    assert more["profiles"]["bert"]["points"] == 5


@pytest.mark.parametrize(
    "kwargs",
    [{"prior": "resnet"}, {"truths": ("bert", "gpt")}, {"truths": ()}, {"first_sizes": ()},
     {"first_sizes": (0, 2)}, {"first_sizes": (1, 65)}, {"strength": 0.0}, {"strength": math.nan}],
)
def test_bench_learn_refuses_bad_arguments(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=r"bench learn: "):
        bench_learn(**kwargs)


def test_calibrated_models_are_valid_for_every_shipped_prior_and_truth() -> None:
    """Any shipped profile calibrated to any other's first sizes gives a usable model (finite,
    positive predictions at the job's own configurations)."""
    models = {n: load_model(n) for n in PROFILE_NAMES}
    for prior in models.values():
        for truth in models.values():
            b = int(truth.proc_batch[len(truth.proc_batch) // 2])
            fit = calibrate(prior, measured(truth, [(1, 1, b), (2, 1, b)]), name="job",
                            prior_batch=float(prior.proc_batch[0]))
            t = np.array([step(fit.model, k, n, b) for k, n in ((1, 1), (4, 1), (8, 2), (64, 16))])
            assert np.all(np.isfinite(t) & (t > 0)), (prior.name, truth.name, t)
