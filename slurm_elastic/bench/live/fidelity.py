"""``slurm-elastic bench fidelity``: the simulator against the real dev cluster, on one small trace.

This module owns the fidelity benchmark of issue 15 (part 5): can an admin trust ``what-if``? On a
dev cluster (its own, under ``root``, unless told to use one already up) it

1. measures the site profile of the example trainer's ``cnn`` with ``slurm-elastic profile``
   (:func:`~slurm_elastic.site_profile.profile_site`: one fixed-size job per placement, alone);
2. draws a trace (:func:`make_trace`, seeded): launcher jobs of mixed GPU ranges and lengths (each
   a set number of epochs of its data set, per-GPU batch :data:`LOCAL_BATCH`) with Poisson arrivals;
3. runs it for real: the acting daemon (``--policy``, the measured profiles as ``[daemon]
   profiles``) starts, shrinks and grows the jobs through Slurm while the bench submits each at its
   arrival time; a job's JCT is its end (Slurm's accounting) minus the moment ``sbatch`` returned;
4. simulates the same trace (the real submission times) with the same policy, guards and round
   gap (the daemon's poll interval), the measured profile as the physics, and then, one at a time,
   the physics the bench found the profiles leave out (:data:`PHYSICS`, see
   :mod:`slurm_elastic.sim.costs`): Slurm's equal GPUs per node when a job starts, the whole blocks
   Slurm frees of a running launcher job (:mod:`slurm_elastic.sim.blocks`: never its batch host), the resize
   pauses the real jobs reported, their start-up and ending (Slurm's start to their first step, and
   their end report to Slurm's end: the median over the trace's jobs of each), and the host's CPU
   cores shared by every worker (a dev cluster's "GPU" is a CPU process).

It also records the trace's jobs as ``sacct --json`` lists them and measures from them the site
physics ``what-if`` applies (:func:`~slurm_elastic.reports.site_physics.measure_site_physics`: Slurm's
start to the first ``srun`` step, the last step's end to Slurm's end, per node count), and simulates
the trace once more with those latencies in place of the launcher-measured start-up and ending
(``site_physics``: the ratio ``what-if``'s physics give, and how much of a job's start-up Slurm's
accounting sees).

It prints ``real_avg_jct_s``, ``sim_avg_jct_s`` (every physics), their ``ratio`` (sim / real) and
makespans, the same for each step of the ladder (``ladder``: what each physics changes), the
physics measured, and each job's two JCTs. The real run is recorded in its work folder
(:data:`RUN_FILE`), so the simulator can be run on it again as it changes (:func:`replay_fidelity`,
``--replay DIR``) without running the trace again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import getpass
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from slurm_elastic import policies
from slurm_elastic.config import Config, parse
from slurm_elastic.core.model import ElasticMode
from slurm_elastic.dev import devcluster
from slurm_elastic.dev.processes import die_with_parent
from slurm_elastic.errors import ConfigError, ElasticError
from slurm_elastic.reports.site_physics import measure_site_physics
from slurm_elastic.sim.costs import CHECKPOINT_RESTART_S, IN_PLACE_GROW_S, IN_PLACE_SHRINK_S, ResizeCost
from slurm_elastic.sim.engine import simulate
from slurm_elastic.sim.workload import SimJobSpec
from slurm_elastic.site_profile import EXAMPLE, profile_site
from slurm_elastic.slurm.json_records import parse_sacct
from slurm_elastic.slurm.runner import run_command, run_json
from slurm_elastic.store import Store
from slurm_elastic.submit import new_secret_file, submit
from slurm_elastic.templates import JobRequest
from slurm_elastic.textfiles import read_text

NODES, GPUS_PER_NODE = 3, 2
MODEL = "cnn"
LOCAL_BATCH = 32
PLACEMENTS = ("1", "2", "11", "111", "22", "222")
"""The placements profiled: every GPU count of the 3 x 2 cluster but 5, in the equal shapes Slurm
starts jobs on (the simulator takes a shape it has not measured from one with as many GPUs and
nodes, then from the fit)."""
RANGES = ((1, 2), (1, 4), (2, 4), (1, 6), (2, 6))
"""The ``--elastic MIN:MAX`` GPU ranges a trace job draws from."""
POLL_S = 1.0
"""The daemon's poll interval; the simulator's round gap."""
PHYSICS = ("equal_start", "blocks", "pauses", "overhead", "cores")
RUN_FILE = "run.json"
"""The record of a real run in its work folder (trace, Slurm's and the jobs' times): ``--replay``."""
MAX_RUN_BYTES = 16 << 20
"""The ladder: profiles only, then each physics added in this order."""


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of the trace: submitted ``at`` seconds after the first, ``epochs`` of ``dataset_size`` samples."""

    name: str
    at: float
    min_gpus: int
    max_gpus: int
    epochs: int
    dataset_size: int


