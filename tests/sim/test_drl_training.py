"""A tiny seeded ``drl`` training run in the simulator: it learns, saves, reloads and replays."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from slurm_elastic.core.drl import DrlPlanner, PolicyWeights
from slurm_elastic.drl import command
from slurm_elastic.drl import weights as files
from slurm_elastic.drl.train import TrainConfig, train, validation_avg_jct
from slurm_elastic.errors import ConfigError
from slurm_elastic.sim.engine import simulate
from slurm_elastic.workloads.ones import ones_longhorn_50

TINY = TrainConfig(jobs=10, warmup_traces=2, warmup_epochs=30, episodes=2, updates=4, slots=8, hidden=(32,),
                   batch_size=32, replay=1024, eval_seeds=(9001,), eval_every=0, lr_warmup=1e-2)


def _f32(w: PolicyWeights) -> PolicyWeights:
    def f32(a: np.ndarray) -> np.ndarray:
        return a.astype(np.float32).astype(np.float64)

    return PolicyWeights(w.spec, tuple((f32(a), f32(b)) for a, b in w.layers), w.meta)


Trained = tuple[PolicyWeights, dict[str, object], list[tuple[int, int, str]]]


@pytest.fixture(scope="module")
def trained() -> Trained:
    calls: list[tuple[int, int, str]] = []
    res = train(TINY, lambda done, total, text: calls.append((done, total, text)))
    return res.weights, res.summary, calls


def test_warm_up_learns_the_teacher(trained: Trained) -> None:
    _, summary, _ = trained
    loss = summary["warmup_loss"]
    acc = summary["warmup_accuracy"]
    assert isinstance(loss, list) and isinstance(acc, list) and len(loss) == TINY.warmup_epochs
    assert loss[-1] < 0.8 * loss[0]
    assert acc[-1] > acc[0]


def test_training_reports_progress_and_episodes(trained: Trained) -> None:
    w, summary, calls = trained
    dones = [c[0] for c in calls]
    assert dones == list(range(1, len(calls) + 1)) and all(c[1] == len(calls) for c in calls)
    episodes = summary["episodes"]
    assert isinstance(episodes, list) and len(episodes) == TINY.episodes
    assert all(e["decisions"] > 0 and e["policy_loss"] is not None for e in episodes)
    assert summary["kept"] in {v["after"] for v in summary["validation"]}  # type: ignore[attr-defined]
    assert w.spec == TINY.spec and "config" in w.meta


def test_saved_model_replays_the_same_decisions(trained: Trained, tmp_path: Path) -> None:
    w, _, _ = trained
    path = tmp_path / "tiny.npz"
    files.save(w, path)
    back = files.load(path)
    jobs = ones_longhorn_50(3)[:10]
    a = simulate(jobs, DrlPlanner(back), gpus=64, seed=3)
    b = simulate(jobs, DrlPlanner(_f32(w)), gpus=64, seed=3)
    assert a["jobs"] == b["jobs"] and a["metrics"] == b["metrics"]
    assert all(j["finished"] for j in a["jobs"])


def test_training_is_deterministic() -> None:
    cfg = TrainConfig(jobs=6, warmup_traces=1, warmup_epochs=3, episodes=1, updates=2, slots=4, hidden=(8,),
                      batch_size=32, replay=256, eval_seeds=(), eval_every=0)
    a, b = train(cfg).weights, train(cfg).weights
    for (w1, b1), (w2, b2) in zip(a.layers, b.layers, strict=True):
        np.testing.assert_array_equal(w1, w2)
        np.testing.assert_array_equal(b1, b2)


@pytest.mark.parametrize(("model", "workload", "gpus"), [(files.DEFAULT_MODEL, "ones-longhorn", 64),
                                                      (files.DL2_MODEL, "dl2-simulation", 80)])
def test_the_shipped_model_runs_again_to_the_validation_it_records(model: Path, workload: str, gpus: int) -> None:
    """DL2 learns from the cluster's own jobs (§4.2-4.3), and reproduce's ONES Table 4 and
    fairness rows compare against the shipped model, so it must come from today's
    ``ones-longhorn`` at 64 GPUs (the appendix's 400 Philly-matched jobs). A workload's name is
    not its definition: the name once meant the 50-job set (mean queue 9-16 s), and a model
    trained there admitted too little under the appendix's load (ONES came out 63.7 % better
    than it; the paper says 26.9 %). So the model is run again on its recorded validation
    workloads and must give the avg JCT it recorded. The same holds for the model of reproduce's
    DL2 table, trained on ``dl2-simulation`` at 80 GPUs."""
    weights = files.load(model)
    recorded = json.loads(weights.meta["config"])
    assert (recorded["workload"], recorded["gpus"], recorded["gpus_per_node"]) == (workload, gpus, 4)
    assert recorded["jobs"] is None  # whole workloads, not a prefix
    assert not set(recorded["eval_seeds"]) & {1, 2, 3, 4, 5}  # never the evaluation seeds
    cfg = TrainConfig(workload=recorded["workload"], gpus=recorded["gpus"], gpus_per_node=recorded["gpus_per_node"],
                      eval_seeds=tuple(recorded["eval_seeds"]), round_gap=recorded["round_gap"])
    assert validation_avg_jct(cfg, weights) == pytest.approx(float(weights.meta["validation_avg_jct"]), abs=0.051)


def test_the_defaults_train_the_shipped_model() -> None:
    """``slurm-elastic train-drl --out FILE`` with no other option is the shipped model's command:
    the command's defaults make the config the model records."""
    from dataclasses import asdict

    recorded = json.loads(files.load(files.DEFAULT_MODEL).meta["config"])
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    cfg = command.config_from_args(parser.parse_args(["--out", "m.npz"]))
    assert cfg == TrainConfig()
    ours = json.loads(json.dumps(asdict(cfg)))  # tuples become lists, as in the file
    assert ours == recorded


def test_bad_configs_are_refused() -> None:
    with pytest.raises(ConfigError, match="teacher = 'nope'"):
        TrainConfig(teacher="nope")
    with pytest.raises(ConfigError, match="gamma"):
        TrainConfig(gamma=0.0)
    with pytest.raises(ConfigError, match="bad parameters"):
        TrainConfig(teacher="fifo", teacher_params={"colour": 1})


def test_command_writes_the_model_and_prints_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    out = tmp_path / "m.npz"
    args = parser.parse_args(["--seed", "2", "--episodes", "1", "--warmup-traces", "1", "--warmup-epochs", "2",
                              "--jobs", "6", "--teacher", "fifo", "--out", str(out), "--json", "--quiet",
                              "--set", "slots=4", "--set", "hidden=[8]", "--set", "eval_seeds=[]",
                              "--set", "updates=1"])
    assert command.run(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["out"] == str(out) and summary["bytes"] == out.stat().st_size
    assert summary["config"]["teacher"] == "fifo" and summary["config"]["seed"] == 2
    assert files.load(out).spec.slots == 4
    bad = parser.parse_args(["--out", str(out), "--set", "colour=1"])
    with pytest.raises(ConfigError, match="unknown setting"):
        command.run(bad)
