"""The shape of the controller, as rules: who may change Slurm, who owns the AdminComment grammar,
and that observing is passive (beside the import-linter contracts in setup.cfg)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "slurm_elastic"

# Commands that change Slurm state, as the first word of an argv list or tuple (``scontrol show``
# and ``scontrol ping`` only read).
CHANGING = {"scancel", "sbatch", "scontrol", "runuser", "srun", "salloc"}
# Modules allowed to build such argv lists: the actuator and its satellites; development and user tools
# (the dev cluster, `slurm-elastic submit` and its templates, the benchmarks that submit their own jobs,
# `slurm-elastic profile`, which submits and cancels its own measuring jobs).
MAY_CHANGE_SLURM = {*(f"act/{m}.py" for m in ("context", "commands", "shrink", "satellite_upkeep", "leases")),
                    "slurm/satellites.py", "dev/devcluster.py", "submit.py", "templates.py",
                    "bench/live/reaction.py", "bench/live/load.py", "bench/live/chaos.py", "bench/live/fidelity.py",
                    "site_profile.py"}


def _reads_only(elts: list[ast.expr]) -> bool:
    """``scontrol show ...`` and ``scontrol ping`` read; every other ``scontrol`` verb may change."""
    words = [e.value for e in elts[:2] if isinstance(e, ast.Constant)]
    return words[:1] == ["scontrol"] and len(words) == 2 and words[1] in ("show", "ping")


def _modules() -> list[tuple[str, ast.Module]]:
    return [(str(p.relative_to(ROOT)), ast.parse(p.read_text())) for p in sorted(ROOT.rglob("*.py"))]


def _strings(tree: ast.Module) -> list[str]:
    """String constants that are not docstrings."""
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return [n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def test_only_the_actuator_builds_commands_that_change_slurm() -> None:
    found = []
    for name, tree in _modules():
        for node in ast.walk(tree):
            if (isinstance(node, ast.List | ast.Tuple) and node.elts and isinstance(node.elts[0], ast.Constant)
                    and node.elts[0].value in CHANGING and name not in MAY_CHANGE_SLURM
                    and not _reads_only(node.elts)):
                found.append(f"{name}:{node.lineno}: {node.elts[0].value}")
    assert found == []


def test_the_admin_comment_grammar_lives_in_contract_only() -> None:
    outside = [name for name, tree in _modules() if name != "contract.py"
               and any("satellite-of" in s or s.startswith("slurm-elastic gpus=") for s in _strings(tree))]
    assert outside == []


def test_observing_runs_no_command_and_imports_no_actuator() -> None:
    for name, tree in _modules():
        if not name.startswith("observe/"):
            continue
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not imported & {"subprocess", "slurm_elastic.slurm.actuator", "slurm_elastic.slurm.runner",
                               "slurm_elastic.slurm.satellites"}, name


PREDICTOR = ROOT.parent / "predictor" / "slurm_elastic_predictor"
DECIDING = [*sorted((ROOT / "core").glob("*.py")), ROOT / "sim" / "workload.py", ROOT / "sim" / "truth.py",
            ROOT / "sim" / "cluster.py", ROOT / "sim" / "job.py", ROOT / "sim" / "costs.py",
            ROOT / "sim" / "progress_pool.py", ROOT / "sim" / "engine.py", ROOT / "sim" / "blocks.py",
            ROOT / "workloads" / "offered_load.py", PREDICTOR / "progress.py",
            PREDICTOR / "throughput.py", PREDICTOR / "calibrate.py", PREDICTOR / "profiles.py"]
"""What plans, and what a plan or a simulated run is computed from: its floats must be the same on every CPU."""
CPU_DEPENDENT = {
    "np": {"dot", "matmul", "inner", "einsum", "tensordot", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p",
           "power", "float_power", "tanh", "sinh", "cosh", "logaddexp", "linalg"},
    "math": {"exp", "expm1", "log", "log2", "log10", "log1p", "pow", "tanh", "lgamma", "gamma", "erf"},
}
"""Per-CPU code (docs/architecture.md, "Results that do not depend on the CPU"): BLAS, numpy's SIMD
transcendental functions, the C library's libm. ``slurm_elastic_predictor.portable`` has each."""


def test_what_decides_uses_no_arithmetic_that_depends_on_the_cpu() -> None:
    """No ``@``, no BLAS product, no numpy or libm transcendental function, no scipy solver where a
    plan or a simulated run gets its floats (``2 ** k``, ``x ** 2`` and ``np.sqrt`` are exact
    or correctly rounded everywhere and stay allowed)."""
    found = []
    for path in DECIDING:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            where = f"{path.name}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.BinOp | ast.AugAssign) and isinstance(node.op, ast.MatMult):
                found.append(f"{where}: @")
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.attr in CPU_DEPENDENT.get(node.value.id, ())):
                found.append(f"{where}: {node.value.id}.{node.attr}")
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(("scipy.optimize", "scipy.special")):
                found.append(f"{where}: from {node.module} import ...")
    assert not found, found
