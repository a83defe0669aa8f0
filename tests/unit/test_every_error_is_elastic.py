"""One exception hierarchy, for every error class the controller and the predictor define.

``test_error_hierarchy.py`` checks ``slurm_elastic.errors``' own classes; this imports every module
of ``slurm_elastic`` and ``slurm_elastic_predictor`` and checks each exception class defined in
one: it derives from :class:`~slurm_elastic.errors.ElasticError` (so the command and the daemon
tell "our clear message" from a bug), unless it is one of the few below, which never reach the
command on purpose. The launcher (``slurm_elastic_launcher``) is left out: it runs inside the
user's job, imports neither package, and its errors are ``ValueError`` s its own callers catch.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

import slurm_elastic
import slurm_elastic_predictor
from slurm_elastic.errors import ElasticError

APART = {
    # an outcome its caller turns into a refused report line, never raised past it
    "slurm_elastic.observe.job_reports.ReportRefused",
    "slurm_elastic.observe.bounds.ReportOutOfBounds",
    # a fuzz case's time limit: a BaseException on purpose, so the code under test cannot catch it
    "slurm_elastic.fuzz.case.CaseTimeout",
}
"""Exception classes outside the hierarchy on purpose, each with its reason."""

NOT_IMPORTED = ("slurm_elastic.cli.__main__", "slurm_elastic.rehearse.probe")
"""Modules that run when imported (the command's entry point; the probe runs a user's script)."""


def _modules() -> list[ModuleType]:
    out = []
    for package in (slurm_elastic, slurm_elastic_predictor):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name not in NOT_IMPORTED:
                out.append(importlib.import_module(info.name))
    return out


def outside(modules: list[ModuleType]) -> list[str]:
    """The exception classes defined in ``modules`` that are not :class:`ElasticError` s."""
    return sorted(f"{m.__name__}.{name}" for m in modules for name, value in vars(m).items()
                  if isinstance(value, type) and issubclass(value, BaseException)
                  and value.__module__ == m.__name__ and not issubclass(value, ElasticError))


def test_every_error_the_project_defines_is_an_elastic_error() -> None:
    modules = _modules()
    assert len(modules) > 150  # every module was walked, not only the packages' roots
    assert outside(modules) == sorted(APART)


def test_the_check_sees_an_error_outside_the_hierarchy() -> None:
    module = ModuleType("stray")
    for name, base in (("StrayError", ValueError), ("Fine", Exception), ("Ours", ElasticError)):
        setattr(module, name, type(name, (base,), {"__module__": "stray"}))
    module.Imported = KeyError  # defined elsewhere: not this module's to answer for
    assert outside([module]) == ["stray.Fine", "stray.StrayError"]
