"""Job identity (issue 15, part 3b): the launcher reports the model's name and parameter count, and
the daemon plans a job with the throughput profile of the model it names.

Each test fails before the change: reports carried neither ``model`` nor ``params``, rows and the
store had no place for them, ``runtime_of`` never filled ``JobRuntime.model``, so every launcher job
was planned with the site's default model; and a ``JobRuntime.model`` without a profile failed the
job's snapshot.
"""

from __future__ import annotations

import getpass
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from slurm_elastic.core.model import JobId, NodeName, NodeState
from slurm_elastic.observe.job_reports import ReportRefused, ingest, row_of, runtime_of, runtimes
from slurm_elastic.observe.snapshot import build_snapshot
from slurm_elastic.slurm.records import NodeRecord
from slurm_elastic.store import SCHEMA_VERSION, ProgressRow, Store
from slurm_elastic.testing import report_limits, shipped_profiles
from slurm_elastic_launcher.orders import PARAMS_MAX, sign_report
from slurm_elastic_launcher.reports import Reporter, parameter_count
from slurm_elastic_predictor.calibrate import StepPoint, calibrate
from slurm_elastic_predictor.throughput import ThroughputModel

from .test_hostile_job_input import SECRET, job_files
from .test_learning import _rec

USER = getpass.getuser()
BASE = {"kind": "progress", "t": 1.0, "samples": 10, "world": 4, "global_batch": 128, "throughput": 100.0}


def _nodes() -> list[NodeRecord]:
    return [NodeRecord(NodeName(n), NodeState.UP, ("MIXED",), 4, (), (), ("gpu",)) for n in ("n0", "n1", "n2")]


def _measured(truth: ThroughputModel, slower: float = 2.0) -> list[StepPoint]:
    """What a job ``slower`` times slower than ``truth`` measures at 1 and 2 GPUs of one node, 32 per GPU."""
    return [StepPoint(k, 1, 32, slower * float(truth.t_iter(32 * k, k, 1))) for k in (1, 2)]


def _rows(points: list[StepPoint], **identity: Any) -> list[ProgressRow]:
    """A launcher job's rows that measured ``points`` (two reports per configuration: the second is clean)."""
    out: list[ProgressRow] = []
    t, samples = 0.0, 0
    for p in points:
        batch = p.k * p.local_batch
        for throughput in (None, batch / p.step_time):
            t, samples = t + 2.0, samples + 10 * batch
            out.append(ProgressRow(t, "progress", samples, p.k, batch, throughput, nodes=p.nodes, **identity))
    return out


# -- the launcher's side ----------------------------------------------------------------------------


def test_rank0_reports_name_the_model_and_its_parameter_count_and_a_left_report_does_not(tmp_path: Path) -> None:
    path = tmp_path / "job.reports"
    rep = Reporter(str(path), "7", SECRET, every_s=1.0, model="resnet18", params=11_689_512)
    rep.write("progress", 1.0, step=1, samples=32, epoch=0, epoch_size=100, world=1, local_batch=32, members=("w0",))
    rep.write("left", 2.0, step=1, samples=32, epoch=0, epoch_size=100, world=1, local_batch=32, worker="w1")
    progress, left = (json.loads(line) for line in path.read_text().splitlines())
    assert (progress["model"], progress["params"]) == ("resnet18", 11_689_512)
    assert "model" not in left and "params" not in left


def test_without_a_name_or_a_count_the_reports_carry_neither(tmp_path: Path) -> None:
    path = tmp_path / "job.reports"
    Reporter(str(path), "7", SECRET, every_s=1.0).write("progress", 1.0, step=1, samples=32, epoch=0,
                                                        epoch_size=100, world=1, local_batch=32)
    body = json.loads(path.read_text())
    assert "model" not in body and "params" not in body
    assert row_of(body).model is None and row_of(body).params is None


@pytest.mark.parametrize(("model", "params", "rule"), [
    ("resnet 18", None, "model='resnet 18': must be a string of 1 to 64"),
    ("x" * 65, None, "must be a string of 1 to 64"),
    (None, 0, "params=0: must be an integer in 1..10**13"),
    (None, PARAMS_MAX + 1, "params=10000000000001: must be an integer in 1..10**13"),
], ids=["space", "65 chars", "zero", "too many"])
def test_the_reporter_refuses_an_identity_the_daemon_would_refuse(tmp_path: Path, model: Any, params: Any,
                                                                  rule: str) -> None:
    with pytest.raises(ValueError, match=rule.replace("*", r"\*").replace(".", r"\.")):
        Reporter(str(tmp_path / "r"), "7", SECRET, every_s=1.0, model=model, params=params)


