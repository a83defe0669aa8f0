"""A job whose training ended is not offered a grow (issue 38, item 5).

The act step does nothing to a launcher job whose last report says its training ended, while that
report is believed (``finished_training``: ``END_REPORT_TRUST_S`` after it): "nothing done: the job
finished training". The snapshot must not offer such a job more GPUs. It did when the job was in
the store's quarantine: a quarantined job is planned from priors, as if it had never reported, so
its runtime, and with it ``can_grow=False``, was dropped, while the act step still read its end
report. The quarantine is the store's, so a restarted daemon sees it too (a report refused by the
daemon before it, or one refused as the job ended: a line after the end report), and dp planned the
job at its maximum every round until the job left the queue (the flake of
``test_daemon_killed_mid_grow_is_settled_without_repeating``: a grow journaled as done, with
"nothing done", after the job's world had already joined).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from slurm_elastic.config import Config, DaemonConfig
from slurm_elastic.core.actions import Action, ActionKind
from slurm_elastic.core.model import JobId
from slurm_elastic.core.rounds import RoundRecord
from slurm_elastic.daemon import Daemon
from slurm_elastic.observe.job_reports import END_REPORT_TRUST_S
from slurm_elastic.observe.view import ClusterView
from slurm_elastic.slurm.actuator import SlurmActuator
from slurm_elastic.store import Store
from slurm_elastic.testing import shipped_profiles
from slurm_elastic_launcher.orders import sign_report

from .test_hostile_job_input import NOW, SECRET, Source, append_lines, job_files, nodes, record, report


def _round(view: ClusterView, now: float) -> RoundRecord:
    """One dry-run ``dp`` round of a daemon over ``view`` (a daemon started afresh on its store)."""
    assert view.store is not None
    cfg = Config(DaemonConfig(policy="dp", store=view.store.path, dry_run=True))
    return Daemon(cfg, view, view.store, sleep=lambda s: None, clock=lambda: now).round()  # type: ignore[arg-type]


def _grows(rnd: RoundRecord) -> list[str]:
    return [a.job_id for a in rnd.actions if a.kind is ActionKind.GROW]


@pytest.mark.parametrize("restarted", [False, True])
def test_a_quarantined_job_whose_training_ended_is_not_offered_a_grow(tmp_path: Path, restarted: bool) -> None:
    comment = job_files(tmp_path, "job-7")
    progress = sign_report(report("7", world=1, global_batch=256, t=NOW - 60, samples=6400), SECRET)
    end = sign_report(report("7", kind="end", world=1, global_batch=256, t=NOW - 30, samples=12800), SECRET)
    after = sign_report(report("7", world=1, global_batch=256, t=NOW - 20, samples=12800), SECRET)
    append_lines(tmp_path, "job-7", [progress, end, after])  # the line after the end report is refused
    source = Source(nodes(2), [record("7", {"n000": 1}, comment=comment, admin="slurm-elastic gpus=1:2")])

    def view() -> ClusterView:
        return ClusterView(source, shipped_profiles(), lambda: NOW, (), "cifar10", Store(tmp_path / "s.db"))

    first = view()
    first.poll()
    assert "after the job's end report" in first.quarantined()["7"]
    assert [r.kind for r in first.store.progress_of("7")] == ["progress", "end"]  # type: ignore[union-attr]
    rnd = _round(view() if restarted else first, NOW)
    job = rnd.snapshot.job(JobId("7"))
    assert not job.can_grow and _grows(rnd) == [], (job, rnd.actions)  # before: a grow to 2 GPUs, "nothing done"
    # once the end report is no longer believed, the act step resizes the job like any other, and so
    # may the plan: it is planned from priors again
    later = NOW - 30 + END_REPORT_TRUST_S + 1
    late = ClusterView(source, shipped_profiles(), lambda: later, (), "cifar10", Store(tmp_path / "s.db"))
    rnd = _round(late, later)
    assert rnd.snapshot.job(JobId("7")).can_grow and _grows(rnd) == ["7"]


def test_a_job_whose_training_ended_is_not_offered_a_grow(tmp_path: Path) -> None:
    comment = job_files(tmp_path, "job-7")
    end = sign_report(report("7", kind="end", world=1, global_batch=256, t=NOW - 30, samples=12800), SECRET)
    append_lines(tmp_path, "job-7", [end])
    source = Source(nodes(2), [record("7", {"n000": 1}, comment=comment, admin="slurm-elastic gpus=1:2")])
    rnd = _round(ClusterView(source, shipped_profiles(), lambda: NOW, (), "cifar10", Store(tmp_path / "s.db")), NOW)
    assert not rnd.snapshot.job(JobId("7")).can_grow and _grows(rnd) == []


def test_the_stop_report_of_a_run_a_requeue_ended_says_nothing_of_the_new_run(tmp_path: Path) -> None:
    """Issue 38, item 1, the daemon's side: a job Slurm requeues writes an end report when it stops
    (its checkpoint); until the new run's first report, that report made the new run look finished:
    it could not grow, was held as under way, and the act step did nothing to it."""
    comment = job_files(tmp_path, "job-7")
    stop = sign_report(report("7", kind="end", world=1, global_batch=256, t=NOW - 60, samples=6400), SECRET)
    append_lines(tmp_path, "job-7", [stop])
    first = record("7", {"n000": 1}, comment=comment, admin="slurm-elastic gpus=1:2")
    again = replace(first, restart_count=1, start_time=int(NOW - 20))  # requeued, started again 20 s ago
    for rec, finished in ((first, True), (again, False)):
        store = Store(tmp_path / f"{rec.restart_count}.db")
        rnd = _round(ClusterView(Source(nodes(2), [rec]), shipped_profiles(), lambda: NOW, (), "cifar10", store), NOW)
        job = rnd.snapshot.job(JobId("7"))
        assert (job.can_grow, bool(rnd.snapshot.in_flight), _grows(rnd)) == (
            (False, True, []) if finished else (True, False, ["7"])), (rec.restart_count, rnd.snapshot.in_flight)
        act = SlurmActuator(lambda argv: "", store, clock=lambda: NOW, records=lambda r=rec: {"7": r})
        rebatch = Action(ActionKind.REBATCH, JobId("7"), job.placement, job.placement, 64, 64, 1, 0.1)
        (out,) = act.apply(rnd.snapshot, (rebatch,))
        assert ("finished training" in out.message) is finished, out.message
