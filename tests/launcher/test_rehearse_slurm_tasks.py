"""``slurm-elastic rehearse`` gives each worker the task variables ``srun`` gives it in a job of
``slurm-elastic submit``: a script written for Slurm (it reads ``SLURM_PROCID``, ``SLURM_NTASKS``,
``SLURM_GPUS_ON_NODE`` before it makes its process group, as Princeton's DDP tutorial does) rehearses
as it will run, instead of failing on a ``KeyError`` the real job would not raise."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from slurm_elastic.cli import main
from slurm_elastic.rehearse.driver import _joiner_tasks, srun_task_variables
from slurm_elastic.rehearse.sequence import parse

pytestmark = pytest.mark.launcher

SLURM_STYLE = textwrap.dedent('''
    import os
    import torch
    from torch.utils.data import DistributedSampler, TensorDataset
    import slurm_elastic_launcher.ddp as dist
    from slurm_elastic_launcher.ddp import DistributedDataParallel as DDP, world

    rank = int(os.environ["SLURM_PROCID"])
    world_size = int(os.environ["SLURM_NTASKS"])
    gpus_per_node = int(os.environ["SLURM_GPUS_ON_NODE"])
    assert gpus_per_node == torch.cuda.device_count()
    print("task", rank, "of", world_size, "local", os.environ["SLURM_LOCALID"], flush=True)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(256, 4), torch.randint(0, 2, (256,)))
    model = DDP(torch.nn.Linear(4, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = world.loader(data, batch_size=8, sampler=DistributedSampler(data, num_replicas=world_size, rank=rank))
    world.register(model=model, optimizer=opt)
    for epoch in world.epochs(3):
        for x, y in loader:
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            world.step(loss)
    dist.destroy_process_group()
''')


def test_a_script_that_reads_srun_task_variables_rehearses(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    script = tmp_path / "slurm_style.py"
    script.write_text(SLURM_STYLE)
    work = tmp_path / "work"
    rc = main(["rehearse", "--sequence", "2,+1", "--pace", "0.05", "--timeout", "90", "--no-baseline", "--json",
               "--workdir", str(work), "--", sys.executable, str(script)])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["passed"], json.dumps(out, indent=1)
    said = {w: (work / "elastic" / f"r0.{w}.out").read_text() for w in ("w0", "w1", "w2")}
    assert "task 0 of 2 local 0" in said["w0"] and "task 1 of 2 local 1" in said["w1"], said
    assert "task 0 of 1 local 0" in said["w2"], said  # the joiner: task 0 of its grow's one-task srun


def test_the_joiners_of_one_grow_are_the_tasks_of_one_srun() -> None:
    assert _joiner_tasks(parse("1,+2,-1,+1,requeue,+3").actions) == [(0, 2), (1, 2), (0, 1)]
    assert _joiner_tasks(parse("2,kill").actions) == []
    env = srun_task_variables(1, 3, 0)
    assert (env["SLURM_PROCID"], env["SLURM_LOCALID"], env["SLURM_NTASKS"], env["SLURM_GPUS_ON_NODE"]) == \
        ("1", "1", "3", "0")
    assert "SLURM_CPUS_PER_TASK" not in env  # submit's job asks for no --cpus-per-task
    with_cpus = srun_task_variables(0, 2, 0, cpus_per_task=4)  # submit --cpus-per-task 4
    assert (with_cpus["SLURM_CPUS_PER_TASK"], with_cpus["OMP_NUM_THREADS"]) == ("4", "4")
