"""Every ``docs/*.md`` that the code, the README or a doc names exists: reports and messages send
readers there (``reproduce`` once pointed at a ``docs/simulator.md`` that was never written)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAMED = re.compile(r"docs/([A-Za-z0-9_.-]+\.md)")


def test_every_named_doc_exists() -> None:
    sources = [*ROOT.joinpath("slurm_elastic").rglob("*.py"), *ROOT.joinpath("docs").glob("*.md"),
               ROOT / "README.rst", ROOT / "Makefile"]
    missing = sorted({(path.relative_to(ROOT).as_posix(), name)
                      for path in sources
                      for name in NAMED.findall(path.read_text(encoding="utf-8"))
                      if not (ROOT / "docs" / name).is_file()})
    assert missing == []
    assert len(sources) > 50  # the walk found the package
