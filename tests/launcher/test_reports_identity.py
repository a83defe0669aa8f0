"""Job identity in the launcher's reports (issue 15, part 3b): rank 0 names the model (the training
script's ``ElasticJob.model_name``, else ``SLURM_ELASTIC_MODEL``) and counts its parameters.

Each test fails before the change: there was no such variable, argument or report field.
"""

from __future__ import annotations

import importlib.util
import json
import socket
from pathlib import Path
from typing import Any

import pytest

from slurm_elastic_launcher import examples
from slurm_elastic_launcher.env import EnvError, LauncherEnv

SECRET = "0123456789abcdef-secret"
BASE = {
    "SLURM_ELASTIC_JOB_ID": "77",
    "SLURM_ELASTIC_SECRET": SECRET,
    "SLURM_ELASTIC_WORKER_ID": "w0",
    "SLURM_ELASTIC_WORKERS": "w0",
    "SLURM_ELASTIC_STORE_PORT": "29500",
}
ROOT = Path(__file__).resolve().parents[2]


def test_the_model_name_variable_is_read_and_empty_by_default() -> None:
    assert LauncherEnv.from_mapping(BASE).model == ""
    assert LauncherEnv.from_mapping({**BASE, "SLURM_ELASTIC_MODEL": " resnet18 "}).model == "resnet18"
    assert LauncherEnv.from_mapping({**BASE, "SLURM_ELASTIC_MODEL": "gpt-2_small.v1"}).model == "gpt-2_small.v1"


@pytest.mark.parametrize("value", ["res net", "a" * 65, "../x/y", "rés", "x;rm"])
def test_a_bad_model_name_variable_names_the_variable_the_value_and_the_rule(value: str) -> None:
    with pytest.raises(EnvError) as exc:
        LauncherEnv.from_mapping({**BASE, "SLURM_ELASTIC_MODEL": value})
    assert f"SLURM_ELASTIC_MODEL={value[:80]!r}: must be empty or 1 to 64 of A-Z a-z 0-9 _ . -" in str(exc.value)


# -- a real run (torch) -----------------------------------------------------------------------------


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(tmp_path: Path, name: str | None, **env: str) -> list[dict[str, Any]]:
    """One worker trains a tiny linear model for an epoch with reports on; its reports."""
    torch = pytest.importorskip("torch")
    from slurm_elastic_launcher import AgentState, ElasticJob, run
    from slurm_elastic_launcher.torch_backend import TensorBatchDataset

    reports = tmp_path / f"{name}-{len(env)}.reports"
    model = torch.nn.Linear(3, 2)
    job = ElasticJob(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                     dataset=TensorBatchDataset(torch.zeros(8, 3), torch.zeros(8, 2)),
                     loss_fn=lambda m, b: ((m(b[0]) - b[1]) ** 2).sum(), model_name=name)
    result = run(job, {**BASE, "SLURM_ELASTIC_STORE_PORT": str(_port()), "SLURM_ELASTIC_STORE_SERVE": "1",
                       "SLURM_ELASTIC_LOCAL_BATCH": "4", "SLURM_ELASTIC_REPORTS": str(reports), **env})
    assert result.state is AgentState.DONE
    return [json.loads(line) for line in reports.read_text().splitlines()]


def test_rank0_reports_the_name_the_script_gives_and_the_parameter_count(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    got = _run(tmp_path, "tiny-linear", SLURM_ELASTIC_MODEL="from-env")  # the script's name wins
    assert got and {(r["kind"], r["model"], r["params"]) for r in got} == {("progress", "tiny-linear", 8),
                                                                           ("end", "tiny-linear", 8)}


def test_without_a_name_in_the_script_the_variable_names_the_model(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    got = _run(tmp_path, None, SLURM_ELASTIC_MODEL="from-env")
    assert got and all(r["model"] == "from-env" and r["params"] == 8 for r in got)


def test_without_any_name_the_reports_carry_the_parameter_count_only(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    got = _run(tmp_path, None)
    assert got and all("model" not in r and r["params"] == 8 for r in got)


def test_a_bad_name_in_the_script_is_refused_before_training(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    with pytest.raises(ValueError, match=r"ElasticJob.model_name: model='res net': must be a string of 1 to 64"):
        _run(tmp_path, "res net")


@pytest.mark.launcher
def test_the_example_names_its_model_choice(fake_job_factory: Any, tmp_path: Path) -> None:
    import torch

    spec = importlib.util.spec_from_file_location("train_cnn", Path(examples.__file__).parent / "train_cnn.py")
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    reports = tmp_path / "example.reports"
    job = fake_job_factory(dataset_size=64, SLURM_ELASTIC_EPOCHS="1", SLURM_ELASTIC_REPORTS=str(reports))
    job.start("w0", ["w0"], SLURM_ELASTIC_STORE_SERVE="0")
    assert job.wait_exit(60.0) == {"w0": 0}, job.output("w0")
    got = [json.loads(line) for line in reports.read_text().splitlines()]
    params = sum(p.numel() for p in example.SmallCNN().parameters())
    assert isinstance(example.SmallCNN(), torch.nn.Module)
    assert got and all(r["model"] == "cnn" and r["params"] == params for r in got)
