"""Unit tests of the pure Slurm JSON readers (:mod:`slurm_elastic.slurm.json_records` and friends), snapshot builder.

Three sources: the real Slurm 25.11.7 recordings in ``tests/fixtures/slurm-json/25.11`` (values
checked by reading the files), the real Slurm 22.05 recordings in ``…/22.05`` (skipped until they
are recorded), and synthetic minimal documents in both dialects that reach every field and error.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from slurm_elastic.contract import ContractError, parse_elastic_request
from slurm_elastic.core.model import ElasticMode, JobId, JobState, NodeName, NodeState
from slurm_elastic.observe.job_reports import JobRuntime
from slurm_elastic.observe.snapshot import build_snapshot
from slurm_elastic.slurm.dialects import (
    JsonDialect,
    SlurmJsonError,
    UnsupportedSlurmVersion,
    detect_version,
    map_job_state,
    map_node_state,
)
from slurm_elastic.slurm.hostlist import (
    expand_hostlist,
    parse_gres,
    parse_gres_detail,
    parse_index_list,
    parse_tres_gpus,
)
from slurm_elastic.slurm.json_records import parse_jobs, parse_nodes, parse_sacct
from slurm_elastic.slurm.records import GpuRequest
from slurm_elastic.testing import shipped_profiles

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm-json"
NOW = 1_795_305_900


def load(version: str, name: str) -> dict[str, Any]:
    with (FIXTURES / version / name).open() as f:
        doc: dict[str, Any] = json.load(f)
    return doc


# ------------------------------------------------------------------------------------------------
# Synthetic documents

def meta_2205(plugin: str = "openapi/v0.0.38") -> dict[str, Any]:
    return {"plugin": {"type": plugin, "name": "Slurm OpenAPI v0.0.38"},
            "Slurm": {"version": {"major": 22, "micro": 8, "minor": 5}, "release": "22.05.8"}}


def meta_2511(parser: str = "data_parser/v0.0.44") -> dict[str, Any]:
    return {"plugin": {"type": "", "name": "", "data_parser": parser, "accounting_storage": ""},
            "command": ["squeue"],
            "slurm": {"version": {"major": "25", "micro": "7", "minor": "11"}, "release": "25.11.7", "cluster": "c"}}


def num(n: int, *, set_: bool = True, infinite: bool = False) -> dict[str, Any]:
    return {"set": set_, "infinite": infinite, "number": n}


def job_2205(**over: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "job_id": 5, "name": "train", "job_state": "RUNNING", "user_name": "alice", "account": "proj",
        "partition": "gpu", "submit_time": 100, "start_time": 110, "resize_time": 0, "nodes": "n[01-02]",
        "node_count": 2, "tasks": 2, "gres_detail": ["gpu:v100:2(IDX:0-1)", "gpu:v100:1(IDX:3)"],
        "tres_per_node": None, "tres_per_job": "gres:gpu:3", "tres_per_task": None,
        "admin_comment": "slurm-elastic gpus=2:8 batch=64:512 mode=endo", "comment": None, "batch_host": "n01",
        "restart_cnt": 0, "array_job_id": 0, "array_task_id": None, "array_task_string": None,
        "het_job_id": 0, "het_job_offset": 0,
    }
    job.update(over)
    return job


def job_2511(**over: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "job_id": 7, "name": "train", "job_state": ["RUNNING"], "user_name": "bob", "account": "lab",
        "partition": "gpu", "submit_time": num(200), "start_time": num(210), "resize_time": num(0),
        "nodes": "n03", "node_count": num(1), "tasks": num(1), "gres_detail": ["gpu:v100:2(IDX:1-2)"],
        "tres_per_node": "gres/gpu:v100:2", "tres_per_job": "", "tres_per_task": "",
        "admin_comment": "", "comment": "", "batch_host": "n03", "restart_cnt": 0,
        "array_job_id": num(0), "array_task_id": num(0, set_=False), "array_task_string": "",
        "het_job_id": num(0), "het_job_offset": num(0),
    }
    job.update(over)
    return job


def squeue_2205(*jobs: dict[str, Any]) -> dict[str, Any]:
    return {"meta": meta_2205(), "errors": [], "jobs": list(jobs)}


def squeue_2511(*jobs: dict[str, Any]) -> dict[str, Any]:
    return {"jobs": list(jobs), "last_backfill": num(0), "last_update": num(0), "meta": meta_2511(),
            "errors": [], "warnings": []}


def node_2205(name: str, state: str = "mixed", flags: tuple[str, ...] = (), gres: str | None = "gpu:v100:4",
              used: str | None = "gpu:v100:0(IDX:N/A)", partitions: tuple[str, ...] = ("gpu",)) -> dict[str, Any]:
    return {"name": name, "state": state, "state_flags": list(flags), "gres": gres, "gres_used": used,
            "gres_drained": "N/A", "partitions": list(partitions), "reason": None}


def sinfo_2205(*nodes: dict[str, Any]) -> dict[str, Any]:
    return {"meta": meta_2205(), "errors": [], "nodes": list(nodes)}


def sinfo_row_2511(name: str, state: tuple[str, ...] = ("IDLE",), total: str = "gpu:v100:4",
                   used: str = "gpu:v100:0(IDX:N/A)", partition: str = "gpu") -> dict[str, Any]:
    return {"node": {"state": list(state)}, "nodes": {"nodes": [name], "total": 1},
            "gres": {"total": total, "used": used}, "partition": {"name": partition},
            "reason": {"description": "", "time": 0, "user": ""}}


def sinfo_2511(*rows: dict[str, Any]) -> dict[str, Any]:
    meta = meta_2511()
    meta["command"] = ["sinfo", "-N"]
    return {"sinfo": list(rows), "meta": meta, "errors": [], "warnings": []}


def sacct_job_2205(**over: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "job_id": 5, "name": "train", "user": "alice", "account": "proj", "partition": "gpu",
        "state": {"current": "COMPLETED", "reason": "None"},
        "time": {"elapsed": 90, "submission": 100, "start": 110, "end": 200, "limit": None},
        "tres": {"allocated": [{"type": "cpu", "name": None, "id": 1, "count": 2},
                               {"type": "gres", "name": "gpu", "id": 1001, "count": 3}], "requested": []},
        "nodes": "n[01-02]", "comment": {"administrator": "slurm-elastic gpus=2:8", "job": None, "system": None},
        "array": {"job_id": 0, "task_id": None, "task": None}, "het": {"job_id": 0, "job_offset": None},
    }
    job.update(over)
    return job


# ------------------------------------------------------------------------------------------------
# Real 25.11 recordings


def test_2511_fixture_versions() -> None:
    for name in ("squeue.json", "sinfo.json", "sinfo_N.json", "sacct.json", "scontrol_show_job.json",
                 "scontrol_show_node.json"):
        v = detect_version(load("25.11", name))
        assert (v.dialect, v.plugin, v.release) == (JsonDialect.DATA_PARSER, "data_parser/v0.0.44", (25, 11, 7))


def test_2511_squeue_jobs() -> None:
    jobs = {str(j.job_id): j for j in parse_jobs(load("25.11", "squeue.json"))}
    assert sorted(jobs) == ["10", "11", "9"]
    j9, j10, j11 = jobs["9"], jobs["10"], jobs["11"]
    # job 9: -N2 --gres=gpu:2, comment and AdminComment "elastic=2:4"
    assert (j9.state, j9.slurm_state, j9.user, j9.account, j9.partition) == (
        JobState.RUNNING, ("RUNNING",), "root", "root", "gpu")
    assert j9.nodes == ("s01", "s02") and j9.node_count == 2 and j9.batch_host == "s01"
    assert j9.gpus == (("s01", (0, 1)), ("s02", (0, 1)))
    assert j9.gpu_request == GpuRequest(per_node=2) and j9.requested_gpus == 4 and j9.allocated_gpus == 4
    assert (j9.admin_comment, j9.comment) == ("elastic=2:4", "user comment")
    assert (j9.submit_time, j9.start_time, j9.resize_time) == (1795305873, 1795305873, None)
    assert (j9.array_job_id, j9.array_task_id, j9.het_job_id, j9.het_job_offset) == (None, None, None, None)
    # job 10: -N2 --gpus=3 -> split 2 + 1
    assert j10.gpus == (("s03", (0, 1)), ("s04", (0,)))
    assert j10.gpu_request == GpuRequest(per_job=3) and j10.requested_gpus == 3
    # job 11: pending -N4 --gpus-per-node=4
    assert (j11.state, j11.nodes, j11.gpus, j11.batch_host, j11.start_time) == (
        JobState.PENDING, (), (), None, None)
    assert j11.gpu_request == GpuRequest(per_node=4) and j11.requested_gpus == 16


def test_2511_old_style_admin_comment_is_a_rigid_job() -> None:
    j9 = parse_jobs(load("25.11", "squeue.json"))[0]
    assert j9.admin_comment == "elastic=2:4"
    assert parse_elastic_request(j9.admin_comment, job_id=j9.job_id) is None


def test_2511_scontrol_show_job_matches_squeue() -> None:
    (j,) = parse_jobs(load("25.11", "scontrol_show_job.json"))
    sq = parse_jobs(load("25.11", "squeue.json"))[0]
    assert j == sq


def test_2511_sinfo_per_node_merges_partitions() -> None:
    nodes = parse_nodes(load("25.11", "sinfo_N.json"))
    assert [n.name for n in nodes] == ["s01", "s02", "s03", "s04"]
    for n in nodes:
        assert (n.state, n.slurm_state, n.gpus, n.gpu_types, n.partitions) == (
            NodeState.UP, ("MIXED", "PLANNED"), 4, ("v100",), ("gpu", "urgent"))
    assert [n.used_gpus for n in nodes] == [(0, 1), (0, 1), (0, 1), (0,)]
    assert nodes[3].free_gpus == (1, 2, 3)


def test_2511_scontrol_show_node() -> None:
    (n,) = parse_nodes(load("25.11", "scontrol_show_node.json"))
    assert (n.name, n.state, n.slurm_state, n.gpus, n.used_gpus, n.partitions) == (
        "s01", NodeState.UP, ("MIXED",), 4, (0, 1), ("gpu", "urgent"))


def test_2511_grouped_sinfo_is_refused_with_the_fix() -> None:
    with pytest.raises(SlurmJsonError, match=r"sinfo --json: sinfo\[0\]: key 'nodes.nodes': lists 3 nodes .*sinfo -N"):
        parse_nodes(load("25.11", "sinfo.json"))


def test_2511_sacct() -> None:
    recs = {str(r.job_id): r for r in parse_sacct(load("25.11", "sacct.json"))}
    assert sorted(recs) == ["10", "9"]
    r9 = recs["9"]
    assert (r9.state, r9.user, r9.account, r9.partition, r9.nodes) == (
        JobState.RUNNING, "root", "root", "gpu", ("s01", "s02"))
    assert (r9.submit_time, r9.start_time, r9.end_time, r9.elapsed) == (1795305873, 1795305873, None, 26)
    assert r9.allocated_gpus == 4 and recs["10"].allocated_gpus == 3
    assert r9.admin_comment == ""  # AdminComment reaches sacct when the job ends


def test_2511_snapshot_from_recordings() -> None:
    snap = build_snapshot(parse_nodes(load("25.11", "sinfo_N.json")), parse_jobs(load("25.11", "squeue.json")),
                          now=NOW, profiles=shipped_profiles())
    assert [(n.name, n.free_gpus) for n in snap.nodes] == [
        ("s01", (2, 3)), ("s02", (2, 3)), ("s03", (2, 3)), ("s04", (1, 2, 3))]
    assert [(j.job_id, j.elastic, j.state, j.num_gpus, j.requested_gpus) for j in snap.jobs] == [
        ("9", False, JobState.RUNNING, 4, 4), ("10", False, JobState.RUNNING, 3, 3),
        ("11", False, JobState.PENDING, 0, 16)]
    # rigid GPUs are held, hence not schedulable; only the 9 free GPUs are
    assert len(snap.schedulable_gpus()) == 9 and not snap.elastic_jobs()


# ------------------------------------------------------------------------------------------------
# Real 22.05 recordings (recorded by the dev-cluster bring-up)

V2205 = FIXTURES / "22.05"
needs_2205 = pytest.mark.skipif(
    not all((V2205 / f).is_file() for f in ("squeue.json", "sinfo.json", "sacct.json")),
    reason="22.05 recordings not yet saved to tests/fixtures/slurm-json/22.05/{squeue,sinfo,sacct}.json",
)


@needs_2205
def test_2205_fixture_versions() -> None:
    for name in ("squeue.json", "sinfo.json", "sacct.json"):
        v = detect_version(load("22.05", name))
        assert v.dialect is JsonDialect.OPENAPI_V0038 and v.release[:2] == (22, 5)


@needs_2205
def test_2205_squeue_recording() -> None:
    jobs = {str(j.job_id): j for j in parse_jobs(load("22.05", "squeue.json"))}
    assert sorted(jobs) == ["1", "2", "3", "4", "5"]
    # 22.05 lists finished jobs until MinJobAge
    assert (jobs["1"].state, jobs["1"].slurm_state) == (JobState.FINISHED, ("COMPLETED",))
    j2 = jobs["2"]
    assert (j2.state, j2.nodes, j2.batch_host, j2.start_time) == (JobState.RUNNING, ("n01", "n02"), "n01", 1795310960)
    assert j2.gpus == (("n01", (0, 1)), ("n02", (0, 1))) and j2.gpu_request == GpuRequest(per_node=2)
    assert j2.admin_comment == "slurm-elastic gpus=2:8 mode=exo"
    assert jobs["3"].gpus == (("n03", (0, 1)), ("n04", (0,))) and jobs["3"].gpu_request == GpuRequest(per_job=3)
    j4 = jobs["4"]  # shrunk from 2 nodes to one GPU on n01
    assert (j4.gpus, j4.gpu_request.per_node, j4.resize_time) == ((("n01", (2,)),), 1, 1795310960)
    j5 = jobs["5"]  # pending; 22.05 prints the expected start in start_time and "" for unset strings
    assert (j5.state, j5.nodes, j5.batch_host, j5.requested_gpus, j5.start_time) == (
        JobState.PENDING, (), None, 16, 1826846960)


@needs_2205
def test_2205_sinfo_recording() -> None:
    nodes = parse_nodes(load("22.05", "sinfo.json"))
    assert [(n.name, n.state, n.gpus, n.used_gpus, n.partitions) for n in nodes] == [
        ("n01", NodeState.UP, 4, (0, 1, 2), ("gpu", "urgent")), ("n02", NodeState.UP, 4, (0, 1), ("gpu", "urgent")),
        ("n03", NodeState.UP, 4, (0, 1), ("gpu", "urgent")), ("n04", NodeState.UP, 4, (0,), ("gpu", "urgent"))]


@needs_2205
def test_2205_sacct_recording() -> None:
    recs = parse_sacct(load("22.05", "sacct.json"))
    assert [(r.job_id, r.slurm_state, r.state, r.allocated_gpus, r.nodes) for r in recs] == [
        ("4", ("RESIZING",), JobState.FINISHED, 2, ("n01", "n02")),  # the shape before the shrink
        ("1", ("COMPLETED",), JobState.FINISHED, 0, ("n01",)),
        ("2", ("RUNNING",), JobState.RUNNING, 4, ("n01", "n02")),
        ("3", ("RUNNING",), JobState.RUNNING, 3, ("n03", "n04")),
        ("4", ("RUNNING",), JobState.RUNNING, 1, ("n01",)),
    ]
    assert recs[0].admin_comment == "slurm-elastic gpus=1:4 batch=64:512 mode=endo"
    assert (recs[0].start_time, recs[0].end_time, recs[2].end_time, recs[2].elapsed) == (
        1795310960, 1795310960, None, 2)


@needs_2205
def test_2205_snapshot_from_recordings() -> None:
    snap = build_snapshot(parse_nodes(load("22.05", "sinfo.json")), parse_jobs(load("22.05", "squeue.json")),
                          now=1795310962, profiles=shipped_profiles())
    assert [n.free_gpus for n in snap.nodes] == [(3,), (2, 3), (2, 3), (1, 2, 3)]
    got = [(j.job_id, j.elastic, j.mode, j.min_gpus, j.max_gpus, j.num_gpus, j.requested_gpus) for j in snap.jobs]
    assert got == [("2", True, ElasticMode.EXO, 2, 8, 4, 4), ("3", False, ElasticMode.EXO, 3, 3, 3, 3),
                   ("4", True, ElasticMode.ENDO, 1, 4, 1, 1), ("5", False, ElasticMode.EXO, 16, 16, 0, 16)]
    j4 = snap.job(JobId("4"))
    assert (j4.min_batch, j4.max_batch, j4.base_batch, j4.last_change_time) == (64, 512, 128, 1795310960.0)
    # elastic jobs' GPUs and free GPUs are schedulable; rigid job 3's are not
    assert len(snap.schedulable_gpus()) == 4 + 1 + 8


# ------------------------------------------------------------------------------------------------
# Synthetic 22.05 documents


def test_2205_squeue_every_field() -> None:
    (j,) = parse_jobs(squeue_2205(job_2205()))
    assert (j.job_id, j.slurm_job_id, j.name, j.user, j.account, j.partition) == (
        "5", 5, "train", "alice", "proj", "gpu")
    assert (j.state, j.slurm_state, j.submit_time, j.start_time, j.resize_time) == (
        JobState.RUNNING, ("RUNNING",), 100, 110, None)
    assert j.nodes == ("n01", "n02") and j.node_count == 2 and j.tasks == 2
    assert j.gpus == (("n01", (0, 1)), ("n02", (3,)))
    assert j.gpu_request == GpuRequest(per_job=3) and j.requested_gpus == 3
    assert (j.comment, j.batch_host, j.restart_count) == ("", "n01", 0)


def test_2205_pending_nulls_and_typed_request() -> None:
    (j,) = parse_jobs(squeue_2205(job_2205(job_state="PENDING", nodes=None, gres_detail=[], batch_host=None,
                                           start_time=0, tres_per_job=None, tres_per_node="gres:gpu:v100:2")))
    assert (j.state, j.nodes, j.gpus, j.batch_host, j.start_time) == (JobState.PENDING, (), (), None, None)
    assert j.gpu_request == GpuRequest(per_node=2, gpu_type="v100") and j.requested_gpus == 4


@pytest.mark.parametrize(("word", "state"), [
    ("PENDING", JobState.PENDING), ("REQUEUED", JobState.PREEMPTED), ("RUNNING", JobState.RUNNING),
    ("CONFIGURING", JobState.RUNNING), ("RESIZING", JobState.RUNNING), ("SUSPENDED", JobState.PREEMPTED),
    ("COMPLETING", JobState.FINISHED), ("COMPLETED", JobState.FINISHED), ("CANCELLED", JobState.FINISHED),
])
def test_2205_job_state_words(word: str, state: JobState) -> None:
    (j,) = parse_jobs(squeue_2205(job_2205(job_state=word)))
    assert j.state is state


def test_2205_array_and_het_ids() -> None:
    arr, het, pend = parse_jobs(squeue_2205(
        job_2205(job_id=101, array_job_id=100, array_task_id=1),
        job_2205(job_id=201, het_job_id=200, het_job_offset=1),
        job_2205(job_id=100, job_state="PENDING", array_job_id=100, array_task_id=4294967294,
                 array_task_string="2-9", nodes=None, gres_detail=[]),
    ))
    assert (arr.job_id, arr.slurm_job_id, arr.array_job_id, arr.array_task_id) == ("100_1", 101, 100, 1)
    assert (het.job_id, het.het_job_id, het.het_job_offset) == ("200+1", 200, 1)
    assert (pend.job_id, pend.array_task_id) == ("100_[2-9]", None)


def test_2205_sinfo_states_and_gres() -> None:
    nodes = parse_nodes(sinfo_2205(
        node_2205("n01", "mixed", used="gpu:v100:3(IDX:0-1,3)"),
        node_2205("n02", "mixed", ("DRAIN",), used="gpu:v100:1(IDX:2)"),
        node_2205("n03", "idle", ("DRAIN",)),
        node_2205("n04", "down", ("NOT_RESPONDING",)),
        node_2205("n05", "idle", gres="gpu:2(S:0-1)", used="gpu:0(IDX:N/A)", partitions=("gpu", "debug")),
        node_2205("n06", "idle", gres=None, used=None),
    ))
    assert [(n.name, n.state) for n in nodes] == [
        ("n01", NodeState.UP), ("n02", NodeState.DRAINING), ("n03", NodeState.DOWN), ("n04", NodeState.DOWN),
        ("n05", NodeState.UP), ("n06", NodeState.UP)]
    assert nodes[0].used_gpus == (0, 1, 3) and nodes[0].free_gpus == (2,)
    assert nodes[1].slurm_state == ("MIXED", "DRAIN")
    assert (nodes[4].gpus, nodes[4].gpu_types, nodes[4].partitions) == (2, (), ("debug", "gpu"))
    assert (nodes[5].gpus, nodes[5].used_gpus) == (0, ())


def test_2205_sacct_every_field() -> None:
    doc = {"meta": meta_2205("openapi/dbv0.0.38"), "errors": [], "jobs": [
        sacct_job_2205(),
        sacct_job_2205(job_id=9, nodes="None assigned", state={"current": "PENDING"},
                       time={"elapsed": 0, "submission": 5, "start": 0, "end": 0},
                       tres={"allocated": [], "requested": []}, comment={"administrator": None},
                       array={"job_id": 8, "task_id": 1, "task": None}),
    ]}
    r, p = parse_sacct(doc)
    assert (r.job_id, r.user, r.account, r.partition, r.state, r.slurm_state) == (
        "5", "alice", "proj", "gpu", JobState.FINISHED, ("COMPLETED",))
    assert (r.submit_time, r.start_time, r.end_time, r.elapsed, r.allocated_gpus, r.nodes) == (
        100, 110, 200, 90, 3, ("n01", "n02"))
    assert r.admin_comment == "slurm-elastic gpus=2:8"
    assert (p.job_id, p.state, p.nodes, p.start_time, p.allocated_gpus, p.admin_comment) == (
        "8_1", JobState.PENDING, (), None, 0, "")


def test_2205_sacct_nothing_found_is_empty() -> None:
    doc = {"meta": meta_2205("openapi/dbv0.0.38"), "jobs": [],
           "errors": [{"description": "Nothing found", "error_number": 9003, "source": "slurmdb_jobs_get"}]}
    assert parse_sacct(doc) == []


# ------------------------------------------------------------------------------------------------
# Synthetic 25.11 documents


def test_2511_numbers_states_and_ids() -> None:
    jobs = parse_jobs(squeue_2511(
        job_2511(),
        job_2511(job_id=8, job_state=["PENDING", "REQUEUED"], nodes="", gres_detail=[], start_time=num(0),
                 batch_host=""),
        job_2511(job_id=9, job_state=["PENDING"], restart_cnt=2, nodes="", gres_detail=[]),
        job_2511(job_id=10, job_state=["COMPLETED", "COMPLETING"]),
        job_2511(job_id=12, array_job_id=num(11), array_task_id=num(3)),
        job_2511(job_id=14, het_job_id=num(13), het_job_offset=num(0)),
        job_2511(job_id=15, node_count=num(0, set_=False, infinite=True), tasks=num(0, set_=False)),
    ))
    j = jobs[0]
    assert (j.job_id, j.user, j.submit_time, j.start_time, j.resize_time) == ("7", "bob", 200, 210, None)
    assert j.gpus == (("n03", (1, 2)),) and j.gpu_request == GpuRequest(per_node=2, gpu_type="v100")
    assert [x.state for x in jobs[1:4]] == [JobState.PREEMPTED, JobState.PREEMPTED, JobState.FINISHED]
    assert jobs[1].slurm_state == ("PENDING", "REQUEUED") and jobs[1].batch_host is None
    assert [x.job_id for x in jobs[4:6]] == ["11_3", "13+0"]
    assert (jobs[6].node_count, jobs[6].tasks) == (1, None)  # unset node count falls back to the node list


def test_2511_sinfo_per_node_states() -> None:
    nodes = parse_nodes(sinfo_2511(
        sinfo_row_2511("a1", ("IDLE", "DRAIN")),
        sinfo_row_2511("a2", ("MIXED", "DRAIN"), used="gpu:v100:1(IDX:0)"),
        sinfo_row_2511("a3", ("IDLE", "POWERED_DOWN")),
        sinfo_row_2511("a4", ("ALLOCATED", "COMPLETING"), used="gpu:v100:4(IDX:0-3)"),
        sinfo_row_2511("a4", ("ALLOCATED", "COMPLETING"), used="gpu:v100:4(IDX:0-3)", partition="other"),
    ))
    assert [(n.name, n.state) for n in nodes] == [
        ("a1", NodeState.DOWN), ("a2", NodeState.DRAINING), ("a3", NodeState.DOWN), ("a4", NodeState.UP)]
    assert nodes[3].partitions == ("gpu", "other") and nodes[3].free_gpus == ()


def test_2511_sinfo_duplicates_must_agree() -> None:
    doc = sinfo_2511(sinfo_row_2511("a1"), sinfo_row_2511("a1", used="gpu:v100:1(IDX:0)", partition="x"))
    with pytest.raises(SlurmJsonError, match="node a1: key 'state/gres': listed twice"):
        parse_nodes(doc)


# ------------------------------------------------------------------------------------------------
# Error paths


@pytest.mark.parametrize("parser", ["data_parser/v0.0.38", "data_parser/v0.0.45", "v0.0.45", "data_parser/v0.0.4",
                                    "data_parser/v0.0.044", "data_parser/v1.0.44", "data_parser/latest"])
def test_unsupported_data_parser_is_refused_naming_both(parser: str) -> None:
    doc = squeue_2511(job_2511())
    doc["meta"] = meta_2511(parser)
    with pytest.raises(UnsupportedSlurmVersion, match=rf"unsupported Slurm JSON dialect '{parser}' \(Slurm 25.11.7\); "
                                                      r"supported: openapi/v0.0.38 .*data_parser/v0.0.39 to v0.0.44"):
        parse_jobs(doc)


def test_unknown_openapi_version_and_missing_meta() -> None:
    doc = squeue_2205(job_2205())
    doc["meta"] = meta_2205("openapi/v0.0.37")
    with pytest.raises(UnsupportedSlurmVersion, match=r"'openapi/v0\.0\.37'"):
        parse_jobs(doc)
    with pytest.raises(SlurmJsonError, match=r"squeue --json: document: key 'meta': is missing"):
        parse_jobs({"jobs": []})
    bad = squeue_2511()
    bad["meta"]["slurm"]["version"]["major"] = 25.0  # 25.11 prints strings (a number is read too)
    with pytest.raises(SlurmJsonError, match=r"key 'meta.slurm.version.major': must be a str or int"):
        detect_version(bad)
    bad["meta"]["slurm"]["version"]["major"] = "2a"
    with pytest.raises(SlurmJsonError, match=r"key 'meta.slurm.version.major': must be a number, got '2a'"):
        detect_version(bad)


@pytest.mark.parametrize("key", ["job_state", "user_name", "nodes", "gres_detail", "tres_per_node", "admin_comment"])
def test_missing_job_key_names_doc_job_and_key(key: str) -> None:
    job = job_2511()
    del job[key]
    with pytest.raises(SlurmJsonError, match=rf"^squeue --json: job 7: key '{key}': is missing$"):
        parse_jobs(squeue_2511(job))


def test_missing_node_and_sacct_keys() -> None:
    node = node_2205("n01")
    del node["gres_used"]
    with pytest.raises(SlurmJsonError, match=r"^sinfo --json: node n01: key 'gres_used': is missing$"):
        parse_nodes(sinfo_2205(node))
    row = sinfo_row_2511("a1")
    del row["gres"]["used"]
    with pytest.raises(SlurmJsonError, match=r"^sinfo --json: node a1: key 'gres.used': is missing$"):
        parse_nodes(sinfo_2511(row))
    job = sacct_job_2205()
    del job["time"]["elapsed"]
    doc = {"meta": meta_2205("openapi/dbv0.0.38"), "errors": [], "jobs": [job]}
    with pytest.raises(SlurmJsonError, match=r"^sacct --json: job 5: key 'time.elapsed': is missing$"):
        parse_sacct(doc)


def test_wrong_types_are_named() -> None:
    with pytest.raises(SlurmJsonError, match=r"job 7: key 'submit_time.number': is missing"):
        parse_jobs(squeue_2511(job_2511(submit_time={"set": True, "infinite": False})))
    with pytest.raises(SlurmJsonError, match=r"job 5: key 'job_state': must be a string or null, got list"):
        parse_jobs(squeue_2205(job_2205(job_state=["RUNNING"])))
    with pytest.raises(SlurmJsonError, match=r"job 5: key 'job_state': .*unknown base state 'WEIRD'"):
        parse_jobs(squeue_2205(job_2205(job_state="WEIRD")))


def test_malformed_gres_strings_are_named() -> None:
    with pytest.raises(SlurmJsonError, match=r"job 5: key 'gres_detail': .*'gpu:v100:2\(IDX:0-x\)'.*N or N-M"):
        parse_jobs(squeue_2205(job_2205(gres_detail=["gpu:v100:2(IDX:0-x)", "gpu:v100:1(IDX:3)"])))
    with pytest.raises(SlurmJsonError, match=r"count 2 != 1 indices"):
        parse_jobs(squeue_2205(job_2205(gres_detail=["gpu:v100:2(IDX:0)"])))
    with pytest.raises(SlurmJsonError, match=r"3 entries for 2 nodes"):
        parse_jobs(squeue_2205(job_2205(gres_detail=["gpu:1(IDX:0)"] * 3)))
    with pytest.raises(SlurmJsonError, match=r"node n01: key 'gres_used': 'gpu:v100:2' has no IDX list"):
        parse_nodes(sinfo_2205(node_2205("n01", used="gpu:v100:2")))
    with pytest.raises(SlurmJsonError, match=r"node n01: key 'gres_used': .*indices \[4\] beyond the node's 4 GPUs"):
        parse_nodes(sinfo_2205(node_2205("n01", used="gpu:v100:1(IDX:4)")))
    with pytest.raises(SlurmJsonError, match=r"node n01: key 'gres/gres_used': .*too many ':' parts"):
        parse_nodes(sinfo_2205(node_2205("n01", gres="gpu:a:b:4")))
    with pytest.raises(SlurmJsonError, match=r"job 7: key 'tres_per_node': .*must be gres/gpu\[:type\]\[:count\]"):
        parse_jobs(squeue_2511(job_2511(tres_per_node="gres/gpu:v100:two")))
    with pytest.raises(SlurmJsonError, match=r"job 7: key 'nodes': .*unclosed"):
        parse_jobs(squeue_2511(job_2511(nodes="n[01-02")))


def test_slurm_errors_refuse_partial_documents() -> None:
    doc = squeue_2511(job_2511())
    doc["errors"] = [{"description": "Unable to contact slurm controller", "error_number": 1007}]
    with pytest.raises(SlurmJsonError, match=r"squeue --json: Slurm reported errors.*Unable to contact"):
        parse_jobs(doc)


# ------------------------------------------------------------------------------------------------
# Pure helpers


@pytest.mark.parametrize(("text", "hosts"), [
    ("", ()), ("n01", ("n01",)), ("n[01-03,05]", ("n01", "n02", "n03", "n05")),
    ("s[01-02]", ("s01", "s02")), ("a1,b[1-2]", ("a1", "b1", "b2")), ("n[8-11]", ("n8", "n9", "n10", "n11")),
    ("r[1-2]n[1-2]", ("r1n1", "r1n2", "r2n1", "r2n2")),
    ("gpu-[009-011]-ib", ("gpu-009-ib", "gpu-010-ib", "gpu-011-ib")),
    ("x[1],y", ("x1", "y")),
])
def test_expand_hostlist(text: str, hosts: tuple[str, ...]) -> None:
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize(("text", "why"), [
    ("n[01-03", "unclosed"), ("n01]", "without"), ("n[3-1]", "descends"), ("n[a-b]", "must be N or N-M"),
    ("n01,,n02", "empty host name"), ("n[[1]]", "nested"),
])
def test_expand_hostlist_errors(text: str, why: str) -> None:
    with pytest.raises(SlurmJsonError, match=why):
        expand_hostlist(text)


def test_gres_and_index_parsing() -> None:
    assert parse_index_list("0-1,3") == (0, 1, 3) and parse_index_list("N/A") == ()
    items = parse_gres("gpu:v100:2(IDX:0-1),gpu:k80:0(IDX:N/A),mps:200")
    assert [(g.name, g.gtype, g.count, g.indices) for g in items] == [
        ("gpu", "v100", 2, (0, 1)), ("gpu", "k80", 0, ()), ("mps", "", 200, None)]
    assert [(g.count, g.indices) for g in parse_gres("gpu:4(S:0-1)")] == [(4, None)]
    assert [(g.count, g.indices) for g in parse_gres("gpu(CNT:2)")] == [(2, None)]
    assert parse_gres(None) == () == parse_gres("(null)")
    assert parse_gres_detail(["gpu:v100:1(IDX:0),gpu:k80:1(IDX:2)", None], [NodeName("a"), NodeName("b")]) == (
        ("a", (0, 2)),)
    assert parse_tres_gpus("gres:gpu:2") == (2, "") and parse_tres_gpus("gres/gpu:v100:2") == (2, "v100")
    assert parse_tres_gpus("gres/gpu") == (1, "") and parse_tres_gpus("cpu=2,gres/mps:10") == (None, "")
    assert parse_tres_gpus(None) == (None, "") == parse_tres_gpus("")
    # 25.11 prints --gpus-per-task with "=" (issue 18: read as no GPU, or the record refused)
    assert parse_tres_gpus("gres/gpu=1") == (1, "") and parse_tres_gpus("gres/gpu:v100=2") == (2, "v100")
    assert parse_tres_gpus("cpu=2,gres/gpu=4") == (4, "")


@pytest.mark.parametrize(("base", "flags", "busy", "state"), [
    ("idle", (), False, NodeState.UP), ("MIXED", ("PLANNED",), True, NodeState.UP),
    ("ALLOCATED", ("COMPLETING",), True, NodeState.UP), ("IDLE", ("DRAIN",), False, NodeState.DOWN),
    ("IDLE", ("DRAIN", "COMPLETING"), False, NodeState.DRAINING), ("IDLE", ("DRAIN",), True, NodeState.DRAINING),
    ("MIXED", ("DRAIN",), True, NodeState.DRAINING), ("MIXED", ("FAIL",), True, NodeState.DRAINING),
    ("draining", (), True, NodeState.DRAINING), ("drained", (), False, NodeState.DOWN),
    ("DOWN", (), False, NodeState.DOWN), ("IDLE", ("NOT_RESPONDING",), False, NodeState.DOWN),
    ("MIXED", ("POWERING_DOWN",), True, NodeState.DOWN), ("FUTURE", (), False, NodeState.DOWN),
    ("SOMETHING_NEW", (), False, NodeState.DOWN),
])
def test_map_node_state(base: str, flags: tuple[str, ...], busy: bool, state: NodeState) -> None:
    assert map_node_state(base, flags, gpus_in_use=busy) is state


def test_map_job_state_edges() -> None:
    assert map_job_state(["RUNNING", "CONFIGURING"]) is JobState.RUNNING
    assert map_job_state(["PENDING"], restart_count=1) is JobState.PREEMPTED
    assert map_job_state(["CANCELLED", "COMPLETING"]) is JobState.FINISHED
    with pytest.raises(SlurmJsonError, match="empty"):
        map_job_state([])


# ------------------------------------------------------------------------------------------------
# AdminComment contract


def test_elastic_request_forms() -> None:
    r = parse_elastic_request("slurm-elastic gpus=2:8 batch=64:512 mode=endo")
    assert r is not None and (r.min_gpus, r.max_gpus, r.min_batch, r.max_batch, r.mode) == (
        2, 8, 64, 512, ElasticMode.ENDO)
    r = parse_elastic_request("slurm-elastic gpus=1:0")
    assert r is not None and (r.max_gpus, r.min_batch, r.max_batch, r.mode) == (None, None, None, ElasticMode.EXO)
    assert parse_elastic_request("") is None
    assert parse_elastic_request("elastic=2:4") is None
    assert parse_elastic_request("slurm-elasticity gpus=1:2") is None


@pytest.mark.parametrize(("comment", "rule"), [
    ("slurm-elastic", "gpus=MIN:MAX is required"),
    ("slurm-elastic batch=1:2", "gpus=MIN:MAX is required"),
    ("slurm-elastic gpus=4:2", "MAX must be 0 \\(no maximum\\) or >= MIN"),
    ("slurm-elastic gpus=0:2", "MIN must be >= 1"),
    ("slurm-elastic gpus=2", "must be MIN:MAX with integers"),
    ("slurm-elastic gpus=2:4 mode=fast", "must be exo or endo"),
    ("slurm-elastic gpus=2:4 gpus=1:2", "gpus given twice"),
    ("slurm-elastic gpus=2:4 colour=red", "unknown key"),
    ("slurm-elastic gpus=2:4 batch", "must be key=value"),
])
def test_elastic_request_errors_name_job_value_rule(comment: str, rule: str) -> None:
    with pytest.raises(ContractError, match=rf"^job 42: AdminComment .*: '.*': {rule}"):
        parse_elastic_request(comment, job_id="42")


# ------------------------------------------------------------------------------------------------
# Snapshot


def _cluster() -> tuple[list[Any], list[Any]]:
    nodes = parse_nodes(sinfo_2205(
        node_2205("n01", used="gpu:v100:3(IDX:0-2)"),
        node_2205("n02", used="gpu:v100:2(IDX:0,3)"),
        node_2205("n03", "mixed", ("DRAIN",), used="gpu:v100:1(IDX:1)"),
    ))
    jobs = parse_jobs(squeue_2205(
        # elastic, endo, 2 GPUs on n01 + 1 on n02
        job_2205(job_id=1, nodes="n[01-02]", gres_detail=["gpu:v100:2(IDX:0-1)", "gpu:v100:1(IDX:3)"]),
        # rigid, 1 GPU on n01 and 1 on n02
        job_2205(job_id=2, submit_time=50, nodes="n[01-02]", gres_detail=["gpu:v100:1(IDX:2)", "gpu:v100:1(IDX:0)"],
                 admin_comment=None, tres_per_job=None, tres_per_node="gres:gpu:1"),
        # rigid on the draining node
        job_2205(job_id=3, nodes="n03", gres_detail=["gpu:v100:1(IDX:1)"], admin_comment="", tres_per_job="gres:gpu:1"),
        # elastic, pending, asks 16 GPUs but the cluster has 12: clamped
        job_2205(job_id=4, job_state="PENDING", nodes=None, gres_detail=[], start_time=0, submit_time=300,
                 admin_comment="slurm-elastic gpus=2:0", tres_per_job="gres:gpu:16"),
        # rigid CPU-only job: left out
        job_2205(job_id=5, nodes="n02", gres_detail=[], admin_comment=None, tres_per_job=None),
        # finished: left out
        job_2205(job_id=6, job_state="COMPLETING"),
        # rigid pending GPU job
        job_2205(job_id=7, job_state="PENDING", nodes=None, gres_detail=[], admin_comment=None,
                 tres_per_job=None, tres_per_node="gres:gpu:2", node_count=1, submit_time=400),
    ))
    return nodes, jobs


def test_build_snapshot_free_held_and_ranges() -> None:
    nodes, jobs = _cluster()
    snap = build_snapshot(nodes, jobs, now=1000, profiles=shipped_profiles(),
                          progress={"1": JobRuntime(model="bert", samples_processed=500, local_batch=6)})
    assert [(n.name, n.free_gpus, n.state) for n in snap.nodes] == [
        ("n01", (3,), NodeState.UP), ("n02", (1, 2), NodeState.UP), ("n03", (0, 2, 3), NodeState.DRAINING)]
    assert [j.job_id for j in snap.jobs] == ["2", "1", "3", "4", "7"]  # by submit time then id
    j1, j2, j3, j4, j7 = (snap.job(JobId(i)) for i in ("1", "2", "3", "4", "7"))
    assert (j1.elastic, j1.mode, j1.min_gpus, j1.max_gpus, j1.min_batch, j1.max_batch) == (
        True, ElasticMode.ENDO, 2, 8, 64, 512)
    assert (j1.num_gpus, j1.requested_gpus, j1.local_batch, j1.model, j1.samples_processed) == (3, 3, 6, "bert", 500)
    assert (j1.start_time, j1.run_time, j1.last_change_time) == (110.0, 890.0, 110.0)
    assert (j2.elastic, j2.num_gpus, j2.min_gpus, j2.max_gpus) == (False, 2, 2, 2)
    assert (j3.elastic, j3.num_gpus) == (False, 1)
    b, _ = 128, 50_000  # cifar10 defaults
    assert (j4.state, j4.min_gpus, j4.max_gpus, j4.requested_gpus, j4.model) == (JobState.PENDING, 2, 12, 12, "cifar10")
    assert (j4.min_batch, j4.max_batch, j4.base_batch, j4.epoch_size) == (2 * b, 12 * b, 12 * b, 50_000)
    assert (j7.elastic, j7.state, j7.requested_gpus) == (False, JobState.PENDING, 2)
    # schedulable: free GPUs on UP nodes plus the elastic job's own GPUs; not rigid, not draining
    assert sorted(snap.schedulable_gpus()) == [("n01", 0), ("n01", 1), ("n01", 3), ("n02", 1), ("n02", 2), ("n02", 3)]
    assert [j.job_id for j in snap.elastic_jobs()] == ["1", "4"]


def test_build_snapshot_squeue_gpus_count_as_busy_even_if_sinfo_lags() -> None:
    nodes, jobs = _cluster()
    idle = [n.__class__(n.name, n.state, n.slurm_state, n.gpus, n.gpu_types, (), n.partitions) for n in nodes]
    snap = build_snapshot(idle, jobs, now=1000, profiles=shipped_profiles())
    assert snap.nodes[0].free_gpus == (3,)


def test_build_snapshot_drops_gpus_outside_the_managed_nodes() -> None:
    nodes, jobs = _cluster()
    snap = build_snapshot([n for n in nodes if n.name != "n02"], jobs, now=1000, profiles=shipped_profiles())
    assert snap.job(JobId("2")).placement.slots == (("n01", (2,)),)


def test_build_snapshot_errors() -> None:
    nodes, jobs = _cluster()
    with pytest.raises(SlurmJsonError, match=r"job 1: .*holds no GPU on the managed nodes"):
        build_snapshot([n for n in nodes if n.name == "n03"], jobs, now=1000, profiles=shipped_profiles())
    with pytest.raises(SlurmJsonError, match=r"job 1: model 'nope' has no throughput profile"):
        build_snapshot(nodes, jobs, now=1000, profiles=shipped_profiles(), default_model="nope")
    # a model the job's launcher reported without a profile is no error: the job is planned as the default
    snap = build_snapshot(nodes, jobs, now=1000, profiles=shipped_profiles(), progress={"1": JobRuntime(model="nope")})
    assert snap.job(JobId("1")).model == "cifar10"
    bad = copy.deepcopy(jobs)
    bad[0] = parse_jobs(squeue_2205(job_2205(job_id=1, admin_comment="slurm-elastic gpus=9:1")))[0]
    with pytest.raises(ContractError, match=r"^job 1: AdminComment .*MAX must be 0"):
        build_snapshot(nodes, bad, now=1000, profiles=shipped_profiles())
    beyond = parse_jobs(squeue_2205(job_2205(job_id=9, nodes="n01", gres_detail=["gpu:v100:1(IDX:7)"])))
    with pytest.raises(SlurmJsonError, match=r"job 9: key 'gres_detail': GPU indices \[7\] on node n01 beyond its 4"):
        build_snapshot(nodes, beyond, now=1000, profiles=shipped_profiles())


@pytest.mark.parametrize("doc", [squeue_2511(job_2511(restart_cnt=num(2**63))),
                                 squeue_2511(job_2511(restart_cnt=2**63 - 1)),
                                 squeue_2205(job_2205(restart_cnt=65536)), squeue_2205(job_2205(restart_cnt=-1))],
                         ids=["2511-2^63", "2511-2^63-1", "2205-65536", "2205-negative"])
def test_a_restart_count_slurm_cannot_hold_is_refused_for_that_job_only(doc: dict[str, Any]) -> None:
    """Found by the hostile-record fuzz (seed 9304839): a 25.11 ``restart_cnt`` of 2**63 passed the
    64-bit bound, and the actuator's journal (SQLite, signed 64 bits) raised OverflowError while
    shrinking that job. Slurm counts requeues in 16 bits: anything else is refused, the job named."""
    refused: dict[str, str] = {}
    good = job_2511(job_id=8) if "jobs" in doc and isinstance(doc["jobs"][0]["job_state"], list) else job_2205(job_id=6)
    doc["jobs"].append(good)
    jobs = parse_jobs(doc, refused)
    assert [str(j.job_id) for j in jobs] == [str(good["job_id"])]
    ((job, why),) = refused.items()
    assert job == str(doc["jobs"][0]["job_id"]) and "restart_cnt" in why and "0 .. 65535" in why, why
    with pytest.raises(SlurmJsonError, match="restart_cnt"):
        parse_jobs(doc)


def test_the_largest_restart_count_slurm_holds_is_read() -> None:
    (job,) = parse_jobs(squeue_2511(job_2511(restart_cnt=num(65535))))
    assert job.restart_count == 65535
