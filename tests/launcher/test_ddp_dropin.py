"""The drop-in names for a DDP script (issue 36, item 1: ``slurm_elastic_launcher.ddp``): the variables
``torchrun`` would set are set at import, the torch calls a DDP script makes are taken, and those the
launcher must refuse say the rule and the fix; a DDP-tutorial-style script ported through it
(``examples/snapshot_trainer.py``) grows and shrinks in place with every sample once, and its own
snapshot names the job's epochs."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytestmark = pytest.mark.launcher

torch = pytest.importorskip("torch")

from slurm_elastic_launcher import ddp  # noqa: E402
from slurm_elastic_launcher.user_loop import ElasticDataParallel  # noqa: E402

ENV = {"SLURM_ELASTIC_JOB_ID": "7", "SLURM_ELASTIC_SECRET": "s" * 16, "SLURM_ELASTIC_STORE_PORT": "1234",
       "SLURM_ELASTIC_WORKER_ID": "w1", "SLURM_ELASTIC_WORKERS": "w0,w1,w2"}


def test_importing_sets_what_torchrun_sets_for_an_initial_worker() -> None:
    environ = dict(ENV, LOCAL_RANK="1")
    ddp.torchrun_variables(environ, cuda_count=0)
    assert (environ["RANK"], environ["WORLD_SIZE"], environ["LOCAL_RANK"]) == ("1", "3", "1")


def test_a_joiner_gets_the_placeholder_groups_rank_and_size_until_it_joins() -> None:
    environ = dict(ENV, SLURM_ELASTIC_WORKERS="", SLURM_ELASTIC_JOIN="1", SLURM_ELASTIC_WORKER_ID="w9")
    ddp.torchrun_variables(environ, cuda_count=0)
    assert (environ["RANK"], environ["WORLD_SIZE"], environ["LOCAL_RANK"]) == ("0", "1", "0")


def test_outside_the_launcher_nothing_is_set() -> None:
    environ = {"PATH": "/bin"}
    ddp.torchrun_variables(environ, cuda_count=0)
    assert environ == {"PATH": "/bin"}


def test_a_rank_that_is_not_the_launchers_is_refused_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ddp, "_current", None)
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("SLURM_ELASTIC_JOIN", raising=False)
    with pytest.raises(ValueError, match=r"rank 1 of 3 .*drop rank= and world_size="):
        ddp.init_process_group("nccl", rank=0, world_size=3)
    with pytest.raises(ValueError, match="drop rank= and world_size="):
        ddp.init_process_group("nccl", rank=1, world_size=2)


def test_before_init_the_world_and_ddp_say_to_call_init_process_group(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ddp, "_current", None)
    with pytest.raises(RuntimeError, match=r"init_process_group\(\) first"):
        ddp.world.register(model=None, optimizer=None)
    with pytest.raises(RuntimeError, match="init_process_group"):
        ddp.DistributedDataParallel(torch.nn.Linear(2, 1))
    assert not ddp.is_initialized()


def _fake_world(monkeypatch: pytest.MonkeyPatch, device: str) -> list[Any]:
    hooked: list[Any] = []
    fake = SimpleNamespace(device=torch.device(device), backend=SimpleNamespace(reducer=hooked.append))
    monkeypatch.setattr(ddp, "_current", fake)
    return hooked


def test_ddp_takes_this_workers_device_and_refuses_another(monkeypatch: pytest.MonkeyPatch) -> None:
    hooked = _fake_world(monkeypatch, "cpu")
    model = torch.nn.Linear(2, 1)
    wrapped = ddp.DistributedDataParallel(model, device_ids=[torch.device("cpu")], find_unused_parameters=True,
                                          bucket_cap_mb=1)
    assert wrapped.module is model and hooked == [model]
    assert isinstance(wrapped, ElasticDataParallel)
    assert ddp.DistributedDataParallel(model).module is model
    with pytest.raises(ValueError, match=r"device is cpu .*LOCAL_RANK"):
        ddp.DistributedDataParallel(model, device_ids=[0])  # an integer is a CUDA index, as in DDP
    monkeypatch.setattr(ddp, "_current", SimpleNamespace(device=torch.device("cuda", 1), backend=None))
    with pytest.raises(ValueError, match=r"device is cuda:1"):
        ddp.DistributedDataParallel(model, device_ids=[0])


@pytest.mark.parametrize(("kwargs", "rule"), [
    ({"process_group": object()}, "drop process_group="),
    ({"broadcast_buffers": False}, "drop broadcast_buffers=False"),
    ({"dim": 1}, "drop dim="),
])
def test_ddp_refuses_what_the_launcher_cannot_keep(monkeypatch: pytest.MonkeyPatch, kwargs: dict[str, Any],
                                                    rule: str) -> None:
    _fake_world(monkeypatch, "cpu")
    with pytest.raises(ValueError, match=rule):
        ddp.DistributedDataParallel(torch.nn.Linear(2, 1), **kwargs)


def test_a_torch_distributed_name_it_does_not_replace_says_which_to_call() -> None:
    with pytest.raises(AttributeError, match=r"torch.distributed.all_reduce\(\.\.\., group=world.group\)"):
        ddp.all_reduce  # noqa: B018


EXAMPLE = Path(__file__).resolve().parents[2] / "launcher" / "slurm_elastic_launcher" / "examples"
PROBE = Path(__file__).resolve().parents[2] / "slurm_elastic" / "rehearse" / "probe.py"
SAMPLES = 300  # 2 workers x batch 8: 19 steps an epoch, the last one short
EPOCHS = 12


def _trained(job: Any, workers: list[str]) -> dict[int, list[int]]:
    """Sample ids trained per epoch: each step once, in the newest generation that logged it."""
    by_step: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for w in workers:
        for e in job.events(w):
            if e["ev"] == "step":
                by_step[e["step"]].append(e)
    seen: dict[int, list[int]] = defaultdict(list)
    for step in sorted(by_step):
        newest = max(r["gen"] for r in by_step[step])
        for r in by_step[step]:
            if r["gen"] == newest:
                seen[r["epoch"]].extend(r["indices"])
    return seen


def test_a_tutorial_style_script_ported_through_the_dropin_grows_and_shrinks_in_place(
        fake_job_factory: Any, tmp_path: Path) -> None:
    snapshot = tmp_path / "snapshot.pt"
    script = [str(PROBE), str(EXAMPLE / "snapshot_trainer.py"), str(EPOCHS), "1", "--batch_size", "8",
              "--samples", str(SAMPLES), "--snapshot_path", str(snapshot)]
    job = fake_job_factory(dataset_size=SAMPLES, script=script, SLURM_ELASTIC_LOG_INDICES="1",
                           SLURM_ELASTIC_REHEARSE_PACE_S="0.03")  # the rehearsal's probe paces the steps
    old, everyone = ["w0", "w1"], ["w0", "w1", "w2"]
    for w in old:
        job.start(w, old)
    job.start("w2")  # it waits for the order that names it
    job.wait_until("two workers training", lambda: job.last_step("w0") >= 3, timeout=90)
    grow = job.order("resize", everyone)
    job.wait_until("grown to 3", lambda: job.steps_in("w2", f"o{grow}") >= 2, timeout=90)
    shrink = job.order("resize", ["w2", "w0"])  # the joiner becomes rank 0; w1 leaves
    job.wait_until("shrunk to 2", lambda: job.steps_in("w2", f"o{shrink}") >= 2, timeout=90)
    rcs = job.wait_exit(timeout=180)
    assert rcs == {w: 0 for w in everyone}, {w: job.output(w)[-2000:] for w in everyone}

    seen = _trained(job, everyone)
    assert sorted(seen) == list(range(EPOCHS))
    for epoch, ids in seen.items():
        assert sorted(ids) == list(range(SAMPLES)), f"epoch {epoch}: not every sample exactly once"
    assert torch.load(snapshot, weights_only=True)["EPOCHS_RUN"] == EPOCHS  # the joiner's, rank 0 at the end
    saved = [line for line in job.output("w2").splitlines() if "Training snapshot saved" in line]
    assert saved and saved[-1].startswith(f"Epoch {EPOCHS - 1} |"), job.output("w2")[-2000:]
    assert any(e["ev"] == "step" and e["rank"] == 0 and e["gen"] == f"o{shrink}" for e in job.events("w2"))


def test_rank_and_size_are_the_current_worlds_and_need_the_world(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ddp, "_current", None)
    with pytest.raises(RuntimeError, match="before init_process_group"):
        ddp.get_rank()
    monkeypatch.setenv("RANK", "1")
    before = SimpleNamespace(agent=None, joining=None, rank=-1, size=3)  # the world has not formed yet
    monkeypatch.setattr(ddp, "_current", before)
    assert (ddp.get_rank(), ddp.get_world_size(), ddp.is_initialized()) == (1, 3, True)
    monkeypatch.setattr(ddp, "_current", SimpleNamespace(agent=object(), joining=None, rank=0, size=2))
    assert (ddp.get_rank(), ddp.get_world_size()) == (0, 2)  # after a resize: the new world's
