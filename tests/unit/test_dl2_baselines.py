"""Unit tests of DL2's other baselines: ``drf`` (progressive filling by dominant share) and ``tetris``
(packing and shortest remaining time, each pick grown to its threshold)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from slurm_elastic import policies
from slurm_elastic.core.dl2_baselines import DrfPlanner, TetrisMemo, TetrisPlanner
from slurm_elastic.core.model import Job, JobId, JobState, NodeState
from slurm_elastic.errors import ConfigError
from slurm_elastic.testing import checked_plan, gpu_counts, make_job, make_nodes, make_snapshot, unplaced_reasons
from slurm_elastic_predictor.throughput import ThroughputModel

# "linear" scales perfectly at a fixed batch: 1,000 samples/s per GPU whatever the batch, no communication.
LINEAR = ThroughputModel("linear", (1.0, 256.0), (0.001, 0.256), 256, (0.0, 0.0), (0.0, 0.0, 0.0), 4)
PROFILES = {"linear": LINEAR}


def _job(job_id: str, submit: float, model: str = "cifar10", **kw: Any) -> Job:
    return make_job(job_id, model, submit_time=submit, **kw)


# -- drf -----------------------------------------------------------------------------------------


def test_drf_splits_the_gpus_max_min_fairly_the_earlier_job_first_on_ties() -> None:
    jobs = [_job("a", 0, max_gpus=16), _job("b", 1, max_gpus=16), _job("c", 2, max_gpus=16)]
    plan, _ = checked_plan(DrfPlanner(), make_snapshot(make_nodes(2), jobs))
    assert gpu_counts(plan) == {"a": 3, "b": 3, "c": 2}


def test_drf_gives_what_a_capped_job_cannot_take_to_the_others() -> None:
    jobs = [_job("small", 0, max_gpus=1), _job("b", 1, max_gpus=16), _job("c", 2, max_gpus=16)]
    plan, _ = checked_plan(DrfPlanner(), make_snapshot(make_nodes(3), jobs))
    assert gpu_counts(plan) == {"small": 1, "b": 6, "c": 5}


def test_drf_offers_every_waiting_job_its_minimum_before_a_running_job_grows() -> None:
    """A waiting job's share is 0, so it comes first; a running job keeps its minimum (no preemption)."""
    running = _job("run", 0, max_gpus=8, placement=[("n000", g) for g in range(4)])
    late = [_job("w1", 5, min_gpus=2), _job("w2", 6, min_gpus=2)]
    plan, _ = checked_plan(DrfPlanner(), make_snapshot(make_nodes(1), [running, *late]))
    assert gpu_counts(plan) == {"run": 2, "w1": 2}  # w2 does not fit in the one GPU left, so the running job takes it
    assert unplaced_reasons(plan)["w2"] == ("waiting: needs 2 GPUs at least, 1 are left after the drf shares "
                                            "of earlier and smaller jobs")


def test_drf_plans_a_running_job_only_at_sizes_its_blocks_free() -> None:
    """A 4-GPU job whose GPUs go only as one whole 2-GPU block can be planned at 2 or 4, never at 3 or 1:
    on 5 GPUs it keeps 2, and the GPU its next size (4) does not fit in goes to the other job."""
    job = replace(_job("blocks", 0, max_gpus=8, placement=[("n000", 0), ("n000", 1), ("n001", 0), ("n001", 1)]),
                  release_blocks=(("n001", 2),))
    assert job.unreachable_sizes == (1, 3)
    other = _job("new", 1, max_gpus=8)
    n0, n1 = make_nodes(2)
    nodes = (replace(n0, gpus=(0, 1, 2), free_gpus=(0, 1, 2)), replace(n1, gpus=(0, 1), free_gpus=(0, 1)))
    plan, _ = checked_plan(DrfPlanner(), make_snapshot(nodes, [job, other]))
    assert gpu_counts(plan) == {"blocks": 2, "new": 3}


def test_drf_reserves_the_running_jobs_on_schedulable_gpus_first_when_gpus_are_lost() -> None:
    a = _job("a", 0, min_gpus=4, max_gpus=4, placement=[("n000", g) for g in range(4)])
    b = _job("b", 1, min_gpus=4, max_gpus=4, placement=[("n001", g) for g in range(4)])
    nodes = make_nodes(2)
    nodes = (replace(nodes[0], state=NodeState.DOWN), nodes[1])
    plan, _ = checked_plan(DrfPlanner(), make_snapshot(nodes, [a, b]))
    assert gpu_counts(plan) == {"b": 4}
    assert unplaced_reasons(plan)["a"].startswith("preempted by drf: keeping 4 GPUs needs more than the 0 left")


def test_drf_keeps_the_users_batch() -> None:
    job = _job("a", 0, max_gpus=8, requested_gpus=2)
    plan, _ = checked_plan(DrfPlanner(), make_snapshot(make_nodes(2), [job]))
    (jp,) = plan.jobs
    assert jp.num_gpus == 8 and jp.global_batch == job.base_batch


# -- tetris --------------------------------------------------------------------------------------


