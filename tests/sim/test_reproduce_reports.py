"""``slurm-elastic reproduce`` writes one HTML report per reported workload and cluster size. The whole
run (``make reproduce``) exited 2 after writing its table: its fairness section simulates some of the
ONES table's runs again (``ones-longhorn`` on 64 GPUs, seed 1), and the report refused the repeat."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from slurm_elastic.cli import main
from slurm_elastic.experiments import papers
from slurm_elastic.experiments import pool as pool_module
from slurm_elastic.experiments.comparison import PolicySpec, run_comparison
from slurm_elastic.experiments.papers import report_groups


def _runs() -> list[dict[str, Any]]:
    runs = run_comparison([PolicySpec("fifo"), PolicySpec("dp")], [1], workload="ones-longhorn-50", gpus=16)
    for r in runs:
        r["workload"] = "ones-longhorn"
    return runs


def test_a_run_simulated_twice_is_reported_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    table = _runs()
    fairness = [copy.deepcopy(table[0])]  # the same simulation, run again by the fairness section
    unreported = [{**copy.deepcopy(table[1]), "workload": "philly-like-160"}]
    monkeypatch.setattr(papers, "reproduce", lambda *a, **k: ("# table\n", [*table, *fairness, *unreported]))
    assert main(["reproduce", "--seeds", "1", "--quiet", "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    assert (tmp_path / "reproduce.md").read_text() == "# table\n"
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["ones-longhorn-16"]
    assert (tmp_path / "ones-longhorn-16" / "index.html").is_file()


def test_report_groups_keep_each_policy_and_seed_once_in_order() -> None:
    table = _runs()
    again = copy.deepcopy(table)
    other_seed = [{**copy.deepcopy(table[0]), "seed": 2}]
    groups = report_groups([*table, *again, *other_seed])
    assert list(groups) == [("ones-longhorn", 16)]
    assert [(r["policy"], r["seed"]) for r in groups[("ones-longhorn", 16)]] == [("fifo", 1), ("dp", 1), ("fifo", 2)]
    assert groups[("ones-longhorn", 16)][0] is table[0]


def test_the_fairness_section_takes_the_ones_tables_runs_instead_of_simulating_them_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A bare run of a built-in workload is the same run whoever asks: the fairness section's
    ``ones-longhorn`` row takes the ONES table's (same seed, GPUs, policy and parameters)."""
    pols = [PolicySpec("fifo"), PolicySpec("dp"), PolicySpec("dp", {"ftf_bound": 1.5}, "dp+guard")]
    fresh = papers._run_jobs(pols, papers.builtin("ones-longhorn-50", 1, 16), "ones-longhorn-50", 16, 1, None, {})
    table = run_comparison(pols[:2], [1], workload="ones-longhorn-50", gpus=16)
    assert [r["metrics"] for r in table] == [r["metrics"] for r in fresh[:2]]  # the same run, whoever asks
    known = {papers.run_key("ones-longhorn-50", 16, 1, p): r for p, r in zip(pols[:2], table, strict=True)}
    simulated: list[str] = []
    real = pool_module.simulate

    def counting(*a: Any, **k: Any) -> dict[str, Any]:
        simulated.append(k["workload"])
        return real(*a, **k)

    monkeypatch.setattr(pool_module, "simulate", counting)
    again = papers._run_jobs(pols, papers.builtin("ones-longhorn-50", 1, 16), "ones-longhorn-50", 16, 1, None, known)
    assert simulated == ["ones-longhorn-50"]  # only dp+guard: fifo and dp were known
    assert [r["policy"] for r in again] == ["fifo", "dp", "dp+guard"]
    assert [r["metrics"] for r in again] == [r["metrics"] for r in fresh]
    assert papers.run_key("w", 16, 1, PolicySpec("dp", {"ftf_bound": 1.5})) != papers.run_key(
        "w", 16, 1, PolicySpec("dp"))  # parameters are part of the run