class _Tensor:
    def __init__(self, n: int) -> None:
        self.n = n

    def numel(self) -> int:
        return self.n


class _Module:
    def __init__(self, *sizes: int) -> None:
        self.sizes = sizes

    def parameters(self) -> list[_Tensor]:
        return [_Tensor(n) for n in self.sizes]


def test_the_parameter_count_is_the_sum_of_numel_or_none() -> None:
    assert parameter_count(_Module(10, 20, 3)) == 33
    assert parameter_count(_Module()) is None  # no parameters: nothing the daemon would accept
    assert parameter_count(_Module(PARAMS_MAX, 1)) is None  # more than a report may carry
    assert parameter_count(object()) is None  # not a module


def test_the_parameter_count_of_a_torch_module() -> None:
    torch = pytest.importorskip("torch")
    shared = torch.nn.Linear(3, 2)
    model = torch.nn.Sequential(shared, torch.nn.ReLU(), shared, torch.nn.Linear(2, 5))
    assert parameter_count(model) == (3 * 2 + 2) + (2 * 5 + 5)  # a shared layer counts once


# -- the daemon's parser and store ------------------------------------------------------------------


def test_a_report_row_keeps_the_model_and_params() -> None:
    row = row_of({**BASE, "model": "resnet18", "params": 11_689_512})
    assert (row.model, row.params) == ("resnet18", 11_689_512)
    assert row_of({**BASE, "model": None, "params": None}).model is None  # null: as absent


