"""``what-if`` plans when the site's daemon would: at its cadence (a round at the poll after each
arrival, completion or epoch end, and every ``max_idle``), read from ``--config``'s ``[daemon]``
``poll_interval`` and ``max_idle``; it planned at fixed 30-s rounds, which no site runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from slurm_elastic.cli import main
from slurm_elastic.config import DaemonConfig
from slurm_elastic.core.model import JobId, JobState, NodeName
from slurm_elastic.experiments.comparison import PolicySpec
from slurm_elastic.sim.engine import Cadence
from slurm_elastic.slurm.records import AccountingRecord
from slurm_elastic.whatif import what_if


def _rec(job_id: int, submit: int, start: int, end: int, gpus: int) -> AccountingRecord:
    return AccountingRecord(
        job_id=JobId(str(job_id)), slurm_job_id=job_id, name="j", user="u", account="a", partition="gpu",
        state=JobState.FINISHED, slurm_state=("COMPLETED",), submit_time=submit, start_time=start, end_time=end,
        elapsed=end - start, allocated_gpus=gpus, nodes=(NodeName("n00"),), admin_comment="", steps=())


RECORDS = [_rec(1, 1000, 1000, 1400, 2), _rec(2, 1011, 1011, 1900, 1), _rec(3, 1047, 1100, 1700, 4)]


def test_what_if_plans_at_the_daemons_cadence_by_default() -> None:
    res = what_if(RECORDS, [PolicySpec("fifo")], [1], 8, 4, site_physics=False)
    assert res[0]["cadence"] == Cadence.of(DaemonConfig()).label == "daemon (poll 2 s, max_idle 60 s)"
    fixed = what_if(RECORDS, [PolicySpec("fifo")], [1], 8, 4, site_physics=False, round_gap=30.0)
    assert fixed[0]["cadence"] == "fixed 30 s"  # the papers' fixed rounds only when asked for
    # a job starts at the poll after its arrival, not at the next 30-s round
    starts = {j["job_id"]: j["start"] for j in res[0]["jobs"]}
    fixed_starts = {j["job_id"]: j["start"] for j in fixed[0]["jobs"]}
    assert starts["2"] - 11 <= 2.0 < fixed_starts["2"] - 11


def test_what_if_reads_the_sites_cadence_from_its_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "elastic.toml"
    config.write_text("[daemon]\npoll_interval = 5\nmax_idle = 120\n")
    monkeypatch.setattr("slurm_elastic.whatif.read_accounting", lambda *a, **k: RECORDS)
    out = tmp_path / "res.json"
    assert main(["what-if", "--since", "now-1d", "--policy", "fifo", "--gpus", "8", "--config", str(config),
                 "--no-site-physics", "--processes", "1", "--quiet", "--json", str(out)]) == 0
    results: list[dict[str, Any]] = json.loads(out.read_text())
    assert results[0]["cadence"] == "daemon (poll 5 s, max_idle 120 s)"
    capsys.readouterr()
