"""Unit tests of the ``drl`` policy: featurisation, forward pass, decision loop, model files."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from slurm_elastic import policies
from slurm_elastic.core.constraints import validate_plan
from slurm_elastic.core.drl import (
    _ALLOC,
    _CAN_ADD,
    GLOBAL_FEATURES,
    SLOT_FEATURES,
    DrlPlanner,
    FeatureSpec,
    PolicyWeights,
    Step,
    allocate,
    forward,
    greedy_chooser,
    masked_probabilities,
    sampling_chooser,
    slot_features,
)
from slurm_elastic.core.model import ClusterSnapshot, JobId, JobState, NodeState
from slurm_elastic.drl import weights as files
from slurm_elastic.errors import ConfigError
from slurm_elastic.testing import make_job, make_nodes, make_snapshot, random_snapshot

MODELS = ("bert", "cifar10", "imagenet")


def _weights(spec: FeatureSpec, seed: int = 0, hidden: tuple[int, ...] = (16, 16)) -> PolicyWeights:
    rng = np.random.default_rng(seed)
    sizes = [spec.input_size, *hidden, spec.actions]
    layers = tuple((rng.normal(0, 1 / math.sqrt(a), (a, b)), rng.normal(0, 0.1, b))
                   for a, b in itertools.pairwise(sizes))
    return PolicyWeights(spec, layers)


def _stop_bias(w: PolicyWeights, bias: float) -> PolicyWeights:
    """The same network with ``bias`` added to the stop logit."""
    last_w, last_b = w.layers[-1]
    b = last_b.copy()
    b[-1] += bias
    return PolicyWeights(w.spec, (*w.layers[:-1], (last_w, b)))


def _small() -> ClusterSnapshot:
    nodes = make_nodes(2, 4)
    jobs = [
        make_job("1", "cifar10", submit_time=0.0, requested_gpus=2, max_gpus=8,
                 placement=[("n000", 0), ("n000", 1)], run_time=120.0, epochs_done=2.0),
        make_job("2", "bert", submit_time=60.0, requested_gpus=1, max_gpus=4),
        make_job("3", "ncf", submit_time=120.0, requested_gpus=1, max_gpus=2),
    ]
    return make_snapshot(nodes, jobs, now=660.0)


# -- featurisation and forward pass ---------------------------------------------------------------


def test_spec_sizes() -> None:
    spec = FeatureSpec(4, MODELS)
    assert spec.per_slot == len(SLOT_FEATURES) + len(MODELS) + 1
    assert spec.input_size == 4 * spec.per_slot + len(GLOBAL_FEATURES)
    assert spec.actions == 5
    with pytest.raises(ConfigError, match="slots = 0"):
        FeatureSpec(0, MODELS)
    with pytest.raises(ConfigError, match="duplicate"):
        FeatureSpec(2, ("bert", "bert"))


def test_slot_features_follow_the_jobs() -> None:
    snap = _small()
    spec = FeatureSpec(4, MODELS)
    rows = slot_features(snap, snap.elastic_jobs(), spec)
    f = {name: i for i, name in enumerate(SLOT_FEATURES)}
    assert rows.shape == (3, spec.per_slot)
    assert rows[:, f["occupied"]].tolist() == [1, 1, 1]
    assert rows[:, f["running"]].tolist() == [1, 0, 0]
    assert rows[0, f["age"]] == pytest.approx(math.log1p(11.0))
    assert rows[1, f["age"]] == pytest.approx(math.log1p(10.0))
    assert rows[0, f["run_time"]] == pytest.approx(math.log1p(2.0))
    assert rows[0, f["held"]] == pytest.approx(2 / 16)
    assert rows[0, f["requested"]] == pytest.approx(2 / 16)
    assert rows[2, f["max_gpus"]] == pytest.approx(2 / 16)
    assert rows[:, f["epochs_to_go"]].min() > 0  # the progress prior leaves work to do
    assert rows[:, f["allocated"]].tolist() == [0, 0, 0]  # filled by the loop
    onehot = rows[:, len(SLOT_FEATURES):]
    assert onehot.sum(axis=1).tolist() == [1, 1, 1]
    assert onehot[0, MODELS.index("cifar10")] == 1
    assert onehot[1, MODELS.index("bert")] == 1
    assert onehot[2, len(MODELS)] == 1  # ncf is not among the spec's models: the "other" column


def test_forward_equals_torch() -> None:
    torch = pytest.importorskip("torch")
    from slurm_elastic.drl.train import to_torch, to_weights

    spec = FeatureSpec(3, MODELS)
    w = _weights(spec, seed=4, hidden=(8, 5))
    x = np.random.default_rng(1).normal(size=(7, spec.input_size))
    net = to_torch(w)
    with torch.no_grad():
        expect = net(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(forward(w, x), expect, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(forward(w, x[2]), expect[2], rtol=1e-12, atol=1e-12)
    back = to_weights(net, spec)
    for (w1, b1), (w2, b2) in zip(back.layers, w.layers, strict=True):
        np.testing.assert_array_equal(w1, w2)
        np.testing.assert_array_equal(b1, b2)


def test_masked_probabilities() -> None:
    p = masked_probabilities(np.array([1.0, 5.0, 2.0]), np.array([True, False, True]))
    assert p[1] == 0 and p.sum() == pytest.approx(1.0)
    assert p[2] / p[0] == pytest.approx(math.e)


def test_bad_weights_are_refused() -> None:
    spec = FeatureSpec(2, MODELS)
    w = _weights(spec)
    with pytest.raises(ConfigError, match="layer 0"):
        PolicyWeights(spec, ((np.zeros((3, 4)), np.zeros(4)),))
    with pytest.raises(ConfigError, match="outputs"):
        PolicyWeights(spec, w.layers[:-1])
    bad = w.layers[0][0].copy()
    bad[0, 0] = np.nan
    with pytest.raises(ConfigError, match="non-finite"):
        PolicyWeights(spec, ((bad, w.layers[0][1]), *w.layers[1:]))


# -- the decision loop ----------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(12))
def test_plans_respect_capacity_range_and_no_preemption(seed: int) -> None:
    rng = np.random.default_rng(seed)
    snap = random_snapshot(rng, n_nodes=int(rng.integers(1, 6)), gpus_per_node=4,
                           n_jobs=int(rng.integers(0, 20)), down_nodes=int(rng.integers(0, 2)))
    spec = FeatureSpec(int(rng.integers(1, 9)), MODELS)
    w = _weights(spec, seed)
    sched = set(snap.schedulable_gpus())
    for sample in (False, True):
        res = DrlPlanner(w, sample=sample).plan(snap, None, np.random.default_rng(seed))
        validate_plan(snap, res.plan)
        counts = {p.job_id: p.num_gpus for p in res.plan.jobs}
        assert sum(counts.values()) <= len(sched)
        for job in snap.elastic_jobs():
            k = counts.get(job.job_id, 0)
            assert k == 0 or job.min_gpus <= k <= job.max_gpus
            if job.state is JobState.RUNNING and job.placement.gpu_set() <= sched and job.min_gpus <= job.base_batch:
                # no preemption: running jobs are fully on schedulable GPUs, so their minimums fit
                assert k >= job.min_gpus, (job.job_id, k)
        assert {p.job_id for p in res.plan.jobs}.isdisjoint(u.job_id for u in res.plan.unplaced)
        assert len(res.plan.jobs) + len(res.plan.unplaced) == len(snap.elastic_jobs())
        assert all(p.global_batch == snap.job(p.job_id).base_batch for p in res.plan.jobs)  # fixed batch


def test_every_step_masks_what_would_break_a_rule() -> None:
    snap = random_snapshot(np.random.default_rng(7), 4, 4, 15)
    spec = FeatureSpec(6, MODELS)
    w = _weights(spec, 3)
    alloc = allocate(snap, spec, sampling_chooser(w, np.random.default_rng(0)), record=True)
    assert alloc.steps
    total = len(snap.schedulable_gpus())
    for step, action in alloc.steps:
        assert step.mask[action]
        assert step.state.shape == (spec.input_size,)
        for i, job in enumerate(step.slot_jobs):
            if job is None:
                assert not step.mask[i]
            elif step.mask[i]:
                need = job.min_gpus if step.allocated[i] == 0 else 1
                assert need <= step.free and step.allocated[i] + need <= min(job.max_gpus, total)
    assert sum(alloc.counts.values()) <= total


def test_more_jobs_than_slots_are_scheduled_in_batches() -> None:
    nodes = make_nodes(4, 4)
    jobs = [make_job(str(i), "cifar10", submit_time=float(i), requested_gpus=1, max_gpus=2) for i in range(7)]
    snap = make_snapshot(nodes, jobs)
    spec = FeatureSpec(2, MODELS)
    w = _stop_bias(_weights(spec), -50.0)  # never stops: fills every batch
    plan = DrlPlanner(w).plan(snap, None, np.random.default_rng(0)).plan
    assert sorted(p.job_id for p in plan.jobs) == sorted(JobId(str(i)) for i in range(7))
    assert sum(p.num_gpus for p in plan.jobs) == 14  # every job at its max of 2


def test_stop_leaves_jobs_waiting_with_a_reason_but_never_idles_the_cluster() -> None:
    spec = FeatureSpec(4, MODELS)
    w = _stop_bias(_weights(spec), 50.0)  # always stops when it may
    snap = _small()
    plan = DrlPlanner(w).plan(snap, None, np.random.default_rng(0)).plan
    assert {p.job_id: p.num_gpus for p in plan.jobs} == {"1": 1}  # the running job keeps its minimum
    reasons = {u.job_id: u.reason for u in plan.unplaced}
    assert "stopped allocating with 7 GPUs free" in reasons["2"]
    idle = make_snapshot(make_nodes(2, 4), [make_job("9", "bert")], now=10.0)
    plan = DrlPlanner(w).plan(idle, None, np.random.default_rng(0)).plan
    assert [p.job_id for p in plan.jobs] == ["9"]  # liveness guard: stop is not offered on an idle cluster


def test_lost_gpus_preempt_only_what_no_longer_fits() -> None:
    nodes = list(make_nodes(2, 4))
    jobs = [make_job("1", "cifar10", min_gpus=4, max_gpus=8, requested_gpus=4,
                     placement=[("n000", g) for g in range(4)]),
            make_job("2", "cifar10", submit_time=1.0, min_gpus=4, max_gpus=8, requested_gpus=4,
                     placement=[("n001", g) for g in range(4)])]
    nodes[1] = replace(nodes[1], state=NodeState.DOWN)
    snap = make_snapshot(nodes, jobs)
    plan = DrlPlanner(_weights(FeatureSpec(4, MODELS))).plan(snap, None, np.random.default_rng(0)).plan
    validate_plan(snap, plan)
    assert [p.job_id for p in plan.jobs] == ["1"]
    assert "preempted by drl" in plan.unplaced[0].reason


def test_jobs_wholly_on_schedulable_gpus_keep_their_minimum_first() -> None:
    """The earlier job sits partly on a node that went down: the later one, wholly on schedulable
    GPUs, keeps its minimum first, as arrival order alone would not."""
    nodes = list(make_nodes(3, 4))
    jobs = [make_job("1", "cifar10", min_gpus=4, max_gpus=8, requested_gpus=8,
                     placement=[("n001", g) for g in range(4)] + [("n002", g) for g in range(4)]),
            make_job("2", "cifar10", submit_time=1.0, min_gpus=4, max_gpus=8, requested_gpus=4,
                     placement=[("n000", g) for g in range(4)])]
    nodes[2] = replace(nodes[2], state=NodeState.DOWN)
    snap = make_snapshot(nodes, jobs)
    alloc = allocate(snap, FeatureSpec(4, MODELS), lambda step: 4)  # always "stop"
    assert alloc.counts == {"2": 4, "1": 4}  # room for both
    nodes[1] = replace(nodes[1], state=NodeState.DOWN)
    alloc = allocate(make_snapshot(nodes, jobs), FeatureSpec(4, MODELS), lambda step: 4)
    assert alloc.counts == {"2": 4} and "preempted by drl" in alloc.reasons["1"]


def test_a_chooser_cannot_break_the_mask() -> None:
    snap = _small()

    def bad(step: Step) -> int:
        return int(np.flatnonzero(~step.mask)[0])

    with pytest.raises(ConfigError, match="not allowed"):
        allocate(snap, FeatureSpec(4, MODELS), bad)


@pytest.mark.parametrize("seed", range(40))
def test_the_kept_first_layer_decides_as_the_whole_network(seed: int) -> None:
    """The planner's greedy loop (first layer kept up to date, ``_GreedyRun``) takes every decision
    the whole network takes on each step's full state, for networks of 1 to 3 layers."""
    rng = np.random.default_rng(seed)
    snap = random_snapshot(rng, n_nodes=int(rng.integers(1, 9)), gpus_per_node=4,
                           n_jobs=int(rng.integers(1, 40)), down_nodes=int(rng.integers(0, 2)))
    spec = FeatureSpec(int(rng.integers(1, 12)), MODELS)
    hidden = ((), (16,), (24, 12))[seed % 3]
    w = _weights(spec, seed, hidden)
    if seed % 4 == 0:
        w = _stop_bias(w, -3.0)  # fill more of the cluster before stopping
    whole = greedy_chooser(w)
    reference = allocate(snap, spec, lambda step: whole(step), record=True)  # a plain callable: no kept layer
    kept = allocate(snap, spec, whole)
    assert kept.counts == reference.counts
    assert kept.reasons == reference.reasons
    assert kept.stopped == reference.stopped
    assert not kept.steps
    for step, action in reference.steps:  # the reference path did run the whole network at each step
        assert action == int(np.argmax(np.where(step.mask, forward(w, step.state), -np.inf)))