HOSTILE: dict[str, tuple[str, Any, str]] = {
    "empty name": ("model", "", "model='': must be a string of 1 to 64 of A-Z a-z 0-9 _ . -"),
    "path": ("model", "../../etc/passwd", "model='../../etc/passwd': must be a string of 1 to 64"),
    "65 chars": ("model", "a" * 65, "must be a string of 1 to 64"),
    "100k chars": ("model", "x" * 100_000, "model='xxxx"),  # the reason is short, whatever the value
    "non-ascii": ("model", "rés", "model='rés': must be a string"),
    "newline": ("model", "a\nb", "must be a string of 1 to 64"),
    "int name": ("model", 7, "model=7: must be a string"),
    "list name": ("model", ["resnet18"], "model=\\['resnet18'\\]: must be a string"),
    "object name": ("model", {"x": 1}, "must be a string"),
    "bool name": ("model", True, "model=True: must be a string"),
    "zero": ("params", 0, "params=0: must be an integer in 1..10\\*\\*13"),
    "negative": ("params", -5, "params=-5: must be an integer in 1..10\\*\\*13"),
    "too many": ("params", 10**13 + 1, "params=10000000000001: must be an integer in 1..10\\*\\*13"),
    "4000 digits": ("params", 10**4000, "params=an integer of 13288 bits: must be an integer"),
    "float": ("params", 1.5e6, "params=1500000.0: must be an integer"),
    "nan": ("params", float("nan"), "params=nan: must be an integer"),
    "string count": ("params", "1000", "params='1000': must be an integer"),
    "bool count": ("params", True, "params=True: must be an integer"),
    "list count": ("params", [1], "params=\\[1\\]: must be an integer"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_model_or_params_is_refused_naming_the_value_and_the_rule(case: str) -> None:
    field, value, rule = HOSTILE[case]
    with pytest.raises(ReportRefused, match=rule) as exc:
        row_of({**BASE, field: value})
    assert len(str(exc.value)) < 200


def test_a_hostile_identity_quarantines_its_job_only(tmp_path: Path) -> None:
    records = []
    for job, name in (("7", "x" * 65), ("8", "resnet18")):
        comment = job_files(tmp_path, f"job-{job}")
        body = {**BASE, "job_id": job, "world": 1, "global_batch": 32, "model": name, "params": 11_689_512}
        (tmp_path / f"job-{job}.reports").write_text(sign_report(body, SECRET) + "\n")
        records.append(_rec(job, {f"n{job}": 1}, comment))
    store = Store(tmp_path / "s.db")
    assert ingest(store, records, report_limits(100.0), 100.0) == 1
    assert set(store.quarantined()) == {"7"}
    assert "model='xxx" in store.quarantined()["7"] and "must be a string of 1 to 64" in store.quarantined()["7"]
    assert store.progress_of("7") == []
    assert set(runtimes(store, records)) == {"8"} and runtimes(store, records)["8"].model == "resnet18"


def test_the_store_keeps_the_identity_of_each_row(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    rows = [ProgressRow(1.0, "progress", 10, 1, 32, model="resnet18", params=11_689_512),
            ProgressRow(2.0, "progress", 20, 1, 32)]
    store.add_reports("7", rows, 0)
    assert Store(tmp_path / "s.db").progress_of("7") == rows


def test_a_store_of_schema_7_gains_the_identity_columns_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    Store(path).add_progress("7", ProgressRow(1.0, "progress", 10, 2, 64, 5.0, nodes=1, model="m", params=5))
    db = sqlite3.connect(path)
    db.execute("ALTER TABLE progress DROP COLUMN model")
    db.execute("ALTER TABLE progress DROP COLUMN params")
    for column in ("epochs", "submitted_epochs", "submitted_local_batch"):  # schema 10's
        db.execute(f"ALTER TABLE progress DROP COLUMN {column}")
    db.execute("UPDATE meta SET value='7' WHERE key='schema'")
    db.commit()
    db.close()
    store = Store(path)
    assert SCHEMA_VERSION == 10 and store.progress_of("7") == [ProgressRow(1.0, "progress", 10, 2, 64, 5.0, nodes=1)]
    store.add_progress("7", ProgressRow(2.0, "progress", 20, 2, 64, 5.0, nodes=1, model="m", params=5))
    assert store.progress_of("7")[-1].model == "m" and store.progress_of("7")[-1].params == 5
    assert sqlite3.connect(path).execute("SELECT value FROM meta WHERE key='schema'").fetchone() == ("10",)


# -- runtime and snapshot ---------------------------------------------------------------------------


def test_the_runtime_takes_the_model_of_the_latest_report_that_names_one() -> None:
    rows = [ProgressRow(1.0, "progress", 10, 1, 32, 10.0, model="cnn", params=20_000),
            ProgressRow(2.0, "progress", 20, 1, 32, 10.0, model="resnet18", params=11_689_512),
            ProgressRow(3.0, "progress", 30, 1, 32, 10.0),  # names none: the last name holds
            ProgressRow(4.0, "left", 30, 1, 32, model="other", params=5)]  # a leaver's farewell: not the job's
    rt = runtime_of(rows)
    assert rt is not None and (rt.model, rt.params) == ("resnet18", 11_689_512)
    unnamed = runtime_of([ProgressRow(1.0, "progress", 10, 1, 32, 10.0)])
    assert unnamed is not None and (unnamed.model, unnamed.params) == (None, None)


def test_a_job_whose_training_ended_is_not_offered_growth() -> None:
    """Its workers are exiting: a grow planned for it would be refused by the actuator (a no-op round
    that once raced a real-cluster test)."""
    rows = [ProgressRow(1.0, "progress", 10, 2, 64, 5.0, nodes=1), ProgressRow(2.0, "end", 20, 2, 64, nodes=1)]
    ended, training = runtime_of(rows), runtime_of(rows[:1])
    assert ended is not None and training is not None and not ended.can_grow and training.can_grow
    assert runtime_of([*rows, ProgressRow(3.0, "left", 20, 2, 64)]).can_grow is False  # type: ignore[union-attr]


def test_a_job_naming_a_profiled_model_is_planned_with_that_profile_as_its_prior() -> None:
    profiles = shipped_profiles()
    points = _measured(profiles["imagenet"])
    rts = {"7": runtime_of(_rows(points[:1], model="imagenet")),  # one configuration: fitted from it
           "8": runtime_of(_rows(points, model="imagenet", params=25_557_032)),
           "9": runtime_of(_rows(points))}  # names no model: the default's, as today
    progress = {k: v for k, v in rts.items() if v is not None}
    assert len(progress) == 3
    snap = build_snapshot(_nodes(), [_rec("8", {"n0": 2}), _rec("9", {"n1": 2}), _rec("7", {"n2": 1})], now=10.0,
                          profiles=profiles, progress=progress)
    mine, other = snap.job(JobId("8")), snap.job(JobId("9"))
    assert mine.model == "imagenet~job8" and mine.model_points == 2
    assert other.model == "cifar10~job9"
    assert snap.job(JobId("7")).model == "imagenet~job7"
    expected = calibrate(profiles["imagenet"], points, name="imagenet~job8").model  # the profile as is
    fitted = snap.profiles["imagenet~job8"]
    for k in (1, 2, 4):
        assert float(fitted.t_iter(32 * k, k, 1)) == pytest.approx(float(expected.t_iter(32 * k, k, 1)))
    for p in points:
        assert float(fitted.t_iter(p.k * p.local_batch, p.k, p.nodes)) == pytest.approx(p.step_time, rel=0.05)
    assert progress["8"].params == 25_557_032


def test_a_job_naming_a_profiled_model_without_measurements_is_planned_with_the_profile_as_is() -> None:
    profiles = shipped_profiles()
    rows = [ProgressRow(1.0, "progress", 10, 2, 64, None, model="bert", nodes=1)]
    rt = runtime_of(rows)
    assert rt is not None
    snap = build_snapshot(_nodes(), [_rec("8", {"n0": 2})], now=10.0, profiles=profiles, progress={"8": rt})
    job = snap.job(JobId("8"))
    assert (job.model, job.model_points) == ("bert", 0) and job.epoch_size == 88_641  # bert's defaults


def test_a_job_naming_a_model_without_a_profile_is_planned_as_one_naming_none() -> None:
    profiles = shipped_profiles()
    points = _measured(profiles["cifar10"], slower=3.0)
    named, unnamed = runtime_of(_rows(points, model="mystery-net.v2", params=123)), runtime_of(_rows(points))
    assert named is not None and unnamed is not None and named.model == "mystery-net.v2"
    records = [_rec("81", {"n0": 2}), _rec("82", {"n1": 2})]
    refused: dict[str, str] = {}
    snap = build_snapshot(_nodes(), records, now=10.0, profiles=profiles,
                          progress={"81": named, "82": unnamed}, refused=refused)
    assert not refused  # never refused, never quarantined
    a, b = snap.job(JobId("81")), snap.job(JobId("82"))
    assert (a.model, a.model_points) == ("cifar10~job81", 2) and b.model == "cifar10~job82"
    fa, fb = snap.profiles[a.model], snap.profiles[b.model]
    for k in (1, 2, 4):  # the same fit as a job that names no model (prior_batch stretch included)
        assert float(fa.t_iter(32 * k, k, 1)) == pytest.approx(float(fb.t_iter(32 * k, k, 1)))
    # without measurements: the default model as is, as today
    bare = runtime_of([ProgressRow(1.0, "progress", 10, 2, 64, None, model="mystery-net.v2", nodes=1)])
    assert bare is not None
    snap = build_snapshot(_nodes(), records[:1], now=10.0, profiles=profiles, progress={"81": bare})
    assert snap.job(JobId("81")).model == "cifar10"


def test_the_model_a_launcher_names_reaches_the_plan(tmp_path: Path) -> None:
    """Reporter -> signed report file -> ingest -> store -> runtimes -> snapshot."""
    comment = job_files(tmp_path, "job-1")
    rep = Reporter(str(tmp_path / "job-1.reports"), "7", SECRET, every_s=1.0, model="imagenet", params=25_557_032)
    rep.write("progress", 100.0, step=0, samples=0, epoch=0, epoch_size=1000, world=2, local_batch=32,
              members=("w0", "w1"))
    rep.write("progress", 102.0, step=10, samples=640, epoch=0, epoch_size=1000, world=2, local_batch=32,
              members=("w0", "w1"))
    store = Store(tmp_path / "s.db")
    records = [_rec("7", {"n0": 2}, comment)]
    assert ingest(store, records, report_limits(200.0), 200.0) == 2 and not store.quarantined()
    rt = runtimes(store, records)["7"]
    assert (rt.model, rt.params) == ("imagenet", 25_557_032)
    snap = build_snapshot(_nodes(), records, now=200.0, profiles=shipped_profiles(), progress={"7": rt})
    assert snap.job(JobId("7")).model.startswith("imagenet")
