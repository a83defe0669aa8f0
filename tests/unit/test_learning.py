"""The real path learns from its own jobs (issue 15): what a launcher job measured becomes its own
throughput model, and what it reports (the validation metric, the nodes its world ran on) is kept.

Each test fails before the change: reports carried no ``members`` (so the daemon could not tell on
how many nodes a throughput was measured), rows had no ``nodes``, ``runtime_of`` dropped the metric,
and every job was planned with its prior profile as is.
"""

from __future__ import annotations

import getpass
import sqlite3
from pathlib import Path

import pytest

from slurm_elastic.core.model import JobId, JobState, NodeName, NodeState
from slurm_elastic.observe.job_reports import ReportRefused, ingest, row_of, runtime_of, step_points
from slurm_elastic.observe.snapshot import build_snapshot
from slurm_elastic.slurm.records import GpuRequest, JobRecord, NodeRecord
from slurm_elastic.store import SCHEMA_VERSION, ProgressRow, Store
from slurm_elastic.testing import report_limits, shipped_profiles
from slurm_elastic_launcher.reports import Reporter
from slurm_elastic_predictor.calibrate import StepPoint

USER = getpass.getuser()
BASE = {"kind": "progress", "t": 1.0, "samples": 10, "world": 4, "global_batch": 128, "throughput": 100.0}


def _rec(job_id: str, gpus: dict[str, int], comment: str = "") -> JobRecord:
    slots = tuple((NodeName(n), tuple(range(c))) for n, c in gpus.items())
    return JobRecord(JobId(job_id), int(job_id), "j", USER, "acct", "gpu", JobState.RUNNING, ("RUNNING",), 0, 0, None,
                     tuple(NodeName(n) for n in gpus), len(gpus), None, slots, GpuRequest(per_node=2),
                     "slurm-elastic gpus=1:8", comment, next(iter(gpus)), work_dir="/tmp")


def _channel(tmp_path: Path) -> tuple[str, bytes]:
    secret = b"s" * 32
    base = tmp_path / "job-1"
    for suffix, data, mode in (("", secret, 0o600), (".orders", b"", 0o600), (".reports", b"", 0o600),
                               (".join", b"#!/bin/bash\n", 0o700), (".env", b"A=1\0", 0o600)):
        path = Path(f"{base}{suffix}")
        path.write_bytes(data)
        path.chmod(mode)
    return f"slurm-elastic-orders={base}.orders", secret


def test_a_report_names_its_members_and_the_row_the_nodes_they_ran_on() -> None:
    layout = {"w0": "n0", "w1": "n0", "w2": "n1", "w3": "n1"}
    assert row_of({**BASE, "members": ["w0", "w1", "w2", "w3"]}, layout).nodes == 2
    assert row_of({**BASE, "members": ["w0", "w1", "w2", "w3"]}, {**layout, "w2": "n0", "w3": "n0"}).nodes == 1
    assert row_of({**BASE, "members": ["w0", "w1", "w2", "w9"]}, layout).nodes is None  # w9: not in the layout
    assert row_of(BASE, layout).nodes is None  # no members named
    assert row_of({**BASE, "world": 1, "global_batch": 32}).nodes == 1  # one worker, one node
    for bad in ("w1", ["w0", "w0", "w1", "w2"], ["w0", "w1"], ["../x"] * 4, [1, 2, 3, 4], ["w1"] * 5000):
        with pytest.raises(ReportRefused, match="members="):
            row_of({**BASE, "members": bad}, layout)


