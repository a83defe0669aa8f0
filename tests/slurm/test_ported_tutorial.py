"""A DDP-tutorial-style script ported through the drop-in module (issue 36, item 4) on the real dev
cluster: ``examples/snapshot_trainer.py`` (a ``Trainer`` that reads ``LOCAL_RANK`` in ``__init__``,
argparse, its own snapshot and resume, a ``DistributedSampler``, ``init_process_group`` and ``DDP``
kept), submitted with ``slurm-elastic submit``, is grown 1 -> 2 onto a satellite on another node by
the daemon's actor, shrunk back, and completes: every sample of every epoch trained once (the
job's signed reports), and its own snapshot names the last epoch. The script runs under the
rehearsal's probe, which only paces its steps (0.03 s each), so that it outlasts a satellite's start
on any machine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from slurm_elastic.core.actions import Action, ActionKind
from slurm_elastic.core.model import JobId
from slurm_elastic.rehearse.driver import PROBE
from slurm_elastic.resources import EXAMPLE_TRAINER

from .conftest import DevCluster
from .test_grow_in_place import _actuator, _grow_onto_another_node, _wait

pytestmark = pytest.mark.slurm


def test_a_ported_tutorial_style_script_grows_shrinks_and_completes(cluster: DevCluster, tmp_path: Path,
                                                                     submit_example: Any,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    epochs, samples = 20, 4096  # 2,560 steps at one worker, at least 0.03 s each: it outlasts the grow
    monkeypatch.setenv("SLURM_ELASTIC_REHEARSE_PACE_S", "0.03")  # the job's and its satellite's workers'
    script = EXAMPLE_TRAINER.with_name("snapshot_trainer.py")
    snapshot = cluster.root / "jobs" / f"tutorial-snapshot-{tmp_path.name}.pt"  # written by the job's user
    out = cluster.root / "jobs" / "tutorial-%j.out"
    job = str(submit_example(out, "--elastic", "1:2", "--gpus-per-node", "1", "--epochs", str(epochs),
                             "--local-batch", "32",
                             script=[str(PROBE), str(script), str(epochs), "1", "--batch_size", "32",
                                     "--samples", str(samples), "--snapshot_path", str(snapshot)]))
    cluster.wait_state(int(job), "RUNNING", timeout=40)
    store, obs, act = _actuator(cluster, tmp_path, job)

    held, sat = _grow_onto_another_node(store, obs, act, job)

    def world(n: int) -> bool:
        obs.observe()
        return any(r.kind == "resize" and r.world == n for r in store.progress_of(job))

    def logs() -> str:
        return "\n".join(f"--- {j}\n{Path(str(out).replace('%j', j)).read_text()[-3000:]}" for j in (job, sat)
                         if Path(str(out).replace("%j", j)).exists())

    try:
        _wait("the joined world of 2 workers", lambda: world(2), timeout=180)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; job {cluster.job(int(job))['job_state']}, satellite "
                             f"{cluster.job(int(sat))['job_state']}; reports {store.progress_of(job)[-3:]}\n"
                             f"{logs()}") from None
    seen = obs.observation()
    snap = seen.seen()
    (outcome,) = act.apply(seen, (Action(ActionKind.SHRINK, JobId(job), snap.job(JobId(job)).placement, held,
                                         32, 32, 1, 0.1),))
    assert outcome.ok and f"satellites {sat} end" in outcome.message, outcome.message
    _wait("the satellite to end by itself", lambda: cluster.job(int(sat))["job_state"] == "COMPLETED")
    _wait("the job to finish", lambda: cluster.job(int(job))["job_state"] == "COMPLETED", timeout=480)
    obs.poll()  # the last reports, written as the job ended
    rows = store.progress_of(job)
    assert [r.world for r in rows if r.kind == "resize"] == [2, 1], rows
    end = [r for r in rows if r.kind == "end"]
    assert end and end[-1].samples == epochs * samples, end  # no sample lost or repeated across both resizes
    log = Path(str(out).replace("%j", job)).read_text()
    assert "1 -> 2 workers" in log and "2 -> 1 workers" in log, log[-3000:]
    assert f"Epoch {epochs - 1} | Training snapshot saved" in log, log[-3000:]
    assert torch.load(snapshot, weights_only=True)["EPOCHS_RUN"] == epochs
