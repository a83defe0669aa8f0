"""A DDP-tutorial-style script ported through the drop-in module (issue 36), grown and shrunk by the
daemon's own policy loop on the real dev cluster: ``examples/snapshot_trainer.py`` (a ``Trainer``
that reads ``LOCAL_RANK`` in ``__init__``, argparse, its own snapshot and resume, a
``DistributedSampler``, ``init_process_group`` and ``DDP`` kept), submitted with ``slurm-elastic
submit`` on a cluster that rigid jobs fill but for one GPU on each of two nodes. The daemon (the
default policy, min-jct, in the site guards with no cooldown) grows it 1 -> 2 onto a satellite on
the other node; a second elastic job arrives and the daemon shrinks the first back to 1 to start it.
The job completes: every sample of every epoch trained once (its signed reports), and its own
snapshot names the last epoch.

It is submitted with ``--epochs 3`` while its script trains more (issue 36, item 3): ``status``
says so, and the daemon plans it with the epochs it trains. The script runs under the rehearsal's
probe, which only paces its steps, so that it outlasts a satellite's start on any machine."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from slurm_elastic.config import parse
from slurm_elastic.core.actions import ActionKind
from slurm_elastic.core.model import JobId
from slurm_elastic.rehearse.driver import PROBE
from slurm_elastic.resources import EXAMPLE_TRAINER
from slurm_elastic.slurm.cli_backend import SlurmCli
from slurm_elastic.slurm.runner import run_command
from slurm_elastic.store import Store
from slurm_elastic.wiring import cluster_view, slurm_daemon

from .conftest import DevCluster

pytestmark = pytest.mark.slurm


def test_a_ported_tutorial_script_is_grown_and_shrunk_by_the_daemon(cluster: DevCluster, tmp_path: Path,
                                                                    submit_example: Any,
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    torch = pytest.importorskip("torch")
    from slurm_elastic.cli import main

    epochs, samples = 20, 4096  # 2,560 steps at one worker, at least 0.03 s each: it outlasts the grow
    monkeypatch.setenv("SLURM_ELASTIC_REHEARSE_PACE_S", "0.03")  # the job's and its satellite's workers'
    # rigid jobs hold 14 of the 16 GPUs: one GPU is left on each of two nodes
    for fill in (("-N4", "--gres=gpu:3"), ("-N2", "--gres=gpu:1")):
        cluster.wait_state(cluster.sbatch(*fill, "--wrap", "sleep 600"), "RUNNING", timeout=40)
    script = EXAMPLE_TRAINER.with_name("snapshot_trainer.py")
    snapshot = cluster.root / "jobs" / f"tutorial-snapshot-{tmp_path.name}.pt"  # written by the job's user
    out = cluster.root / "jobs" / "tutorial-%j.out"
    job = str(submit_example(out, "--elastic", "1:2", "--gpus-per-node", "1", "--epochs", "3",
                             "--local-batch", "32",
                             script=[str(PROBE), str(script), str(epochs), "1", "--batch_size", "32",
                                     "--samples", str(samples), "--snapshot_path", str(snapshot)]))
    cluster.wait_state(int(job), "RUNNING", timeout=40)

    def runner(argv: Sequence[str]) -> str:
        return run_command(argv, env=cluster.env)

    conf = tmp_path / "elastic.toml"
    conf.write_text(f'[daemon]\npartitions = ["gpu"]\ndry_run = false\nstore = "{tmp_path / "s.db"}"\n'
                    "poll_interval = 0.5\nmax_idle = 0.5\n[guards]\ncooldown_s = 0\nmax_resizes_per_hour = 0\n")
    cfg = parse(conf.read_text())
    assert cfg.daemon.policy == "min-jct"  # the default policy, in the site guards
    store = Store(cfg.daemon.store)
    view = cluster_view(cfg, SlurmCli(runner), store)
    daemon = slurm_daemon(cfg, view, store, client_env=cluster.env)

    def logs() -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-2500:]}" for p in sorted(out.parent.glob("tutorial-*.out"))
                         if p.stat().st_mtime > time.time() - 600)

    def rounds_until(what: str, ok: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not ok():
            daemon.run(max_rounds=daemon.rounds + 1)
            assert time.monotonic() < deadline, (f"timed out waiting for {what}: job {job} "
                                                 f"{cluster.job(int(job))['job_state']}, reports "
                                                 f"{store.progress_of(job)[-3:]}, journal "
                                                 f"{[(e.action.kind, e.state) for e in store.actions_of(job)]}"
                                                 f"\n{logs()}")

    def resized_to(n: int) -> bool:
        return any(r.kind == "resize" and r.world == n for r in store.progress_of(job))

    rounds_until("the daemon to grow the job to 2 workers", lambda: resized_to(2), timeout=150)
    grows = [e for e in store.actions_of(job) if e.action.kind is ActionKind.GROW and e.state == "done"]
    assert grows and grows[0].action.after.num_gpus == 2, store.actions_of(job)
    assert len({n for n, _ in grows[0].action.after.slots}) == 2  # onto the other node, through a satellite
    # One source of truth (issue 36, item 3): the daemon plans the epochs the script trains, and
    # `status` (another process beside the daemon) shows the --epochs it was submitted with beside them.
    assert view.observe().job(JobId(job)).target_epochs == epochs
    for key, value in cluster.env.items():
        monkeypatch.setenv(key, value)
    capsys.readouterr()
    assert main(["status", "--config", str(conf), "--json"]) == 0
    row = {r["job_id"]: r for r in json.loads(capsys.readouterr().out)}[job]
    assert (row["epochs"], row["submitted"]) == (epochs, {"epochs": 3, "local_batch": 32}), row
    assert f"the script trains {epochs} epochs at a per-worker batch of 32, but the job was submitted with " \
           "--epochs 3 --local-batch 32" in row["configured_twice"], row
    assert main(["status", "--config", str(conf)]) == 0
    assert "configured twice: the script trains" in capsys.readouterr().out

    other = cluster.sbatch("--elastic=1:1", "--gres=gpu:1", "-N1", "--wrap", "sleep 600")
    rounds_until("the daemon to shrink the job to 1 worker and start the other job",
                 lambda: resized_to(1) and cluster.job(other)["job_state"] == "RUNNING", timeout=90)
    assert [e.state for e in store.actions_of(job) if e.action.kind is ActionKind.SHRINK] == ["done"]
    rounds_until("the job to finish", lambda: cluster.job(int(job))["job_state"] == "COMPLETED", timeout=300)
    daemon.run(max_rounds=daemon.rounds + 1)  # the last reports, written as the job ended
    rows = store.progress_of(job)
    assert [r.world for r in rows if r.kind == "resize"] == [2, 1], rows
    end = [r for r in rows if r.kind == "end"]
    assert end and end[-1].samples == epochs * samples, end  # no sample lost or repeated across both resizes
    assert store.unfinished_actions() == [] and store.satellites() == {}
    log = Path(str(out).replace("%j", job)).read_text()
    assert "1 -> 2 workers" in log and "2 -> 1 workers" in log, log[-3000:]
    assert f"Epoch {epochs - 1} | Training snapshot saved" in log, log[-3000:]
    assert torch.load(snapshot, weights_only=True)["EPOCHS_RUN"] == epochs
    cluster.cancel_all()
