"""A user's own dataset and loss (issue 17, friction found porting a DDP script): a standard
map-style ``torch.utils.data.Dataset`` through :class:`MapBatchDataset`, and a loss averaged over
the batch (PyTorch's default ``reduction="mean"``) with ``loss_reduction="mean"``: the same
gradients as the summed loss the agent used to require."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

SECRET = "0123456789abcdef-secret"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _train(tmp_path: Path, reduction: str, dataset: Any, torch: Any) -> Any:
    from slurm_elastic_launcher import AgentState, ElasticJob, run

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 4)
    loss = torch.nn.CrossEntropyLoss(reduction="sum" if reduction == "sum" else "mean")  # mean: over samples
    job = ElasticJob(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05), dataset=dataset,
                     loss_fn=lambda m, b: loss(m(b[0]), b[1]), loss_reduction=reduction)
    env = {"SLURM_ELASTIC_JOB_ID": "5", "SLURM_ELASTIC_SECRET": SECRET, "SLURM_ELASTIC_WORKER_ID": "w0",
           "SLURM_ELASTIC_WORKERS": "w0", "SLURM_ELASTIC_STORE_PORT": str(_port()), "SLURM_ELASTIC_STORE_SERVE": "1",
           "SLURM_ELASTIC_LOCAL_BATCH": "4", "SLURM_ELASTIC_EPOCHS": "2"}
    assert run(job, env).state is AgentState.DONE
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_a_map_style_dataset_batches_as_a_dataloader_would() -> None:
    torch = pytest.importorskip("torch")
    from torch.utils.data import TensorDataset

    from slurm_elastic_launcher.torch_backend import MapBatchDataset, TensorBatchDataset

    x, y = torch.arange(12.0).reshape(6, 2), torch.arange(6)
    mine, theirs = MapBatchDataset(TensorDataset(x, y)), TensorBatchDataset(x, y)
    assert len(mine) == 6
    for got, want in zip(mine.batch([4, 0, 2]), theirs.batch([4, 0, 2]), strict=True):
        assert torch.equal(got, want)
    pairs = MapBatchDataset(TensorDataset(x, y), collate_fn=lambda samples: [int(s[1]) for s in samples])
    assert pairs.batch([5, 1]) == [5, 1]


def test_a_mean_loss_trains_exactly_as_the_summed_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    from torch.utils.data import TensorDataset

    from slurm_elastic_launcher.torch_backend import MapBatchDataset, TensorBatchDataset

    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(16, 3, generator=g), torch.randint(0, 4, (16,), generator=g)
    summed = _train(tmp_path, "sum", TensorBatchDataset(x, y), torch)
    averaged = _train(tmp_path, "mean", MapBatchDataset(TensorDataset(x, y)), torch)
    assert torch.allclose(summed, averaged, atol=1e-6)
    torch.manual_seed(0)  # the same seed's initial parameters: training moved them
    untouched = torch.nn.Linear(3, 4)
    assert not torch.allclose(summed, torch.cat([p.detach().flatten() for p in untouched.parameters()]))


def test_an_unknown_loss_reduction_is_refused_before_training(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    from slurm_elastic_launcher.torch_backend import TensorBatchDataset

    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    with pytest.raises(ValueError, match=r"ElasticJob.loss_reduction='avg': must be 'sum' or 'mean'"):
        _train(tmp_path, "avg", TensorBatchDataset(torch.zeros(4, 3), torch.zeros(4, dtype=torch.long)), torch)
