"""A job's ``work_scale`` in its lower bound (issue 39, item 5): ``job_best`` of one job counts it, as
``job_bests`` of many did (each time and GPU-seconds is a multiple of the job's work)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slurm_elastic.core.model import ElasticMode
from slurm_elastic.sim.lower_bound import job_best, job_bests
from slurm_elastic.sim.workload import SimJobSpec, requested_time

SPECS = [  # validation curves (no set epoch count), and a set epoch count
    SimJobSpec("x", 0.0, "bert", 1, 1, 3, 12, 4, 20, 1000),
    SimJobSpec("y", 0.0, "yolov3", 2, 1, 3, 16, 8, 24, 500, mode=ElasticMode.ENDO),
    SimJobSpec("w", 0.0, "cifar10", 1, 2, 3, 64, 40, 70, 2000, max_local_batch=20, epochs=3.0),
]


@pytest.mark.parametrize("scale", [0.1, 3.0])
@pytest.mark.parametrize("spec", SPECS, ids=["bert-exo", "yolov3-endo", "cifar10-set-epochs"])
def test_job_best_scales_with_the_work(spec: SimJobSpec, scale: float) -> None:
    unit, scaled = replace(spec, work_scale=1.0), replace(spec, work_scale=scale)
    best = job_best(scaled, 8, 4)
    assert best.time == pytest.approx(scale * job_best(unit, 8, 4).time, rel=1e-12)
    assert best.gpu_seconds == pytest.approx(scale * job_best(unit, 8, 4).gpu_seconds, rel=1e-12)
    many = job_bests([scaled], 8, 4)[spec.job_id]
    assert best.time == pytest.approx(many.time, rel=1e-12)
    assert best.gpu_seconds == pytest.approx(many.gpu_seconds, rel=1e-12)
    # A bound: never longer than the job alone at its request, whatever its work.
    assert best.time <= requested_time(scaled)
