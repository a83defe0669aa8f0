"""Unit tests of validate_plan: each rule, broken alone, is reported by name and value."""

from __future__ import annotations

import pytest

from slurm_elastic.core.constraints import placement_score, plan_violations, validate_plan
from slurm_elastic.core.model import ElasticMode, JobId, JobPlan, Placement, Plan
from slurm_elastic.errors import InvalidPlanError
from slurm_elastic.testing import make_job, make_nodes, make_snapshot


def _snap():  # type: ignore[no-untyped-def]
    rigid = make_job("r", elastic=False, min_gpus=1, max_gpus=1, placement=[("n001", 3)])
    jobs = [make_job("a", max_gpus=4), make_job("b", max_gpus=4, mode=ElasticMode.ENDO, requested_gpus=2), rigid]
    return make_snapshot(make_nodes(2), jobs)


def _jp(job: str, gpus: list[tuple[str, int]], batch: int, local: int, accum: int = 1, lr: float = 0.1) -> JobPlan:
    return JobPlan(JobId(job), Placement.of(gpus), batch, local, accum, lr)


def test_valid_plan_passes() -> None:
    snap = _snap()
    plan = Plan("t", (_jp("a", [("n000", 0), ("n000", 1)], 256, 128), _jp("b", [("n001", 0)], 256, 128, 2)))
    validate_plan(snap, plan)
    assert placement_score(plan, 4) == 0.0


@pytest.mark.parametrize(
    ("jobplan", "message"),
    [
        (_jp("zz", [("n000", 0)], 128, 128), "job zz: not in the snapshot"),
        (_jp("r", [("n000", 0)], 128, 128), "job r: is rigid"),
        (_jp("a", [("n001", 3)], 128, 128), "GPU n001:3 is not schedulable"),
        (_jp("a", [("n000", 0), ("n000", 1), ("n000", 2), ("n001", 0), ("n001", 1)], 640, 128),
         "5 GPUs outside its range 1:4"),
        (_jp("a", [("n000", 0)], 100_000, 128), "global batch 100000 outside its range"),
        (_jp("a", [("n000", 0), ("n000", 1)], 128, 9999), "per-GPU batch 9999 outside"),
        (_jp("a", [("n000", 0), ("n000", 1)], 256, 64), "cannot hold global batch 256"),
        (_jp("b", [("n000", 0)], 128, 128), "endo-elastic global batch 128 must stay 256"),
        (_jp("a", [("n000", 0)], 128, 128, lr=0.0), "learning rate 0.0 must be a positive number"),
    ],
)
def test_each_rule_reported(jobplan: JobPlan, message: str) -> None:
    found = plan_violations(_snap(), Plan("t", (jobplan,)))
    assert any(message in v for v in found), found


def test_gpu_given_twice_is_refused() -> None:
    snap = _snap()
    plan = Plan("t", (_jp("a", [("n000", 0)], 128, 128), _jp("b", [("n000", 0)], 256, 128, 2)))
    with pytest.raises(InvalidPlanError, match="GPU n000:0 is given to jobs a and b"):
        validate_plan(snap, plan)


def test_placement_score_counts_extra_nodes() -> None:
    plan = Plan("t", (_jp("a", [("n000", 0), ("n001", 0)], 256, 128),))
    assert placement_score(plan, 4) == 1.0
