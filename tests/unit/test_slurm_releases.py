"""Every Slurm release from 22.05 to 25.11 is read by one set of accessors (issue 18, part 2).

The fixtures under ``tests/fixtures/slurm-json/<release>/`` are real output, recorded on the dev
cluster by ``tests/slurm/record_json_fixtures.py`` with the same job mix (see the README there): each
release's default data_parser version, printed by a Slurm 24.05.8 or 25.11.7 build with
``--json=v0.0.NN``. The records read from them must be the same whatever the version, except what
changed between the recordings (seconds elapsed) and the state words each version prints.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from slurm_elastic.core.model import JobState
from slurm_elastic.slurm.dialects import DATA_PARSERS, JsonDialect, SlurmJsonError, detect_version
from slurm_elastic.slurm.json_records import parse_jobs, parse_nodes, parse_sacct

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "slurm-json"
RECORDED = ("23.02", "23.11", "24.05", "24.11", "25.05")


def load(release: str, name: str) -> dict[str, Any]:
    doc = json.loads((FIX / release / f"{name}.json").read_text())
    assert isinstance(doc, dict)
    return doc


def plain(records: list[Any]) -> list[dict[str, Any]]:
    """Records without what differs between two recordings of the same jobs: seconds run, and the
    state words (23.02 prints the flag ``RESIZING`` where 24.05 prints ``PENDING, RESIZING``)."""
    out = []
    for r in records:
        d = dataclasses.asdict(r)
        for key in ("elapsed", "end_time", "slurm_state"):
            d.pop(key, None)
        out.append(d)
    return out


def test_every_data_parser_version_has_a_recording_named_by_its_release() -> None:
    assert sorted(DATA_PARSERS.values()) == sorted((*RECORDED, "25.11"))
    for nn, release in DATA_PARSERS.items():
        v = detect_version(load(release, "squeue"))
        assert v.dialect is JsonDialect.DATA_PARSER and v.plugin.endswith(f"v0.0.{nn}")
        assert f"(Slurm {release}'s default)" in v.describe()
        if release in RECORDED:
            how = json.loads((FIX / release / "RECORDED.json").read_text())
            assert how["data_parser"] == f"v0.0.{nn}" and how["default_of"] == release
            assert v.release == tuple(int(p) for p in how["printed_by"].split()[-1].split("."))


def printed_by(release: str) -> str:
    return str(json.loads((FIX / release / "RECORDED.json").read_text())["printed_by"])


def stable(records: list[Any]) -> list[tuple[Any, ...]]:
    """What two recording sessions of the same job mix share (not ids, times, nor which GPUs a job got)."""
    return sorted(repr((r.name, r.state.value, r.allocated_gpus if hasattr(r, "allocated_gpus") else r.gpus,
                        getattr(r, "gpu_request", None), getattr(r, "admin_comment", None),
                        len(getattr(r, "nodes", ())) if not hasattr(r, "partitions") else r.partitions))
                  for r in records)


READERS = (("squeue", parse_jobs), ("scontrol_show_job", parse_jobs), ("sinfo_N", parse_nodes),
           ("scontrol_show_node", parse_nodes), ("sacct", parse_sacct))


@pytest.mark.parametrize("release", RECORDED)
def test_each_release_reads_the_same_jobs_nodes_and_accounting(release: str) -> None:
    """Versions printed in one session read the same, record for record; the two sessions (a 24.05
    and a 25.11 build) agree on everything that is not an id or a time."""
    same_session = "24.05" if printed_by(release) == printed_by("24.05") else "25.05"
    for name, read in READERS:
        assert plain(read(load(release, name))) == plain(read(load(same_session, name))), (release, name)
        assert stable(read(load(release, name))) == stable(read(load("24.05", name))), (release, name)


def test_what_the_recordings_hold() -> None:
    """The job mix of the recorder, as every version reads it."""
    jobs = {j.name: j for j in parse_jobs(load("23.02", "squeue"))}
    a, b, c, d = jobs["elastic-a"], jobs["gpus3"], jobs["shrunk"], jobs["pending"]
    assert a.state is JobState.RUNNING and a.admin_comment == "slurm-elastic gpus=2:8 mode=exo"
    assert [(n, len(g)) for n, g in a.gpus] == [("n01", 2), ("n02", 2)] and a.gpu_request.per_node == 2
    assert b.gpu_request.per_job == 3 and b.allocated_gpus == 3
    assert c.nodes == ("n01",) or len(c.nodes) == 1
    assert d.state is JobState.PENDING and d.requested_gpus == 16
    nodes = parse_nodes(load("23.02", "sinfo_N"))
    assert [n.name for n in nodes] == ["n01", "n02", "n03", "n04"] and all(n.gpus == 4 for n in nodes)
    assert all(n.partitions == ("gpu", "urgent") for n in nodes)
    acct = parse_sacct(load("23.02", "sacct"))
    assert any(r.name == "done" and r.state is JobState.FINISHED for r in acct)
    resized = [r for r in acct if r.name == "shrunk"]
    assert len(resized) == 2 and {r.allocated_gpus for r in resized} == {1, 2}


@pytest.mark.parametrize("release", RECORDED)
def test_grouped_sinfo_is_refused_for_sinfo_n(release: str) -> None:
    with pytest.raises(SlurmJsonError, match=r"one node per record: run `sinfo -N --json`"):
        parse_nodes(load(release, "sinfo"))


def test_v0039_prints_states_as_one_word_and_later_versions_as_lists() -> None:
    raw = {r: load(r, "squeue")["jobs"][0]["job_state"] for r in RECORDED}
    assert isinstance(raw["23.02"], str) and all(isinstance(raw[r], list) for r in RECORDED[1:])
    bad = load("23.02", "squeue")
    bad["jobs"][0]["job_state"] = 7
    with pytest.raises(SlurmJsonError, match=r"key 'job_state': must be a list of strings, got 7"):
        parse_jobs(bad)
