"""The files that ship inside the packages: the sbatch templates, the site configurations (the dev
cluster's, Longhorn's, ``job_submit.lua``, the systemd unit) and the launcher's example trainer.

This module owns finding them. They are package data (``setup.cfg``), found through
``importlib.resources`` (the launcher's package by its import spec, without importing it), so an
install from the wheel finds them where the source tree does. The packages are not zip-safe: every
path here is a file on disk.
"""

from __future__ import annotations

import importlib.util
from importlib.resources import files
from pathlib import Path


def _launcher_dir() -> Path:
    spec = importlib.util.find_spec("slurm_elastic_launcher")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("slurm_elastic_launcher is not installed (it ships in the slurm-elastic wheel)")
    return Path(next(iter(spec.submodule_search_locations)))


SBATCH_TEMPLATES = Path(str(files("slurm_elastic").joinpath("sbatch_templates")))
"""``<name>.sbatch.j2`` and ``<name>.join.j2`` of each ``slurm-elastic submit --template``."""
SITE_CONFIGS = Path(str(files("slurm_elastic").joinpath("site_configs")))
"""``dev/`` (the dev cluster's templates, ``job_submit.lua``), ``longhorn/elastic.toml``, ``systemd/``."""
JOB_SUBMIT_LUA = SITE_CONFIGS / "dev" / "job_submit.lua"
"""The ``--elastic`` grammar for slurmctld (``install-plugin --write`` copies it)."""
SYSTEMD_UNIT = SITE_CONFIGS / "systemd" / "slurm-elastic.service"
"""The daemon's unit (root with four capabilities in a read-only sandbox)."""
EXAMPLE_CONFIG = SITE_CONFIGS / "longhorn" / "elastic.toml"
"""The daemon's configuration for the Longhorn target machine, the one to start from."""
EXAMPLE_TRAINER = _launcher_dir() / "examples" / "train_cnn.py"
"""The launcher's example trainer (a small CNN or ResNet-18 on synthetic data)."""
