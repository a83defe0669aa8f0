"""The CLI backend on recorded output: version check, commands run, snapshot built."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from slurm_elastic.observe.view import ClusterView
from slurm_elastic.slurm.cli_backend import SlurmCli
from slurm_elastic.slurm.dialects import UnsupportedSlurmVersion
from slurm_elastic.slurm.runner import SlurmCommandError, run_command, slurm_release
from slurm_elastic.testing import shipped_profiles

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "slurm-json"


class Recorded:
    """Answers Slurm commands from recorded files, and remembers what was asked."""

    def __init__(self, release: str, version: str) -> None:
        self.release, self.version, self.calls = release, version, []  # type: ignore[var-annotated]

    def __call__(self, argv: Sequence[str]) -> str:
        self.calls.append(list(argv))
        if list(argv) == ["sinfo", "--version"]:
            return f"slurm {self.version}\n"
        name = {("squeue", "--json"): "squeue", ("sinfo", "--json"): "sinfo",
                ("sinfo", "-N", "--json"): "sinfo_N"}[tuple(argv)]
        return (FIX / self.release / f"{name}.json").read_text()


@pytest.mark.parametrize(("release", "version", "sinfo", "dialect"), [
    ("22.05", "22.05.8", ["sinfo", "--json"], "openapi/v0.0.38 (Slurm 22.05's default) from Slurm 22.05.8"),
    ("23.02", "23.02.7", ["sinfo", "-N", "--json"], "v0.0.39 (Slurm 23.02's default) from Slurm 24.05.8"),
    ("23.11", "23.11.10", ["sinfo", "-N", "--json"], "v0.0.40 (Slurm 23.11's default) from Slurm 24.05.8"),
    ("24.05", "24.05.8", ["sinfo", "-N", "--json"], "v0.0.41 (Slurm 24.05's default) from Slurm 24.05.8"),
    ("24.11", "24.11.7", ["sinfo", "-N", "--json"],
     "data_parser/v0.0.42 (Slurm 24.11's default) from Slurm 25.11.7"),
    ("25.05", "25.05.8", ["sinfo", "-N", "--json"],
     "data_parser/v0.0.43 (Slurm 25.05's default) from Slurm 25.11.7"),
    ("25.11", "25.11.7", ["sinfo", "-N", "--json"],
     "data_parser/v0.0.44 (Slurm 25.11's default) from Slurm 25.11.7")])
def test_observer_builds_a_snapshot_from_each_version(release: str, version: str, sinfo: list[str],
                                                      dialect: str) -> None:
    rec = Recorded(release, version)
    obs = ClusterView(SlurmCli(rec), shipped_profiles(), lambda: 1_000_000.0, ("gpu",))
    snap = obs.observe()
    assert obs.source.dialect == dialect  # type: ignore[attr-defined]
    assert rec.calls[0] == ["sinfo", "--version"] and sinfo in rec.calls and ["squeue", "--json"] in rec.calls
    assert len(snap.nodes) == 4 and all(len(n.gpus) == 4 for n in snap.nodes)
    held = sum(j.num_gpus for j in snap.jobs)
    free = sum(len(n.free_gpus) for n in snap.nodes)
    assert held + free <= 16 and held > 0
    assert obs.poll() == obs.poll()


def test_unsupported_release_is_refused_at_start() -> None:
    with pytest.raises(UnsupportedSlurmVersion, match=r"Slurm 21\.08\.8 is not supported .* supported: 22\.05, "
                                                      r"23\.02, 23\.11, 24\.05, 24\.11, 25\.05, 25\.11"):
        SlurmCli(Recorded("22.05", "21.08.8"))
    with pytest.raises(UnsupportedSlurmVersion, match=r"Slurm 26\.05\.0 is not supported"):
        SlurmCli(Recorded("22.05", "26.05.0"))
    with pytest.raises(UnsupportedSlurmVersion, match="no Slurm release found"):
        slurm_release(lambda argv: "hello\n")


def test_run_command_reports_missing_program_and_failures() -> None:
    with pytest.raises(SlurmCommandError, match="no-such-slurm-command: not found"):
        run_command(["no-such-slurm-command", "--json"])
    with pytest.raises(SlurmCommandError, match="exit 3"):
        run_command(["sh", "-c", "echo boom >&2; exit 3"])
    assert run_command(["printf", "%s", "ok"]) == "ok"
