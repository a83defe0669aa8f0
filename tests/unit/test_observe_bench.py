"""``bench observe``: a large site's JSON built from the recorded 25.11 fixtures, read by the daemon's
own observer; and the observer pauses the garbage collector while it reads."""

from __future__ import annotations

import gc
import json
from collections.abc import Sequence

import pytest

from slurm_elastic.bench.observing import bench_observe, site_documents
from slurm_elastic.cli import main
from slurm_elastic.core.model import JobState
from slurm_elastic.observe.view import ClusterView, gc_paused
from slurm_elastic.slurm.cli_backend import SlurmCli
from slurm_elastic.slurm.json_records import parse_jobs, parse_nodes
from slurm_elastic.slurm.records import JobRecord, NodeRecord
from slurm_elastic.testing import shipped_profiles


def test_the_site_is_the_recorded_records_renamed_and_placed() -> None:
    sinfo, squeue, changed = site_documents(12, 40, seed=3, churn=0.1)
    first, second = parse_jobs(json.loads(squeue)), parse_jobs(json.loads(changed))
    assert sum(a != b for a, b in zip(first, second, strict=True)) == 4  # a tenth have a new comment
    nodes = parse_nodes(json.loads(sinfo))
    jobs = parse_jobs(json.loads(squeue))
    assert len(nodes) == 12 and all(n.gpus == 4 and n.partitions == ("gpu", "urgent") for n in nodes)
    running = [j for j in jobs if j.state is JobState.RUNNING]
    assert len(jobs) == 40 and len(running) == 8  # a fifth runs
    held = {(node, g) for j in running for node, gs in j.gpus for g in gs}
    assert len(held) == sum(j.allocated_gpus for j in running)  # no GPU held twice
    assert held == {(n.name, g) for n in nodes for g in n.used_gpus}  # the nodes say the same
    assert 0 < sum(j.admin_comment.startswith("slurm-elastic gpus=") for j in jobs) < 40


def test_bench_observe_prints_the_median_of_each_stage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "observe", "--nodes", "16", "--jobs", "60", "--repeat", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["snapshot_jobs"] == 60 and out["left_out"] == 0 and out["elastic_jobs"] > 0
    assert out["dialect"] == "data_parser/v0.0.44 (Slurm 25.11's default) from Slurm 25.11.7"
    assert set(out["stages_s"]) == {"command", "decode", "records", "snapshot"}
    assert out["observe_s"] > 0 and out["plan_s"] > 0 and out["first_observe_s"] > 0 and out["collector_s"] >= 0
    assert out["last_round"] == {"jobs_read_again": 1, "jobs_made_again": 1}  # 1% of 60 jobs changed
    assert bench_observe(nodes=4, jobs=0, repeat=1)["snapshot_jobs"] == 0


@pytest.mark.parametrize("argv", [["--nodes", "0"], ["--jobs", "-1"], ["--repeat", "0"], ["--policy", "nope"],
                                  ["--churn", "1.5"]])
def test_bench_observe_refuses_bad_values(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = main(["bench", "observe", *argv])
    except SystemExit as exc:  # argparse's refusal
        code = int(exc.code or 0)
    assert code == 2 and argv[1] in capsys.readouterr().err


class _Source:
    """A record source that notes whether the collector ran while it was read."""

    def __init__(self) -> None:
        self.enabled_during_read: list[bool] = []
        sinfo, squeue, _ = site_documents(4, 6)
        self.texts = {"sinfo": sinfo, "squeue": squeue}
        self.cli = SlurmCli(self._runner)

    def _runner(self, argv: Sequence[str]) -> str:
        if list(argv) == ["sinfo", "--version"]:
            return "slurm 25.11.7\n"
        self.enabled_during_read.append(gc.isenabled())
        return self.texts[argv[0]]

    def read(self) -> tuple[list[NodeRecord], list[JobRecord]]:
        return self.cli.read()

    def __getattr__(self, name: str) -> object:
        return getattr(self.cli, name)


def test_the_observer_reads_with_the_collector_paused_and_restores_it() -> None:
    source = _Source()
    view = ClusterView(source, shipped_profiles(), lambda: 1_700_100_000.0)  # type: ignore[arg-type]
    assert gc.isenabled()
    snap = view.observe()
    assert len(snap.jobs) == 6 and source.enabled_during_read == [False, False] and gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # a collector paused by someone else stays paused
    finally:
        gc.enable()
