"""``simulate`` plans inside the site guards (``--config``, the defaults) unless ``--no-guards``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from slurm_elastic.cli import main
from slurm_elastic.core.guards import Guards
from slurm_elastic.experiments.comparison import PolicySpec, run_comparison
from slurm_elastic.experiments.papers import reproduce

TRACE = "job_id,submit_time,num_gpus,duration,min_gpus,max_gpus\na,0,1,3600,1,4\nb,0,1,3600,1,4\n"


def _simulate(tmp_path: Path, *extra: str) -> list[dict[str, Any]]:
    trace, out = tmp_path / "trace.csv", tmp_path / "out.json"
    trace.write_text(TRACE)
    assert main(["simulate", "--trace", str(trace), "--gpus", "4", "--policy", "dp", "--round-gap", "0",
                 "--quiet", "--json", str(out), *extra]) == 0
    results: list[dict[str, Any]] = json.loads(out.read_text())
    return results


def test_simulate_applies_the_site_guards_unless_no_guards(tmp_path: Path) -> None:
    config = tmp_path / "elastic.toml"
    config.write_text("[guards]\nmax_gpus_per_job = 1\n")
    bare = _simulate(tmp_path, "--no-guards")[0]
    guarded = _simulate(tmp_path, "--config", str(config))[0]
    assert max(bare["timeline"]["busy_gpus"]) == 4  # dp grows both jobs onto the idle GPUs
    assert max(guarded["timeline"]["busy_gpus"]) == 2  # the cap keeps each at 1 GPU
    assert guarded["metrics"]["avg_jct"] > bare["metrics"]["avg_jct"]


def test_simulate_defaults_to_the_shipped_guards(tmp_path: Path) -> None:
    # No rigid job waits in this trace, so the default guards (protect_rigid) change nothing.
    assert _simulate(tmp_path)[0]["metrics"] == _simulate(tmp_path, "--no-guards")[0]["metrics"]


def test_simulate_refuses_a_bad_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "elastic.toml"
    config.write_text("[guards]\nmax_gpus_per_job = -1\n")
    trace = tmp_path / "trace.csv"
    trace.write_text(TRACE)
    assert main(["simulate", "--trace", str(trace), "--gpus", "4", "--policy", "dp", "--config", str(config)]) == 2
    assert "guards.max_gpus_per_job = -1" in capsys.readouterr().err


def test_config_and_no_guards_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--workload", "ones-longhorn", "--config", "x.toml", "--no-guards"])
    assert exc.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_run_comparison_threads_the_guards(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text(TRACE)
    kw: dict[str, Any] = {"trace": trace, "gpus": 4, "round_gap": 0.0}
    bare = run_comparison([PolicySpec("dp")], [1], **kw)[0]
    capped = run_comparison([PolicySpec("dp")], [1], guards=Guards(max_gpus_per_job=1), **kw)[0]
    assert max(capped["timeline"]["busy_gpus"]) == 2 < max(bare["timeline"]["busy_gpus"])


def test_reproduce_runs_bare_policies(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Guards | None] = []

    def fake(policies: Any, seeds: Any, *, guards: Guards | None = None, **kw: Any) -> list[dict[str, Any]]:
        seen.append(guards)
        return []

    monkeypatch.setattr("slurm_elastic.experiments.papers.run_comparison", fake)
    monkeypatch.setattr("slurm_elastic.experiments.papers.fairness_section", lambda *a, **k: ([], []))
    reproduce([1], quick=True)
    assert seen and all(g is None for g in seen)


@pytest.mark.parametrize(("extra", "expected"), [([], Guards()), (["--no-guards"], None),
                                                 (["--config", "CONFIG"],
                                                  Guards(cooldown_s=300.0, min_run_s=120.0, max_preemptions=3))])
def test_what_if_passes_the_site_guards(extra: list[str], expected: Guards | None, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "elastic.toml"
    config.write_text("[guards]\ncooldown_s = 300\n")
    seen: list[Guards | None] = []

    def fake_what_if(records: Any, pols: Any, seeds: Any, gpus: int, gpus_per_node: int, *,
                     guards: Guards | None = None, **kw: Any) -> list[dict[str, Any]]:
        seen.append(guards)
        return [{"policy": "dp", "seed": 1, "metrics": {"jobs": 0}}]

    monkeypatch.setattr("slurm_elastic.whatif.read_accounting", lambda *a, **k: [])
    monkeypatch.setattr("slurm_elastic.whatif.what_if", fake_what_if)
    argv = ["what-if", "--since", "2024-01-01", "--until", "2024-01-02", "--policy", "dp", "--gpus", "8",
            *[str(config) if a == "CONFIG" else a for a in extra]]
    assert main(argv) == 0
    assert seen == [expected]
    assert json.loads(capsys.readouterr().out)["runs"][0]["policy"] == "dp"
