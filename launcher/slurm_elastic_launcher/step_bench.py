"""Benchmark of a training step: plain ``DistributedDataParallel`` against the launcher, in one run.

This module owns :func:`bench_step` and the worker it starts (``python -m
slurm_elastic_launcher.step_bench``). The same worker processes train the same model on the same
synthetic batches three times: under DDP, under the launcher's user-loop API (:mod:`.user_loop`:
the wrapped model, the elastic loader, a step boundary with its commit, control words and buffers),
and under DDP again; the DDP figure is the mean of its two phases, so a machine that drifts during
the run does not count against either side. Each phase's step time is the median of rank 0's timed
steps after warm-up. It prints nothing and parses no arguments (the controller's CLI wires it).

It also measures the launcher's own step boundary, the part DDP does not have:

* ``boundary_ops``: the torch operators the launcher launches per step in its profiler ranges
  (:data:`.grad_reducer.BOUNDARY`: finishing the step's collectives at the end of backward, and
  ``world.step()``), counted with ``torch.profiler`` over :data:`PROFILED_STEPS` steps after the
  timed ones. Only operators called from the launcher's own code count, not those they call in
  turn; on a GPU each is at least one kernel launch or collective. The gradients' copies into their
  buckets during backward are not counted (DDP makes the same copies).
* ``boundary_ms``: the median host time of ``world.step()``, in milliseconds.
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

MODELS = ("resnet18", "resnet50", "cnn")

PROFILED_STEPS = 4
"""Steps of the launcher's phase run under ``torch.profiler`` to count ``boundary_ops``."""


def bench_step(model: str = "resnet18", workers: int = 2, steps: int = 20, warmup: int = 5, batch: int = 32,
               dist_backend: str = "auto") -> dict[str, Any]:
    """Step time under DDP and under the launcher, same model, batch and world, in the same run.

    Args:
        model: ``"resnet18"`` (11.7M parameters in 62 tensors, 32×32 inputs, 1000 classes),
            ``"resnet50"`` (25.6M in 161 tensors) or ``"cnn"`` (5k parameters in 8 tensors, 16×16
            inputs: a step of a few to tens of milliseconds on CPU cores, where a fixed cost shows).
        workers: worker processes (the world size; each takes GPU ``rank % GPUs`` when CUDA is there).
        steps: timed steps per phase.
        warmup: untimed steps first, per phase.
        batch: per-worker batch.
        dist_backend: ``auto`` (NCCL with CUDA, else gloo), ``gloo`` or ``nccl`` (workers sharing one
            GPU need gloo: NCCL refuses two ranks on one device).

    Returns:
        ``ddp_step_s``, ``elastic_step_s``, ``overhead`` (elastic ÷ DDP − 1), each phase's median,
        ``boundary_ops`` (with their names), ``boundary_ms``, the device, the collectives' library
        and torch's version.

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
        store_port = free_port()
        secret = os.urandom(16).hex()
        names = [f"w{r}" for r in range(workers)]
        procs = []
        for rank in range(workers):
            env = dict(os.environ)
            env.pop("SLURM_LOCALID", None)  # run under srun, the workers are one task: LOCAL_RANK picks the GPU
            env.update(
                SLURM_ELASTIC_JOB_ID="step-bench", SLURM_ELASTIC_SECRET=secret,
                SLURM_ELASTIC_STORE_PORT=str(store_port),
                SLURM_ELASTIC_STORE_SERVE="1" if rank == 0 else "0", SLURM_ELASTIC_WORKER_ID=names[rank],
                SLURM_ELASTIC_WORKERS=",".join(names), SLURM_ELASTIC_GROUP_TIMEOUT_S="120",
                SLURM_ELASTIC_DIST_BACKEND=dist_backend, LOCAL_RANK=str(rank),
            )
            env.setdefault("GLOO_SOCKET_IFNAME", "lo")
            argv = [sys.executable, "-m", "slurm_elastic_launcher.step_bench", model, str(rank), str(workers),
                    str(steps), str(warmup), str(batch), str(Path(tmp) / f"{rank}.json")]
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
    from torch._C._distributed_c10d import PrefixStore
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import TensorDataset

    from . import init
    from .examples.train_cnn import ResNet18, ResNet50, SmallCNN

    model_name, rank_s, world_s, steps_s, warmup_s, batch_s, out = argv
    rank, world, steps, warmup, batch = int(rank_s), int(world_s), int(steps_s), int(warmup_s), int(batch_s)
    elastic = init()
    device = elastic.device
    backend_name = elastic.backend.dist_backend
    if device.type == "cpu":  # the workers share the cores: more threads than cores only adds noise
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    shape, classes = ((1, 16, 16), 10) if model_name == "cnn" else ((3, 32, 32), 1000)
    g = torch.Generator().manual_seed(rank)
    n = batch * (warmup + steps + PROFILED_STEPS + 1) * world
    data = TensorDataset(torch.randn(n, *shape, generator=g), torch.randint(0, classes, (n,), generator=g))

    def build() -> torch.nn.Module:
        torch.manual_seed(0)
        return {"resnet18": ResNet18, "resnet50": ResNet50, "cnn": SmallCNN}[model_name]().to(device)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def ddp_phase(name: str) -> float:  # rendezvous on the job's store, already up: no port to race for
        dist.init_process_group(backend_name, store=PrefixStore(f"{name}/", elastic.backend.store), rank=rank,
                                world_size=world,
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

    boundary_s: list[float] = []

    def elastic_phase() -> tuple[float, dict[str, Any]]:
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
            t0 = time.perf_counter()
            elastic.step()
            boundary_s.append(time.perf_counter() - t0)

        elastic.start()
        try:
            median = _median_step(step, steps, warmup, sync)
            timed = boundary_s[warmup:]
            return median, {"boundary_ms": round(statistics.median(timed) * 1e3, 4), **_boundary_ops(step, sync)}
        finally:
            elastic.close()

    first = ddp_phase("ddp1")
    mine, boundary = elastic_phase()
    second = ddp_phase("ddp2")
    if rank == 0:
        Path(out).write_text(json.dumps({
            "ddp_first_s": round(first, 5), "elastic_s": round(mine, 5), "ddp_second_s": round(second, 5),
            **boundary, "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "dist_backend": backend_name, "threads": torch.get_num_threads(), "torch": torch.__version__,
        }))
    return 0


def _boundary_ops(step: Any, sync: Any) -> dict[str, Any]:
    """The torch operators the launcher's boundary ranges launch per step (see the module docstring)."""
    import collections

    from torch.profiler import ProfilerActivity, profile

    from .grad_reducer import BOUNDARY

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(PROFILED_STEPS):
            step()
            sync()
    names = collections.Counter(e.name for e in prof.events()
                                if e.name != BOUNDARY and e.cpu_parent is not None and e.cpu_parent.name == BOUNDARY)
    total = sum(names.values())
    return {"boundary_ops": round(total / PROFILED_STEPS, 2),
            "boundary_op_names": {k: round(v / PROFILED_STEPS, 2) for k, v in sorted(names.items())}}


if __name__ == "__main__":
    sys.exit(worker_main(sys.argv[1:]))
