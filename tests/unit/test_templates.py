"""The sbatch templates: golden rendering, quoting, refused values, and the submit command."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_elastic.cli import main
from slurm_elastic.errors import ConfigError
from slurm_elastic.templates import JobRequest, render

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "pytorch.sbatch"
GOLDEN_JOIN = Path(__file__).resolve().parents[1] / "golden" / "pytorch.join"
REQ = JobRequest(command=("python", "train.py", "--data", "/scratch/my data"), min_gpus=2, max_gpus=8,
                 batch="64:512", mode="exo", local_batch=64, epochs=3, name="resnet", time="02:00:00",
                 account="proj-1", partition="v100", secret_file="/home/alice/.slurm-elastic/secrets/job-1",
                 umask="0027")


def test_pytorch_template_renders_the_golden_script() -> None:
    assert render("pytorch", REQ) == GOLDEN.read_text()


def test_join_script_renders_the_golden_script() -> None:
    assert render("pytorch", REQ, part="join") == GOLDEN_JOIN.read_text()


def test_unknown_template_part_is_refused() -> None:
    with pytest.raises(ConfigError, match="template part 'restart'"):
        render("pytorch", REQ, part="restart")


def test_user_words_are_quoted_and_options_follow_the_request() -> None:
    from dataclasses import replace

    script = render("pytorch", replace(REQ, command=("python", "t.py", "$(rm -rf ~)"), start_gpus=6, batch=""))
    assert "'$(rm -rf ~)'" in script
    assert "#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=4\n" in script
    assert "--elastic-batch" not in script


def test_cpus_per_task_reaches_the_job_its_satellites_and_their_sruns() -> None:
    """A script that reads SLURM_CPUS_PER_TASK (its DataLoader workers) gets it in the job and in every
    satellite, and srun passes it to the tasks on every release (SRUN_CPUS_PER_TASK)."""
    from dataclasses import replace

    req = replace(REQ, cpus_per_task=6)
    for part in ("sbatch", "join"):
        script = render("pytorch", req, part=part)
        assert "\n#SBATCH --cpus-per-task=6\n" in script, part
        assert 'export SRUN_CPUS_PER_TASK="$SLURM_CPUS_PER_TASK"' in script, part
        assert "#SBATCH --cpus-per-task" not in render("pytorch", REQ, part=part), part


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"min_gpus": 4, "max_gpus": 2}, "expected MIN:MAX with 1 <= MIN <= MAX"),
        ({"mode": "both"}, "--mode 'both': must be exo or endo"),
        ({"account": "a b"}, "--account 'a b': only letters"),
        ({"command": ()}, "no training command given"),
        ({"batch": "lots"}, "--batch 'lots': expected MIN:MAX"),
        ({"umask": "022; rm -rf ~"}, "umask '022; rm -rf ~': expected four octal digits"),
        ({"cpus_per_task": 0}, "--cpus-per-task 0: must be >= 1 and <= 1024"),
    ],
)
def test_bad_values_are_refused(change: dict[str, object], message: str) -> None:
    from dataclasses import replace

    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        render("pytorch", replace(REQ, **change))  # type: ignore[arg-type]


def test_unknown_template_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="known templates: pytorch"):
        render("tensorflow", REQ)


def test_submit_dry_run_prints_the_script(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["submit", "--elastic", "2:8", "--dry-run", "--", "python", "train.py"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("#!/bin/bash") and "#SBATCH --elastic=2:8" in out and "python train.py" in out
    assert main(["submit", "--elastic", "eight", "--dry-run", "--", "python"]) == 2


FAKE_SBATCH = """#!{python}
# records what a real sbatch would pass to the job: its environment and its standard input (no shell:
# a shell adds variables of its own)
import os, sys
out = os.environ["FAKE_OUT"]
with open(out + ".env", "wb") as fh:
    fh.write(b"".join(k + b"=" + v + b"\\0" for k, v in os.environb.items()))
with open(out + ".script", "w") as fh:
    fh.write(sys.stdin.read())
if os.environ.get("FAKE_REFUSE"):
    sys.exit("sbatch: error: refused")
