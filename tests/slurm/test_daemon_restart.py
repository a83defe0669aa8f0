"""A daemon killed in the middle of growing a job, on the real dev cluster: the next daemon settles
the journaled action, sees the satellite the first one submitted as the grow on its way, submits no
second one, and the job trains every sample exactly once at its new size."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from slurm_elastic.act.actor import SlurmActor
from slurm_elastic.act.journal import reconcile
from slurm_elastic.config import parse
from slurm_elastic.core.actions import Action, ActionKind
from slurm_elastic.core.model import JobId, Placement
from slurm_elastic.daemon import Daemon
from slurm_elastic.observe.view import ClusterView
from slurm_elastic.slurm.cli_backend import SlurmCli
from slurm_elastic.slurm.runner import run_command
from slurm_elastic.store import Store
from slurm_elastic.testing import shipped_profiles

from .conftest import DevCluster

pytestmark = pytest.mark.slurm


class Killed(BaseException):
    """The daemon process dies (nothing of ours catches it)."""


def test_daemon_killed_mid_grow_is_settled_without_repeating(cluster: DevCluster, tmp_path: Path,
                                                             submit_example: Any) -> None:
    epochs, size = 3, 32768
    job = str(submit_example(cluster.root / "jobs" / "restart-%j.out", "--elastic", "1:2", "--gpus-per-node", "1",
                             "--epochs", str(epochs), dataset_size=size))
    cluster.wait_state(int(job), "RUNNING", timeout=40)  # started by the fixture, as a daemon would: no daemon yet

    def runner(argv: Sequence[str]) -> str:
        return run_command(argv, env=cluster.env)

    def dying(argv: Sequence[str]) -> str:
        if any(a.startswith("AdminComment=") for a in argv):
            raise Killed  # after the order and the satellite's sbatch, before the action is finished
        return runner(argv)

    store = Store(tmp_path / "s.db")

    def observer() -> ClusterView:
        return ClusterView(SlurmCli(runner), shipped_profiles(), time.time, ("gpu",), store=store)

    obs = observer()
    seen = obs.observation()
    snap = seen.seen()
    held = snap.job(JobId(job)).placement
    node = held.slots[0][0]
    other = next(n.name for n in snap.nodes if n.name != node and n.free_gpus)
    grow = Action(ActionKind.GROW, JobId(job), held, Placement.of([(node, held.slots[0][1][0]), (other, 0)]),
                  64, 32, 1, 0.1)
    with pytest.raises(Killed):
        SlurmActor(dying, store, time.time, client_env=cluster.env).apply(seen, (grow,))
    assert [e.action.kind for e in store.unfinished_actions()] == [ActionKind.GROW]
    assert len(store.satellites()) == 1

    # The next daemon, on the same store.
    cfg = parse(f'[daemon]\npartitions = ["gpu"]\npolicy = "dp"\ndry_run = false\nstore = "{store.path}"\n'
                "poll_interval = 0.5\nmax_idle = 1.0\n")
    obs2 = observer()
    act2 = SlurmActor(runner, store, time.time, client_env=cluster.env)
    assert len(reconcile(store, obs2.observe(), time.time)) == 1 and store.unfinished_actions() == []
    daemon = Daemon(cfg, obs2, store, act2)
    deadline = time.monotonic() + 240
    while cluster.job(int(job))["job_state"] in ("PENDING", "RUNNING", "COMPLETING"):
        assert time.monotonic() < deadline, "the job did not finish"
        daemon.run(max_rounds=daemon.rounds + 1)
        time.sleep(0.5)
    assert cluster.job(int(job))["job_state"] == "COMPLETED"
    journal = [(e.action.kind.value, e.action.before.num_gpus, e.action.after.num_gpus, e.state, e.message)
               for e in store.actions_of(job)]
    # Not repeated: the next daemon grows the job again only if the first daemon's satellite never
    # joined (then a new try is right); once a worker joined, the job is at its maximum.
    obs2.read_reports([r for r in obs2.source.jobs() if r.job_id == job])
    joined = [r.t for r in store.progress_of(job) if r.kind == "resize" and r.world == 2]
    regrown = [e.started for e in store.actions_of(job) if e.action.kind is ActionKind.GROW][1:]
    assert joined and all(t < joined[0] for t in regrown), journal
    assert max(r.world for r in store.progress_of(job)) == 2, journal
    rows = store.progress_of(job)
    assert any(r.kind == "resize" and r.world == 2 for r in rows), rows
    assert [r.samples for r in rows if r.kind == "end"] == [epochs * size]
