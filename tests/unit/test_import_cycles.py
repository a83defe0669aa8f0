"""No import circle among the project's modules, counting imports made inside functions.

import-linter has no contract for this, so the test walks the graph grimp (which import-linter
ships) builds from every ``import`` statement of the three packages, those at module level and
those inside functions alike: a function-level import that closes a circle is still a circle (the
modules cannot be read, layered or moved apart).
"""

from __future__ import annotations

import grimp

PACKAGES = ("slurm_elastic", "slurm_elastic_predictor", "slurm_elastic_launcher")


def circles(imports: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (or a module importing itself),
    each sorted (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(imports):
        if root in index:
            continue
        work = [(root, iter(sorted(imports[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            child = next((w for w in edges if w in imports), None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(imports[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == node:
                        break
                if len(component) > 1 or node in imports[node]:
                    found.append(sorted(component))
    return found


def test_the_finder_sees_a_circle_and_a_self_import() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}, "f": {"a"}}
    assert sorted(circles(graph)) == [["a", "b", "c"], ["e"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_module_or_function_level() -> None:
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    imports = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    # grimp counts an import inside a function: the graph is the one a circle would show in
    assert "slurm_elastic.bench.live.reaction" in imports["slurm_elastic.cli.developers"]
    assert circles(imports) == []
