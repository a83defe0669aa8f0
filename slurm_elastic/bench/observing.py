"""``slurm-elastic bench observe``: a large site's rounds of observation, and their plan, timed by stage.

This module owns building a large site's Slurm 25.11 ``sinfo -N --json`` and ``squeue --json``
documents from the recorded fixtures (each record a copy of a recorded one, renamed and placed, so
every field Slurm prints is there), and timing what the daemon's observer
(:class:`~slurm_elastic.observe.view.ClusterView` on the CLI backend) does with them round after
round: running the command (here a runner that hands back the prepared text, so this is our side
alone: slurmctld's own time to answer is not in it), decoding the JSON, reading the records,
building the snapshot, and planning it with a policy. It reads the fixtures and runs nothing else.

The site: ``nodes`` nodes of 4 GPUs in two partitions (``sinfo -N`` lists each node once per
partition, as 25.11 does); a fifth of the jobs run (each on one node, 1, 2 or 4 GPUs, while GPUs
are free), the rest wait; half of all jobs are elastic (``slurm-elastic gpus=1:4`` in their
AdminComment). Rounds alternate between two versions of the queue, as a live queue changes: in the
second, ``churn`` of the jobs have a new comment (a launcher announcing itself: read again, made
again) and every waiting job a new ``last_sched_evaluation`` and priority (what slurmctld's
scheduler changes on each pass; no reader reads them). The first round reads everything afresh
(``first_observe_s``); ``observe_s`` is the median of the others. Each round observes and plans
as the daemon's does, the garbage collector paused (:func:`~slurm_elastic.collector.gc_paused`),
and is followed by a full collection, timed apart (``collector_s``): the most the collector does
between two rounds.
"""

from __future__ import annotations

import copy
import gc
import json
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from slurm_elastic import policies
from slurm_elastic.collector import gc_paused
from slurm_elastic.contract import ELASTIC_TAG
from slurm_elastic.errors import ConfigError
from slurm_elastic.observe.view import ClusterView
from slurm_elastic.slurm.cli_backend import SlurmCli
from slurm_elastic.textfiles import read_text

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "slurm-json" / "25.11"
GPUS_PER_NODE = 4
RUNNING_SHARE = 0.2
ELASTIC_SHARE = 0.5


def _fixture(name: str, folder: Path) -> dict[str, Any]:
    path = folder / name
    text = read_text(path, max_bytes=16 * 1024 * 1024, noun="bench observe's fixture", error=ConfigError,
                     kind_rule="the recorded 25.11 JSON of the checkout", size_rule="a recorded fixture")
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"bench observe: fixture {path}: {exc} (rule: the recorded 25.11 JSON of the checkout)") \
            from None
    if not isinstance(doc, dict):
        raise ConfigError(f"bench observe: fixture {path}: not a JSON object")
    return doc


def _num(value: int) -> dict[str, Any]:
    return {"set": True, "infinite": False, "number": value}


def site_documents(nodes: int, jobs: int, *, seed: int = 0, folder: Path = FIXTURES,
                   churn: float = 0.0) -> tuple[str, str, str]:
    """The ``sinfo -N --json`` text of the site and two versions of its ``squeue --json`` (the second with
    ``churn`` of the jobs changed; see the module docstring)."""
    rng = np.random.default_rng(seed)
    sinfo = _fixture("sinfo_N.json", folder)
    squeue = _fixture("squeue.json", folder)
    node_rows = {row["partition"]["name"]: row for row in sinfo["sinfo"]}
    run_tpl = next(j for j in squeue["jobs"] if j["job_state"][0] == "RUNNING")
    wait_tpl = next(j for j in squeue["jobs"] if j["job_state"][0] == "PENDING")
    width = len(str(nodes))
    names = [f"g{i:0{width}d}" for i in range(1, nodes + 1)]
    free = {n: GPUS_PER_NODE for n in names}
    out_jobs: list[dict[str, Any]] = []
    running_left = int(jobs * RUNNING_SHARE)
    node_iter = iter(names)
    node = next(node_iter, None)
    used: dict[str, list[int]] = {n: [] for n in names}
    for i in range(jobs):
        want = int(rng.choice((1, 2, 4)))
        elastic = rng.random() < ELASTIC_SHARE
        while node is not None and free[node] < want:
            node = next(node_iter, None)
        if running_left > 0 and node is not None:
            running_left -= 1
            job = copy.deepcopy(run_tpl)
            idx = list(range(GPUS_PER_NODE - free[node], GPUS_PER_NODE - free[node] + want))
            free[node] -= want
            used[node] += idx
            held = f"{idx[0]}-{idx[-1]}" if want > 1 else str(idx[0])
            job.update(nodes=node, batch_host=node, node_count=_num(1), gres_detail=[f"gpu:v100:{want}(IDX:{held})"])
        else:
            job = copy.deepcopy(wait_tpl)
            job.update(node_count=_num(1))
        job.update(job_id=1000 + i, name=f"train{i}", tres_per_node=f"gres/gpu:{want}", tres_per_job="",
                   tres_per_task="", admin_comment=f"{ELASTIC_TAG} gpus=1:4" if elastic else "",
                   comment="", submit_time=_num(1_700_000_000 + i))
        out_jobs.append(job)
    squeue["jobs"] = out_jobs
    first = json.dumps(squeue)
    changed = set(rng.choice(jobs, size=round(jobs * churn), replace=False).tolist()) if jobs else set()
    for i, job in enumerate(out_jobs):
        if i in changed:
            job["comment"] = f"changed in round 2 ({i})"
        if job["job_state"][0] == "PENDING":
            job.update(last_sched_evaluation=_num(1_700_100_000 + i), priority=_num(1000 + i))
    second = json.dumps(squeue)
    rows = []
    for name in names:
        gpus = used[name]
        gres_used = (f"gpu:v100:{len(gpus)}(IDX:{','.join(map(str, gpus))})" if gpus else "gpu:v100:0(IDX:N/A)")
        for tpl in node_rows.values():
            row = copy.deepcopy(tpl)
            row["nodes"]["nodes"] = [name]
            row["gres"] = {"total": f"gpu:v100:{GPUS_PER_NODE}", "used": gres_used}
            row["node"]["state"] = ["MIXED"] if gpus else ["IDLE"]
            rows.append(row)
    sinfo["sinfo"] = rows
    return json.dumps(sinfo), first, second


