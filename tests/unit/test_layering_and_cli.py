"""The layering contracts hold, and the command line behaves (exit codes, JSON)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_elastic import __version__
from slurm_elastic.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_import_linter_contracts_are_kept() -> None:
    exe = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    proc = subprocess.run([exe, "--config", str(ROOT / "setup.cfg")], cwd=ROOT, capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    contracts = (ROOT / "setup.cfg").read_text().count("[importlinter:contract:")
    assert contracts >= 9 and f"{contracts} kept, 0 broken" in proc.stdout


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"slurm-elastic {__version__}"


@pytest.mark.parametrize("policy", ["ones", "dp"])
def test_plan_json_is_a_valid_plan(policy: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--policy", policy, "--gpus", "16", "--jobs", "8", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["policy"] == policy
    assert sum(j["gpus"] for j in out["jobs"]) <= 16
    assert {j["job_id"] for j in out["jobs"]}.isdisjoint(w["job_id"] for w in out["waiting"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["plan", "--policy", "nope"], "unknown policy 'nope'"),
        (["plan", "--param", "generations=-3"], "ones.generations = -3: must be >= 0"),
        (["plan", "--param", "colour=blue"], "bad parameters ['colour']"),
        (["bench", "chaos", "--points", "grow:sbatch,grow:fly"], "point 'grow:fly' is not one of"),
        (["bench", "load", "--policy", "nope"], "unknown policy 'nope'"),
        (["bench", "learn", "--sizes", "1,x"], "--sizes '1,x': must be comma-separated GPU counts"),
        (["bench", "learn", "--prior", "nope"], "unknown profile 'nope'"),
        (["bench", "learn", "--sizes", "0,2"], "bench learn:"),
    ],
)
def test_bad_input_exits_2_with_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_bench_planner_prints_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "planner", "--gpus", "32", "--jobs", "10", "--policy", "ones", "--repeat", "2",
                 "--param", "generations=1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["policy"] == "ones" and out["invalid_plans"] == 0 and out["median_ms"] > 0
    assert "guard_ratio" not in out and out["reported"] is False


def test_bench_planner_reported_times_the_trust_guard_against_the_bare_policy(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "planner", "--gpus", "32", "--jobs", "10", "--policy", "dp", "--repeat", "2",
                 "--reported"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["reported"] is True and out["invalid_plans"] == 0
    assert out["bare_median_ms"] > 0 and out["guard_ratio"] > 0


def test_profiles_report(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profiles", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["profile"] for r in rows} == {"cifar10", "imagenet", "bert", "deepspeech2", "yolov3", "ncf"}
    assert all(r["v100_samples_per_s_4gpu"] > r["t4_samples_per_s_4gpu"] for r in rows)


def test_every_option_of_every_subcommand_says_what_it_means() -> None:
    """Issue 18, part 4: ``bench planner --help`` and others listed options with no word of what
    they mean. Every option and positional argument has a help text; one with a default worth
    naming (not off, empty or a list) names it."""
    import argparse

    from slurm_elastic.cli.parser import build_parser

    silent, no_default = [], []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for a in parser._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sub in a.choices.items():
                    walk(sub, f"{path} {name}".strip())
            elif isinstance(a, argparse._HelpAction | argparse._VersionAction):
                continue
            elif not a.help:
                silent.append(f"{path} {(a.option_strings or [a.dest])[-1]}")
            elif (a.default not in (None, False, "", (), []) and not isinstance(a.default, list)
                  and "default" not in a.help and "%(default)" not in a.help):
                no_default.append(f"{path} {(a.option_strings or [a.dest])[-1]} ({a.default!r})")

    walk(build_parser(), "")
    assert silent == []
    assert no_default == []


def test_the_top_help_lists_every_command_once_under_who_uses_it(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 18, part 4: ``slurm-elastic --help`` groups the commands by who uses them (users,
    site admins, center managers, developers); a new command must be put in a group."""
    import argparse

    from slurm_elastic.cli.parser import COMMAND_GROUPS, build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    grouped = [name for names in COMMAND_GROUPS.values() for name in names]
    assert sorted(grouped) == sorted(sub.choices), "a command in no group, or in two"
    with pytest.raises(SystemExit):
        parser.parse_args(["--help"])
    out = capsys.readouterr().out
    heads = [out.index(f"commands for {g}:") for g in COMMAND_GROUPS]
    assert heads == sorted(heads)
    users = out[heads[0]:heads[1]]
    assert "submit" in users and "status" in users and "daemon" not in users
    assert "  report " in out[heads[2]:heads[3]]


def test_bench_planner_scaling_gives_a_row_per_size() -> None:
    from slurm_elastic.bench.planning import bench_planner_scaling

    rows = bench_planner_scaling(policy="ones", repeat=1, sizes=(16, 32), params={"generations": 1})
    assert [r["jobs"] for r in rows] == [4, 8]
    assert all(r["median_ms"] > 0 and r["profile"] and r["invalid_plans"] == 0 for r in rows)
