"""The daemon acting on the real dev cluster: it sizes and starts held elastic jobs, shrinks by
nodes, journals every action, and settles what a killed daemon left unfinished."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

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


def _daemon(cluster: DevCluster, tmp_path: Path) -> Daemon:
    def runner(argv: Sequence[str]) -> str:
        return run_command(argv, env=cluster.env)

    cfg = parse(f'[daemon]\npartitions = ["gpu"]\npolicy = "dp"\ndry_run = false\nstore = "{tmp_path / "s.db"}"\n'
                "poll_interval = 0.5\nmax_idle = 0.5\n")
    store = Store(cfg.daemon.store)
    obs = ClusterView(SlurmCli(runner), shipped_profiles(), time.time, ("gpu",))
    return Daemon(cfg, obs, store, SlurmActor(runner, store, time.time, client_env=cluster.env), sleep=time.sleep)


def test_daemon_starts_a_held_elastic_job_at_the_planned_size(cluster: DevCluster, tmp_path: Path) -> None:
    cluster.cancel_all()
    daemon = _daemon(cluster, tmp_path)
    t0 = time.monotonic()
    job = cluster.sbatch("--elastic=1:8", "--gres=gpu:1", "-N1", "--wrap", "sleep 120")
    assert cluster.job(job)["job_state"] == "PENDING"  # held by job_submit.lua for the daemon
    while cluster.job(job)["job_state"] != "RUNNING":
        daemon.run(max_rounds=daemon.rounds + 1)
        assert time.monotonic() - t0 < 9, "the daemon did not start the job before the hold expired"
    rec = cluster.job(job)
    gpus = sum(int(d.split(":")[2].split("(")[0]) for d in rec["gres_detail"])
    assert gpus > 1, rec["gres_detail"]  # sized by the planner, not the user's 1 GPU
    starts = [e for e in daemon.store.actions_of(str(job)) if e.action.kind is ActionKind.START]
    assert starts and starts[-1].state == "done"
    # A second elastic job: the planner shares the GPUs; whatever it does is journaled and settled.
    other = cluster.sbatch("--elastic=1:8", "--gres=gpu:1", "-N1", "--wrap", "sleep 120")
    daemon.run(max_rounds=daemon.rounds + 3)
    assert daemon.store.unfinished_actions() == []
    assert any(e.action.job_id == str(other) for e in daemon.store.actions_of(str(other)))
    for entry in daemon.store.actions_of(str(job)) + daemon.store.actions_of(str(other)):
        assert entry.state == "done" or entry.message, entry
    cluster.cancel_all()


def test_restarted_daemon_settles_the_action_it_was_killed_in(cluster: DevCluster, tmp_path: Path) -> None:
    cluster.cancel_all()
    job = cluster.sbatch("--elastic=1:4", "--gres=gpu:2", "-N1", "--wrap", "sleep 120")
    cluster.wait_state(job, "RUNNING")  # started by Slurm after the hold (no daemon ran)
    store = Store(tmp_path / "s.db")
    node = cluster.job(job)["nodes"]
    held = Placement.of([(node, 0), (node, 1)])
    store.begin_action(Action(ActionKind.START, JobId(str(job)), Placement(), held, 2, 1, 1, 0.1), time.time())
    store.begin_action(Action(ActionKind.DROP, JobId("999999"), Placement(), Placement()), time.time())
    def runner(argv: Sequence[str]) -> str:
        return run_command(argv, env=cluster.env)

    snap = ClusterView(SlurmCli(runner), shipped_profiles(), time.time, ("gpu",)).observe()
    lines = reconcile(store, snap, time.time)
    assert lines == [f"start job {job}: found done after a restart", "drop job 999999: found done after a restart"]
    assert store.unfinished_actions() == []
    cluster.cancel_all()


def test_a_job_without_the_launcher_is_requeued_at_its_new_size(cluster: DevCluster, tmp_path: Path) -> None:
    cluster.cancel_all()
    job = cluster.sbatch("--elastic=1:4", "--gres=gpu:1", "-N1", "--wrap", "sleep 120")
    cluster.wait_state(job, "RUNNING")  # started by Slurm after the hold (no daemon ran)

    def runner(argv: Sequence[str]) -> str:
        return run_command(argv, env=cluster.env)

    obs = ClusterView(SlurmCli(runner), shipped_profiles(), time.time, ("gpu",))
    seen = obs.observation()
    snap = seen.seen()
    held = snap.job(JobId(str(job))).placement
    node = held.slots[0][0]
    free = next(n for n in snap.nodes if n.name == node)
    grown = Placement.of([(node, g) for g in sorted({*held.slots[0][1], *free.free_gpus})][:2])
    store = Store(tmp_path / "s.db")
    act = SlurmActor(runner, store, time.time, client_env=cluster.env)
    (outcome,) = act.apply(seen, (Action(ActionKind.GROW, JobId(str(job)), held, grown, 2, 1, 1, 0.1),))
    assert outcome.ok and outcome.message == "requeued at the new size", outcome.message
    deadline = time.monotonic() + 60
    while True:
        rec = cluster.job(job)
        gpus = sum(int(d.split(":")[2].split("(")[0]) for d in rec.get("gres_detail", []))
        if rec["job_state"] == "RUNNING" and gpus == 2:
            break
        assert time.monotonic() < deadline, (f"job {job} not running on 2 GPUs: {rec['job_state']} "
                                             f"({rec.get('state_reason')}) {gpus}\n{cluster.log_of(job)}")
        time.sleep(0.5)
    assert rec["restart_cnt"] == 1
    cluster.cancel_all()


def test_a_job_of_one_task_per_node_starts_packed_on_fewer_nodes(cluster: DevCluster, tmp_path: Path) -> None:
    """Found by bench fidelity: the pytorch template's ``--elastic 2:6`` job (two nodes, one task and
    one GPU each) started on one node with two GPUs stayed PENDING (BadConstraints) for good, the
    daemon starting it again every round: its tasks and CPUs now follow its nodes."""
    cluster.cancel_all()
    job = cluster.sbatch("--elastic=2:4", "--gres=gpu:1", "-N2", "--ntasks-per-node=1", "--wrap", "sleep 120")

    def runner(argv: Sequence[str]) -> str:
        return run_command(argv, env=cluster.env)

    obs = ClusterView(SlurmCli(runner), shipped_profiles(), time.time, ("gpu",))
    seen = obs.observation()
    node = next(n for n in seen.seen().nodes if len(n.free_gpus) >= 2)
    packed = Placement.of([(node.name, g) for g in sorted(node.free_gpus)[:2]])
    act = SlurmActor(runner, Store(tmp_path / "s.db"), time.time, client_env=cluster.env)
    (outcome,) = act.apply(seen, (Action(ActionKind.START, JobId(str(job)), Placement(), packed, 2, 1, 1, 0.1),))
    assert outcome.ok, outcome.message
    deadline = time.monotonic() + 30
    while (rec := cluster.job(job))["job_state"] != "RUNNING":
        assert time.monotonic() < deadline, f"job {job}: {rec['job_state']} ({rec.get('state_reason')})"
        time.sleep(0.5)
    assert rec["nodes"] == node.name and rec["node_count"] == 1, rec
    cluster.cancel_all()


def test_while_the_daemon_runs_it_alone_starts_elastic_jobs(cluster: DevCluster, tmp_path: Path) -> None:
    """Issue 14, finding 2: Slurm started elastic jobs itself when their 10 s hold passed, and the
    daemon preempted what Slurm started, over and over. The daemon leases the waiting jobs it plans
    (their begin time pushed ahead, one command for all); when it is gone, the lease runs out and
    Slurm starts them itself (the fallback)."""
    cluster.cancel_all()

    def runner(argv: Sequence[str]) -> str:
        return run_command(argv, env=cluster.env)

    store = Store(tmp_path / "s.db")
    obs = ClusterView(SlurmCli(runner), shipped_profiles(), time.time, ("gpu",), store=store)
    act = SlurmActor(runner, store, time.time, client_env=cluster.env)
    act.leases.lease_s = 20
    jobs = [cluster.sbatch("--elastic=1:4", "--gres=gpu:1", "-N1", "--wrap", "sleep 30") for _ in range(2)]
    seen = obs.observation()
    assert act.lease(seen.seen(), seen.records, ()) == []
    assert act.tend(seen) == []  # the journal is empty: nothing to settle, nothing owed
    t0 = time.monotonic()
    while time.monotonic() - t0 < 14:  # past the 10 s hold of job_submit.lua, renewed at every poll
        assert act.tend(obs.poll()) == []
        assert [cluster.job(j)["job_state"] for j in jobs] == ["PENDING", "PENDING"]
        time.sleep(1.0)
    # The daemon is gone: nothing renews the lease, and Slurm starts the jobs itself.
    for j in jobs:
        cluster.wait_state(j, "RUNNING", timeout=30)
    cluster.cancel_all()


def test_bench_load_drains_a_queue_without_preemption_churn(cluster: DevCluster) -> None:
    """``bench load`` at a small size (issue 14, finding 2: 200 jobs on 6 GPUs were requeued 490
    times). Figures live in the benchmark; here: every job completes, and the JSON has the issue's
    keys. None is requeued: the guards keep a job without the launcher at its size for its first
    ``min_run_s`` (120 s; these jobs run 5 s). Before, 6 runs in 22 regrew jobs by requeue, up to
    17 requeues a run, and twice the benchmark stopped while a requeued job still had to run."""
    from slurm_elastic.bench.live.load import bench_load

    cluster.cancel_all()
    out = bench_load(root=cluster.root, jobs=24, sleep_s=5, bring_up=False, timeout_s=300)
    assert out["completed"] == 24 and out["preemptions"] == 0, out
    assert {"preemptions", "preemptions_per_job", "drain_s", "ideal_drain_s", "round_p50_s", "round_p99_s",
            "actions", "actions_refused", "refusals"} <= set(out)
    assert out["actions"].get("start", 0) >= 1 and out["actions_refused"] == sum(out["refusals"].values()), out


@pytest.mark.parametrize("point", ["start:start+", "move:release+", "ctld:outage", "worker:kill"])
def test_bench_chaos_loses_nothing(cluster: DevCluster, point: str) -> None:
    """``bench chaos`` in CI at two crash points and both faults (the benchmark runs every point, on
    its own 3 x 2-GPU cluster: some points need that shape): the daemon SIGKILLed right after
    ``StartTime=now``, and after a job held on a draining node was released at its new place, then
    a new one on the same store; slurmctld stopped for 20 s while the launcher job trains (no
    action while it is down, a round soon after it is back); one worker SIGKILLed (the daemon names
    it lost). Every job COMPLETED, every sample of the launcher job trained once, nothing orphaned
    or stranded."""
    pytest.importorskip("torch")
    from slurm_elastic.bench.live.chaos import COUNTS, bench_chaos

    cluster.cancel_all()
    out = bench_chaos(root=cluster.root, points=[point], bring_up=False, run_timeout_s=240)
    assert out["reached"] == 1 and {k: out[k] for k in COUNTS} == dict.fromkeys(COUNTS, 0), out
    if point == "ctld:outage":
        assert out["per_point"][0]["recovery_s"] is not None, out
