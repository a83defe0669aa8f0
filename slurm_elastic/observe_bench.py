"""``slurm-elastic bench observe``: one observation of a large site, and its plan, timed by stage.

This module owns building a large site's Slurm 25.11 ``sinfo -N --json`` and ``squeue --json``
documents from the recorded fixtures (each record a copy of a recorded one, renamed and placed, so
every field Slurm prints is there), and timing what a daemon round does with them: running the
command (here a runner that hands back the prepared text, so this is our side alone: slurmctld's
own time to answer is not in it), decoding the JSON, reading the records, building the snapshot
(:func:`~slurm_elastic.observe.snapshot.snapshot_of`) and planning it with a policy. It reads the
fixtures and runs nothing else.

The site: ``nodes`` nodes of 4 GPUs in two partitions (``sinfo -N`` lists each node once per
partition, as 25.11 does); a fifth of the jobs run (each on one node, 1, 2 or 4 GPUs, while GPUs
are free), the rest wait; half of all jobs are elastic (``slurm-elastic gpus=1:4`` in their AdminComment).
"""

from __future__ import annotations

import copy
import json
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from slurm_elastic import policies
from slurm_elastic.contract import ELASTIC_TAG
from slurm_elastic.errors import ConfigError
from slurm_elastic.observe.snapshot import snapshot_of
from slurm_elastic.observe.view import ClusterView, gc_paused
from slurm_elastic.slurm.cli_backend import SlurmCli
from slurm_elastic.textfiles import read_text

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "slurm-json" / "25.11"
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


def site_documents(nodes: int, jobs: int, *, seed: int = 0,
                   folder: Path = FIXTURES) -> tuple[str, str]:
    """The ``sinfo -N --json`` and ``squeue --json`` texts of the site (see the module docstring)."""
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
    return json.dumps(sinfo), json.dumps(squeue)


def bench_observe(*, nodes: int, jobs: int, policy: str = "dp", repeat: int = 5, seed: int = 0) -> dict[str, Any]:
    """Median seconds of the daemon's observation (``ClusterView.observe`` on the CLI backend), of each of
    its stages (command, decode, records, snapshot) and of the plan."""
    if nodes < 1 or jobs < 0 or repeat < 1:
        raise ConfigError(f"bench observe: nodes={nodes}, jobs={jobs}, repeat={repeat}: need nodes >= 1, "
                          "jobs >= 0, repeat >= 1")
    from slurm_elastic.wiring import default_profiles

    t0 = time.perf_counter()
    sinfo_text, squeue_text = site_documents(nodes, jobs, seed=seed)
    built_s = time.perf_counter() - t0
    texts = {"sinfo": sinfo_text, "squeue": squeue_text}

    def runner(argv: Sequence[str]) -> str:
        if argv[:2] == ["sinfo", "--version"]:
            return "slurm 25.11.7\n"
        return texts[argv[0]]

    cli = SlurmCli(runner=runner)
    profiles = default_profiles()
    planner = policies.create(policy)
    stages: dict[str, list[float]] = {k: [] for k in ("command", "decode", "records", "snapshot", "view", "plan")}
    snap = None
    left_out = 0
    view = ClusterView(cli, profiles, lambda: 1_700_100_000.0)
    for i in range(repeat):
        t = time.perf_counter()
        view.observe()
        stages["view"].append(time.perf_counter() - t)
        with gc_paused():  # as ClusterView.observe reads
            snap, left_out = _stages(runner, cli._sinfo, profiles, stages)
        t = time.perf_counter()
        planner.plan(snap, None, np.random.default_rng(seed + i))
        stages["plan"].append(time.perf_counter() - t)
    # the daemon's own reader read every job the stages did
    assert snap is not None and len(view.records) + len(cli.refused) == jobs
    med = {k: round(statistics.median(v), 4) for k, v in stages.items()}
    return {
        "benchmark": "observe", "dialect": cli.dialect, "nodes": nodes,
        "gpus": nodes * GPUS_PER_NODE, "jobs": jobs, "policy": policy, "repeat": repeat,
        "snapshot_jobs": len(snap.jobs), "elastic_jobs": len(snap.elastic_jobs()), "left_out": left_out,
        "json_mib": round((len(sinfo_text) + len(squeue_text)) / 2**20, 1), "build_documents_s": round(built_s, 2),
        "observe_s": med["view"], "plan_s": med["plan"],
        "stages_s": {k: med[k] for k in ("command", "decode", "records", "snapshot")},
    }


def _stages(runner: Any, sinfo: list[str], profiles: Any, stages: dict[str, list[float]]) -> tuple[Any, int]:
    """One observation by stage (what ``ClusterView.observe`` does, timed between its steps)."""
    from slurm_elastic.slurm.records import parse_jobs, parse_nodes

    t0 = time.perf_counter()
    node_text, job_text = runner(sinfo), runner(["squeue", "--json"])
    t1 = time.perf_counter()
    node_doc, job_doc = json.loads(node_text), json.loads(job_text)
    t2 = time.perf_counter()
    refused: dict[str, str] = {}
    node_recs, job_recs = parse_nodes(node_doc, {}), parse_jobs(job_doc, refused)
    t3 = time.perf_counter()
    snap = snapshot_of(node_recs, job_recs, now=1_700_100_000.0, profiles=profiles, refused=refused)
    t4 = time.perf_counter()
    for key, value in (("command", t1 - t0), ("decode", t2 - t1), ("records", t3 - t2), ("snapshot", t4 - t3)):
        stages[key].append(value)
    return snap, len(refused)