def make_trace(jobs: int, seed: int, samples_per_s: float, *, mean_gap_s: float = 10.0,
               alone_s: tuple[float, float] = (15.0, 45.0)) -> list[TraceJob]:
    """``jobs`` jobs with Poisson arrivals (mean gap ``mean_gap_s``, the first at 0), each as long as
    ``alone_s`` (uniform) of training on one GPU alone at ``samples_per_s``."""
    if jobs < 1 or not (math.isfinite(samples_per_s) and samples_per_s > 0):
        raise ConfigError(f"trace of {jobs} job(s) at {samples_per_s} samples/s: both must be > 0")
    rng = np.random.default_rng(seed)
    out, at = [], 0.0
    for i in range(jobs):
        if i:
            at += float(rng.exponential(mean_gap_s))
        lo, hi = RANGES[int(rng.integers(len(RANGES)))]
        epochs = int(rng.integers(1, 4))
        samples = float(rng.uniform(*alone_s)) * samples_per_s
        size = max(LOCAL_BATCH, round(samples / epochs / LOCAL_BATCH) * LOCAL_BATCH)
        out.append(TraceJob(f"fid-{i:02d}", round(at, 1), lo, hi, epochs, size))
    return out


def bench_fidelity(*, root: Path, policy: str = "dp", jobs: int = 12, seed: int = 0,
                   placements: Sequence[str] = PLACEMENTS, bring_up: bool = True, timeout_s: float = 1800.0,
                   alone_s: tuple[float, float] = (15.0, 45.0), mean_gap_s: float = 10.0,
                   measured: Mapping[str, Any] | None = None,
                   say: Callable[[str], None] = lambda line: print(line, file=sys.stderr)) -> dict[str, Any]:
    """Profile, run the trace for real, simulate it; the figures (module docstring).

    ``bring_up=False`` uses the dev cluster already up under ``root`` (the tests'). ``measured``:
    what :func:`~slurm_elastic.site_profile.profile_site` returned for :data:`MODEL` on this
    cluster, used instead of profiling again (its folder is the daemon's profiles).

    Raises:
        ConfigError: an unknown policy, no dev cluster at ``root`` (``bring_up=False``), or a profile
            that could not be measured or fitted.
    """
    policies.validate(policy, {})
    if not bring_up and not devcluster.status(root).get("up"):
        raise ConfigError(f"bench fidelity: no dev cluster is up at {root}")
    with contextlib.nullcontext() if not bring_up else devcluster.running(NODES, GPUS_PER_NODE, root):
        env = devcluster.slurm_env(root)
        run_command(["scancel", "--user", getpass.getuser()], env=env)
        work = Path(tempfile.mkdtemp(prefix="fidelity-", dir=root))
        say(f"bench fidelity: profiling {MODEL} on placements {','.join(placements)} (work in {work})")
        if measured is None:
            measured = profile_site(work / "profiles", models=[MODEL], placements=placements,
                                    batches=[LOCAL_BATCH], env=env, say=say)
        gpus_per_node = int(measured["gpus_per_node"])
        gpus = gpus_per_node * len(set(run_command(["sinfo", "-h", "-N", "-o", "%N"], env=env).split()))
        profile = measured["models"][MODEL]
        if profile.get("fit") != "fitted":
            raise ConfigError(f"bench fidelity: the {MODEL} profile did not fit: {profile}")
        one = next((r for r in profile["rows"] if r["placement"] == "1"), None)
        if one is None:
            raise ConfigError(f"bench fidelity: placement 1 was not measured: {profile['failed']}")
        trace = make_trace(jobs, seed, LOCAL_BATCH / one["step_time"], mean_gap_s=mean_gap_s, alone_s=alone_s)
        profiles = Path(profile["folder"]).parent
        conf_text = (f'[daemon]\npartitions = ["gpu"]\npolicy = "{policy}"\ndry_run = false\n'
                     f'store = "{work / "s.db"}"\npoll_interval = {POLL_S}\nmetrics_address = ""\n'
                     f'profiles = "{profiles}"\ndefault_model = "{MODEL}"\n')
        (work / "elastic.toml").write_text(conf_text, encoding="utf-8")
        say(f"bench fidelity: {len(trace)} jobs for real under {policy} on {gpus} GPUs")
        real = _run_real(work, env, trace, timeout_s)
        # what-if's read (read_accounting's argv with the steps), of the trace's jobs only
        ids = ",".join(j["job_id"] for j in real["jobs"].values())
        sacct = run_json(lambda argv: run_command(argv, env=env), ["sacct", "--json", "-a", "-j", ids])
    run = {"seed": seed, "gpus": gpus, "gpus_per_node": gpus_per_node, "host_cores": len(os.sched_getaffinity(0)),
           "profile": profile, "trace": [dataclasses.asdict(j) for j in trace], "real": real, "sacct": sacct}
    (work / RUN_FILE).write_text(json.dumps(run, indent=1) + "\n", encoding="utf-8")
    say(f"bench fidelity: the real run is in {work / RUN_FILE}; simulate it again with --replay {work}")
    return replay_fidelity(work)


