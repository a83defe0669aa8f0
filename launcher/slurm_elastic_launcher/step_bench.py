"""Benchmark of a training step: plain ``DistributedDataParallel`` against the launcher, in one run.

This module owns :func:`bench_step` and the worker it starts (``python -m
slurm_elastic_launcher.step_bench``). The same worker processes train two copies of the same model on
the same synthetic batches, on the launcher's own process group: one under DDP, one under the
launcher's user-loop API (:mod:`.user_loop`: the wrapped model, the elastic loader, its step
boundary), in :data:`BLOCKS` alternating blocks of steps after a warm-up of each. Alternating blocks
pair the two under the same conditions, so a machine that drifts during the run (these machines
are noisy: two DDP phases a minute apart differed by up to 45 %) counts against neither. The figures
are the medians of rank 0's timed steps, overall and per block. It prints nothing and parses no
arguments (the controller's CLI wires it).

It also measures the launcher's own step boundary, the part DDP does not have:

* ``boundary_ops``: the torch operators the launcher launches per step in its profiler ranges
  (:data:`.grad_reducer.BOUNDARY`: finishing the step's collectives at the end of backward, and
  ``world.step()``), counted with ``torch.profiler`` over :data:`PROFILED_STEPS` steps in a run of
  worker processes of their own (the profiler never runs where steps are timed). Only operators
  called from the launcher's own code count, not those they call in turn; on a GPU each is at least
  one kernel launch or collective. The gradients' copies into their buckets during backward are not
  counted (DDP makes the same copies).
* ``boundary_ms``: the median host time of ``world.step()``, in milliseconds.
"""

from __future__ import annotations

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
"""Steps of the launcher run under ``torch.profiler`` to count ``boundary_ops``."""

BLOCKS = 5
"""Alternating blocks of DDP's and the launcher's timed steps."""


def bench_step(model: str = "resnet18", workers: int = 2, steps: int = 20, warmup: int = 5, batch: int = 32,
               dist_backend: str = "auto") -> dict[str, Any]:
    """Step time under DDP and under the launcher, same model, batch and world, in the same run.

    Args:
        model: ``"resnet18"`` (11.7M parameters in 62 tensors, 32×32 inputs, 1000 classes),
            ``"resnet50"`` (25.6M in 161 tensors) or ``"cnn"`` (5k parameters in 8 tensors, 16×16
            inputs: a step of a few to tens of milliseconds on CPU cores, where a fixed cost shows).
        workers: worker processes (the world size; each takes GPU ``rank % GPUs`` when CUDA is there).
        steps: timed steps of each (DDP, the launcher), in :data:`BLOCKS` blocks.
        warmup: untimed steps of each first.
        batch: per-worker batch.
        dist_backend: ``auto`` (NCCL with CUDA, else gloo), ``gloo`` or ``nccl`` (workers sharing one
            GPU need gloo: NCCL refuses two ranks on one device).

    Returns:
        ``ddp_step_s``, ``elastic_step_s`` (medians), ``overhead`` (elastic ÷ DDP − 1) and
        ``overhead_by_block``, ``boundary_ops`` (with their names), ``boundary_ms``, the device, the
        collectives' library and torch's version.

    Raises:
        ValueError: on bad arguments.
        RuntimeError: if a worker fails.
    """
    if model not in MODELS or workers < 1 or steps < 3 or warmup < 1 or batch < 1 or \
            dist_backend not in ("auto", "gloo", "nccl"):
        raise ValueError(f"bench_step(model={model!r}, workers={workers}, steps={steps}, warmup={warmup}, "
                         f"batch={batch}, dist_backend={dist_backend!r}): model one of {MODELS}, workers ≥ 1, "
                         "steps ≥ 3, warmup ≥ 1, batch ≥ 1, dist_backend auto|gloo|nccl")
    timed = _run_workers("time", model, workers, steps, warmup, batch, dist_backend)
    counted = _run_workers("ops", model, workers, steps, warmup, batch, dist_backend)  # a run of its own:
    # the profiler never runs in the processes that are timed (on an H200 the DDP phase after it ran 45% slower)
    out = {**timed, **{k: counted[k] for k in ("boundary_ops", "boundary_op_names")}}
    return {
        "model": model, "workers": workers, "batch": batch, "steps": steps, **out,
        "ddp_step_s": out["ddp_s"], "elastic_step_s": out["elastic_s"],
        "overhead": round(out["elastic_s"] / out["ddp_s"] - 1, 4),
    }


