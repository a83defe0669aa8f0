"""What a DDP script sees of the elastic world (issue 36): a joiner's epoch is the job's from its first
batch, and a snapshot of the script's own that a joiner writes as the new rank 0 names the right
epoch; the loader takes the sampler arguments DDP scripts pass; RANK and WORLD_SIZE are set from
``init()`` on and kept current."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.launcher

SAMPLES = 96  # 2 workers x batch 4: 12 steps an epoch, 8 at 3 workers

SCRIPT = textwrap.dedent('''
    import json, os, sys, time
    import torch
    from torch.utils.data import TensorDataset
    import slurm_elastic_launcher
    out = open(sys.argv[1], "a", buffering=1)
    def log(**rec):
        out.write(json.dumps(rec) + "\\n")
    world = slurm_elastic_launcher.init()
    log(ev="init", rank=os.environ.get("RANK"), world_size=os.environ.get("WORLD_SIZE"))
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = TensorDataset(torch.randn(96, 4), torch.randint(0, 2, (96,)))
    model = world.wrap(model)
    loader = world.loader(data, batch_size=4)
    world.register(model=model, optimizer=opt)
    for epoch in world.epochs(100000):
        for x, y in loader:
            log(ev="batch", label=epoch, epoch=world.epoch, rank=world.rank,
                env_rank=os.environ.get("RANK"))
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            time.sleep(0.03)
            world.step()
        if world.is_main and world.training:
            torch.save({"EPOCHS_RUN": epoch}, sys.argv[2])   # the script's own snapshot
            log(ev="saved", label=epoch, epoch=world.epoch)
''')


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_joiner_sees_the_jobs_epoch_from_its_first_batch_and_its_snapshot_names_it(
        fake_job_factory: Any, tmp_path: Path) -> None:
    script = tmp_path / "loop.py"
    script.write_text(SCRIPT)
    logs = {w: tmp_path / f"{w}.loop.jsonl" for w in ("w0", "w1", "w2")}
    snaps = {w: tmp_path / f"{w}.snapshot.pt" for w in logs}
    job = fake_job_factory(dataset_size=SAMPLES, script=[str(script)])
    old, everyone = ["w0", "w1"], ["w0", "w1", "w2"]
    for w in old:  # the script's arguments are per worker
        job.script = [str(script), str(logs[w]), str(snaps[w])]
        job.start(w, old)
    job.wait_until("the job in its second epoch",
                   lambda: any(e["ev"] == "step" and e["epoch"] >= 1 for e in job.events("w0")), timeout=90)
    job.script = [str(script), str(logs["w2"]), str(snaps["w2"])]
    job.start("w2")
    grow = job.order("resize", everyone)
    job.wait_until("grown to 3", lambda: job.steps_in("w2", f"o{grow}") >= 2, timeout=90)
    job.order("resize", ["w2", "w0"])  # the joiner becomes rank 0 mid-epoch; w1 leaves
    job.wait_until("the joiner saved as rank 0",
                   lambda: any(r["ev"] == "saved" for r in records(logs["w2"])), timeout=90)
    job.order("stop")
    assert job.wait_exit(timeout=60) == {w: 0 for w in everyone}, {w: job.output(w)[-2000:] for w in everyone}

    mine = records(logs["w2"])
    batches = [r for r in mine if r["ev"] == "batch"]
    assert batches, mine
    assert batches[0]["label"] >= 1, "the joiner's first batch is labelled with the job's epoch, not 0"
    for r in batches:  # every batch, the warm-up first: the loop's epoch is the job's
        assert r["label"] == r["epoch"], r
    joined = [r for r in batches if r["rank"] >= 0]
    job_epochs = {e["epoch"] for e in job.events("w2") if e["ev"] == "step"}
    assert {r["label"] for r in joined} <= job_epochs
    saved = [r for r in mine if r["ev"] == "saved"]
    assert saved[0]["label"] + 1 == saved[0]["epoch"]  # the epoch that just ended
    import torch
    assert torch.load(snaps["w2"])["EPOCHS_RUN"] == saved[-1]["label"]
    # RANK and WORLD_SIZE from init() on, and current at each batch of a joined worker
    first = next(r for r in records(logs["w0"]) if r["ev"] == "init")
    assert (first["rank"], first["world_size"]) == ("0", "2")
    for w in everyone:
        for r in records(logs[w]):
            if r["ev"] == "batch" and r["rank"] >= 0:
                assert r["env_rank"] == str(r["rank"]), (w, r)


LOADER_ARGS = textwrap.dedent('''
    import sys, torch
    from torch.utils.data import TensorDataset, DistributedSampler, RandomSampler
    import slurm_elastic_launcher
    world = slurm_elastic_launcher.init()
    data = TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,)))
    case = sys.argv[1]
    try:
        if case == "distributed":
            loader = world.loader(data, batch_size=4, shuffle=False, pin_memory=True, sampler=DistributedSampler(data))
            loader.sampler.set_epoch(3)
        elif case == "shuffle":
            loader = world.loader(data, batch_size=4, shuffle=True)
            loader.sampler.set_epoch(0)
        elif case == "random":
            loader = world.loader(data, batch_size=4, sampler=RandomSampler(data))
        elif case == "unshuffled":
            loader = world.loader(data, batch_size=4, sampler=DistributedSampler(data, shuffle=False))
    except ValueError as exc:
        print("refused:", exc)
    else:
        print("accepted")
    import torch.distributed as dist
    world.close()
    dist.destroy_process_group()   # as a DDP script ends
    print("destroyed")
''')


@pytest.mark.parametrize(("case", "said"), [
    ("distributed", "accepted"),
    ("shuffle", "accepted"),
    ("random", "refused: world.loader(..., sampler=RandomSampler"),
    ("unshuffled", "refused: world.loader(..., sampler=DistributedSampler(shuffle=False)"),
])
def test_the_loader_takes_the_sampler_arguments_of_a_ddp_script(fake_job_factory: Any, tmp_path: Path,
                                                                 case: str, said: str) -> None:
    script = tmp_path / "args.py"
    script.write_text(LOADER_ARGS)
    job = fake_job_factory(dataset_size=16, script=[str(script), case])
    job.start("w0", ["w0"])
    assert job.wait_exit(timeout=60) == {"w0": 0}, job.output("w0")[-3000:]
    out = job.output("w0")
    assert said in out and "destroyed" in out, out[-3000:]