def replay_fidelity(work: Path) -> dict[str, Any]:
    """Simulate again a real run recorded by :func:`bench_fidelity` in ``work`` (its :data:`RUN_FILE`,
    configuration and profile): the figures, with the simulator as it is now.

    Raises:
        ConfigError: ``work`` holds no readable record of a run.
    """
    text = read_text(work / RUN_FILE, max_bytes=MAX_RUN_BYTES, noun="fidelity run",
                     kind_rule="the record bench fidelity wrote", size_rule=f"at most {MAX_RUN_BYTES} bytes",
                     error=ConfigError)
    conf = read_text(work / "elastic.toml", max_bytes=MAX_RUN_BYTES, noun="configuration",
                     kind_rule="the configuration bench fidelity wrote", size_rule=f"at most {MAX_RUN_BYTES} bytes",
                     error=ConfigError)
    try:
        run = json.loads(text)
        trace = [TraceJob(**j) for j in run["trace"]]
        real, profile = run["real"], run["profile"]
        gpus, gpus_per_node, seed = int(run["gpus"]), int(run["gpus_per_node"]), int(run["seed"])
        host_cores = int(run["host_cores"])
    except (ValueError, TypeError, KeyError) as exc:
        raise ConfigError(f"{work / RUN_FILE}: not a run bench fidelity recorded ({exc})") from None
    cfg = parse(conf, str(work / "elastic.toml"))
    physics = _physics(real, host_cores)
    profiles = cfg.daemon.profiles if cfg.daemon.profiles is not None else work / "profiles"
    sims = _ladder(cfg, trace, real, physics, profiles, gpus, gpus_per_node, seed)
    out = {**_summary(cfg.daemon.policy, gpus, trace, real, physics, sims, profile), "work": str(work)}
    if isinstance(run.get("sacct"), dict):  # recorded since issue 39: what-if's physics, from sacct
        try:
            site = measure_site_physics(parse_sacct(run["sacct"]))
        except ElasticError as exc:
            raise ConfigError(f"{work / RUN_FILE}: its sacct record does not read: {exc}") from None
        jobs = _simulate(cfg, trace, real, physics, profiles, gpus, gpus_per_node, seed, PHYSICS,
                         overhead=site.overhead_by_nodes())
        avg, span = _figures([jobs[j.name]["jct"] for j in trace], [jobs[j.name]["end"] for j in trace], 0.0)
        real_avg = out["real_avg_jct_s"]
        out["site_physics"] = {**site.as_dict(), "described": site.describe(), "sim_avg_jct_s": _r(avg),
                               "sim_makespan_s": _r(span),
                               "ratio": _r(avg / real_avg, 3) if avg and real_avg else None}
    return out