def test_the_kept_first_layer_follows_every_input_that_changes() -> None:
    """Each input the loop changes (allocated, can_add, free) moves the decision: a network that reads
    only one of them still decides as the whole network does."""
    snap = random_snapshot(np.random.default_rng(5), 6, 4, 30)
    spec = FeatureSpec(8, MODELS)
    columns = {"allocated": [i * spec.per_slot + _ALLOC for i in range(spec.slots)],
               "can_add": [i * spec.per_slot + _CAN_ADD for i in range(spec.slots)],
               "free": [spec.slots * spec.per_slot]}
    rng = np.random.default_rng(1)
    for name, cols in columns.items():
        for trial in range(6):
            w1 = np.zeros((spec.input_size, spec.actions))
            w1[cols] = rng.normal(0, 3.0, (len(cols), spec.actions))
            w = PolicyWeights(spec, ((w1, rng.normal(0, 0.1, spec.actions)),))
            whole = greedy_chooser(w)
            reference = allocate(snap, spec, lambda step, c=whole: c(step))
            assert allocate(snap, spec, whole).counts == reference.counts, (name, trial)


def test_same_inputs_same_plan() -> None:
    snap = random_snapshot(np.random.default_rng(11), 4, 4, 12)
    w = _weights(FeatureSpec(8, MODELS), 5)
    for sample in (False, True):
        a = DrlPlanner(w, sample=sample).plan(snap, None, np.random.default_rng(3)).plan
        b = DrlPlanner(w, sample=sample).plan(snap, None, np.random.default_rng(3)).plan
        assert a == b
    greedy = allocate(snap, w.spec, greedy_chooser(w))
    assert greedy.counts == {p.job_id: p.num_gpus for p in DrlPlanner(w).plan(snap, None, np.random.default_rng(9))
                             .plan.jobs}


