"""The daemon in shadow mode against the real dev cluster: it observes, plans and records, never acts."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from slurm_elastic.config import parse
from slurm_elastic.core.model import JobId, JobState
from slurm_elastic.daemon import Daemon
from slurm_elastic.observe.view import ClusterView
from slurm_elastic.slurm.cli_backend import SlurmCli
from slurm_elastic.slurm.runner import run_command
from slurm_elastic.store import Store
from slurm_elastic.testing import shipped_profiles

from .conftest import DevCluster

pytestmark = pytest.mark.slurm


def _observer(cluster: DevCluster) -> ClusterView:
    def runner(argv: Sequence[str]) -> str:
        return run_command(argv, env=cluster.env)

    return ClusterView(SlurmCli(runner), shipped_profiles(), lambda: 0.0, ("gpu",))


def test_shadow_daemon_plans_the_real_queue(cluster: DevCluster, tmp_path: Path) -> None:
    cluster.cancel_all()
    elastic = cluster.sbatch("--elastic=1:8", "--gres=gpu:1", "-N1", "--wrap", "sleep 120")
    rigid = cluster.sbatch("--gres=gpu:2", "-N1", "--wrap", "sleep 120")
    cluster.wait_state(elastic, "RUNNING")
    cluster.wait_state(rigid, "RUNNING")
    # min_run_s = 0: the elastic job has no launcher, so growing it requeues it, which the site
    # default (120 s) allows only once it has run that long (tests/unit/test_guards.py)
    cfg = parse(f'[daemon]\npartitions = ["gpu"]\npolicy = "dp"\nstore = "{tmp_path / "state.db"}"\n'
                "poll_interval = 0.5\nmax_idle = 0.5\n[guards]\nmin_run_s = 0\n")
    store = Store(cfg.daemon.store)
    daemon = Daemon(cfg, _observer(cluster), store, sleep=lambda s: None)
    assert daemon.run(max_rounds=2) == 2
    rounds = store.rounds()
    assert len(rounds) == 2 and all(r.violations == () for r in rounds)
    planned = rounds[-1].plan.by_job()
    assert str(elastic) in planned and str(rigid) not in planned
    # 16 GPUs, 2 held by the rigid job: the DP grows the elastic job (it may use up to 8).
    assert planned[JobId(str(elastic))].num_gpus > 1
    assert "policy=dp" in rounds[-1].summary
    # Shadow mode: nothing was done to the job.
    assert cluster.job(elastic)["nodes"] and cluster.job(elastic)["job_state"] == "RUNNING"
    cluster.cancel_all()


def test_status_and_check_config_commands(cluster: DevCluster, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from slurm_elastic.cli import main

    for key, value in cluster.env.items():
        monkeypatch.setenv(key, value)
    conf = tmp_path / "elastic.toml"
    conf.write_text(f'[daemon]\npolicy = "ones"\nstore = "{tmp_path / "s.db"}"\n[policy.ones]\ngenerations = 3\n')
    job = cluster.sbatch("--elastic=2:4", "--gres=gpu:1", "-N2", "--wrap", "sleep 60")
    cluster.wait_state(job, "RUNNING")
    assert main(["check-config", str(conf)]) == 0
    checked = json.loads(capsys.readouterr().out)
    assert checked["policy_params"] == {"generations": 3}
    release = cluster.run(["sinfo", "--version"], check=True).stdout.split()[-1]
    seen = checked["slurm"]
    assert seen["release"] == release and f"Slurm {release}" in seen["read_through"], seen
    assert main(["daemon", "--config", str(conf), "--once"]) == 0
    capsys.readouterr()
    assert main(["status", "--config", str(conf), "--json"]) == 0
    out = capsys.readouterr()
    rows = {r["job_id"]: r for r in json.loads(out.out)}
    assert "Slurm read through " in out.err and release in out.err
    assert rows[str(job)]["gpus"] == 2 and rows[str(job)]["range"] == "2:4"
    assert rows[str(job)]["planned_gpus"] >= 2
    cluster.cancel_all()


def test_bench_reaction_on_the_real_cluster(cluster: DevCluster) -> None:
    from slurm_elastic.bench.live.reaction import bench_reaction

    out = bench_reaction(root=cluster.root, repeat=2, poll_interval=0.1)
    assert out["repeat"] == 2 and 0 < out["planned"]["median_ms"] <= out["running"]["median_ms"] < 60_000
    cluster.cancel_all()


def test_a_job_being_requeued_is_seen_waiting_never_ended(cluster: DevCluster) -> None:
    """A requeued job completes before it waits again. Its batch shell and sleep ignore TERM, so it
    stays completing until KillWait (15 s) ends it. Slurm 22.05 prints it then as a job that ends
    (25.11 as pending and completing); the observer must see it waiting throughout, never ended."""
    cluster.cancel_all()
    job = cluster.sbatch("--elastic=1:4", "--gres=gpu:1", "-N1", "--output=/dev/null",
                         "--wrap", "trap '' TERM; sleep 300")
    cluster.wait_state(job, "RUNNING")
    view = _observer(cluster)
    assert view.observe().job(JobId(str(job))).state is JobState.RUNNING
    cluster.run(["scontrol", "requeue", str(job)], check=True)
    sightings = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        planned = {j.job_id: j.state for j in view.observe().jobs}
        rec = view.records[str(job)]
        sightings.append((rec.slurm_state, rec.state, planned.get(rec.job_id)))
        if "COMPLETING" not in rec.slurm_state:
            break
        time.sleep(0.2)
    completing = [s for s in sightings if "COMPLETING" in s[0]]
    assert completing, f"the requeue never showed completing: {sightings}"
    assert all(s[1] is JobState.PREEMPTED and s[2] is JobState.PREEMPTED for s in sightings), sightings
    cluster.cancel_all()

