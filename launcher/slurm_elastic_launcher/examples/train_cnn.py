"""Example: train a small CNN (or ResNet-18) elastically on synthetic data generated in-process.

Run one process per worker with the ``SLURM_ELASTIC_*`` variables set (see
``slurm_elastic_launcher.env``); the sbatch templates and the tests do that. No downloads: the data are
class templates plus noise, generated from a fixed seed so every worker builds the same dataset.
``--api run`` (the default) hands the job to ``run(ElasticJob)``; ``--api loop`` trains the same model
on the same data in a loop of its own through ``slurm_elastic_launcher.init()`` (``bench resize --api
loop`` times that path).
It prints one JSON line with how this worker ended and exits 0 (done or dropped) or 3 (declared lost).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

import slurm_elastic_launcher
from slurm_elastic_launcher import AgentResult, AgentState, ElasticJob, run
from slurm_elastic_launcher.torch_backend import TensorBatchDataset


class SmallCNN(nn.Module):
    """Two conv layers with BatchNorm and a linear head (about 20k parameters)."""

    def __init__(self, channels: int = 1, classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.head = nn.Linear(32, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.relu(self.conv2(x))
        out: torch.Tensor = self.head(F.adaptive_avg_pool2d(x, 1).flatten(1))
        return out


class BasicBlock(nn.Module):
    """ResNet basic block (two 3x3 convs with BatchNorm and a shortcut)."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + self.short(x))


class ResNet18(nn.Module):
    """ResNet-18 in plain torch (11.7M parameters at 1000 classes; CIFAR-style stem)."""

    def __init__(self, channels: int = 3, classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(channels, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU())
        layers: list[nn.Module] = []
        cin = 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(512, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(F.adaptive_avg_pool2d(self.layers(self.stem(x)), 1).flatten(1))
        return out


class Bottleneck(nn.Module):
    """ResNet bottleneck block (1x1, 3x3, 1x1 convs with BatchNorm, 4x expansion, and a shortcut)."""

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * 4
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.short: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        return F.relu(self.bn3(self.conv3(y)) + self.short(x))


class ResNet50(nn.Module):
    """ResNet-50 in plain torch (25.6M parameters in 161 tensors at 1000 classes; CIFAR-style stem)."""

    def __init__(self, channels: int = 3, classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(channels, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU())
        layers: list[nn.Module] = []
        cin = 64
        for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for k in range(blocks):
                layers.append(Bottleneck(cin, width, stride if k == 0 else 1))
                cin = width * 4
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(F.adaptive_avg_pool2d(self.layers(self.stem(x)), 1).flatten(1))
        return out


def synthetic(
    size: int, channels: int, side: int, classes: int, seed: int = 1234, split: int = 0
) -> TensorBatchDataset:
    """Class templates plus noise; the same for every worker. ``split`` > 0 draws other (held-out)
    samples of the same classes."""
    g = torch.Generator().manual_seed(seed)
    templates = torch.randn(classes, channels, side, side, generator=g)
    if split:
        g = torch.Generator().manual_seed(seed + split)
    targets = torch.randint(0, classes, (size,), generator=g)
    inputs = templates[targets] + 0.5 * torch.randn(size, channels, side, side, generator=g)
    return TensorBatchDataset(inputs, targets)


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Cross-entropy summed over the batch (the agent divides by the global sample count)."""
    x, y = batch
    return F.cross_entropy(model(x), y, reduction="sum")


def accuracy(model: nn.Module, data: TensorBatchDataset) -> float:
    """Top-1 accuracy on ``data`` (the validation metric the job reports at each epoch end)."""
    model.eval()
    with torch.no_grad():
        x, y = data.batch(range(len(data)))
        acc = float((model(x).argmax(1) == y).float().mean())
    model.train()
    return acc


def train_loop(model: nn.Module, optimizer: torch.optim.Optimizer, data: TensorBatchDataset, batch_size: int,
               epochs: int, model_name: str) -> AgentResult | None:
    """The same training in a loop of the script's own (the user-loop API): a standard ``DataLoader``
    over a ``TensorDataset``, a mean loss, and ``world.step`` after each optimizer step."""
    world = slurm_elastic_launcher.init()
    model = world.wrap(model.to(world.device))
    loader = world.loader(torch.utils.data.TensorDataset(data.inputs, data.targets), batch_size=batch_size)
    world.register(model=model, optimizer=optimizer, model_name=model_name)
    for _ in world.epochs(epochs):
        for x, y in loader:
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x.to(world.device)), y.to(world.device))
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            world.step(loss.detach())
    return world.result


def main(argv: Sequence[str] | None = None) -> int:
    """Build the job from the command line and run it under the agent."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", choices=("cnn", "resnet18"), default="cnn")
    ap.add_argument("--dataset-size", type=int, default=2048)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--val-size", type=int, default=256, help="held-out samples for the accuracy (0: none)")
    ap.add_argument("--api", choices=("run", "loop"), default="run", help="run(ElasticJob) or a loop of its own")
    ap.add_argument("--batch-size", type=int, default=8, help="--api loop: each worker's batch at the start")
    ap.add_argument("--epochs", type=int, default=1, help="--api loop: epochs to train")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    if args.model == "cnn":
        model: nn.Module = SmallCNN()
        shape = (1, 16, 10)
        data = synthetic(args.dataset_size, *shape)
        optimizer: torch.optim.Optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    else:
        model = ResNet18()
        shape = (3, 32, 1000)
        data = synthetic(args.dataset_size, *shape)
        optimizer = torch.optim.Adam(model.parameters(), lr=args.lr / 50)
    if args.api == "loop":
        ended = train_loop(model, optimizer, data, args.batch_size, args.epochs, args.model)
        assert ended is not None  # the loop ran to its end: the worker is done, dropped or lost
        result = ended
    else:
        val = synthetic(args.val_size, *shape, split=1) if args.val_size > 0 else None
        evaluate = (lambda m: accuracy(m, val)) if val is not None else None
        result = run(ElasticJob(model=model, optimizer=optimizer, dataset=data, loss_fn=loss_fn, evaluate=evaluate,
                                model_name=args.model))
    print(json.dumps({"state": result.state.value, "steps": result.steps, "epoch": result.epoch}), flush=True)
    if result.state is AgentState.LEFT:
        # Dropped by a shrink, with nothing left to do: exit now rather than tear the interpreter
        # down object by object, which on a shared node takes CPU from the workers that stay.
        sys.stderr.flush()
        os._exit(0)
    return 3 if result.state is AgentState.FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
