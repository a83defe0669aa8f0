"""Benchmark of a training step: plain ``DistributedDataParallel`` against the launcher, in one run.

This module owns :func:`bench_step` and the worker it starts (``python -m
slurm_elastic_launcher.step_bench``). The same worker processes train the same model on the same
synthetic batches three times: under DDP, under the launcher's user-loop API (:mod:`.user_loop`:
the wrapped model, the elastic loader, a step boundary with its commit, control words and buffers),
and under DDP again; the DDP figure is the mean of its two phases, so a machine that drifts during
the run does not count against either side. Each phase's step time is the median of rank 0's timed
steps after warm-up. It prints nothing and parses no arguments (the controller's CLI wires it).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

MODELS = ("resnet18", "cnn")


def bench_step(model: str = "resnet18", workers: int = 2, steps: int = 20, warmup: int = 5, batch: int = 32,
               dist_backend: str = "auto") -> dict[str, Any]:
    """Step time under DDP and under the launcher, same model, batch and world, in the same run.

    Args:
        model: ``"resnet18"`` (11.7M parameters, 32×32 inputs, 1000 classes) or ``"cnn"``.
        workers: worker processes (the world size; each takes GPU ``rank % GPUs`` when CUDA is there).
        steps: timed steps per phase.
        warmup: untimed steps first, per phase.
        batch: per-worker batch.
        dist_backend: ``auto`` (NCCL with CUDA, else gloo), ``gloo`` or ``nccl`` (workers sharing one
            GPU need gloo: NCCL refuses two ranks on one device).

    Returns:
        ``ddp_step_s``, ``elastic_step_s``, ``overhead`` (elastic ÷ DDP − 1), each phase's median,
        the device and the collectives' library.

    Raises:
        ValueError: on bad arguments.
        RuntimeError: if a worker fails.
    """
    if model not in MODELS or workers < 1 or steps < 3 or warmup < 1 or batch < 1 or \
            dist_backend not in ("auto", "gloo", "nccl"):
        raise ValueError(f"bench_step(model={model!r}, workers={workers}, steps={steps}, warmup={warmup}, "
                         f"batch={batch}, dist_backend={dist_backend!r}): model one of {MODELS}, workers ≥ 1, "
                         "steps ≥ 3, warmup ≥ 1, batch ≥ 1, dist_backend auto|gloo|nccl")
    from .bench import free_port  # the resize bench's helper: a free TCP port on this machine

    with tempfile.TemporaryDirectory(prefix="slurm-elastic-step-") as tmp:
        store_port, ddp_ports = free_port(), f"{free_port()},{free_port()}"
        secret = os.urandom(16).hex()
        names = [f"w{r}" for r in range(workers)]
        procs = []
        for rank in range(workers):
            env = dict(os.environ)
            env.update(
                SLURM_ELASTIC_JOB_ID="step-bench", SLURM_ELASTIC_SECRET=secret,
                SLURM_ELASTIC_STORE_PORT=str(store_port),
                SLURM_ELASTIC_STORE_SERVE="1" if rank == 0 else "0", SLURM_ELASTIC_WORKER_ID=names[rank],
                SLURM_ELASTIC_WORKERS=",".join(names), SLURM_ELASTIC_GROUP_TIMEOUT_S="120",
                SLURM_ELASTIC_DIST_BACKEND=dist_backend, LOCAL_RANK=str(rank),
            )
            env.setdefault("GLOO_SOCKET_IFNAME", "lo")
            argv = [sys.executable, "-m", "slurm_elastic_launcher.step_bench", model, str(rank), str(workers),
                    ddp_ports, str(steps), str(warmup), str(batch), str(Path(tmp) / f"{rank}.json")]
            procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
        errors = [p.communicate(timeout=900)[1] for p in procs]
        for rank, p in enumerate(procs):
            if p.returncode != 0:
                raise RuntimeError(f"step bench worker {rank} exited {p.returncode}:\n{errors[rank][-3000:]}")
        out = json.loads((Path(tmp) / "0.json").read_text())
    ddp = (out["ddp_first_s"] + out["ddp_second_s"]) / 2
    return {
        "model": model, "workers": workers, "batch": batch, "steps": steps, **out,
        "ddp_step_s": round(ddp, 5), "elastic_step_s": round(out["elastic_s"], 5),
        "overhead": round(out["elastic_s"] / ddp - 1, 4),
    }


# -- the worker ---------------------------------------------------------------------------------


def _median_step(step: Any, steps: int, warmup: int, sync: Any) -> float:
    times = []
    for k in range(warmup + steps):
        t0 = time.perf_counter()
        step()
        sync()
        if k >= warmup:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def worker_main(argv: Sequence[str]) -> int:
    """One worker: the DDP phase, the launcher phase, the DDP phase again; rank 0 writes the figures."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F  # noqa: N812
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import TensorDataset

    from . import init
    from .examples.train_cnn import ResNet18, SmallCNN

    model_name, rank_s, world_s, ports, steps_s, warmup_s, batch_s, out = argv
    rank, world, steps, warmup, batch = int(rank_s), int(world_s), int(steps_s), int(warmup_s), int(batch_s)
    elastic = init()
    device = elastic.device
    backend_name = elastic.backend.dist_backend
    shape, classes = ((3, 32, 32), 1000) if model_name == "resnet18" else ((1, 16, 16), 10)
    g = torch.Generator().manual_seed(rank)
    n = batch * (warmup + steps) * world
    data = TensorDataset(torch.randn(n, *shape, generator=g), torch.randint(0, classes, (n,), generator=g))

    def build() -> torch.nn.Module:
        torch.manual_seed(0)
        return (ResNet18() if model_name == "resnet18" else SmallCNN()).to(device)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def ddp_phase(port: str) -> float:  # a fresh port per phase: a TCPStore's port is not reused at once
        dist.init_process_group(backend_name, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                timeout=dt.timedelta(seconds=120))
        model = DistributedDataParallel(build(), device_ids=[device.index] if device.type == "cuda" else None)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        batches = iter(torch.utils.data.DataLoader(data, batch_size=batch))

        def step() -> None:
            x, y = next(batches)
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x.to(device, non_blocking=True)), y.to(device, non_blocking=True))
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()

        try:
            return _median_step(step, steps, warmup, sync)
        finally:
            dist.destroy_process_group()

    def elastic_phase() -> float:
        model = elastic.wrap(build())
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        loader = elastic.loader(data, batch_size=batch)
        elastic.register(model=model, optimizer=opt)
        batches = None

        def step() -> None:
            nonlocal batches
            if batches is None:
                batches = iter(loader)
            x, y = next(batches)
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x.to(device, non_blocking=True)), y.to(device, non_blocking=True))
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()
            elastic.step()

        elastic.start()
        try:
            return _median_step(step, steps, warmup, sync)
        finally:
            elastic.close()

    port1, port2 = ports.split(",")
    first = ddp_phase(port1)
    mine = elastic_phase()
    second = ddp_phase(port2)
    if rank == 0:
        Path(out).write_text(json.dumps({
            "ddp_first_s": round(first, 5), "elastic_s": round(mine, 5), "ddp_second_s": round(second, 5),
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "dist_backend": backend_name, "threads": torch.get_num_threads(),
        }))
    return 0


if __name__ == "__main__":
    sys.exit(worker_main(sys.argv[1:]))
