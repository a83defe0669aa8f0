"""Measure the daemon's observation of a big queue on a real cluster (run as root; issue 18, part 5).

Brings up a 4-node x 4-GPU dev cluster in a temporary root (Debian's Slurm 22.05, or with
``--slurm-prefix`` a release built by ``scripts/build-slurm``), submits ``--jobs`` held jobs (one GPU
each, every other one ``--elastic=1:4``), and times, ``--rounds`` times each:

* ``squeue --json`` alone: slurmctld's answer and its JSON serializer, which no reader avoids;
* the CLI backend's observation (``ClusterView.observe`` on ``SlurmCli``): the first, which reads
  every record, and the median of the later ones (records unchanged since the last read are not
  read again);
* the pyslurm backend's, when a pyslurm of the running release can be imported (put one on
  ``PYTHONPATH``, e.g. ``build/pyslurm-25.11.7`` from ``scripts/release-check``).

Prints one JSON object and brings the cluster down. Usage:
``python tests/slurm/measure_big_queue.py [--jobs 2500] [--rounds 5] [--slurm-prefix DIR]`` (up to 9,000
jobs: the dev cluster keeps Slurm's default MaxJobCount of 10,000).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from slurm_elastic.dev import devcluster
from slurm_elastic.observe.view import ClusterView
from slurm_elastic.slurm.cli_backend import SlurmCli
from slurm_elastic.testing import shipped_profiles


def _timed(rounds: int, step: Callable[[], object]) -> list[float]:
    took = []
    for _ in range(rounds):
        t = time.perf_counter()
        step()
        took.append(time.perf_counter() - t)
    return took


def _observer(source: Any) -> ClusterView:
    return ClusterView(source, shipped_profiles(), time.time)


def measure(root: Path, jobs: int, rounds: int) -> dict[str, Any]:
    """Submit ``jobs`` held jobs to the running cluster at ``root`` and time the reads."""
    env = devcluster.slurm_env(root)
    os.environ.update(env)  # pyslurm reads slurm.conf through SLURM_CONF

    def run(argv: Sequence[str]) -> str:
        return subprocess.run(list(argv), env=env, capture_output=True, text=True, check=True, cwd=root).stdout

    def submit(i: int) -> str:
        extra = ["--elastic=1:4"] if i % 2 else []
        return run(["sbatch", "--parsable", "--hold", "--gres=gpu:1", *extra, "--wrap", "true"]).strip()

    t = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        ids = list(pool.map(submit, range(jobs)))
    submit_s = time.perf_counter() - t
    squeue = run(["squeue", "--json"])
    cli_view = _observer(SlurmCli(runner=run))
    cli = _timed(rounds + 1, cli_view.observe)
    out: dict[str, Any] = {
        "benchmark": "big-queue", "slurm": run(["sinfo", "--version"]).strip(), "jobs": jobs,
        "listed": len(json.loads(squeue)["jobs"]), "squeue_mib": round(len(squeue) / 2**20, 1),
        "submit_s": round(submit_s, 1),
        "squeue_json_s": round(statistics.median(_timed(rounds, lambda: run(["squeue", "--json"]))), 3),
        "cli_first_observe_s": round(cli[0], 3), "cli_observe_s": round(statistics.median(cli[1:]), 3),
        "cli_snapshot_jobs": len(cli_view.records),
    }
    try:
        from slurm_elastic.slurm.pyslurm_backend import PyslurmSource

        source = PyslurmSource.connect(run)
    except Exception as exc:  # any reason pyslurm cannot serve is reported, not raised
        out["pyslurm"] = f"not measured: {type(exc).__name__}: {exc}"
    else:
        py_view = _observer(source)
        py = _timed(rounds + 1, py_view.observe)
        out.update(pyslurm_first_observe_s=round(py[0], 3), pyslurm_observe_s=round(statistics.median(py[1:]), 3))
    for start in range(0, len(ids), 500):
        subprocess.run(["scancel", *ids[start:start + 500]], env=env, capture_output=True, check=False)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2500, help="held jobs submitted (default 2500)")
    parser.add_argument("--rounds", type=int, default=5, help="timed reads after the first (default 5)")
    parser.add_argument("--slurm-prefix", type=Path, default=None, help="a release built by scripts/build-slurm")
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.rounds < 1:
        print(f"measure_big_queue: --jobs {args.jobs} and --rounds {args.rounds} must be >= 1", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="slurm-elastic-bigq-", dir="/tmp"))
    devcluster.up(root=root, slurm_prefix=args.slurm_prefix)  # MaxJobCount: Slurm's default, 10,000
    try:
        print(json.dumps(measure(root, args.jobs, args.rounds), indent=2))
    finally:
        devcluster.down(root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
