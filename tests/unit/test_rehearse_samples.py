"""The rehearsal's ``samples`` check counts from the job's first epoch: a script whose epochs are
numbered from 1 (``world.epochs(n + 1, start=1)``, as Princeton's DDP tutorial loops
``range(1, epochs + 1)``) passes when each of its epochs trains every sample once; a gap still fails."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import cast

from slurm_elastic.rehearse import checks
from slurm_elastic.rehearse.driver import RunRecord, Worker
from slurm_elastic_launcher.sampler import ElasticSampler, SamplerState

SIZE, BATCH, SEED = 8, 4, 0


def _record(tmp_path: Path, epochs: list[int]) -> RunRecord:
    """One worker that trained ``epochs`` whole (world of 1), as its event log and reports say."""
    log, reports = tmp_path / "r0.w0.jsonl", tmp_path / "r0.reports"
    steps, step = [], 0
    for epoch in epochs:
        for consumed in range(0, SIZE, BATCH):
            step += 1
            ids = ElasticSampler(SIZE, SamplerState(SEED, epoch, consumed)).indices(1, 0, BATCH)
            steps.append({"ev": "step", "t": float(step), "worker": "w0", "gen": "o0", "rank": 0, "step": step,
                          "epoch": epoch, "consumed": consumed, "world": 1, "local": BATCH, "n": BATCH,
                          "indices": ids})
    log.write_text("".join(json.dumps(s) + "\n" for s in steps))
    reports.write_text(json.dumps({"kind": "progress", "epoch_size": SIZE, "samples": BATCH}) + "\n")
    proc = cast("subprocess.Popen[bytes]", None)  # never read by the check
    worker = Worker("w0", 0, proc, log, tmp_path / "r0.w0.out", tmp_path / "r0.w0.probe", joiner=False)
    return RunRecord(workers={worker.key: worker}, ended=True, reports=[reports])


def test_epochs_numbered_from_1_pass_when_each_trained_every_sample_once(tmp_path: Path) -> None:
    verdict = checks.sample_verdict(_record(tmp_path, [1, 2, 3]), SEED)
    assert verdict.status == checks.PASS, verdict.detail
    assert verdict.figures["epochs"] == 3 and "(1..3)" in verdict.detail


def test_a_missing_epoch_in_between_still_fails(tmp_path: Path) -> None:
    verdict = checks.sample_verdict(_record(tmp_path, [1, 3]), SEED)
    assert verdict.status == checks.FAIL and "not one after another from 1" in verdict.detail, verdict.detail