def _ladder(cfg: Config, trace: Sequence[TraceJob], real: dict[str, Any], physics: dict[str, Any], profiles: Path,
            gpus: int, gpus_per_node: int, seed: int) -> dict[str, dict[str, dict[str, Any]]]:
    """The trace simulated with the profile alone, then with each of :data:`PHYSICS` added: the
    records of each rung by job name."""
    out = {}
    for rung in range(len(PHYSICS) + 1):
        have = PHYSICS[:rung]
        out[f"+{have[-1]}" if have else "profiles"] = _simulate(cfg, trace, real, physics, profiles, gpus,
                                                                gpus_per_node, seed, have)
    return out


def _simulate(cfg: Config, trace: Sequence[TraceJob], real: dict[str, Any], physics: dict[str, Any], profiles: Path,
              gpus: int, gpus_per_node: int, seed: int, have: Sequence[str],
              overhead: Mapping[int, float] | None = None) -> dict[str, dict[str, Any]]:
    """The trace simulated with the physics ``have`` (of :data:`PHYSICS`); ``overhead``: the start-up
    and ending per node count instead of the launcher-measured one. The records by job name."""
    specs = [_spec(j, real["jobs"][j.name], real["t0"], profiles) for j in trace]
    measured = ResizeCost(physics["grow_pause_s"], physics["shrink_pause_s"], CHECKPOINT_RESTART_S, "measured")
    knobs: dict[str, Any] = {
        "overhead_s": (overhead if overhead is not None else physics["overhead_s"]) if "overhead" in have else 0.0,
        "equal_start": "equal_start" in have, "whole_blocks": "blocks" in have,
        "host_cores": physics["host_cores"] if "cores" in have else None}
    res = simulate(specs, policies.build(cfg.daemon.policy, cfg.policy_params, cfg.guards), gpus=gpus,
                   gpus_per_node=gpus_per_node, resize_cost=measured if "pauses" in have else "in-place",
                   round_gap=POLL_S, seed=seed, workload="fidelity", **knobs)
    return {r["job_id"]: r for r in res["jobs"]}


def _run_real(work: Path, env: dict[str, str], trace: Sequence[TraceJob], timeout_s: float) -> dict[str, Any]:
    """Submit each job at its time beside the acting daemon; each one's submission, start and end."""
    (work / "jobs").mkdir()
    full = {**os.environ, **env}
    with open(work / "daemon.log", "ab") as log:
        daemon = subprocess.Popen([sys.executable, "-m", "slurm_elastic.cli", "daemon", "--config",
                                   str(work / "elastic.toml")], env=full, stdout=log, stderr=subprocess.STDOUT,
                                  preexec_fn=die_with_parent)
    submitted: dict[str, tuple[str, float]] = {}  # name -> (job id, when sbatch returned)
    t0 = time.time()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            for job in trace:
                if job.name not in submitted and time.time() - t0 >= job.at:
                    submitted[job.name] = (_submit(work, env, job), time.time())
            queued = set(run_command(["squeue", "-h", "-o", "%i"], env=env).split())
            if len(submitted) == len(trace) and not queued & {jid for jid, _ in submitted.values()}:
                break
            time.sleep(0.5)
        else:
            raise ElasticError(f"bench fidelity: the trace did not end within {timeout_s:g} s (see {work})")
    finally:
        daemon.terminate()
        daemon.wait(30)
    acct = _accounting(env, [jid for jid, _ in submitted.values()])
    store = Store(work / "s.db", read_only=True)
    try:
        rows = {name: store.progress_of(jid) for name, (jid, _) in submitted.items()}
    finally:
        store.close()
    out: dict[str, Any] = {"t0": min(at for _, at in submitted.values()), "jobs": {}}
    for job in trace:
        jid, at = submitted[job.name]
        state, start, end = acct.get(jid, ("UNKNOWN", None, None))
        first = next((r for r in rows[job.name] if r.kind == "progress" and r.throughput), None)
        last = next((r for r in reversed(rows[job.name]) if r.kind == "end"), None)
        out["jobs"][job.name] = {
            "job_id": jid, "state": state, "submitted": at, "start": start, "end": end,
            "first_step": first.t - first.samples / first.throughput if first and first.throughput else None,
            "resizes": [(before.world, r.world, r.pause_s) for before, r in itertools.pairwise(rows[job.name])
                        if r.kind == "resize" and r.pause_s is not None],
            "trained": last.t if last else None, "samples": last.samples if last else None}
    return out


