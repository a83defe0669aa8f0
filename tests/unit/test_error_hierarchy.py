"""One exception hierarchy: the controller's and the predictor's errors share one base and one
``ProfileError``, so a profile error the predictor raises reaches the command as a clear message
(exit status 2, one line), as every error raised on purpose does."""

from __future__ import annotations

import pytest

import slurm_elastic.errors as controller
import slurm_elastic_predictor.errors as predictor
import slurm_elastic_predictor.profiles
from slurm_elastic.cli import main


def test_there_is_one_profile_error_and_one_base() -> None:
    assert controller.ProfileError is predictor.ProfileError
    assert controller.ElasticError is predictor.ElasticError
    assert issubclass(predictor.ProfileError, controller.ElasticError)
    assert issubclass(predictor.ProfileError, ValueError)  # what the predictor's numeric callers catch
    for name in controller.__all__:
        assert issubclass(getattr(controller, name), controller.ElasticError)


def test_a_profile_the_predictor_refuses_exits_2_with_one_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def refuse(name: str, root: object = None) -> object:
        raise predictor.ProfileError(f"{name}/placements.csv:7: step_time must be a positive number, got '-1'")

    monkeypatch.setattr(slurm_elastic_predictor.profiles, "load_profile_rows", refuse)
    assert main(["profiles"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("slurm-elastic profiles: ") and "step_time" in err