def _run_workers(mode: str, model: str, workers: int, steps: int, warmup: int, batch: int,
                 dist_backend: str) -> dict[str, Any]:
    """Start the workers (``mode``: ``time`` the phases, or count the boundary's ``ops``); rank 0's figures."""
    from .resize_bench import free_port  # the resize bench's helper: a free TCP port on this machine

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
            argv = [sys.executable, "-m", "slurm_elastic_launcher.step_bench", mode, model, str(rank), str(workers),
                    str(steps), str(warmup), str(batch), str(Path(tmp) / f"{rank}.json")]
            procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
        errors = [p.communicate(timeout=900)[1] for p in procs]
        for rank, p in enumerate(procs):
            if p.returncode != 0:
                raise RuntimeError(f"step bench worker {rank} ({mode}) exited {p.returncode}:\n{errors[rank][-3000:]}")
        out: dict[str, Any] = json.loads((Path(tmp) / "0.json").read_text())
    return out


# -- the worker ---------------------------------------------------------------------------------


def worker_main(argv: Sequence[str]) -> int:
    """One worker: DDP's and the launcher's steps in alternating blocks (``time``), or the launcher's
    steps under the profiler (``ops``); rank 0 writes the figures."""
    import torch
    import torch.nn.functional as F  # noqa: N812
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, TensorDataset

    from . import init
    from .examples.train_cnn import ResNet18, ResNet50, SmallCNN

    mode, model_name, rank_s, world_s, steps_s, warmup_s, batch_s, out = argv
    rank, world, steps, warmup, batch = int(rank_s), int(world_s), int(steps_s), int(warmup_s), int(batch_s)
    elastic = init()
    device = elastic.device
    if device.type == "cpu":  # the workers share the cores: more threads than cores only adds noise
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    per_block = -(-steps // BLOCKS)
    shape, classes = ((1, 16, 16), 10) if model_name == "cnn" else ((3, 32, 32), 1000)
    g = torch.Generator().manual_seed(rank)
    n = batch * (warmup + max(per_block * BLOCKS, PROFILED_STEPS) + 2) * world
    data = TensorDataset(torch.randn(n, *shape, generator=g), torch.randint(0, classes, (n,), generator=g))

    def build() -> torch.nn.Module:
        torch.manual_seed(0)
        return {"resnet18": ResNet18, "resnet50": ResNet50, "cnn": SmallCNN}[model_name]().to(device)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def timed(step: Any, k: int, times: list[float] | None) -> None:
        for _ in range(k):
            t0 = time.perf_counter()
            step()
            sync()
            if times is not None:
                times.append(time.perf_counter() - t0)

    def sgd(model: torch.nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def trainer(model: torch.nn.Module, opt: torch.optim.Optimizer, batches: Any, boundary: Any) -> Any:
        def step() -> None:
            x, y = next(batches)
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x.to(device, non_blocking=True)), y.to(device, non_blocking=True))
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()
            boundary()

        return step

    boundary_s: list[float] = []

    def elastic_boundary() -> None:
        t0 = time.perf_counter()
        elastic.step()
        boundary_s.append(time.perf_counter() - t0)

    model = elastic.wrap(build())
    opt = sgd(model)
    loader = elastic.loader(data, batch_size=batch)
    elastic.register(model=model, optimizer=opt)
    elastic.start()
    elastic_step = trainer(model, opt, iter(loader), elastic_boundary)
    try:
        if mode == "ops":
            timed(elastic_step, warmup + 1, None)
            counted = _boundary_ops(elastic_step, sync)
            if rank == 0:
                Path(out).write_text(json.dumps(counted))
            return 0
        # DDP in the same processes, on the launcher's own group (the same collectives library)
        ddp = DistributedDataParallel(build(), device_ids=[device.index] if device.type == "cuda" else None,
                                      process_group=elastic.group)
        ddp_step = trainer(ddp, sgd(ddp), iter(DataLoader(data, batch_size=batch)), lambda: None)
        timed(ddp_step, warmup, None)
        timed(elastic_step, warmup, None)
        del boundary_s[:]
        ddp_s: list[float] = []
        elastic_s: list[float] = []
        for _ in range(BLOCKS):
            timed(ddp_step, per_block, ddp_s)
            timed(elastic_step, per_block, elastic_s)
    finally:
        elastic.close()
    if rank == 0:
        cut = [slice(b * per_block, (b + 1) * per_block) for b in range(BLOCKS)]
        blocks = [round(statistics.median(elastic_s[c]) / statistics.median(ddp_s[c]) - 1, 4) for c in cut]
        Path(out).write_text(json.dumps({
            "ddp_s": round(statistics.median(ddp_s), 5), "elastic_s": round(statistics.median(elastic_s), 5),
            "overhead_by_block": blocks, "boundary_ms": round(statistics.median(boundary_s) * 1e3, 4),
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "dist_backend": elastic.backend.dist_backend, "threads": torch.get_num_threads(),
            "torch": torch.__version__,
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
