"""The paths every Slurm release must serve, read through our own records (so any release's JSON).

On the default dev cluster (Debian's 22.05) these run in CI with the CLI backend. ``scripts/release-check
25.11.7`` runs them on a dev cluster of a built release with pyslurm installed: then the two backends
must read the same records and the same snapshot, and the acting daemon's START and SHRINK go through
the backend ``daemon.backend = auto`` picks (pyslurm where it serves).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from slurm_elastic.act.actor import SlurmActor
from slurm_elastic.config import parse
from slurm_elastic.core.actions import ActionKind
from slurm_elastic.core.model import JobState
from slurm_elastic.daemon import Daemon
from slurm_elastic.observe.view import ClusterView
from slurm_elastic.slurm.cli_backend import SlurmCli
from slurm_elastic.slurm.pyslurm_backend import PyslurmSource, PyslurmUnavailable, choose_source
from slurm_elastic.slurm.records import JobRecord
from slurm_elastic.slurm.runner import run_command
from slurm_elastic.store import Store
from slurm_elastic.testing import shipped_profiles

from .conftest import DevCluster

pytestmark = pytest.mark.slurm


def _runner(cluster: DevCluster) -> Any:
    def runner(argv: Sequence[str]) -> str:
        return run_command(argv, env=cluster.env)

    return runner


def _records(cluster: DevCluster) -> dict[str, JobRecord]:
    return {j.job_id: j for j in SlurmCli(_runner(cluster)).jobs()}


def _pyslurm(cluster: DevCluster, monkeypatch: pytest.MonkeyPatch) -> Any:
    for key, value in cluster.env.items():
        monkeypatch.setenv(key, value)
    try:
        return choose_source(_runner(cluster), prefer="pyslurm")
    except PyslurmUnavailable as exc:
        if os.environ.get("SLURM_ELASTIC_REQUIRE_PYSLURM") == "1":
            pytest.fail(f"pyslurm backend required (SLURM_ELASTIC_REQUIRE_PYSLURM=1): {exc}")
        pytest.skip(f"pyslurm backend unavailable here: {exc}")


def test_both_backends_read_the_same_cluster(cluster: DevCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    source = _pyslurm(cluster, monkeypatch)
    cluster.cancel_all()
    rigid = cluster.sbatch("-N2", "--gres=gpu:2", "--wrap", "sleep 120")
    split = cluster.sbatch("-N2", "--gpus=3", "--wrap", "sleep 120")
    held = cluster.sbatch("--elastic=2:8", "--gres=gpu:1", "-N1", "--wrap", "sleep 120")
    cluster.wait_state(rigid, "RUNNING")
    cluster.wait_state(split, "RUNNING")
    cli = SlurmCli(_runner(cluster))
    cli_nodes, cli_jobs = cli.read()
    py_nodes, py_jobs = source.read()
    assert cli_nodes == py_nodes
    # pyslurm lists finished jobs still in slurmctld's memory, squeue does not; it keeps a --gpus type
    live = {j.job_id: j for j in py_jobs if j.state is not JobState.FINISHED}
    assert sorted(live) == sorted(j.job_id for j in cli_jobs) and {str(held), str(rigid), str(split)} <= set(live)
    for rec in cli_jobs:
        other = live[rec.job_id]
        assert (rec.state, rec.gpus, rec.nodes, rec.admin_comment, rec.requested_gpus) == (
            other.state, other.gpus, other.nodes, other.admin_comment, other.requested_gpus), rec.job_id
    views = [ClusterView(s, shipped_profiles(), lambda: 1_000_000.0, ("gpu",)) for s in (cli, source)]
    snaps = [v.observe() for v in views]
    assert snaps[0].nodes == snaps[1].nodes
    assert {j.job_id: (j.state, j.num_gpus, j.min_gpus, j.max_gpus) for j in snaps[0].jobs} == {
        j.job_id: (j.state, j.num_gpus, j.min_gpus, j.max_gpus) for j in snaps[1].jobs}
    cluster.cancel_all()


def _acting_daemon(cluster: DevCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Daemon:
    """The acting daemon with the backend ``auto`` picks on this cluster (pyslurm where it serves)."""
    for key, value in cluster.env.items():
        monkeypatch.setenv(key, value)
    runner = _runner(cluster)
    # min_run_s = 0: these sleep jobs have no launcher, so a shrink requeues them, which the site
    # default (120 s) allows only once a job has run that long (tests/unit/test_guards.py)
    cfg = parse(f'[daemon]\npartitions = ["gpu"]\npolicy = "dp"\ndry_run = false\nstore = "{tmp_path / "s.db"}"\n'
                "poll_interval = 0.5\nmax_idle = 0.5\n[guards]\nmin_run_s = 0\n")
    store = Store(cfg.daemon.store)
    source = choose_source(runner, prefer="auto")
    if os.environ.get("SLURM_ELASTIC_REQUIRE_PYSLURM") == "1":
        assert isinstance(source, PyslurmSource), "auto must pick pyslurm where it serves"
    view = ClusterView(source, shipped_profiles(), time.time, ("gpu",))
    return Daemon(cfg, view, store, SlurmActor(runner, store, time.time, client_env=cluster.env), sleep=time.sleep)


def test_the_acting_daemon_starts_and_shrinks(cluster: DevCluster, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """START: a held elastic job starts at the planned size; SHRINK: a second one arrives, and the
    first gives GPUs back (requeued at its new size: it has no launcher)."""
    cluster.cancel_all()
    daemon = _acting_daemon(cluster, tmp_path, monkeypatch)
    first = cluster.sbatch("--elastic=2:16", "--gres=gpu:2", "-N1", "--wrap", "sleep 300")
    t0 = time.monotonic()
    while _records(cluster)[str(first)].state is not JobState.RUNNING:
        daemon.run(max_rounds=daemon.rounds + 1)
        assert time.monotonic() - t0 < 9, "the daemon did not start the job before the hold expired"
    started = _records(cluster)[str(first)].allocated_gpus
    assert started > 2, "sized by the planner, not the user's 2 GPUs"
    assert [e.state for e in daemon.store.actions_of(str(first)) if e.action.kind is ActionKind.START][-1] == "done"
    second = cluster.sbatch("--elastic=8:16", "--gres=gpu:4", "-N2", "--wrap", "sleep 300")
    deadline = time.monotonic() + 60
    while True:
        daemon.run(max_rounds=daemon.rounds + 1)
        recs = _records(cluster)
        if recs[str(second)].state is JobState.RUNNING and recs[str(first)].state is JobState.RUNNING:
            break
        assert time.monotonic() < deadline, {j: r.slurm_state for j, r in recs.items()}
    assert _records(cluster)[str(first)].allocated_gpus < started
    kinds = {e.action.kind for e in daemon.store.actions_of(str(first)) if e.state == "done"}
    assert kinds & {ActionKind.SHRINK, ActionKind.PREEMPT}, kinds
    assert daemon.store.unfinished_actions() == []
    cluster.cancel_all()
