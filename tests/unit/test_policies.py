"""The policy table (slurm_elastic/policies.py), the planners' declared traits, and --param names."""

from __future__ import annotations

import argparse
import ast
import inspect
from pathlib import Path

import numpy as np
import pytest

from slurm_elastic import policies
from slurm_elastic.argtypes import param
from slurm_elastic.cli import main
from slurm_elastic.core import baselines, dl2_baselines, drl, dynprog, efq, evolutionary, minjct
from slurm_elastic.core.fairness import FtfGuardedPlanner
from slurm_elastic.core.guards import GuardedPlanner, Guards
from slurm_elastic.core.trust import ReportGuard
from slurm_elastic.errors import ConfigError, UnknownPolicyError
from slurm_elastic.testing import make_job, make_nodes, make_snapshot

CORE = Path(policies.__file__).resolve().parent / "core"
ALL = ("dp", "dp-fixed", "drf", "drl", "efq", "fifo", "min-jct", "ones", "optimus", "tetris", "tiresias")


def test_available_lists_every_planner() -> None:
    assert policies.available() == ALL
    assert policies.DEFAULT_POLICY in ALL
    core_planners = {cls for mod in (baselines, dl2_baselines, drl, dynprog, efq, evolutionary, minjct)
                     for _, cls in inspect.getmembers(mod, inspect.isclass)
                     if cls.__module__ == mod.__name__ and callable(getattr(cls, "plan", None))}
    made = {type(policies.create(name)) for name in ALL}
    assert core_planners == made  # every planner class of the core is reachable by a name


@pytest.mark.parametrize("name", ALL)
def test_every_planner_declares_its_traits(name: str) -> None:
    p = policies.create(name)
    assert p.name == name
    assert isinstance(p.interval, float | int) and p.interval >= 0
    assert isinstance(p.epoch_events, bool) and isinstance(p.uses_progress, bool)


def test_known_traits() -> None:
    assert policies.create("optimus").interval == 600.0
    assert policies.create("dp", interval=30.0).interval == 30.0
    ones = policies.create("ones", interval=60.0)
    assert (ones.interval, ones.epoch_events, ones.uses_progress) == (60.0, True, True)
    assert not policies.create("fifo").uses_progress and policies.create("efq").uses_progress


def test_create_refuses_unknown_names_and_parameters() -> None:
    with pytest.raises(UnknownPolicyError, match="unknown policy 'nope'; known policies: dp, dp-fixed"):
        policies.create("nope")
    with pytest.raises(ConfigError, match=r"policy 'fifo': bad parameters \['colour'\].*known parameters: backfill"):
        policies.create("fifo", colour="blue")
    with pytest.raises(ConfigError, match=r"dp\.mode = 'sideways'"):
        policies.create("dp-fixed", mode="sideways")


def test_build_wraps_in_the_trust_guard_always_and_in_site_guards_only_when_given() -> None:
    bare = policies.build("ones", {"interval": 120.0})
    assert type(bare) is ReportGuard and type(bare.inner) is evolutionary.OnesPlanner
    assert (bare.name, bare.interval, bare.epoch_events, bare.uses_progress) == ("ones", 120.0, True, True)
    guarded = policies.build("ones", {"interval": 120.0}, Guards(max_gpus_per_job=2))
    assert isinstance(guarded, GuardedPlanner) and guarded.guards.max_gpus_per_job == 2
    assert (guarded.name, guarded.interval, guarded.epoch_events, guarded.uses_progress) == ("ones", 120.0, True, True)
    assert Guards() == policies.DEFAULT_GUARDS


def test_guard_wrappers_expose_the_inner_traits() -> None:
    ftf = FtfGuardedPlanner(policies.create("optimus", interval=30.0), 1.5)
    assert (ftf.interval, ftf.epoch_events, ftf.uses_progress) == (30.0, False, True)
    both = GuardedPlanner(ftf, Guards())
    assert (both.interval, both.epoch_events, both.uses_progress) == (30.0, False, True)


def test_guards_bind_through_build() -> None:
    snap = make_snapshot(make_nodes(2, 4), [make_job("a", min_gpus=1, max_gpus=8)])
    rng = np.random.default_rng(0)
    assert policies.build("dp", None, None).plan(snap, None, rng).plan.jobs[0].num_gpus > 2
    capped = policies.build("dp", None, Guards(max_gpus_per_job=2)).plan(snap, None, rng).plan
    assert capped.jobs[0].num_gpus == 2


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module)
    return out


def test_core_planner_imports_nothing_from_outside_the_core() -> None:
    ours = {m for m in _imports(CORE / "planner.py") if m.split(".")[0].startswith("slurm_elastic")}
    assert ours and all(m == "slurm_elastic.core" or m.startswith("slurm_elastic.core.") for m in ours), ours


def test_no_core_module_imports_the_policy_table_or_drl_files() -> None:
    for path in sorted(CORE.glob("*.py")):
        bad = {m for m in _imports(path)
               if m.startswith(("slurm_elastic.policies", "slurm_elastic.drl"))}
        assert not bad, f"{path.name} imports {bad}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("dp-fixed.mode=drop", ("dp-fixed.mode", "drop")),
        ("optimus.start-between-rounds=true", ("optimus.start_between_rounds", True)),
        ("start-between-rounds=false", ("start_between_rounds", False)),
        ("generations=20", ("generations", 20)),
        ("drl.model=/m/a-b.npz", ("drl.model", "/m/a-b.npz")),
    ],
)
def test_param_normalises_only_the_parameter_name(text: str, expected: tuple[str, object]) -> None:
    assert param(text) == expected


def test_param_needs_key_and_value() -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        param("generations")


def test_simulate_accepts_a_dashed_policy_parameter(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("job_id,submit_time,num_gpus,duration,min_gpus,max_gpus\na,0,1,600,1,4\n")
    assert main(["simulate", "--trace", str(trace), "--gpus", "4", "--policy", "dp-fixed",
                 "--param", "dp-fixed.mode=drop", "--quiet"]) == 0
    assert '"policy": "dp-fixed"' in capsys.readouterr().out
