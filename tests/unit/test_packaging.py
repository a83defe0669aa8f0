"""setup.cfg lists every package of the source tree, so a wheel install has all of them (issue 13), and
the wheel carries its data: installed away from the checkout, it submits and installs (issue 18)."""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from slurm_elastic.resources import EXAMPLE_CONFIG, JOB_SUBMIT_LUA, SYSTEMD_UNIT

ROOT = Path(__file__).resolve().parents[2]


def test_every_slurm_elastic_package_is_in_setup_cfg() -> None:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    listed = set(cfg["options"]["packages"].split())
    tree = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "slurm_elastic").rglob("__init__.py")}
    assert tree - listed == set(), "packages a wheel would leave out"
    assert {"slurm_elastic.fuzz", "slurm_elastic.cli"} <= listed


# --- a wheel that works away from the source tree (issue 18, part 1) -----------------------------

def _wheel_venv(tmp: Path) -> Path:
    """A fresh virtual environment outside the checkout with only our wheel installed (built from the
    working tree); its dependencies come from the test's own environment by a plain path line,
    whose editable hook for the checkout is not run. Returns its ``bin``."""
    wheels = tmp / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels),
                    str(ROOT)], check=True, cwd=tmp, capture_output=True)
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    deps = next(p for p in map(Path, sys.path) if p.name == "site-packages" and (p / "jinja2").is_dir())
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "deps.pth").write_text(f"{deps}\n")
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--no-deps", "--no-index", "-q",
                    *map(str, wheels.glob("*.whl"))], check=True, cwd=tmp, capture_output=True)
    return venv / "bin"


def test_a_wheel_installed_outside_the_checkout_submits_and_installs_the_plugin(tmp_path: Path) -> None:
    """Installed from the wheel, ``submit`` renders its packaged template, ``install-plugin`` builds
    the SPANK plugin and writes job_submit.lua, and ``--site-files`` writes the unit and a
    configuration, all from package data: before, the wheel carried neither templates nor site
    configurations, and both commands read them from the source tree."""
    bin_ = _wheel_venv(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    where = subprocess.run([str(bin_ / "python"), "-c", "import slurm_elastic, slurm_elastic_launcher.examples as e; "
                            "print(slurm_elastic.__file__); print(e.__file__)"],
                           cwd=run, capture_output=True, text=True, check=True).stdout.split()
    assert all(str(tmp_path / "venv") in w for w in where), where  # not the checkout
    sub = subprocess.run([str(bin_ / "slurm-elastic"), "submit", "--elastic", "1:4", "--dry-run", "--", "python",
                          "train.py"], cwd=run, capture_output=True, text=True)
    assert sub.returncode == 0, sub.stderr
    assert "#SBATCH --elastic=1:4" in sub.stdout and "srun" in sub.stdout
    if os.geteuid() != 0 or shutil.which("gcc") is None or not Path("/usr/include/slurm/spank.h").exists():
        pytest.skip("install-plugin builds as root with gcc and Slurm's spank.h")
    # the plugin's folder must be one only root can change: not below /tmp (nor the checkout, which may be)
    lib = Path(tempfile.mkdtemp(prefix="slurm-elastic-wheel-test-", dir="/var/lib"))
    try:
        etc = lib / "etc"
        etc.mkdir(mode=0o755)
        ip = subprocess.run([str(bin_ / "slurm-elastic"), "install-plugin", "--out", str(lib / "spank"), "--write",
                             str(etc / "plugstack.conf"), "--site-files", str(etc)], cwd=run, capture_output=True,
                            text=True)
        assert ip.returncode == 0, ip.stderr
        assert (lib / "spank" / "slurm_elastic.so").is_file()
        assert (etc / "job_submit.lua").read_bytes() == JOB_SUBMIT_LUA.read_bytes()
        assert (etc / "slurm-elastic.service").read_bytes() == SYSTEMD_UNIT.read_bytes()
        assert (etc / "elastic.toml").read_bytes() == EXAMPLE_CONFIG.read_bytes()
    finally:
        shutil.rmtree(lib, ignore_errors=True)
