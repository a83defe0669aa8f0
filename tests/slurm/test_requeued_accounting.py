"""What the accounting keeps of a job requeued twice within seconds (issue 38, bug 6), on the real dev
cluster: every run of it is in what the allocation report and what-if read
(:func:`~slurm_elastic.whatif.read_accounting`), and in ``sacct -D``.

A job runs, is requeued, started again, requeued again at once and started again: three runs. Each
run held GPUs for a while; a report that reads one record of the job counts the GPU-hours of its
last run alone."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence

import pytest

from slurm_elastic.slurm.runner import run_command
from slurm_elastic.whatif import read_accounting

from .conftest import DevCluster, base_state

pytestmark = pytest.mark.slurm


def _wait(cluster: DevCluster, job: int, state: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while base_state(cluster.job(job)) != state:
        assert time.monotonic() < deadline, f"job {job} is not {state}: {cluster.job(job)['job_state']}"
        time.sleep(0.2)


def test_every_run_of_a_job_requeued_twice_within_seconds_is_read(cluster: DevCluster) -> None:
    cluster.cancel_all()
    time.sleep(1.1)
    since = dt.datetime.now().replace(microsecond=0)
    job = cluster.sbatch("--gres=gpu:1", "-N1", "--wrap", "sleep 300")
    runs = 1
    _wait(cluster, job, "RUNNING")
    time.sleep(2)
    for _ in range(2):  # requeued, started again at once, twice
        cluster.run(["scontrol", "requeue", str(job)], check=True)
        _wait(cluster, job, "PENDING")
        # slurmd refuses a batch launch whose credential is dated the second its requeue revoked the
        # last one ("Job credential revoked": the job FAILED); start it again a second later
        time.sleep(1.1)
        cluster.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], check=True)
        _wait(cluster, job, "RUNNING")
        runs += 1
    time.sleep(2)
    cluster.run(["scancel", str(job)], check=True)
    deadline = time.monotonic() + 30
    while str(job) in cluster.run(["squeue", "-h", "-o", "%i"]).stdout.split():
        assert time.monotonic() < deadline, "the job did not end"
        time.sleep(0.2)
    time.sleep(3)  # slurmdbd writes the end

    def runner(argv: Sequence[str]) -> str:
        return run_command(argv, env=cluster.env)

    until = dt.datetime.now().replace(microsecond=0) + dt.timedelta(seconds=1)
    plain = cluster.run(["sacct", "-n", "-P", "-X", "-a", "-o", "JobID,State,Start,End", "-j", str(job)]).stdout
    dups = cluster.run(["sacct", "-n", "-P", "-X", "-a", "-D", "-o", "JobID,State,Start,End", "-j", str(job)]).stdout
    print(f"sacct -X:\n{plain}sacct -X -D:\n{dups}")
    read = [r for r in read_accounting(since, until, runner=runner) if r.slurm_job_id == job]
    print("read_accounting:", [(r.slurm_state, r.start_time, r.end_time, r.elapsed) for r in read])
    assert len(dups.strip().splitlines()) == runs, dups  # Slurm's accounting has every run
    assert len(read) == runs, (plain, dups, read)  # and what the reports read has them too
