"""setup.cfg lists every package of the source tree, so a wheel install has all of them (issue 13)."""

from __future__ import annotations

import configparser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_slurm_elastic_package_is_in_setup_cfg() -> None:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    listed = set(cfg["options"]["packages"].split())
    tree = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "slurm_elastic").rglob("__init__.py")}
    assert tree - listed == set(), "packages a wheel would leave out"
    assert {"slurm_elastic.fuzz", "slurm_elastic.cli"} <= listed
