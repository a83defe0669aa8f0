"""Real worker processes on gloo (CPU): in-place grows and shrinks, and SIGKILLed workers."""

from __future__ import annotations

import json
import signal
import time
from collections import defaultdict
from typing import Any

import pytest

from slurm_elastic_launcher.sampler import ElasticSampler, SamplerState

pytestmark = pytest.mark.launcher

DATASET = 512


def check_accounting(job: Any, workers: list[str], killed: str = "") -> int:
    """Every step was run by all ranks of its world; per epoch, no sample lost or repeated.

    A step redone after a rollback counts in its newest generation only; the killed worker's log may
    lack its last steps (it died before writing), so its records are rebuilt from the survivors'.
    """
    by_step: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for w in workers:
        for e in job.events(w):
            if e["ev"] == "step":
                by_step[e["step"]].append(e)
    for step, recs in by_step.items():
        newest = max(r["gen"] for r in recs)
        by_step[step] = [r for r in recs if r["gen"] == newest]
    epochs: dict[int, list[int]] = defaultdict(list)
    for step in sorted(by_step):
        recs = by_step[step]
        if killed and len(recs) < recs[0]["world"]:  # the killed rank's chunk of a completed step
            sampler = ElasticSampler(DATASET, SamplerState(0, recs[0]["epoch"], recs[0]["consumed"]))
            have = {r["rank"] for r in recs}
            recs = recs + [
                {**recs[0], "rank": k, "indices": sampler.indices(recs[0]["world"], k, recs[0]["local"])}
                for k in range(recs[0]["world"])
                if k not in have
            ]
        assert sorted(r["rank"] for r in recs) == list(range(recs[0]["world"])), f"step {step}: {recs}"
        assert len({(r["gen"], r["epoch"], r["n"]) for r in recs}) == 1
        for r in sorted(recs, key=lambda r: r["rank"]):
            epochs[r["epoch"]].extend(r["indices"])
        assert sum(len(r["indices"]) for r in recs) == recs[0]["n"]
    last = max(epochs)
    for epoch, seen in epochs.items():
        assert len(seen) == len(set(seen)), f"epoch {epoch} repeats samples"
        if epoch < last:
            assert sorted(seen) == list(range(DATASET)), f"epoch {epoch} lost samples"
    return len(by_step)