def bench_observe(*, nodes: int, jobs: int, policy: str = "dp", repeat: int = 5, seed: int = 0,
                  churn: float = 0.01) -> dict[str, Any]:
    """Seconds of the daemon's observation (``ClusterView.observe`` on the CLI backend): the first
    round, the median of ``repeat`` rounds after it, each stage's median, and the plan's median."""
    if nodes < 1 or jobs < 0 or repeat < 1 or not 0 <= churn <= 1:
        raise ConfigError(f"bench observe: nodes={nodes}, jobs={jobs}, repeat={repeat}, churn={churn}: need "
                          "nodes >= 1, jobs >= 0, repeat >= 1, 0 <= churn <= 1")
    from slurm_elastic.wiring import default_profiles

    t0 = time.perf_counter()
    sinfo_text, *queues = site_documents(nodes, jobs, seed=seed, churn=churn)
    built_s = time.perf_counter() - t0
    turn = [0]

    def runner(argv: Sequence[str]) -> str:
        if argv[:2] == ["sinfo", "--version"]:
            return "slurm 25.11.7\n"
        return sinfo_text if argv[0] == "sinfo" else queues[turn[0] % 2]

    cli = SlurmCli(runner=runner)
    planner = policies.create(policy)
    view = ClusterView(cli, default_profiles(), lambda: 1_700_100_000.0 + turn[0])
    stages: dict[str, list[float]] = {k: [] for k in ("command", "decode", "records", "snapshot", "observe", "plan",
                                                       "collector")}
    first_s = 0.0
    snap = None
    for turn[0] in range(repeat + 1):
        with gc_paused():  # as the daemon runs a round: observe and plan with the collector paused
            t = time.perf_counter()
            snap = view.observe()
            took = time.perf_counter() - t
            t = time.perf_counter()
            planner.plan(snap, None, np.random.default_rng(seed + turn[0]))
            stages["plan"].append(time.perf_counter() - t)
        if turn[0] == 0:
            first_s = took
        else:
            for key in ("command", "decode", "records"):
                stages[key].append(cli.timings.get(key, 0.0))
            stages["snapshot"].append(view.snapshot_s)
            stages["observe"].append(took)
        t = time.perf_counter()
        gc.collect()  # what the collector does between rounds, at most: a full collection
        stages["collector"].append(time.perf_counter() - t)
    assert snap is not None and len(view.records) + len(cli.refused) == jobs
    med = {k: round(statistics.median(v), 4) for k, v in stages.items()}
    return {
        "benchmark": "observe", "dialect": cli.dialect, "nodes": nodes,
        "gpus": nodes * GPUS_PER_NODE, "jobs": jobs, "policy": policy, "repeat": repeat, "churn": churn,
        "snapshot_jobs": len(snap.jobs), "elastic_jobs": len(snap.elastic_jobs()), "left_out": len(view.left_out),
        "json_mib": round((len(sinfo_text) + len(queues[0])) / 2**20, 1), "build_documents_s": round(built_s, 2),
        "first_observe_s": round(first_s, 4), "observe_s": med["observe"], "plan_s": med["plan"],
        "collector_s": med["collector"],
        "stages_s": {k: med[k] for k in ("command", "decode", "records", "snapshot")},
        "last_round": {"jobs_read_again": cli.job_memo.misses, "jobs_made_again": len(snap.jobs) - view.made.reused},
    }