def test_tetris_grows_the_shortest_job_to_its_threshold_first() -> None:
    """The same shape, one nearly done: it is picked first and gets its whole request; the other gets
    what is left, not its request."""
    long_ = _job("long", 0, requested_gpus=6, max_gpus=8, target_epochs=100, epochs_done=1)
    short = _job("short", 1, requested_gpus=6, max_gpus=8, target_epochs=3, epochs_done=1)
    plan, memo = checked_plan(TetrisPlanner(), make_snapshot(make_nodes(2), [long_, short]))
    assert gpu_counts(plan) == {"short": 6, "long": 2}
    assert isinstance(memo, TetrisMemo) and memo.grids


def test_tetris_leaves_gpus_idle_above_every_threshold() -> None:
    jobs = [_job("a", 0, requested_gpus=2, max_gpus=8), _job("b", 1, requested_gpus=1, max_gpus=8)]
    plan, _ = checked_plan(TetrisPlanner(), make_snapshot(make_nodes(2), jobs))
    assert gpu_counts(plan) == {"a": 2, "b": 1}


def test_tetris_packs_the_larger_task_first_when_remaining_times_tie() -> None:
    """Alignment is a task's demand times the free GPUs: with equal remaining times the 4-GPU job is
    picked before the earlier 1-GPU one, and takes the whole node."""
    wide = _job("wide", 1, "linear", min_gpus=4, requested_gpus=4, max_gpus=4, target_epochs=8)
    narrow = _job("narrow", 0, "linear", requested_gpus=1, max_gpus=1, target_epochs=2)
    snap = make_snapshot(make_nodes(1), [narrow, wide], profiles=PROFILES)
    plan, _ = checked_plan(TetrisPlanner(), snap)
    assert gpu_counts(plan) == {"wide": 4}  # 8 epochs on 4 GPUs take as long as 2 epochs on 1
    assert unplaced_reasons(plan)["narrow"] == ("waiting: 0 GPUs are left after tetris packed the jobs it "
                                                "scored higher (it needs 1)")
    longer = replace(wide, target_epochs=40.0)  # five times longer: the remaining-time term turns the score
    plan, _ = checked_plan(TetrisPlanner(), make_snapshot(make_nodes(1), [narrow, longer], profiles=PROFILES))
    assert gpu_counts(plan) == {"narrow": 1}


def test_tetris_keeps_running_jobs_at_least_at_their_minimum() -> None:
    running = _job("run", 0, min_gpus=2, requested_gpus=2, max_gpus=8, placement=[("n000", g) for g in range(4)],
                   target_epochs=1000)
    new = _job("new", 5, requested_gpus=4, max_gpus=8, target_epochs=2)
    plan, _ = checked_plan(TetrisPlanner(), make_snapshot(make_nodes(1), [running, new]))
    assert gpu_counts(plan) == {"run": 2, "new": 2}


def test_tetris_checks_its_parameter() -> None:
    assert policies.create("tetris", default_epochs_to_go=5).default_epochs_to_go == 5.0  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"tetris.default_epochs_to_go = 0"):
        policies.create("tetris", default_epochs_to_go=0)
    with pytest.raises(ConfigError, match="drf"):
        policies.create("drf", interval=5)


@pytest.mark.parametrize("policy", ["drf", "tetris"])
def test_every_waiting_job_left_out_gets_a_reason(policy: str) -> None:
    jobs = [_job(str(i), float(i), min_gpus=2, requested_gpus=2, max_gpus=4) for i in range(6)]
    jobs.append(_job("huge", 9, min_gpus=64, requested_gpus=64, max_gpus=64))
    plan, _ = checked_plan(policies.create(policy), make_snapshot(make_nodes(1), jobs))
    placed = {str(p.job_id) for p in plan.jobs}
    reasons = unplaced_reasons(plan)
    assert placed | set(reasons) == {str(j.job_id) for j in jobs}
    assert reasons["huge"] == "cannot run: needs 64 GPUs at least, only 4 are schedulable now"
    assert all(r for r in reasons.values())


@pytest.mark.parametrize("policy", ["drf", "tetris"])
def test_plans_are_valid_on_random_clusters(policy: str) -> None:
    rng = np.random.default_rng(7)
    planner = policies.create(policy)
    memo: Any = None
    for t in range(20):
        jobs = []
        free = {f"n{i:03d}": list(range(4)) for i in range(4)}
        for i in range(int(rng.integers(1, 12))):
            k = int(rng.integers(0, 4))
            node = f"n{int(rng.integers(0, 4)):03d}"
            gpus = [free[node].pop() for _ in range(min(k, len(free[node])))]
            jobs.append(_job(f"{t}-{i}", float(i), max_gpus=int(rng.integers(1, 9)),
                             requested_gpus=1, placement=[(node, g) for g in gpus],
                             state=JobState.PENDING))
        snap = make_snapshot(make_nodes(4), jobs, now=float(t))
        plan, memo = checked_plan(planner, snap, memo)
        assert {p.job_id for p in plan.jobs} | {u.job_id for u in plan.unplaced} == {JobId(j.job_id) for j in jobs}
