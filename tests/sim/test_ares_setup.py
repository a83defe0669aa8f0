"""Issue 16, part 1: Ares's own simulation setup (§5.1): 64 GPUs, each Philly trace "160 jobs
submitted over 8 hours", each record mapped to the Table 2 model of its GPU-time class."""

from __future__ import annotations

import numpy as np
import pytest

from slurm_elastic.errors import TraceError
from slurm_elastic.workloads.catalog import builtin
from slurm_elastic.workloads.philly import ARES_GPUS, ares_philly, philly_draw, philly_like


def test_ares_philly_is_160_jobs_over_8_hours_mapped_by_gpu_time_class() -> None:
    jobs = ares_philly(4)
    assert len(jobs) == 160 and ARES_GPUS == 64 and builtin("ares-philly", 4, 64) == jobs
    submits = [j.submit_time for j in jobs]
    assert submits == sorted(submits) and submits[0] >= 0 and submits[-1] <= 8 * 3600
    assert submits[-1] > 7 * 3600 and submits[0] < 3600  # spread over the whole window
    ks, durations = philly_draw(np.random.default_rng(4), 160)
    classes = {"cifar10": 0, "ncf": 0, "deepspeech2": 1, "bert": 1, "yolov3": 2, "imagenet": 3}
    for job, k, d in zip(jobs, ks, durations, strict=True):
        hours = k * d / 3600  # Small < 1 h, Medium < 10 h, Large < 100 h, X-Large above
        assert classes[job.model] == int(np.searchsorted([1, 10, 100], hours, side="right")), (job, hours)
        assert job.requested_gpus == k


def test_a_bad_window_is_refused() -> None:
    with pytest.raises(TraceError, match=r"window_s=-1.0 must all be positive"):
        philly_like(10, 64, 1, window_s=-1.0)
