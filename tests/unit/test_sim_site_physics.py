"""The simulator on a site's own machine (issue 15, part 5): a site profile as its physics, jobs of a
set number of epochs, and the physics of a real cluster the profiles leave out (a job's start-up
and ending, Slurm's equal GPUs per node at a start, workers sharing the host's CPU cores), each
checked against a JCT worked out by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_elastic import policies
from slurm_elastic.core.model import ElasticMode
from slurm_elastic.errors import ConfigError, ProfileError
from slurm_elastic.sim.costs import COMM_CPU_SHARE, ResizeCost
from slurm_elastic.sim.engine import simulate
from slurm_elastic.sim.truth import truth
from slurm_elastic.sim.workload import SimJobSpec
from slurm_elastic.site_profile import write_profile

STEP_1 = 0.010  # s per step of 32 samples on one GPU of the site machine


def _site(tmp_path: Path) -> Path:
    rows = [{"placement": p, "local_bsz": b, "step_time": STEP_1 * b / 32 + extra}
            for p, extra in (("1", 0.0), ("2", 0.002), ("11", 0.006), ("22", 0.008)) for b in (32, 128)]
    write_profile(tmp_path / "cnn", rows, [], {"gpus_per_node": 2})
    return tmp_path


def _job(site: Path, job_id: str, gpus: int, *, epochs: float = 2.0, size: int = 32_000, at: float = 0.0) -> SimJobSpec:
    return SimJobSpec(job_id=job_id, submit_time=at, model="cnn", requested_gpus=gpus, min_gpus=gpus, max_gpus=gpus,
                      base_batch=32 * gpus, min_batch=32 * gpus, max_batch=32 * gpus, epoch_size=size,
                      mode=ElasticMode.EXO, max_local_batch=32, epochs=epochs, profiles=site)


def _jcts(jobs: list[SimJobSpec], **kw: object) -> dict[str, float]:
    res = simulate(jobs, policies.create("fifo"), gpus=4, gpus_per_node=2, round_gap=0.0, **kw)  # type: ignore[arg-type]
    return {r["job_id"]: r["jct"] for r in res["jobs"]}


def test_a_site_profile_is_the_machine_as_measured_and_its_jobs_train_their_set_epochs(tmp_path: Path) -> None:
    site = _site(tmp_path)
    speed = truth("cnn", root=site).speed
    assert speed.step_time(32, (1,)) == pytest.approx(STEP_1)  # never V100-scaled
    assert speed.step_time(32, (1, 1)) == pytest.approx(STEP_1 + 0.006)
    # 2 epochs of 32,000 samples at 32 per 0.010 s step = 20 s, whatever the batch would need to converge
    assert _jcts([_job(site, "a", 1)])["a"] == pytest.approx(20.0)


def test_a_site_profile_has_no_convergence_and_says_a_job_needs_its_epochs(tmp_path: Path) -> None:
    site = _site(tmp_path)
    with pytest.raises(ProfileError, match="set number of epochs"):
        _job(site, "a", 1, epochs=None).epochs_needed(32)  # type: ignore[arg-type]


def test_start_up_and_ending_time_is_paid_at_every_start(tmp_path: Path) -> None:
    site = _site(tmp_path)
    assert _jcts([_job(site, "a", 1)], overhead_s=7.5)["a"] == pytest.approx(27.5)


def test_workers_sharing_the_host_cores_slow_every_job_until_one_ends(tmp_path: Path) -> None:
    site = _site(tmp_path)
    jobs = [_job(site, "a", 1), _job(site, "b", 1, epochs=1.0)]
    # alone on 1 core each (2 cores, 2 workers): no slowdown
    assert _jcts(jobs, host_cores=2) == pytest.approx({"a": 20.0, "b": 10.0})
    # one core for both: half speed until b ends at 20 s (10 s of its work), then a runs alone: its
    # other 10 s of work done by 30 s
    assert _jcts(jobs, host_cores=1) == pytest.approx({"a": 30.0, "b": 20.0})


def test_a_job_whose_own_workers_outnumber_the_cores_was_profiled_so_and_only_others_slow_it(tmp_path: Path) -> None:
    site = _site(tmp_path)
    two = _job(site, "a", 2)  # 2 workers on 1 core: the profile measured that, so alone it runs at its profile
    alone = _jcts([two], host_cores=1)["a"]
    assert alone == pytest.approx(2 * 32_000 / (64 / (STEP_1 + 0.002)))
    with_other = _jcts([two, _job(site, "b", 1, size=320_000)], host_cores=1)["a"]
    assert with_other == pytest.approx(alone * 1.5)  # 3 workers on the core: 1/3 each instead of 1/2


def test_measured_resize_pauses_and_bad_physics(tmp_path: Path) -> None:
    assert ResizeCost.parse(ResizeCost(1.5, 0.5, 30.0, "measured")).grow == 1.5
    site = _site(tmp_path)
    with pytest.raises(ConfigError, match="job overhead"):
        _jcts([_job(site, "a", 1)], overhead_s=-1.0)
    with pytest.raises(ConfigError, match="host cores 0"):
        _jcts([_job(site, "a", 1)], host_cores=0)


def test_an_unequal_placement_starts_at_the_equal_shape_inside_it_as_slurm_does(tmp_path: Path) -> None:
    site = _site(tmp_path)
    three = SimJobSpec(job_id="a", submit_time=0.0, model="cnn", requested_gpus=3, min_gpus=3, max_gpus=3,
                       base_batch=96, min_batch=96, max_batch=96, epoch_size=32_000, mode=ElasticMode.EXO,
                       max_local_batch=32, epochs=2.0, profiles=site)
    planned = simulate([three], policies.create("fifo"), gpus=4, gpus_per_node=2, round_gap=0.0)["jobs"][0]
    started = simulate([three], policies.create("fifo"), gpus=4, gpus_per_node=2, round_gap=0.0,
                       equal_start=True)["jobs"][0]
    # fifo plans 2 + 1 GPUs; Slurm starts it on 1 + 1 (the exo batch follows: 64 per step), and fifo
    # never resizes it: the 2 GPUs of placement 11 at 64 samples per step
    assert planned["jct"] == pytest.approx(2 * 32_000 / (96 / speed_of(site, 32, (2, 1))))
    assert started["jct"] == pytest.approx(2 * 32_000 / (64 / (STEP_1 + 0.006)))


def speed_of(site: Path, local: int, shape: tuple[int, ...]) -> float:
    return truth("cnn", root=site).speed.step_time(local, shape)


def test_a_worker_waiting_on_its_all_reduce_leaves_its_core_to_others(tmp_path: Path) -> None:
    """Two 2-worker jobs on 2 cores: each worker computes for step(1)/step(2) of its step and spends
    the rest in its all-reduce, partly waiting, so they ask 4 x d of the 2 cores, not 4 (a model of
    busy workers would halve both)."""
    site = _site(tmp_path)
    computing = STEP_1 / (STEP_1 + 0.002)  # placement 2 (fifo packs each job on one node)
    d = computing + COMM_CPU_SHARE * (1 - computing)  # the all-reduce is partly on the CPU
    shared = 2.0 / (4 * d)
    free = _jcts([_job(site, "a", 2), _job(site, "b", 2)])
    slowed = _jcts([_job(site, "a", 2), _job(site, "b", 2)], host_cores=2)
    assert slowed["a"] == pytest.approx(free["a"] * (d / shared + 1 - d))
    assert slowed["a"] < free["a"] * 2  # not halved


def test_the_nearest_measured_batch_is_remembered_within_a_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    import slurm_elastic.sim.truth as truth_module
    from slurm_elastic.sim.truth import Convergence

    conv = Convergence("cifar10")
    plain = [conv.relative_metric(b, 3.0) for b in (1.0, 100.0, 200.0, 100.0, 5000.0)]
    monkeypatch.setattr(truth_module, "NEAREST_CACHE", 2)
    bounded = Convergence("cifar10")
    assert [bounded.relative_metric(b, 3.0) for b in (1.0, 100.0, 200.0, 100.0, 5000.0)] == plain
    assert len(bounded._nearest) <= 2