def _submit(work: Path, env: dict[str, str], job: TraceJob) -> str:
    req = JobRequest(command=(sys.executable, str(EXAMPLE), "--model", MODEL, "--dataset-size",
                              str(job.dataset_size), "--val-size", "0"),
                     min_gpus=job.min_gpus, max_gpus=job.max_gpus, gpus_per_node=1, local_batch=LOCAL_BATCH,
                     epochs=job.epochs, name=job.name, output=str(work / "jobs" / "%x-%j.out"),
                     secret_file=str(new_secret_file(work / "secrets")))
    return submit("pytorch", req, env=env)


def _accounting(env: dict[str, str], ids: Sequence[str]) -> dict[str, tuple[str, float | None, float | None]]:
    """Each job's last record: (state, start, end), times in seconds since the epoch (slurmdbd may lag)."""
    out: dict[str, tuple[str, float | None, float | None]] = {}
    deadline = time.monotonic() + 30
    while True:
        text = run_command(["sacct", "-n", "-P", "-X", "-o", "JobID,State,Start,End", "-j", ",".join(ids)],
                           env={**env, "SLURM_TIME_FORMAT": "%s"})
        for line in text.splitlines():
            jid, state, start, end = [*line.split("|"), "", "", ""][:4]
            out[jid] = (state.split()[0] if state else "", _epoch(start), _epoch(end))
        if all(out.get(j, ("", None, None))[2] is not None for j in ids) or time.monotonic() > deadline:
            return out
        time.sleep(1.0)


def _epoch(text: str) -> float | None:
    return float(text) if text.isdigit() else None


def _physics(real: dict[str, Any], host_cores: int) -> dict[str, Any]:
    """What the real run measured that the profiles leave out (module docstring); ``host_cores``: the
    cores of the machine it ran on."""
    jobs = real["jobs"].values()
    startups = [j["first_step"] - j["start"] for j in jobs if j["first_step"] is not None and j["start"] is not None]
    endings = [j["end"] - j["trained"] for j in jobs if j["end"] is not None and j["trained"] is not None]
    grows = [p for j in jobs for before, after, p in j["resizes"] if after > before]
    shrinks = [p for j in jobs for before, after, p in j["resizes"] if after <= before]
    startup = statistics.median(startups) if startups else 0.0
    ending = statistics.median(endings) if endings else 0.0
    return {"overhead_s": round(startup + ending, 2), "startup_s": round(startup, 2), "ending_s": round(ending, 2),
            "grow_pause_s": round(statistics.median(grows), 2) if grows else IN_PLACE_GROW_S,
            "shrink_pause_s": round(statistics.median(shrinks), 2) if shrinks else IN_PLACE_SHRINK_S,
            "grows_measured": len(grows), "shrinks_measured": len(shrinks),
            "host_cores": host_cores}


