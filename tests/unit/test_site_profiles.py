"""Site profiles (issue 15, part 3): a folder ``slurm-elastic profile`` writes, the loader that
reads it with the site's GPUs per node, ``daemon.profiles`` in the configuration, and the real
path planning with them beside the shipped Longhorn profiles. Measuring through Slurm is in
``tests/slurm/test_site_profile.py``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from slurm_elastic.cli import main
from slurm_elastic.config import parse
from slurm_elastic.errors import ConfigError
from slurm_elastic.site_profile import parse_batches, parse_models, parse_placements, write_profile
from slurm_elastic.wiring import default_profiles
from slurm_elastic_predictor.errors import ProfileError
from slurm_elastic_predictor.profiles import PROFILE_NAMES, load_model, machine_gpus_per_node


def _rows(t1: float = 0.010, slope: float = 0.0004, intra: float = 0.004, inter: float = 0.020) -> list[dict[str, Any]]:
    """Rows of a 2-GPU-per-node machine: t = t1 + slope * b, plus an all-reduce term by placement."""
    out = []
    for placement, comm in (("1", 0.0), ("2", intra), ("11", inter), ("22", inter + intra)):
        for b in (32, 128):
            out.append({"placement": placement, "local_bsz": b, "step_time": t1 + slope * b + comm})
    return out


def _site(tmp_path: Path, name: str = "cnn", gpn: int = 2) -> Path:
    write_profile(tmp_path / name, _rows(), [], {"gpus_per_node": gpn})
    return tmp_path


def test_a_written_profile_loads_with_the_site_gpus_per_node_and_fits_its_rows(tmp_path: Path) -> None:
    out = write_profile(tmp_path / "cnn", _rows(), ["cnn placement 11 batch 64: timed out"], {"gpus_per_node": 2})
    assert out["fit"] == "fitted" and out["fit_median_ape"] < 0.05, out
    assert out["failed"] == ["cnn placement 11 batch 64: timed out"]
    model = load_model("cnn", tmp_path)
    assert model.gpus_per_node == 2 and model.name == "cnn"
    one = float(model.t_iter(32, 1, 1))
    assert one == pytest.approx(0.010 + 0.0004 * 32, rel=0.02)
    assert float(model.t_iter(64, 2, 2)) > float(model.t_iter(64, 2, 1))  # across nodes costs more
    assert machine_gpus_per_node(tmp_path / "cnn") == 2


def test_a_written_profile_that_cannot_be_fitted_says_why(tmp_path: Path) -> None:
    rows = [r for r in _rows() if len(r["placement"]) == 1]  # no row across nodes
    out = write_profile(tmp_path / "cnn", rows, [], {"gpus_per_node": 2})
    assert out["fit"].startswith("not fitted:") and "across nodes" in out["fit"], out


def test_a_placement_beyond_the_machines_gpus_per_node_is_refused(tmp_path: Path) -> None:
    write_profile(tmp_path / "cnn", [*_rows(), {"placement": "3", "local_bsz": 32, "step_time": 0.1}], [],
                  {"gpus_per_node": 2})
    with pytest.raises(ProfileError, match=r"placements.csv:10: placement must be one digit 1..2 per node"):
        load_model("cnn", tmp_path)


@pytest.mark.parametrize(("text", "rule"), [
    ('{"gpus_per_node": 0}', "gpus_per_node must be an integer 1..9"),
    ('{"gpus_per_node": 2.0}', "gpus_per_node must be an integer 1..9"),
    ('{"gpus_per_node": true}', "gpus_per_node must be an integer 1..9"),
    ("[2]", "gpus_per_node must be an integer 1..9"),
    ("{", "not JSON"),
    ("{" + " " * 70000 + "}", "larger than 65536 bytes"),
])
def test_a_bad_machine_file_is_refused_with_the_rule(tmp_path: Path, text: str, rule: str) -> None:
    _site(tmp_path)
    (tmp_path / "cnn" / "machine.json").write_text(text)
    with pytest.raises(ProfileError, match=rule):
        load_model("cnn", tmp_path)


def test_a_machine_file_that_is_a_link_is_refused(tmp_path: Path) -> None:
    _site(tmp_path)
    real = tmp_path / "elsewhere.json"
    real.write_text('{"gpus_per_node": 2}')
    (tmp_path / "cnn" / "machine.json").unlink()
    os.symlink(real, tmp_path / "cnn" / "machine.json")
    with pytest.raises(ProfileError, match="must be a regular file, not a link"):
        load_model("cnn", tmp_path)


def test_a_machine_file_that_is_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    _site(tmp_path)
    (tmp_path / "cnn" / "machine.json").unlink()
    os.mkfifo(tmp_path / "cnn" / "machine.json")  # an open for reading would wait for a writer
    with pytest.raises(ProfileError, match=r"must be a regular file \(not a FIFO"):
        load_model("cnn", tmp_path)


def test_a_folder_without_machine_file_is_a_four_gpu_machine(tmp_path: Path) -> None:
    _site(tmp_path)
    (tmp_path / "cnn" / "machine.json").unlink()
    assert load_model("cnn", tmp_path).gpus_per_node == 4


def test_the_configuration_names_a_site_folder_and_the_daemon_plans_with_it(tmp_path: Path) -> None:
    site = _site(tmp_path / "profiles")
    write_profile(site / "cifar10", _rows(t1=0.5), [], {"gpus_per_node": 2})  # replaces the shipped one
    cfg = parse(f'[daemon]\nprofiles = "{site}"\ndefault_model = "cnn"\n')
    assert cfg.daemon.profiles == site and cfg.daemon.default_model == "cnn"
    profiles = default_profiles(cfg.daemon.profiles)
    assert set(PROFILE_NAMES) | {"cnn"} == set(profiles)
    assert profiles["cnn"].gpus_per_node == 2 and profiles["imagenet"].gpus_per_node == 4
    assert float(profiles["cifar10"].t_iter(32, 1, 1)) == pytest.approx(0.5 + 0.0004 * 32, rel=0.02)
    assert set(default_profiles()) == set(PROFILE_NAMES)  # without one: the shipped profiles only


@pytest.mark.parametrize(("value", "rule"), [
    ('"relative/profiles"', "must be the absolute path of a folder of site profiles"),
    ('"/nonexistent/profiles"', "no such folder"),
    ("3", "must be the absolute path of a folder of site profiles"),
])
def test_a_bad_profiles_setting_names_the_value_and_the_rule(value: str, rule: str) -> None:
    with pytest.raises(ConfigError, match=rf"daemon.profiles = .*{rule}"):
        parse(f"[daemon]\nprofiles = {value}\n")


def test_a_profiles_folder_that_is_empty_or_broken_is_refused_at_load(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="it holds no profile"):
        parse(f'[daemon]\nprofiles = "{tmp_path}"\n')
    _site(tmp_path)
    (tmp_path / "cnn" / "placements.csv").write_text("placement,local_bsz,step_time,sync_time\n1,32,-1,0\n")
    with pytest.raises(ConfigError, match="step_time must be a finite number > 0"):
        parse(f'[daemon]\nprofiles = "{tmp_path}"\n')


def test_the_default_model_may_be_a_site_profile_only_when_the_site_has_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"daemon\.default_model = 'cnn': must be one of the shipped or site"):
        parse('[daemon]\ndefault_model = "cnn"\n')
    site = _site(tmp_path)
    assert parse(f'[daemon]\ndefault_model = "cnn"\nprofiles = "{site}"\n').daemon.default_model == "cnn"


@pytest.mark.parametrize(("fn", "text", "message"), [
    (parse_placements, "1,2,21", "--placements '21': must be one digit 1..9 per node, the same on every node"),
    (parse_placements, "1,2,0", "--placements '0'"),
    (parse_placements, "2,11", "must hold 1 (one GPU)"),
    (parse_placements, "1,11", "one node with several GPUs"),
    (parse_placements, "1,2", "several nodes"),
    (parse_batches, "32,x", "--batches 'x': must be integers 1..65536"),
    (parse_batches, "0", "--batches '0'"),
    (parse_batches, ",", "name at least one"),
    (parse_models, "cnn,gpt", "--models 'cnn,gpt': must be among cnn, resnet18"),
])
def test_bad_profile_options_name_the_value_and_the_rule(fn, text: str, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError) as exc:
        fn(text)
    assert message in str(exc.value)


def test_profile_cli_refuses_bad_options_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "--out", str(tmp_path), "--placements", "1,2"]) == 2
    assert "several nodes" in capsys.readouterr().err
    assert main(["profile", "--out", str(tmp_path), "--partition", "gpu;rm -rf /"]) == 2
    assert "a partition name is letters, digits" in capsys.readouterr().err
    _site(tmp_path)
    assert main(["profile", "--out", str(tmp_path), "--models", "cnn"]) == 2  # never overwritten
    assert "is never overwritten" in capsys.readouterr().err
    assert json.loads((tmp_path / "cnn" / "machine.json").read_text())["gpus_per_node"] == 2


def test_a_job_that_ran_on_another_node_count_than_its_placement_is_not_measured(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A daemon beside may start a profiling job elsewhere: the row would then say a placement the
    job did not run on. Slurm's node count while it ran is checked (here: 1 node for placement 11)."""
    from slurm_elastic import site_profile

    answers = iter(["PENDING 2\n", "RUNNING 1\n", "RUNNING 1\n", ""])
    monkeypatch.setattr(site_profile, "submit", lambda *a, **k: "7")
    monkeypatch.setattr(site_profile, "run_command", lambda argv, env=None: next(answers))
    monkeypatch.setattr(site_profile.time, "sleep", lambda s: None)
    got = site_profile._measure(tmp_path, "cnn", "11", 32, 20, "", None, 60.0)
    assert got == "job 7 ran on 1 node(s), not the 2 of placement 11"