print("4242;dev")
"""


def _fake_sbatch(tmp_path: Path) -> Path:
    import sys

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(FAKE_SBATCH.format(python=sys.executable))
    (bin_dir / "sbatch").chmod(0o755)
    return bin_dir


def _entries(data: bytes) -> dict[bytes, bytes]:
    assert data.endswith(b"\0")  # every entry terminated: Slurm drops an unterminated last one
    return dict(e.split(b"=", 1) for e in data[:-1].split(b"\0"))


def test_submit_saves_the_environment_sbatch_gets_for_the_jobs_satellites(tmp_path: Path) -> None:
    import os
    from dataclasses import replace

    from slurm_elastic.submit import submit

    env = {"PATH": f"{_fake_sbatch(tmp_path)}:/usr/bin:/bin", "FAKE_OUT": str(tmp_path / "seen"),
           "MY_TOKEN": "a b\nc=d", "LANG": "C.UTF-8"}
    secret = tmp_path / "secrets" / "job-1"
    old = os.umask(0o027)
    try:
        assert submit("pytorch", replace(REQ, secret_file=str(secret)), env=env) == "4242"
    finally:
        os.umask(old)
    saved = Path(f"{secret}.env")
    assert saved.stat().st_mode & 0o777 == 0o600
    assert _entries(saved.read_bytes()) == {k.encode(): v.encode() for k, v in env.items()}
    assert _entries(saved.read_bytes()) == _entries((tmp_path / "seen.env").read_bytes())  # exactly sbatch's
    assert "\numask 0027\n" in Path(f"{secret}.join").read_text()  # this process's umask, for the satellites


def test_submit_without_an_environment_saves_this_processes_and_cleans_up_a_refused_job(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    from slurm_elastic.submit import submit

    monkeypatch.setenv("PATH", f"{_fake_sbatch(tmp_path)}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_OUT", str(tmp_path / "seen"))
    monkeypatch.setenv("ODD", "\u00e9t\u00e9")
    secret = tmp_path / "secrets" / "job-1"
    assert submit("pytorch", replace(REQ, secret_file=str(secret), umask="")) == "4242"
    saved = _entries(Path(f"{secret}.env").read_bytes())
    assert saved == _entries((tmp_path / "seen.env").read_bytes())
    assert saved[b"ODD"] == "\u00e9t\u00e9".encode()
    monkeypatch.setenv("FAKE_REFUSE", "1")
    other = tmp_path / "secrets" / "job-2"
    with pytest.raises(ConfigError, match="sbatch refused the job: sbatch: error: refused"):
        submit("pytorch", replace(REQ, secret_file=str(other)))
    assert sorted(p.name for p in other.parent.iterdir() if p.name.startswith("job-2")) == []


def _job_whose_srun_returns_137(tmp_path: Path) -> Path:
    """A job's secret file, and an ``srun`` on ``tmp_path/bin`` that exits 137; returns the secret's path."""
    secret = tmp_path / "job-1"
    secret.write_text("s" * 32)
    (tmp_path / "bin").mkdir()
    srun = tmp_path / "bin" / "srun"
    srun.write_text("#!/bin/sh\nexit 137\n")
    srun.chmod(0o755)
    return secret


@pytest.mark.parametrize("trained", [True, False])
def test_a_lost_worker_does_not_fail_a_job_whose_training_completed(tmp_path: Path, trained: bool) -> None:
    """Issue 14, finding 3: one worker of four SIGKILLed, the others finished the training, but srun
    returned 137 for the lost task and ``set -e`` made it the job's status: Slurm said FAILED."""
    import dataclasses
    import os
    import subprocess

    secret = _job_whose_srun_returns_137(tmp_path)
    if trained:
        Path(f"{secret}.reports").write_text('{"job_id":"5","kind":"progress"}\n{"job_id":"5","kind":"end"}\n')
    script = tmp_path / "job.sh"
    script.write_text(render("pytorch", dataclasses.replace(REQ, secret_file=str(secret))))
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "SLURM_JOB_ID": "5",
           "SLURM_JOB_NUM_NODES": "1"}
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == (0 if trained else 137), done.stderr
    assert ("the training completed" in done.stderr) == trained


@pytest.mark.parametrize(("reports", "said"), [
    # a shrink ordered w1 out: it said it left, then Slurm took its node back and ended its task
    ('{"job_id":"5","kind":"left","worker":"w1"}\n{"job_id":"5","kind":"end"}\n',
     "srun returned 137 after workers a resize ordered out had left the job (w1; Slurm ends a task when it "
     "takes its node back): no worker was lost, and the training completed"),
    # a recovery went on without w2 (lost), and w1 was ordered out before
    ('{"job_id":"5","kind":"left","worker":"w1"}\n{"job_id":"5","kind":"resize","lost":["w2"]}\n'
     '{"job_id":"5","kind":"end"}\n',
     "srun returned 137 (workers lost: w2; ordered out: w1), but the training completed"),
    ('{"job_id":"5","kind":"end"}\n', "srun returned 137 (a worker was lost), but the training completed"),
])
def test_the_job_log_says_whether_its_workers_were_ordered_out_or_lost(tmp_path: Path, reports: str,
                                                                        said: str) -> None:
    """Issue 38, bug 8: after an in-place shrink whose node Slurm released, the job's log said "srun
    returned 137 (a worker was lost), but the training completed": the leaver had been ordered out
    and had left; only the node release ended its task. The log says what the reports say."""
    import dataclasses
    import os
    import subprocess

    secret = _job_whose_srun_returns_137(tmp_path)
    Path(f"{secret}.reports").write_text(reports)
    script = tmp_path / "job.sh"
    script.write_text(render("pytorch", dataclasses.replace(REQ, secret_file=str(secret))))
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "SLURM_JOB_ID": "5",
           "SLURM_JOB_NUM_NODES": "1"}
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines()[-1] == f"slurm-elastic: {said}", done.stderr