def _spec(job: TraceJob, real: dict[str, Any], t0: float, profiles: Path) -> SimJobSpec:
    lo, hi = LOCAL_BATCH * job.min_gpus, LOCAL_BATCH * job.max_gpus
    return SimJobSpec(job_id=job.name, submit_time=real["submitted"] - t0, model=MODEL, requested_gpus=job.min_gpus,
                      min_gpus=job.min_gpus, max_gpus=job.max_gpus, base_batch=lo, min_batch=lo, max_batch=hi,
                      epoch_size=job.dataset_size, mode=ElasticMode.EXO, max_local_batch=LOCAL_BATCH,
                      epochs=float(job.epochs), profiles=profiles)


def _figures(jcts: Sequence[float | None], ends: Sequence[float | None], first: float) -> tuple[float | None, ...]:
    done = [x for x in jcts if x is not None]
    last = [x for x in ends if x is not None]
    return (statistics.mean(done) if done else None, (max(last) - first) if last else None)


def _summary(policy: str, gpus: int, trace: Sequence[TraceJob], real: dict[str, Any], physics: dict[str, Any],
             sims: dict[str, dict[str, dict[str, Any]]], profile: dict[str, Any]) -> dict[str, Any]:
    t0 = real["t0"]
    rj = real["jobs"]
    real_jct = [rj[j.name]["end"] - rj[j.name]["submitted"] if rj[j.name]["end"] else None for j in trace]
    real_avg, real_span = _figures(real_jct, [rj[j.name]["end"] for j in trace], t0)
    ladder = {}
    for name, jobs in sims.items():
        avg, span = _figures([jobs[j.name]["jct"] for j in trace], [jobs[j.name]["end"] for j in trace], 0.0)
        ladder[name] = {"sim_avg_jct_s": _r(avg), "sim_makespan_s": _r(span),
                        "ratio": _r(avg / real_avg, 3) if avg and real_avg else None}
    full = sims[list(sims)[-1]]
    per_job = [{"job": j.name, "gpus": f"{j.min_gpus}:{j.max_gpus}", "epochs": j.epochs, "samples": j.dataset_size,
                "state": rj[j.name]["state"], "real_jct_s": _r(jct), "sim_jct_s": _r(full[j.name]["jct"]),
                "real_resizes": len(rj[j.name]["resizes"]), "sim_resizes": full[j.name]["resizes"],
                **_phases(rj[j.name]), "sim_wait_s": _r(full[j.name]["queue"])}
               for j, jct in zip(trace, real_jct, strict=True)]
    last = ladder[list(ladder)[-1]]
    return {"benchmark": "fidelity", "policy": policy, "gpus": gpus, "jobs": len(trace),
            "completed": sum(1 for j in trace if rj[j.name]["state"] == "COMPLETED"),
            "samples_exact": sum(1 for j in trace if rj[j.name]["samples"] == j.epochs * j.dataset_size),
            "real_avg_jct_s": _r(real_avg), "sim_avg_jct_s": last["sim_avg_jct_s"], "ratio": last["ratio"],
            "real_makespan_s": _r(real_span), "sim_makespan_s": last["sim_makespan_s"],
            "ladder": ladder, "physics": physics,
            "profile": {"rows": len(profile["rows"]), "fit_median_ape": profile.get("fit_median_ape"),
                        "fit_max_ape": profile.get("fit_max_ape"), "failed": profile["failed"]},
            "per_job": per_job}


def _phases(job: dict[str, Any]) -> dict[str, float | None]:
    """Where a real job's time went: waiting (submission to Slurm's start), starting up (to its first
    step), training (to its end report) and ending (to Slurm's end)."""
    marks = [job["submitted"], job["start"], job["first_step"], job["trained"], job["end"]]
    names = ("real_wait_s", "real_startup_s", "real_train_s", "real_ending_s")
    return {n: _r(b - a) if a is not None and b is not None else None
            for n, a, b in zip(names, marks, marks[1:], strict=False)}


def _r(x: float | None, digits: int = 1) -> float | None:
    return None if x is None else round(x, digits)

