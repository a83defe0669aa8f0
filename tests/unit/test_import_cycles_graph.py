"""The import-circle check (``test_import_cycles.py``) sees the circles it is there for, on a real package.

``test_import_cycles.py`` tests its finder on a hand-made graph; this builds the graph the same way
the check does (grimp, from every ``import`` statement) from small packages written here, so a
circle closed inside a function or under ``TYPE_CHECKING`` is shown to fail the check, and the one
case treated apart is pinned: a package's ``__init__`` that imports its own submodules is no
circle with them. Importing ``pkg.sub`` runs ``pkg/__init__.py`` first, but that is Python loading
the parent, not an import the submodule makes: grimp draws no edge for it, and counting one would
make every package that gathers its submodules' names (``store/__init__.py``) a circle. A submodule
that imports a name back from its package's ``__init__`` does make a circle, and is found.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import grimp
import pytest

from .test_import_cycles import circles


def _package(root: Path, name: str, files: dict[str, str]) -> None:
    for rel, text in {"__init__.py": "", **files}.items():
        path = root / name / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def _circles(root: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    monkeypatch.syspath_prepend(str(root))
    graph = grimp.build_graph(name, cache_dir=None)
    return circles({m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules})


def test_a_circle_closed_inside_a_function_fails_the_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _package(tmp_path, "circ_fn", {
        "a.py": "from circ_fn.b import g\n\ndef f():\n    return g()\n",
        "b.py": "def g():\n    from circ_fn import a  # closes the circle, at call time only\n    return a\n",
        "c.py": "from circ_fn import a\n",
    })
    assert _circles(tmp_path, "circ_fn", monkeypatch) == [["circ_fn.a", "circ_fn.b"]]


def test_a_circle_closed_under_type_checking_fails_the_check(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    _package(tmp_path, "circ_tc", {
        "a.py": "from circ_tc import b\n",
        "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from circ_tc.a import X\n",
    })
    assert _circles(tmp_path, "circ_tc", monkeypatch) == [["circ_tc.a", "circ_tc.b"]]


def test_a_package_gathering_its_submodules_is_no_circle_but_a_submodule_importing_it_back_is(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _package(tmp_path, "gather", {
        "__init__.py": "from gather.rows import Row\nfrom gather.schema import SCHEMA\n",
        "rows.py": "class Row: ...\n",
        "schema.py": "from gather.rows import Row\nSCHEMA = Row\n",
    })
    assert _circles(tmp_path, "gather", monkeypatch) == []
    _package(tmp_path, "gather_back", {
        "__init__.py": "from gather_back.rows import Row\nLIMIT = 3\n",
        "rows.py": "def limit():\n    from gather_back import LIMIT\n    return LIMIT\n\nclass Row: ...\n",
    })
    assert _circles(tmp_path, "gather_back", monkeypatch) == [["gather_back", "gather_back.rows"]]
