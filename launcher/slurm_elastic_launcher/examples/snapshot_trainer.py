"""A DDP script in the style of PyTorch's DDP tutorials, ported through :mod:`slurm_elastic_launcher.ddp`.

It is what such a script does: a ``Trainer`` class that reads ``LOCAL_RANK`` once in its
``__init__``, argparse, its own snapshot every ``save_every`` epochs and its resume from it, a
``DistributedSampler`` beside ``shuffle=False``, ``set_epoch``, ``init_process_group`` and
``destroy_process_group``. The lines marked ``# elastic`` are the port (the two imports count as
changed: they were ``torch.distributed``'s and ``torch.nn.parallel``'s). The data is a seeded
regression problem, so every worker, a joiner too, builds the same one.

    python -m slurm_elastic_launcher.examples.snapshot_trainer TOTAL_EPOCHS SAVE_EVERY [--batch_size N]
        [--samples N] [--snapshot_path PATH]

Run it with ``slurm-elastic rehearse -- python snapshot_trainer.py 3 1`` locally, or submit it.
"""

import argparse
import os
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812
from torch.utils.data import DistributedSampler, TensorDataset

from slurm_elastic_launcher.ddp import DistributedDataParallel as DDP  # elastic  # noqa: N817
from slurm_elastic_launcher.ddp import destroy_process_group, init_process_group, world  # elastic


def ddp_setup() -> None:
    init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")


class Trainer:
    def __init__(self, model: torch.nn.Module, train_data: Any, optimizer: torch.optim.Optimizer, save_every: int,
                 snapshot_path: str) -> None:
        self.local_rank = int(os.environ["LOCAL_RANK"])
        self.device = torch.device("cuda", self.local_rank) if torch.cuda.is_available() else torch.device("cpu")
        self.model: Any = model.to(self.device)
        self.train_data = train_data
        self.optimizer = optimizer
        self.save_every = save_every
        self.epochs_run = 0
        self.snapshot_path = snapshot_path
        if os.path.exists(snapshot_path):
            self._load_snapshot(snapshot_path)
        self.model = DDP(self.model, device_ids=[self.local_rank] if torch.cuda.is_available() else None)
        world.register(model=self.model, optimizer=self.optimizer)  # elastic

    def _load_snapshot(self, path: str) -> None:
        snapshot = torch.load(path, map_location=self.device, weights_only=True)
        self.model.load_state_dict(snapshot["MODEL_STATE"])
        self.epochs_run = snapshot["EPOCHS_RUN"]
        print(f"Resuming training from snapshot at epoch {self.epochs_run}", flush=True)

    def _run_batch(self, source: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        self.optimizer.zero_grad()
        loss = F.mse_loss(self.model(source), targets)
        loss.backward()  # type: ignore[no-untyped-call]
        self.optimizer.step()
        world.step(loss)  # elastic
        return loss

    def _run_epoch(self, epoch: int) -> None:
        self.train_data.sampler.set_epoch(epoch)
        for source, targets in self.train_data:
            loss = self._run_batch(source.to(self.device), targets.to(self.device))
        print(f"[LOCAL_RANK {self.local_rank}] epoch {epoch} | last loss {loss.item():.4f}", flush=True)

    def _save_snapshot(self, epoch: int) -> None:
        torch.save({"MODEL_STATE": self.model.module.state_dict(), "EPOCHS_RUN": epoch + 1}, self.snapshot_path)
        print(f"Epoch {epoch} | Training snapshot saved at {self.snapshot_path}", flush=True)

    def train(self, max_epochs: int) -> None:
        for epoch in world.epochs(max_epochs, start=self.epochs_run):  # elastic
            self._run_epoch(epoch)
            if world.is_main and (epoch + 1) % self.save_every == 0:  # elastic
                self._save_snapshot(epoch)


def load_train_objs(samples: int) -> tuple[TensorDataset, torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    x = torch.randn(samples, 20)
    y = x @ torch.linspace(-1, 1, 20).unsqueeze(1) + 0.1 * torch.randn(samples, 1)
    model = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    return TensorDataset(x, y), model, torch.optim.SGD(model.parameters(), lr=0.01)


def prepare_dataloader(dataset: TensorDataset, batch_size: int) -> Any:
    return world.loader(dataset, batch_size=batch_size, shuffle=False, sampler=DistributedSampler(dataset))  # elastic


def main(save_every: int, total_epochs: int, batch_size: int, samples: int, snapshot_path: str) -> None:
    ddp_setup()
    dataset, model, optimizer = load_train_objs(samples)
    train_data = prepare_dataloader(dataset, batch_size)
    Trainer(model, train_data, optimizer, save_every, snapshot_path).train(total_epochs)
    destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="a DDP-tutorial-style training job, elastic")
    parser.add_argument("total_epochs", type=int, help="total epochs to train the model")
    parser.add_argument("save_every", type=int, help="how often to save a snapshot (epochs)")
    parser.add_argument("--batch_size", default=32, type=int, help="input batch size on each device")
    parser.add_argument("--samples", default=2048, type=int, help="samples in the data set")
    parser.add_argument("--snapshot_path", default="snapshot.pt", help="the script's own snapshot")
    args = parser.parse_args()
    main(args.save_every, args.total_epochs, args.batch_size, args.samples, args.snapshot_path)