def digests(job: Any, workers: list[str]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = defaultdict(set)
    for w in workers:
        for e in job.events(w):
            if e["ev"] == "formed":
                out[e["gen"]].add(e["digest"])
    return out


def test_resizes_2_4_3_2_3_keep_ranks_equal_and_accounting_exact(fake_job_factory: Any) -> None:
    """Grow (state sent to the joiners), shrink twice (the group narrowed, the second time reordered so
    the decider changes), then grow again from a narrowed group."""
    job = fake_job_factory(dataset_size=DATASET, SLURM_ELASTIC_LOG_INDICES="1")
    old, everyone = ["w0", "w1"], ["w0", "w1", "w2", "w3", "w4"]
    for w in old:
        job.start(w, old)
    job.wait_until("two workers training", lambda: job.last_step("w0") >= 5)
    job.order("resize", everyone[:4], secret="forged-secret-0123456789")  # refused: bad MAC
    for w in everyone[2:4]:
        job.start(w)  # joiners import torch and initialise while w0, w1 keep training
    grow = job.order("resize", everyone[:4])
    # (steps are the job's global count; both joiners must have logged a step of the new world)
    job.wait_until("grown to 4", lambda: all(job.last_step(w, f"o{grow}") for w in everyone[2:4]))
    steps_before_grow = min(e["step"] for e in job.events("w2") if e["ev"] == "step") - 1
    assert steps_before_grow > 5  # the old workers trained while the joiners started
    assert any(e["ev"] == "warmed" for e in job.events("w2"))
    shrink = job.order("resize", everyone[:3])
    job.wait_until("shrunk to 3", lambda: job.steps_in("w0", f"o{shrink}") >= 3)
    shrink2 = job.order("resize", ["w2", "w0"])  # w2 becomes rank 0 and reads the orders
    job.wait_until("shrunk to 2", lambda: job.steps_in("w2", f"o{shrink2}") >= 3)
    job.start("w4")
    grow2 = job.order("resize", ["w2", "w0", "w4"])
    job.wait_until("grown to 3", lambda: job.steps_in("w4", f"o{grow2}") >= 3)
    job.wait_until("an epoch boundary crossed at size 3", lambda: job.last_step("w0") * 24 > 4 * DATASET)
    job.order("stop")
    rcs = job.wait_exit()
    assert rcs == {w: 0 for w in everyone}, {w: job.output(w)[-2000:] for w in everyone}
    for w, state in {"w3": "left", "w1": "left", "w0": "done", "w2": "done", "w4": "done"}.items():
        assert f'"state": "{state}"' in job.output(w), (w, job.output(w)[-2000:])
    assert any(e["ev"] == "refused" and "bad MAC" in e["reason"] for e in job.events("w0"))
    formed = [e for w in everyone for e in job.events(w) if e["ev"] == "formed"]
    worlds = {e["gen"]: e["world"] for e in formed}
    assert worlds == {"o0": 2, f"o{grow}": 4, f"o{shrink}": 3, f"o{shrink2}": 2, f"o{grow2}": 3}
    assert {e["rank"] for e in formed if e["gen"] == f"o{shrink2}" and e["worker"] == "w2"} == {0}
    for gen, ds in digests(job, everyone).items():
        assert len(ds) == 1, f"ranks differ after forming {gen}"
    synced: dict[str, int] = defaultdict(int)
    for e in formed:
        synced[e["gen"]] = max(synced[e["gen"]], e["synced_bytes"])
    assert synced[f"o{grow}"] > 0 and synced[f"o{grow2}"] > 0  # a joiner received the state
    assert synced[f"o{shrink}"] == synced[f"o{shrink2}"] == 0  # a shrink moves no state
    assert {e["worker"] for e in formed if e["gen"] == f"o{grow}" and e["synced_bytes"]} == set(everyone[:4])
    assert check_accounting(job, everyone) > 20
    evaluated = [e for w in everyone for e in job.events(w) if e["ev"] == "evaluated"]
    assert evaluated and all(e["rank"] == 0 and 0.0 <= e["metric"] <= 1.0 for e in evaluated)
    assert sorted(e["epoch"] for e in evaluated) == list(range(len(evaluated)))  # once per epoch end
    # the job's own output says each change of its world, once, from its rank 0 (issue 17: it showed none)
    said = [
        line
        for w in everyone
        for line in (job.tmp / f"{w}.out").read_text().splitlines()
        if line.startswith("slurm-elastic: order ")
    ]
    assert [line.split(":")[1].strip().split()[1] for line in said] == [str(s) for s in (grow, shrink, shrink2, grow2)]
    assert "2 -> 4 workers (w0,w1,w2,w3)" in said[0] and "paused" in said[0] and "at sample" in said[0]


def test_an_order_for_the_same_world_changes_the_batch_and_keeps_the_group(fake_job_factory: Any) -> None:
    job = fake_job_factory(dataset_size=DATASET, SLURM_ELASTIC_LOG_INDICES="1")
    workers = ["w0", "w1"]
    for w in workers:
        job.start(w, workers)
    job.wait_until("two workers training", lambda: job.last_step("w0") >= 5)
    seq = job.order("resize", workers, local_batch=16)
    job.wait_until("rebatched", lambda: any(e["ev"] == "rebatched" for e in job.events("w1")))
    job.wait_until("an epoch boundary crossed", lambda: job.last_step("w0") * 32 > 2 * DATASET)
    job.order("stop")
    assert job.wait_exit() == {"w0": 0, "w1": 0}
    steps = [e for e in job.events("w0") if e["ev"] == "step"]
    assert {e["local"] for e in steps} == {8, 16} and steps[-1]["local"] == 16
    said = (job.tmp / "w0.out").read_text()
    assert f"slurm-elastic: order {seq}: 2 -> 2 workers (w0,w1), per-GPU batch 16" in said
    assert not [e for w in workers for e in job.events(w) if e["ev"] == "formed" and e["gen"] == f"o{seq}"]
    assert check_accounting(job, workers) > 10


def test_worker_killed_in_a_narrowed_group_survivors_reform(fake_job_factory: Any) -> None:
    job = fake_job_factory(dataset_size=DATASET, SLURM_ELASTIC_LOG_INDICES="1", SLURM_ELASTIC_GROUP_TIMEOUT_S="5")
    workers = ["w0", "w1", "w2", "w3"]
    for w in workers:
        job.start(w, workers)
    job.wait_until("four workers training", lambda: job.last_step("w0") >= 5)
    shrink = job.order("resize", workers[:3])
    job.wait_until("shrunk to 3", lambda: job.steps_in("w2", f"o{shrink}") >= 3)
    job.kill("w1")
    gen = f"o{shrink}.r"
    job.wait_until("survivors re-formed", lambda: job.steps_in("w2", gen) >= 5, timeout=40)
    job.order("stop")
    rcs = job.wait_exit()
    assert rcs["w0"] == rcs["w2"] == rcs["w3"] == 0 and rcs["w1"] == -signal.SIGKILL
    recovered = [e for e in job.events("w0") if e["ev"] == "recovered"]
    assert len(recovered) == 1 and recovered[0]["world"] == 2
    assert len(digests(job, ["w0", "w2"])[gen]) == 1
    assert check_accounting(job, workers, killed="w1") >= 10


def test_killed_worker_survivors_reform_and_continue(fake_job_factory: Any) -> None:
    job = fake_job_factory(dataset_size=DATASET, SLURM_ELASTIC_LOG_INDICES="1", SLURM_ELASTIC_GROUP_TIMEOUT_S="5")
    workers = ["w0", "w1", "w2"]
    reports = job.tmp / "job.reports"
    for w in workers:
        job.start(w, workers, SLURM_ELASTIC_REPORTS=str(reports))
    job.wait_until("three workers training", lambda: job.last_step("w0") >= 10)
    killed_at = time.time()
    job.kill("w1")
    # step numbers are the job's global count: wait for five steps of the new generation on each survivor,
    # not for step 5 (already passed), or w0 may not have logged its first new step yet
    job.wait_until("survivors re-formed", lambda: min(job.steps_in(w, "o0.r") for w in ("w0", "w2")) >= 5, timeout=40)
    first_new = min(e["t"] for e in job.events("w0") if e["ev"] == "step" and e["gen"] == "o0.r")
    assert first_new - killed_at < 30.0
    job.order("stop")
    rcs = job.wait_exit()
    assert rcs["w0"] == rcs["w2"] == 0 and rcs["w1"] == -signal.SIGKILL
    recovered = [e for e in job.events("w0") if e["ev"] == "recovered"]
    assert len(recovered) == 1 and recovered[0]["world"] == 2
    assert len(digests(job, ["w0", "w2"])["o0.r"]) == 1
    # Exact accounting over every step, before and after the kill (steps 0..10 at least ran before it).
    assert check_accounting(job, workers, killed="w1") >= 11
    assert any(e["ev"] == "step" and e["gen"] == "o0.r" for e in job.events("w2"))
    # rank 0's recovery report names the lost worker: the daemon gives its GPU back (issue 14, finding 3)
    lines = [json.loads(line) for line in reports.read_text().splitlines()]
    assert [r["lost"] for r in lines if "lost" in r] == [["w1"]]
    assert [r["world"] for r in lines if "lost" in r] == [2]
    assert "slurm-elastic: lost w1: 2 workers (w0,w2) went on after" in (job.tmp / "w0.out").read_text()


@pytest.mark.parametrize(("from_", "to", "api"), [(2, 3, "run"), (3, 2, "run"), (2, 3, "loop"), (3, 2, "loop")])
def test_bench_resize_measures_both_pauses_on_real_workers(from_: int, to: int, api: str) -> None:
    """The bench's figures come from real runs, under run(ElasticJob) or a loop of the script's own
    (the user-loop API): a grow sends the state, a shrink none (no timing asserted)."""
    from slurm_elastic_launcher.resize_bench import bench_resize

    out = bench_resize("cnn", from_=from_, to=to, steps_after=4, api=api)
    assert (out["from"], out["to"], out["backend"], out["repeat"], out["api"]) == (from_, to, "gloo-cpu", 1, api)
    assert (out["synced_bytes"] > 0) == (to > from_)
    assert out["switch_s"] >= 0 and out["resize_raw_s"] > 0 and out["checkpoint_restart_raw_s"] > 0
    slowest = max(out["resize_pause_s"], out["switch_s"], 1e-3)
    assert out["speedup"] == round(out["checkpoint_restart_pause_s"] / slowest, 1)
