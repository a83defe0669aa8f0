"""The step boundary: no per-tensor cost (issue 35), and a rollback point that needs no copy.

A lost peer is seen while the step's collectives finish, before the optimizer may step: the
parameters, the optimizer and (from the reducer's one copy per dtype) the buffers then still hold the
last boundary's state, and the guarded ``optimizer.step()`` of the user's loop does nothing.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

pytestmark = pytest.mark.launcher

LOST_PEER = r'''
import datetime as dt, hashlib, json, os, sys
import torch, torch.distributed as dist
from slurm_elastic_launcher.grad_reducer import GradReducer
from slurm_elastic_launcher.user_loop import _skip_step_after_a_lost_peer
rank, port = int(sys.argv[1]), int(sys.argv[2])
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                        timeout=dt.timedelta(seconds=5))
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
reducer = GradReducer(model, lambda: None, bucket_bytes=256, first_bucket_bytes=64, control_words=3)
_skip_step_after_a_lost_peer(opt, lambda: reducer.failed)
def digest():
    h = hashlib.sha256()
    for t in [*model.state_dict().values(), *[s for st in opt.state.values() for s in st.values()]]:
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()
def step(k):
    x = torch.randn(6, 8, generator=torch.Generator().manual_seed(10 * k + rank))
    opt.zero_grad(set_to_none=True)
    reducer.arm(0.5, [k, 0, rank])
    loss = torch.nn.functional.mse_loss(model(x), torch.zeros(6, 4))
    if rank == 1 and k == 2:
        os._exit(0)  # gone after its forward, before the step's collectives: rank 0's fail
    loss.backward()
    opt.step()
for k in range(2):
    step(k)
    assert reducer.failure is None and reducer.decided == [2 * k, 0, 1], reducer.decided  # summed
boundary = digest()
step(2)
print(json.dumps({"failure": reducer.failure, "failed": reducer.failed, "kept": digest() == boundary,
                  "buffers_are_views": {b.untyped_storage().data_ptr() for b in model.buffers()} ==
                                       {fb.flat.data_ptr() for fb in reducer.buffers}}),
      flush=True)
os._exit(0)
'''


def test_a_peer_lost_in_the_step_leaves_the_last_boundary_state_without_a_copy_of_it(start_ranks: Any) -> None:
    """Rank 1 dies in the step: rank 0's collectives fail, the forward's change to the BatchNorm
    buffers is undone, and its guarded optimizer step leaves the parameters and momentum as they were."""
    procs = start_ranks(LOST_PEER, 2)
    out, err = procs[0].communicate(timeout=120)
    procs[1].communicate(timeout=30)
    assert procs[0].returncode == 0, err[-3000:]
    rec = json.loads(out.strip().splitlines()[-1])
    assert rec["failed"] and "failed" in rec["failure"], rec
    assert rec["kept"], "the parameters, momentum or buffers moved in a step whose collectives failed"
    assert rec["buffers_are_views"], "the buffers are not views of the reducer's flat tensors"


def test_the_boundary_launches_the_same_few_operators_for_8_and_for_62_tensors() -> None:
    """``bench step``'s boundary_ops: no per-tensor term (cnn: 8 parameter tensors and 3 buffers;
    ResNet-18: 62 and 60), and at most 16 (issue 35)."""
    pytest.importorskip("torch")
    from slurm_elastic_launcher.step_bench import bench_step

    small = bench_step(model="cnn", workers=1, steps=3, warmup=1, batch=2)
    large = bench_step(model="resnet18", workers=1, steps=3, warmup=1, batch=1)
    assert small["boundary_ops"] == large["boundary_ops"] <= 16, (small, large)
    assert small["boundary_op_names"] == large["boundary_op_names"]
    assert small["boundary_ms"] > 0 and small["torch"] and small["device"]


def test_a_buffer_changed_in_place_in_forward_leaves_the_others_fit_for_backward() -> None:
    """The reducer's buffers share one flat tensor but not a version counter: a module that updates
    its own buffer in place in forward (an EMA) must not make autograd refuse the BatchNorm statistics
    saved before it (views of one base share one counter: backward failed on ResNet-18 that way)."""
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    from slurm_elastic_launcher.grad_reducer import GradReducer
    from slurm_elastic_launcher.resize_bench import free_port

    class Ema(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("ema", torch.zeros(3))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.ema.mul_(0.9).add_(x.detach().mean())
            return x

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 3, 3), torch.nn.BatchNorm2d(3), Ema(), torch.nn.Conv2d(3, 3, 3),
                                torch.nn.BatchNorm2d(3), Ema(), torch.nn.Flatten(), torch.nn.Linear(3 * 4 * 4, 4))
    store = dist.TCPStore("127.0.0.1", free_port(), 1, is_master=True)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        reducer = GradReducer(model, lambda: None, control_words=3)
        for step in range(3):
            reducer.arm(1.0, [step, 0, 1])
            torch.nn.functional.cross_entropy(model(torch.randn(2, 3, 8, 8)), torch.tensor([1, 2])).backward()
            assert reducer.failure is None and reducer.decided == [step, 0, 1]
        assert int(model[1].num_batches_tracked) == 3
        flats = {fb.flat.data_ptr() for fb in reducer.buffers}
        assert {b.untyped_storage().data_ptr() for b in model.buffers()} == flats
        torch.save(model.state_dict(), io.BytesIO())  # the user's own snapshot still saves
    finally:
        dist.destroy_process_group()
