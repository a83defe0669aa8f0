"""``bench fidelity``'s pure parts (issue 15, part 5): the seeded trace, and the physics measured from
a real run's records. The run itself is in ``tests/slurm/test_site_profile.py``."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from slurm_elastic.bench.live.fidelity import LOCAL_BATCH, RANGES, _phases, _physics, make_trace, replay_fidelity
from slurm_elastic.errors import ConfigError
from slurm_elastic.sim.costs import IN_PLACE_SHRINK_S


def test_the_trace_is_seeded_poisson_and_each_job_is_as_long_as_asked() -> None:
    trace = make_trace(40, 7, 4000.0, mean_gap_s=10.0, alone_s=(15.0, 45.0))
    assert trace == make_trace(40, 7, 4000.0, mean_gap_s=10.0, alone_s=(15.0, 45.0))
    assert trace != make_trace(40, 8, 4000.0, mean_gap_s=10.0, alone_s=(15.0, 45.0))
    assert trace[0].at == 0 and all(a.at <= b.at for a, b in itertools.pairwise(trace))
    assert 5.0 < trace[-1].at / 39 < 20.0  # mean gap near 10 s
    for job in trace:
        assert (job.min_gpus, job.max_gpus) in RANGES and 1 <= job.epochs <= 3
        assert job.dataset_size % LOCAL_BATCH == 0
        assert 14.0 <= job.epochs * job.dataset_size / 4000.0 <= 46.0  # seconds alone on one GPU
    assert len({j.name for j in trace}) == 40


@pytest.mark.parametrize(("jobs", "speed"), [(0, 4000.0), (3, 0.0), (3, float("nan"))])
def test_a_trace_of_no_job_or_no_speed_is_refused(jobs: int, speed: float) -> None:
    with pytest.raises(ConfigError, match="must be > 0"):
        make_trace(jobs, 0, speed)


def _job(start: float, first: float | None, trained: float | None, end: float | None,
         resizes: list[tuple[int, int, float]]) -> dict[str, object]:
    return {"submitted": start - 1.0, "start": start, "first_step": first, "trained": trained, "end": end,
            "resizes": resizes}


def test_the_physics_are_medians_of_what_the_real_jobs_reported() -> None:
    real = {"jobs": {"a": _job(100.0, 106.0, 130.0, 131.0, [(1, 2, 0.05), (2, 4, 0.07)]),
                     "b": _job(200.0, 208.0, 240.0, 243.0, [(4, 2, 0.5)]),
                     "c": _job(300.0, 307.0, 330.0, 332.0, []),
                     "d": _job(400.0, None, None, None, [])}}  # never reported: left out
    got = _physics(real, 2)
    assert got["startup_s"] == 7.0 and got["ending_s"] == 2.0 and got["overhead_s"] == 9.0
    assert got["grow_pause_s"] == 0.06 and got["shrink_pause_s"] == 0.5
    assert (got["grows_measured"], got["shrinks_measured"]) == (2, 1)
    assert (got["host_cores"], _physics(real, 16)["host_cores"]) == (2, 16)  # the run's machine, recorded
    none = _physics({"jobs": {"c": _job(300.0, 307.0, 330.0, 332.0, [])}}, 16)
    assert none["shrink_pause_s"] == IN_PLACE_SHRINK_S and none["shrinks_measured"] == 0  # the launcher's figure


def test_a_real_jobs_time_splits_into_its_phases() -> None:
    assert _phases(_job(100.0, 106.0, 130.0, 131.0, [])) == {
        "real_wait_s": 1.0, "real_startup_s": 6.0, "real_train_s": 24.0, "real_ending_s": 1.0}
    assert _phases(_job(100.0, None, None, 131.0, []))["real_train_s"] is None


def test_a_replay_of_a_folder_without_a_good_record_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read fidelity run"):
        replay_fidelity(tmp_path)
    (tmp_path / "run.json").write_text('{"trace": [{"name": 1}]}')
    (tmp_path / "elastic.toml").write_text("[daemon]\n")
    with pytest.raises(ConfigError, match="not a run bench fidelity recorded"):
        replay_fidelity(tmp_path)