def test_the_launcher_names_its_members_and_the_daemon_stores_the_nodes(tmp_path: Path) -> None:
    comment, secret = _channel(tmp_path)
    rep = Reporter(str(tmp_path / "job-1.reports"), "7", secret, every_s=1.0)
    rep.write("progress", 100.0, step=0, samples=0, epoch=0, epoch_size=1000, world=4, local_batch=32,
              members=("w0", "w1", "w2", "w3"))
    rep.write("progress", 102.0, step=10, samples=1280, epoch=0, epoch_size=1000, world=4, local_batch=32,
              members=("w0", "w1", "w2", "w3"))
    store = Store(tmp_path / "s.db")
    assert ingest(store, [_rec("7", {"n0": 2, "n1": 2}, comment)], report_limits(200.0), 200.0) == 2
    assert [r.nodes for r in store.progress_of("7")] == [2, 2]  # w0, w1 on n0; w2, w3 on n1 (block layout)
    store.add_workers("7", [("w0", "n0", "7"), ("w1", "n0", "7"), ("w2", "n5", "9"), ("w3", "n6", "10")])
    rep.write("progress", 104.0, step=20, samples=2560, epoch=0, epoch_size=1000, world=4, local_batch=32,
              members=("w0", "w1", "w2", "w3"))
    ingest(store, [_rec("7", {"n0": 2, "n1": 2}, comment)], report_limits(200.0), 200.0)
    assert store.progress_of("7")[-1].nodes == 3  # the recorded layout (satellites on n5, n6) wins


def test_step_points_come_from_clean_windows_only() -> None:
    rows = [
        ProgressRow(0.0, "progress", 0, 2, 64, None, nodes=1),
        ProgressRow(2.0, "progress", 640, 2, 64, 320.0, nodes=1),  # clean: 64 / 320 = 0.2 s
        ProgressRow(4.0, "progress", 1280, 2, 64, 320.0, nodes=1),
        ProgressRow(6.0, "progress", 1920, 2, 64, 160.0, nodes=1),  # an epoch-end evaluation: median holds
        ProgressRow(7.0, "resize", 2200, 4, 128, 50.0, pause_s=0.9, nodes=2),  # the pause is in it
        ProgressRow(7.5, "left", 2200, 4, 128, None),  # a leaver's farewell says nothing of the world
        ProgressRow(9.0, "progress", 3480, 4, 128, 640.0, nodes=2),  # clean after the resize: 0.2 s
        ProgressRow(10.0, "progress", 4000, 4, 256, 800.0, nodes=2),  # the batch changed: not clean
        ProgressRow(11.0, "progress", 4800, 4, 256, 800.0, nodes=None),  # nodes unknown
    ]
    assert step_points(rows) == (StepPoint(2, 1, 32, 0.2), StepPoint(4, 2, 32, 0.2))


def test_runtime_keeps_the_validation_metric() -> None:
    rows = [ProgressRow(1.0, "progress", 10, 1, 32, 10.0, loss=2.0), ProgressRow(2.0, "progress", 20, 1, 32, 10.0,
                                                                                   loss=1.5, metric=0.61)]
    rt = runtime_of(rows)
    assert rt is not None and rt.progress.val_metric == 0.61 and rt.progress.initial_loss == 2.0


def test_a_job_that_measured_itself_is_planned_with_its_own_model() -> None:
    """Two identical jobs on the default prior; the one whose launcher measured that it runs twice
    as slow as the prior says is planned with its own model (``cifar10~job8``), which predicts what
    it measured; the other keeps the prior and says so (``model_points == 0``)."""
    profiles = shipped_profiles()
    prior = profiles["cifar10"]
    nodes = [NodeRecord(NodeName(n), NodeState.UP, ("MIXED",), 4, (), (), ("gpu",)) for n in ("n0", "n1")]
    slow = [StepPoint(1, 1, 32, 2.0 * float(prior.t_iter(32, 1, 1))),
            StepPoint(2, 1, 32, 2.0 * float(prior.t_iter(64, 2, 1)))]
    from slurm_elastic.observe.job_reports import JobRuntime

    runtimes = {"8": JobRuntime(local_batch=32, step_points=tuple(slow))}
    snap = build_snapshot(nodes, [_rec("7", {"n0": 1}), _rec("8", {"n1": 2})], now=10.0, profiles=profiles,
                          progress=runtimes)
    mine, other = snap.job(JobId("8")), snap.job(JobId("7"))
    assert (other.model, other.model_points) == ("cifar10", 0)
    assert mine.model == "cifar10~job8" and mine.model_points == 2
    fitted = snap.profiles[mine.model]
    for p in slow:
        assert float(fitted.t_iter(p.k * p.local_batch, p.k, p.nodes)) == pytest.approx(p.step_time, rel=0.05)
    assert float(prior.t_iter(64, 2, 1)) < 0.6 * float(fitted.t_iter(64, 2, 1))


