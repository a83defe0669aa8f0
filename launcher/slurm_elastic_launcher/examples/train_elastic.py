"""The ddp_train.py example ported to the launcher: the "after" of the porting guide.

The same script with 13 lines added or changed and 16 removed (``docs/launcher.md`` shows the
diff): the job's world is joined by ``slurm_elastic_launcher.init()``, the model wrapped by
``world.wrap``, the data served by ``world.loader`` from the same ``Dataset`` and ``DataLoader``
arguments, the state registered once, and each step ends with ``world.step``. The daemon may then
grow and shrink it in place at any step, and SIGTERM (preemption, time limit) checkpoints it to
``SLURM_ELASTIC_CHECKPOINT`` for a requeue.
"""

import argparse
import os
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn
from torch.utils.data import Dataset

import slurm_elastic_launcher


class NpyFolder(Dataset):
    """Samples stored one per file: ``ROOT/<class>/<n>.npy``; the class is the folder's index."""

    def __init__(self, root):
        classes = sorted(p.name for p in Path(root).iterdir() if p.is_dir())
        self.files = [(f, c) for c, name in enumerate(classes) for f in sorted((Path(root) / name).glob("*.npy"))]

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        path, label = self.files[i]
        return torch.from_numpy(np.load(path)), label


class Net(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.head = nn.Linear(32, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        return self.head(F.adaptive_avg_pool2d(F.relu(self.conv2(x)), 1).flatten(1))


class Trainer:
    def __init__(self, model, optimizer, device):
        self.model, self.optimizer, self.device = model, optimizer, device
        self.steps = 0

    def train_step(self, x, y):
        x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
        self.optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(self.model(x), y)
        loss.backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), 5.0)
        self.optimizer.step()
        self.steps += 1
        return loss.detach()

    def state_dict(self):
        return {"steps": self.steps}

    def load_state_dict(self, state):
        self.steps = state["steps"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--checkpoint", default="")
    args = ap.parse_args()

    world = slurm_elastic_launcher.init()
    device = world.device
    torch.manual_seed(0)
    model = world.wrap(Net().to(device))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    trainer = Trainer(model, optimizer, device)
    dataset = NpyFolder(args.data)
    loader = world.loader(dataset, batch_size=args.batch_size, num_workers=args.workers,
                          pin_memory=torch.cuda.is_available())
    world.register(model=model, optimizer=optimizer, scheduler=scheduler, trainer=trainer)
    start_epoch = 0
    if args.checkpoint and os.path.exists(args.checkpoint):
        state = torch.load(args.checkpoint, map_location=device)
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        trainer.load_state_dict(state["trainer"])
        start_epoch = state["epoch"] + 1

    for epoch in world.epochs(args.epochs, start=start_epoch):
        for x, y in loader:
            loss = trainer.train_step(x, y)
            world.step(loss)
            if world.is_main and trainer.steps % 20 == 0:
                print(f"epoch {epoch} step {trainer.steps} loss {loss.item():.3f}", flush=True)
        scheduler.step()
        if world.is_main and args.checkpoint:
            torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(),
                        "scheduler": scheduler.state_dict(), "trainer": trainer.state_dict(), "epoch": epoch},
                       args.checkpoint)


if __name__ == "__main__":
    main()