def test_planner_parameters_are_checked() -> None:
    w = _weights(FeatureSpec(2, MODELS))
    with pytest.raises(ConfigError, match=r"drl\.sample"):
        DrlPlanner(w, sample="yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="default_epochs_to_go"):
        DrlPlanner(w, default_epochs_to_go=0.0)


# -- model files and the registry -----------------------------------------------------------------


def test_save_load_round_trip_gives_the_same_decisions(tmp_path: Path) -> None:
    spec = FeatureSpec(8, MODELS, gpu_scale=8.0)
    w = _weights(spec, 2)
    w32 = PolicyWeights(spec, tuple((a.astype(np.float32).astype(np.float64), b.astype(np.float32).astype(np.float64))
                                    for a, b in w.layers), {"seed": "2"})
    path = tmp_path / "m.npz"
    files.save(w32, path)
    back = files.load(path)
    assert back.spec == spec and dict(back.meta) == {"seed": "2"}
    for (a1, b1), (a2, b2) in zip(back.layers, w32.layers, strict=True):
        np.testing.assert_array_equal(a1, a2)
        np.testing.assert_array_equal(b1, b2)
    for seed in range(4):
        snap = random_snapshot(np.random.default_rng(seed), 4, 4, 14)
        assert (DrlPlanner(back).plan(snap, None, np.random.default_rng(0)).plan
                == DrlPlanner(w32).plan(snap, None, np.random.default_rng(0)).plan)
    via_registry = policies.create("drl", model=str(path))
    snap = random_snapshot(np.random.default_rng(5), 4, 4, 14)
    assert (via_registry.plan(snap, None, np.random.default_rng(0)).plan
            == DrlPlanner(w32).plan(snap, None, np.random.default_rng(0)).plan)


def _write(path: Path, **arrays: np.ndarray) -> Path:
    with path.open("wb") as fh:
        np.savez(fh, **arrays)  # type: ignore[arg-type]
    return path


def test_bad_model_files_name_the_file_and_the_problem(tmp_path: Path) -> None:
    good = tmp_path / "good.npz"
    files.save(_weights(FeatureSpec(2, MODELS)), good)
    with np.load(good) as npz:
        arrays = {k: npz[k] for k in npz.files}
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"this is not a zip archive")
    cases = [
        (tmp_path / "missing.npz", "no such file"),
        (garbage, "not a readable .npz"),
        (_write(tmp_path / "v9.npz", **{**arrays, "format_version": np.array(9)}), "format version 9"),
        (_write(tmp_path / "nolayer.npz", **{k: v for k, v in arrays.items() if k != "W1"}), "missing array 'W1'"),
        (_write(tmp_path / "shape.npz", **{**arrays, "slots": np.array(3)}), "layer 0 has W"),
        (_write(tmp_path / "meta.npz", **{**arrays, "meta": np.array("{not json")}), "'meta' is not JSON"),
        (_write(tmp_path / "other.npz", x=np.zeros(3)), "missing array 'format_version'"),
    ]
    for path, message in cases:
        with pytest.raises(ConfigError) as exc:
            files.load(path)
        assert str(path) in str(exc.value) and message in str(exc.value), str(exc.value)
    with pytest.raises(ConfigError, match="no such file"):
        policies.create("drl", model=str(tmp_path / "missing.npz"))
    with pytest.raises(ConfigError, match="bad parameters"):
        policies.create("drl", colour="blue")


def test_the_shipped_model_loads_and_plans() -> None:
    assert files.DEFAULT_MODEL.is_file()
    assert files.DEFAULT_MODEL.stat().st_size < 1_000_000
    assert "drl" in policies.available()
    pol = policies.create("drl")
    snap = random_snapshot(np.random.default_rng(1), 16, 4, 30)
    res = pol.plan(snap, None, np.random.default_rng(0))
    validate_plan(snap, res.plan)
    assert res.plan.policy == "drl" and res.plan.jobs
