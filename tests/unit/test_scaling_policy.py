"""Unit tests of the ONES R_j rules (Start, Scale-up/down, Resume)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slurm_elastic.core import scaling_policy as sp
from slurm_elastic.core.model import JobState
from slurm_elastic.testing import make_job


def test_start_is_one_gpu() -> None:
    job = make_job(1, max_gpus=8)
    st = sp.advance(None, job, sigma=0.0, rejected=False)
    assert st.limit == 128 and sp.gpu_cap(job, st.limit) == 1


@pytest.mark.parametrize(("run_time", "expected"), [(0.0, 256), (599.0, 256), (600.0, 128), (1200.0, 86)])
def test_epoch_update_doubles_young_jobs_and_shrinks_old_ones(run_time: float, expected: int) -> None:
    # sigma = 1/600 s: jobs younger than the 10-minute arrival interval double each epoch.
    assert sp.epoch_update(128, run_time, 1 / 600) == expected


def test_running_job_doubles_once_per_completed_epoch() -> None:
    job = make_job(1, max_gpus=64, placement=[("n000", 0)], epochs_done=0.5)
    st = sp.advance(None, job, 0.0, False)
    later = replace(job, samples_processed=3 * job.epoch_size)
    st2 = sp.advance(st, later, 0.0, False)
    assert st2.limit == 128 * 2**3 and st2.epochs_seen == 3


def test_limit_clamped_to_max_gpus() -> None:
    job = make_job(1, max_gpus=2, placement=[("n000", 0)])
    st = sp.advance(sp.LimitState(256, 0, 256), replace(job, samples_processed=10 * job.epoch_size), 0.0, False)
    assert st.limit == 256


def test_resume_halves_on_each_rejection_never_below_start() -> None:
    job = make_job(1, max_gpus=16, state=JobState.PREEMPTED, epochs_done=2.0)
    st = sp.LimitState(1024, 2, 1024)
    st = sp.advance(st, job, 0.0, rejected=True)
    assert st.limit == 512
    for _ in range(10):
        st = sp.advance(st, job, 0.0, rejected=True)
    assert st.limit == 128


def test_job_first_seen_running_keeps_its_size() -> None:
    job = make_job(1, max_gpus=16, placement=[("n000", g) for g in range(4)])
    st = sp.advance(None, job, 0.0, False)
    assert sp.gpu_cap(job, st.limit) == 4


def test_old_running_job_doubles_when_no_job_is_queued() -> None:
    # Scale-down fights the convoy effect: without a queue an old job keeps doubling (sigma*T = 10).
    job = make_job(1, max_gpus=64, placement=[("n000", 0)], run_time=6000.0)
    st = sp.LimitState(512, 2, 512)
    later = replace(job, samples_processed=3 * job.epoch_size)
    assert sp.advance(st, later, 1 / 600, False, contended=False).limit == 1024
    # With a queue it is penalised: ceil(2 * 512 / 11) = 94 -> clamped to the start size 128.
    assert sp.advance(st, later, 1 / 600, False, contended=True).limit == 128


def test_epoch_update_without_contention_is_plain_doubling() -> None:
    assert sp.epoch_update(128, 1e6, 1 / 60, contended=False) == 256
