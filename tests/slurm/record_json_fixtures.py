"""Record real Slurm 22.05 ``--json`` outputs into ``tests/fixtures/slurm-json/22.05/`` (run once, as root).

Brings up a 4-node x 4-GPU dev cluster in a temporary root, creates the job mix below, saves
``squeue --json``, ``sinfo --json`` and ``sacct --json -a -S START`` and brings the cluster down:

* job A: ``sbatch -N2 --gres=gpu:2 --elastic=2:8`` running (AdminComment record set);
* job B: ``sbatch -N2 --gpus=3`` running (``tres_per_job``, GPUs split 2+1);
* job C: ``sbatch -N2 --gres=gpu:1 --elastic=1:4 --elastic-batch=64:512 --elastic-mode=endo`` shrunk to
  one node with ``scontrol update JobId=C NumNodes=1`` (sacct shows its RESIZING record);
* job D: ``sbatch -N4 --gpus-per-node=4`` pending (Resources);
* job E: ``sbatch --elastic --wrap true`` completed.

Usage: ``python tests/slurm/record_json_fixtures.py [OUT_DIR]``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from slurm_elastic.dev import devcluster

OUT = Path(__file__).resolve().parents[1] / "fixtures" / "slurm-json" / "22.05"


def main(out: Path) -> int:
    root = Path(tempfile.mkdtemp(prefix="slurm-elastic-rec-", dir="/tmp"))
    env = devcluster.slurm_env(root)

    def run(*argv: str) -> str:
        proc = subprocess.run(list(argv), env=env, capture_output=True, text=True, check=True, cwd=root / "jobs")
        return proc.stdout

    def sbatch(*args: str) -> str:
        return run("sbatch", "--parsable", *args).strip()

    def state(job: str) -> str:
        return run("squeue", "-h", "-t", "all", "-j", job, "-o", "%T").strip()

    def wait(job: str, want: str) -> None:
        deadline = time.monotonic() + 60
        while state(job) != want:
            if time.monotonic() > deadline:
                raise SystemExit(f"job {job} is {state(job)}, not {want}")
            time.sleep(0.3)

    with devcluster.running(4, 4, root):
        start = run("date", "+%Y-%m-%dT%H:%M:%S").strip()
        e = sbatch("--elastic", "-J", "done", "--wrap", "true")
        wait(e, "COMPLETED")
        a = sbatch("-N2", "--gres=gpu:2", "--elastic=2:8", "-J", "elastic-a", "--wrap", "srun sleep 600")
        b = sbatch("-N2", "--gpus=3", "-J", "gpus3", "--wrap", "srun sleep 600")
        c = sbatch("-N2", "--gres=gpu:1", "--elastic=1:4", "--elastic-batch=64:512", "--elastic-mode=endo",
                   "-J", "shrunk", "--wrap", "srun sleep 600")
        for job in (a, b, c):
            wait(job, "RUNNING")
        for _ in range(30):
            try:
                run("scontrol", "update", f"JobId={c}", "NumNodes=1")
                break
            except subprocess.CalledProcessError:
                time.sleep(0.3)
        d = sbatch("-N4", "--gpus-per-node=4", "-J", "pending", "--wrap", "srun sleep 600")
        time.sleep(2)
        assert state(d) == "PENDING", state(d)
        out.mkdir(parents=True, exist_ok=True)
        for name, argv in (("squeue", ("squeue", "--json")), ("sinfo", ("sinfo", "--json")),
                           ("sacct", ("sacct", "--json", "-a", "-S", start))):
            text = run(*argv)
            json.loads(text)
            secret = (root / "etc" / "db.pass").read_text().strip()
            if secret in text:
                raise SystemExit(f"{name}: output contains the database password; not saved")
            (out / f"{name}.json").write_text(text)
        print(f"recorded jobs A={a} B={b} C={c} D={d} E={e} into {out}")
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT))
