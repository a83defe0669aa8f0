"""One node record Slurm prints oddly leaves that node out, never the round (issue 14, finding 4).

Right after slurmctld restarted, ``sinfo --json`` printed ``gres_used 'gpu:v100:4'`` with no IDX
list for one node, and the daemon refused the whole output: no round ran until the node read
again. Now that node is left out with its reason (in the log, ``status`` and ``/metrics``), an
elastic job running on it is left out too (what it holds there is unknown), and every other node
and job is planned in the same round.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_elastic.config import Config, DaemonConfig
from slurm_elastic.core.model import JobState, NodeName
from slurm_elastic.daemon import Daemon
from slurm_elastic.slurm.cli_backend import SlurmCli
from slurm_elastic.slurm.dialects import SlurmJsonError
from slurm_elastic.slurm.json_records import parse_nodes
from slurm_elastic.slurm.pyslurm_records import node_records

from .test_hostile_job_input import NOW, Source, nodes, record, view
from .test_pyslurm_backend import FakeNode
from .test_slurm_parse import node_2205, sinfo_2205, sinfo_2511, sinfo_row_2511

NO_IDX = "gpu:v100:4"  # what sinfo printed right after slurmctld restarted


def test_a_node_whose_gres_used_has_no_idx_list_is_left_out_with_its_reason() -> None:
    doc = sinfo_2205(node_2205("n01"), node_2205("n02", "allocated", used=NO_IDX), node_2205("n03"))
    with pytest.raises(SlurmJsonError, match="node n02"):
        parse_nodes(doc)  # without a place for reasons, it still raises (a caller that wants all or nothing)
    refused: dict[str, str] = {}
    assert [n.name for n in parse_nodes(doc, refused)] == ["n01", "n03"]
    assert list(refused) == ["n02"] and "'gpu:v100:4' has no IDX list" in refused["n02"]


def test_a_2511_node_with_one_odd_or_disagreeing_row_is_left_out_whole() -> None:
    doc = sinfo_2511(sinfo_row_2511("a1"), sinfo_row_2511("a1", used="gpu:v100:1(IDX:0)", partition="x"),
                     sinfo_row_2511("a2"), sinfo_row_2511("a2", used=NO_IDX, partition="x"),
                     sinfo_row_2511("a3"), sinfo_row_2511("a3", partition="x"))
    refused: dict[str, str] = {}
    (a3,) = parse_nodes(doc, refused)
    assert a3.name == "a3" and a3.partitions == ("gpu", "x")
    assert sorted(refused) == ["a1", "a2"]
    assert "listed twice with different state or GRES" in refused["a1"] and "no IDX list" in refused["a2"]


def test_a_node_record_without_a_readable_name_is_named_by_its_position() -> None:
    bad = node_2205("n02")
    bad["name"] = ["not", "a", "name"]
    refused: dict[str, str] = {}
    assert [n.name for n in parse_nodes(sinfo_2205(node_2205("n01"), bad), refused)] == ["n01"]
    assert list(refused) == ["record 1"]


def test_the_pyslurm_backend_leaves_an_odd_node_out_the_same_way() -> None:
    odd = FakeNode("b2", configured_gres={"gpu:v100": "four"})
    refused: dict[str, str] = {}
    assert [n.name for n in node_records([FakeNode("b1"), odd, FakeNode("b3")], [], refused)] == ["b1", "b3"]
    assert list(refused) == ["b2"]
    with pytest.raises(SlurmJsonError):
        node_records([FakeNode("b1"), odd], [])


def test_the_cli_backend_reads_the_other_nodes_and_names_the_odd_one() -> None:
    doc = sinfo_2205(node_2205("n01"), node_2205("n02", used=NO_IDX))

    def runner(argv: object) -> str:
        return "slurm 22.05.8\n" if argv == ["sinfo", "--version"] else json.dumps(doc)

    cli = SlurmCli(runner)
    assert [n.name for n in cli.nodes()] == ["n01"] and list(cli.refused_nodes) == ["n02"]


def test_the_round_runs_without_the_odd_node_and_its_elastic_job(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    reason = "sinfo: node n001: key 'gres_used': 'gpu:v100:4' has no IDX list (rule: GPUs configured with File=)"
    on_odd = record("7", {"n001": 2, "n002": 2})  # an elastic job with GPUs on the odd node and another
    elsewhere = record("8", {"n000": 2})
    rigid = replace(record("9", {"n001": 1, "n002": 1}, admin=""),
                    gpus=((NodeName("n001"), (3,)), (NodeName("n002"), (3,))))
    waiting = record("10", {}, state=JobState.PENDING)
    all_nodes = nodes(3)
    source = Source([all_nodes[0], all_nodes[2]], [on_odd, elsewhere, rigid, waiting],
                    refused_nodes={"n001": reason})
    v = view(tmp_path, source)
    cfg = Config(DaemonConfig(policy="dp", store=tmp_path / "s.db", dry_run=True))
    d = Daemon(cfg, v, v.store, sleep=lambda s: None, clock=lambda: NOW)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING):
        assert d.run(max_rounds=1) == 1 and d.store.rounds(), "the round failed"
    snap = d.store.rounds()[-1]
    planned = {j.job_id for j in snap.plan.jobs}
    assert planned == {"8", "10"}
    assert "n001" in v.quarantined()["7"] and "printed oddly" in v.quarantined()["7"]
    assert v.nodes_left_out == {"n001": reason}
    assert sum("node n001 left out" in r.getMessage() for r in caplog.records) == 1
    text = d.metrics.render()
    assert 'slurm_elastic_node_left_out{node="n001",reason="sinfo: node n001: key' in text
    # the left-out elastic job's GPUs and the rigid job's GPU on the node that reads stay busy
    observed = v.observe()
    assert next(n for n in observed.nodes if n.name == "n002").free_gpus == (2,)
    assert observed.job("9").placement.slots == (("n002", (3,)),)
    source.refused_nodes = {}
    source.nodes = all_nodes
    with caplog.at_level(logging.INFO):
        v.observe()
    assert v.nodes_left_out == {} and any("node n001 reads again" in r.getMessage() for r in caplog.records)