def test_a_store_of_schema_6_gains_the_nodes_column_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    Store(path).add_progress("7", ProgressRow(1.0, "progress", 10, 2, 64, 5.0, nodes=1))
    db = sqlite3.connect(path)
    for column in ("nodes", "model", "params", "epochs", "submitted_epochs", "submitted_local_batch"):  # not in 6
        db.execute(f"ALTER TABLE progress DROP COLUMN {column}")
    db.execute("UPDATE meta SET value='6' WHERE key='schema'")
    db.commit()
    db.close()
    store = Store(path)
    assert SCHEMA_VERSION >= 7 and store.progress_of("7") == [ProgressRow(1.0, "progress", 10, 2, 64, 5.0)]


def _finished(store: Store, job: str, epochs: int, epoch_size: int = 1000, t0: float = 0.0) -> None:
    """A launcher job that trained ``epochs`` epochs: a report every half epoch, loss falling, metric rising."""
    rows = [ProgressRow(t0 + i, "progress", i * epoch_size // 2, 2, 64, 100.0, loss=2.0 / (1 + i),
                        epoch_size=epoch_size, metric=min(0.95, 0.1 * (i // 2)) if i >= 2 else None)
            for i in range(2 * epochs)]
    rows.append(ProgressRow(t0 + 2 * epochs, "end", epochs * epoch_size, 2, 64, epoch_size=epoch_size))
    store.add_reports(job, rows, 0)


def test_history_of_a_finished_job_and_none_of_one_that_did_not_finish() -> None:
    from slurm_elastic.observe.history import POINTS_PER_JOB, history_of

    rows = [ProgressRow(0.0, "progress", 0, 2, 64, loss=2.5, epoch_size=100),
            ProgressRow(1.0, "progress", 50, 2, 64, 10.0, loss=2.0, epoch_size=100),
            ProgressRow(2.0, "progress", 100, 2, 64, 10.0, loss=1.0, metric=0.4, epoch_size=100),
            ProgressRow(3.0, "left", 100, 2, 64),
            ProgressRow(4.0, "progress", 150, 1, 64, 10.0, loss=0.5, epoch_size=100)]
    assert history_of(rows) is None  # no end yet
    h = history_of([*rows, ProgressRow(5.0, "end", 200, 1, 64, epoch_size=100)])
    assert h is not None and (h.epoch_size, h.initial_loss, h.total_samples) == (100.0, 2.5, 200.0)
    assert h.points == ((50.0, 2.0, 0.0), (100.0, 1.0, 0.4), (150.0, 0.5, 0.4))  # metric 0 until the first
    long = [ProgressRow(float(i), "progress", i + 1, 1, 1, 1.0, loss=1.0, epoch_size=10) for i in range(500)]
    h = history_of([*long, ProgressRow(600.0, "end", 1000, 1, 1)])
    assert h is not None and len(h.points) == POINTS_PER_JOB  # bounded, evenly spaced
    assert history_of([ProgressRow(0.0, "progress", 5, 1, 1, loss=0.0, epoch_size=10),
                       ProgressRow(1.0, "end", 10, 1, 1)]) is None  # no positive first loss


def _completed(*jobs: str) -> list[JobRecord]:
    """Slurm's records of launcher jobs that completed (what makes their history count)."""
    from dataclasses import replace

    return [replace(_rec(j, {"n0": 1}, comment="slurm-elastic-orders=/gone.orders"), state=JobState.FINISHED,
                    slurm_state=("COMPLETED",), user=f"user{j}") for j in jobs]


def test_the_progress_model_is_learned_from_finished_jobs_kept_and_refitted_as_history_grows(tmp_path: Path) -> None:
    from slurm_elastic.observe.history import ProgressLearner

    store = Store(tmp_path / "s.db")
    learner = ProgressLearner(store)
    for j in range(2):
        _finished(store, f"{j + 1}", epochs=4)
    assert learner.current(_completed("1", "2")) is None and learner.summary()["source"] == "prior"  # 2 < 3 jobs
    _finished(store, "3", epochs=4)
    assert learner.current() is None  # ended by its own report: Slurm has not shown it completed
    store.quarantine("9", "forged reports", 1.0)
    _finished(store, "9", epochs=40)  # a quarantined job's reports are never history
    model = learner.current(_completed("1", "2", "3", "9"))
    assert model is not None and learner.summary()["jobs"] == 3 and learner.summary()["error"] is not None
    assert learner.current(_completed("1", "2", "3", "9")) is model  # not refitted until the history grows by 10 %
    # every job trained 4 epochs: the fitted model expects about 2 epochs to go at epoch 2 (half done)
    from slurm_elastic_predictor.progress import ProgressPoint

    at_half = ProgressPoint(1000.0, 2.0, 2000.0, 1.0 - (2.0 / 5) / 2.0, 0.2)
    assert 0.3 < float(model.mean_progress(at_half.vector())) < 0.7
    again = ProgressLearner(Store(tmp_path / "s.db", read_only=True), writes=False)
    kept = again.current()
    assert kept is not None and kept.weights == model.weights and again.summary() == learner.summary()
    _finished(store, "4", epochs=4)
    assert learner.current(_completed("4")) is not model and learner.summary()["jobs"] == 4


def test_status_and_metrics_show_what_is_predicted_beside_what_is_measured() -> None:
    from slurm_elastic.core.remaining import outlook
    from slurm_elastic.daemon_metrics import Metrics
    from slurm_elastic.observe.job_reports import JobRuntime

    profiles = shipped_profiles()
    nodes = [NodeRecord(NodeName(n), NodeState.UP, ("MIXED",), 4, (), (), ("gpu",)) for n in ("n0", "n1")]
    runtimes = {"8": JobRuntime(local_batch=32, observed_throughput=100.0, samples_processed=2000, epoch_size=1000,
                                target_epochs=4.0, step_points=(StepPoint(2, 1, 32, 0.64),))}
    snap = build_snapshot(nodes, [_rec("7", {"n0": 1}), _rec("8", {"n1": 2})], now=10.0, profiles=profiles,
                          progress=runtimes)
    mine, other = outlook(snap, snap.job(JobId("8"))), outlook(snap, snap.job(JobId("7")))
    assert mine["model_points"] == 1 and mine["measured_throughput"] == 100.0
    assert mine["predicted_throughput"] == pytest.approx(64 / 0.64, rel=0.05)
    assert mine["remaining_s"] == pytest.approx(2000 / 100.0)  # 2 epochs of 4 done, 100 samples/s
    assert other["model_points"] == 0 and other["remaining_s"] is None  # no epochs declared, no fitted model
    m = Metrics(show_identities=True)
    from slurm_elastic.core.model import Plan
    from slurm_elastic.core.rounds import RoundRecord

    m.observe_round(RoundRecord(snap, Plan("dp", ()), (), (), (), None), 0.1)
    m.observe_progress_model({"source": "fitted", "jobs": 12, "points": 300, "error": 0.07})
    text = m.render()
    assert 'slurm_elastic_job_model_points{job="8",user="' in text and "slurm_elastic_progress_model_jobs 12" in text
    assert 'what="measured"} 100.000' in text and 'slurm_elastic_job_remaining_seconds{job="8"' in text
