"""Large listings are read fast and read the same (issue 18, part 5): ``decode_listing`` keeps only the
keys the records read, and gives the same records (or the same refusal) as Python's ``json`` for every
recorded release; the read memo takes an unchanged record from the last read and reads a changed one
again; the snapshot memo reuses an unchanged job and still checks every rule between jobs and nodes."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from slurm_elastic.contract import ELASTIC_TAG
from slurm_elastic.core.model import JobState
from slurm_elastic.errors import SnapshotError
from slurm_elastic.observe.snapshot import SnapshotMemo, snapshot_of
from slurm_elastic.slurm.dialects import SlurmJsonError
from slurm_elastic.slurm.json_records import parse_jobs, parse_nodes
from slurm_elastic.slurm.listing_json import ListedRecord, decode_listing
from slurm_elastic.slurm.read_memo import ReadMemo
from slurm_elastic.slurm.records import JobRecord, NodeRecord
from slurm_elastic.slurm.runner import decode_json
from slurm_elastic.testing import shipped_profiles

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "slurm-json"
LISTINGS = sorted((d.name, f.name) for d in FIX.iterdir() if d.is_dir() for f in d.glob("*.json")
                  if f.name.startswith(("squeue", "sinfo", "scontrol")))


def _parse(doc: dict[str, Any], name: str) -> tuple[list[Any], dict[str, str]]:
    refused: dict[str, str] = {}
    read = parse_jobs if "squeue" in name or "show_job" in name else parse_nodes
    return read(doc, refused), refused  # type: ignore[operator]


@pytest.mark.parametrize(("release", "name"), LISTINGS)
def test_every_recorded_listing_reads_the_same_through_both_decoders(release: str, name: str) -> None:
    text = (FIX / release / name).read_text()
    lean = decode_listing(text, ["x"])
    assert _parse(lean, name) == _parse(decode_json(text, ["x"]), name)
    rows = lean.get("jobs") or lean.get("sinfo") or lean.get("nodes")
    assert rows and all(isinstance(r, ListedRecord) for r in rows)  # msgspec read it, not the fallback


def _squeue(comment: str = "c") -> dict[str, Any]:
    doc = json.loads((FIX / "25.11" / "squeue.json").read_text())
    doc["jobs"][0]["comment"] = comment
    return doc


def test_what_msgspec_refuses_and_json_reads_is_read_by_json_whole() -> None:
    doc = _squeue()
    text = json.dumps(doc).replace('"comment": "c"', '"comment": "a\\ud800b"', 1)  # a lone surrogate escape
    lean = decode_listing(text, ["squeue", "--json"])
    assert not isinstance(lean["jobs"][0], ListedRecord) and lean["jobs"][0]["comment"] == "a\ud800b"
    assert _parse(lean, "squeue") == _parse(decode_json(text, ["squeue", "--json"]), "squeue")
    records, refused = _parse(lean, "squeue")
    assert len(records) + len(refused) == len(doc["jobs"]) and len(records) >= len(doc["jobs"]) - 1
    for odd in ('"restart_cnt": 0', '"restart_cnt": true', '"restart_cnt": 1.5', '"restart_cnt": ' + "9" * 30,
                '"restart_cnt": {"set": true, "x": 1}'):
        text = json.dumps(doc).replace('"restart_cnt": 0', odd, 1)  # one job's number: junk, or beyond 64 bits
        assert _parse(decode_listing(text, ["squeue"]), "squeue") == _parse(decode_json(text, ["squeue"]), "squeue")
    for bad in ('{"jobs": 3, "meta": {}}', "[1, 2]", "{", '{"jobs": [1]}'):
        with pytest.raises(SlurmJsonError) as lean_error:
            parse_jobs(decode_listing(bad, ["squeue", "--json"]))
        with pytest.raises(SlurmJsonError) as json_error:
            parse_jobs(decode_json(bad, ["squeue", "--json"]))
        assert str(lean_error.value) == str(json_error.value)


def test_a_listed_record_reads_like_the_dict_json_makes() -> None:
    text = (FIX / "25.11" / "sinfo_N.json").read_text()
    row = decode_listing(text, ["sinfo"])["sinfo"][0]
    full = json.loads(text)["sinfo"][0]
    assert dict(row["partition"]) == {"name": full["partition"]["name"]}  # only the name is kept
    assert "cpus" in full and "cpus" not in row and row.get("cpus") is None
    assert set(row) == {"nodes", "node", "gres", "partition", "reason"} and len(row) == 5
    with pytest.raises(KeyError):
        row["__class__"]
    assert row == decode_listing(text, ["sinfo"])["sinfo"][0] and row != dict(row)


def test_the_read_memo_takes_unchanged_records_and_reads_changed_ones_again() -> None:
    memo: ReadMemo[JobRecord] = ReadMemo()
    text = json.dumps(_squeue())
    first = parse_jobs(decode_listing(text, ["squeue"]), {}, memo)
    assert (memo.hits, memo.misses) == (0, len(first))
    again = parse_jobs(decode_listing(text, ["squeue"]), {}, memo)
    assert again == first and all(a is b for a, b in zip(again, first, strict=True))
    assert (memo.hits, memo.misses) == (len(first), 0)
    changed = parse_jobs(decode_listing(json.dumps(_squeue("new")), ["squeue"]), {}, memo)
    assert changed[0].comment == "new" and changed[0] is not first[0] and changed[1:] == first[1:]
    assert (memo.hits, memo.misses) == (len(first) - 1, 1)
    fewer = _squeue("new")
    fewer["jobs"] = fewer["jobs"][:1]
    parse_jobs(decode_listing(json.dumps(fewer), ["squeue"]), {}, memo)
    assert len(memo._kept) == 1  # the jobs that left the queue are let go


def test_a_record_that_does_not_read_is_refused_every_read_with_its_reason() -> None:
    memo: ReadMemo[JobRecord] = ReadMemo()
    doc = _squeue()
    doc["jobs"][0]["nodes"] = "s[01-"
    text = json.dumps(doc)
    reasons = []
    for _ in range(2):
        refused: dict[str, str] = {}
        jobs = parse_jobs(decode_listing(text, ["squeue"]), refused, memo)
        reasons.append(refused)
        assert len(jobs) == len(doc["jobs"]) - 1
    assert reasons[0] == reasons[1] and len(reasons[0]) == 1 and "nodes" in next(iter(reasons[0].values()))


def test_a_change_of_dialect_empties_the_memo() -> None:
    memo: ReadMemo[NodeRecord] = ReadMemo()
    text = (FIX / "25.11" / "sinfo_N.json").read_text()
    parse_nodes(decode_listing(text, ["sinfo"]), {}, memo)
    older = (FIX / "24.11" / "sinfo_N.json").read_text()
    parse_nodes(decode_listing(older, ["sinfo"]), {}, memo)
    assert memo.hits == 0


def _site() -> tuple[list[NodeRecord], list[JobRecord]]:
    """The recorded 25.11 site, its first running job made elastic."""
    text = (FIX / "25.11" / "squeue.json").read_text()
    jobs = parse_jobs(decode_listing(text, ["squeue"]))
    first = next(i for i, j in enumerate(jobs) if j.state is JobState.RUNNING and j.gpus)
    jobs[first] = replace(jobs[first], admin_comment=f"{ELASTIC_TAG} gpus=1:4")
    return parse_nodes(json.loads((FIX / "25.11" / "sinfo_N.json").read_text())), jobs


def test_the_snapshot_memo_gives_the_snapshot_made_afresh_at_the_new_instant() -> None:
    nodes, jobs = _site()
    profiles = shipped_profiles()
    memo = SnapshotMemo()
    snapshot_of(nodes, jobs, now=2_000_000_000.0, profiles=profiles, memo=memo)
    later = snapshot_of(nodes, jobs, now=2_000_000_100.0, profiles=profiles, memo=memo)
    fresh = snapshot_of(nodes, jobs, now=2_000_000_100.0, profiles=profiles)
    assert memo.reused == len(fresh.jobs) > 0
    assert later.jobs == fresh.jobs and later.nodes == fresh.nodes
    assert any(j.state is JobState.RUNNING and j.run_time > 100 for j in later.jobs)


def test_a_reused_job_is_still_checked_against_the_others_and_the_nodes() -> None:
    nodes, jobs = _site()
    profiles = shipped_profiles()
    memo = SnapshotMemo()
    snapshot_of(nodes, jobs, now=2_000_000_000.0, profiles=profiles, memo=memo)
    running = next(j for j in jobs if j.state is JobState.RUNNING and j.gpus)
    thief = replace(running, job_id="99999", slurm_job_id=99999)  # holds the same GPUs
    refused: dict[str, str] = {}
    snapshot_of(nodes, [*jobs, thief], now=2_000_000_100.0, profiles=profiles, memo=memo, refused=refused)
    assert "held by one job" in refused["99999"]
    node = running.gpus[0][0]
    shrunk = [replace(n, gpus=0, used_gpus=()) if n.name == node else n for n in nodes]
    with pytest.raises(SlurmJsonError, match="beyond its 0 GPUs"):
        snapshot_of(shrunk, jobs, now=2_000_000_200.0, profiles=profiles, memo=memo)
    snap = snapshot_of(nodes, jobs, now=2_000_000_300.0, profiles=profiles, memo=memo)
    elastic = next(j for j in snap.jobs if j.elastic and j.state is JobState.RUNNING)
    assert memo.reused == len(snap.jobs)
    with pytest.raises(SnapshotError, match="printed oddly"):
        snapshot_of(nodes, jobs, now=2_000_000_400.0, profiles=profiles, memo=memo,
                    unreadable_nodes={elastic.placement.slots[0][0]})
