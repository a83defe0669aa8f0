"""Record real Slurm ``--json`` outputs into ``tests/fixtures/slurm-json/<release>/`` (run once, as root).

Brings up a 4-node x 4-GPU dev cluster in a temporary root (Debian's Slurm 22.05, or with
``--slurm-prefix`` a release built by ``scripts/build-slurm``), creates the job mix below, saves
``squeue --json``, ``sinfo --json`` and ``sacct --json -a -S START`` and brings the cluster down.
A data_parser release (23.02 on) is recorded once per data_parser version it ships
(``--json=v0.0.NN``), each into the folder of the release that prints that version by default
(24.05 gives ``23.02/``, ``23.11/`` and ``24.05/``), adding ``sinfo -N --json``,
``scontrol --json show job A`` and ``scontrol --json show node n01``; each folder gets a
``RECORDED.json`` saying which Slurm printed it and how. A folder that exists is never written over.

* job A: ``sbatch -N2 --gres=gpu:2 --elastic=2:8`` running (AdminComment record set);
* job B: ``sbatch -N2 --gpus=3`` running (``tres_per_job``, GPUs split 2+1);
* job C: ``sbatch -N2 --gres=gpu:1 --elastic=1:4 --elastic-batch=64:512 --elastic-mode=endo`` shrunk to
  one node with ``scontrol update JobId=C NumNodes=1`` (sacct shows its RESIZING record);
* job D: ``sbatch -N4 --gpus-per-node=4`` pending (Resources);
* job E: ``sbatch --elastic --wrap true`` completed.

Usage: ``python tests/slurm/record_json_fixtures.py [--slurm-prefix DIR] [OUT_DIR]`` (OUT_DIR: the
release's folder for 22.05, the folder of release folders otherwise).
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
from slurm_elastic.slurm.dialects import DATA_PARSERS

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm-json"
OUT = FIXTURES / "22.05"
# the data_parser versions each release ships (SchedMD's tags: src/plugins/data_parser/v0.0.NN)
SHIPPED = {(23, 2): (39,), (23, 11): (39, 40), (24, 5): (39, 40, 41), (24, 11): (40, 41, 42),
           (25, 5): (40, 41, 42, 43), (25, 11): (41, 42, 43, 44)}


def main(out: Path, prefix: Path | None = None) -> int:
    root = Path(tempfile.mkdtemp(prefix="slurm-elastic-rec-", dir="/tmp"))
    env: dict[str, str] = {}  # the cluster's, once it is up (its Slurm build first on PATH)

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

    with devcluster.running(4, 4, root, slurm_prefix=prefix):
        env.update(devcluster.slurm_env(root))
        start = run("date", "+%Y-%m-%dT%H:%M:%S").strip()
        e = sbatch("--elastic", "-J", "done", "--wrap", "true")
        wait(e, "COMPLETED")
        a = sbatch("-N2", "--gres=gpu:2", "--elastic=2:8", "-J", "elastic-a", "--wrap", "sleep 600")
        b = sbatch("-N2", "--gpus=3", "-J", "gpus3", "--wrap", "sleep 600")
        c = sbatch("-N2", "--gres=gpu:1", "--elastic=1:4", "--elastic-batch=64:512", "--elastic-mode=endo",
                   "-J", "shrunk", "--wrap", "sleep 600")
        for job in (a, b, c):
            wait(job, "RUNNING")
        for _ in range(30):
            try:
                run("scontrol", "update", f"JobId={c}", "NumNodes=1")
                break
            except subprocess.CalledProcessError:
                time.sleep(0.3)
        d = sbatch("-N4", "--gpus-per-node=4", "-J", "pending", "--wrap", "sleep 600")
        time.sleep(2)
        assert state(d) == "PENDING", state(d)
        secret = (root / "etc" / "db.pass").read_text().strip()
        version = run("sinfo", "--version").split()[-1]
        release = tuple(int(p) for p in version.split("."))
        if release[:2] == (22, 5):
            _save(out, secret, {"squeue": run("squeue", "--json"), "sinfo": run("sinfo", "--json"),
                                "sacct": run("sacct", "--json", "-a", "-S", start)})
            print(f"recorded jobs A={a} B={b} C={c} D={d} E={e} into {out}")
        for nn in SHIPPED.get((release[0], release[1]), ()):
            folder = out / DATA_PARSERS[nn]
            if folder.exists():
                print(f"{folder} exists: not written over")
                continue
            flag = f"--json=v0.0.{nn}"
            texts = {"squeue": run("squeue", flag), "sinfo": run("sinfo", flag), "sinfo_N": run("sinfo", "-N", flag),
                     "sacct": run("sacct", flag, "-a", "-S", start),
                     "scontrol_show_job": run("scontrol", flag, "show", "job", a),
                     "scontrol_show_node": run("scontrol", flag, "show", "node", "n01")}
            _save(folder, secret, texts)
            recorded = {"printed_by": f"Slurm {version}", "flag": flag, "data_parser": f"v0.0.{nn}",
                        "default_of": DATA_PARSERS[nn], "jobs": {"A": a, "B": b, "C": c, "D": d, "E": e},
                        "commands": {"squeue": f"squeue {flag}", "sinfo": f"sinfo {flag}",
                                     "sinfo_N": f"sinfo -N {flag}", "sacct": f"sacct {flag} -a -S {start}",
                                     "scontrol_show_job": f"scontrol {flag} show job {a}",
                                     "scontrol_show_node": f"scontrol {flag} show node n01"}}
            (folder / "RECORDED.json").write_text(json.dumps(recorded, indent=1) + "\n")
            print(f"recorded {flag} into {folder}")
    shutil.rmtree(root, ignore_errors=True)
    return 0


def _save(folder: Path, secret: str, texts: dict[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in texts.items():
        json.loads(text)
        if secret in text:
            raise SystemExit(f"{name}: output contains the database password; not saved")
        (folder / f"{name}.json").write_text(text)


if __name__ == "__main__":
    args = sys.argv[1:]
    slurm_prefix = None
    if args[:1] == ["--slurm-prefix"]:
        slurm_prefix, args = Path(args[1]).resolve(), args[2:]
    sys.exit(main(Path(args[0]) if args else (FIXTURES if slurm_prefix else OUT), slurm_prefix))
