"""Unit tests of the baseline policies: fifo, tiresias, optimus, and the shared progress estimate."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from slurm_elastic import policies
from slurm_elastic.core.baselines import (
    FifoPlanner,
    OptimusMemo,
    OptimusPlanner,
    TiresiasMemo,
    TiresiasPlanner,
)
from slurm_elastic.core.model import JobId, JobState, NodeState
from slurm_elastic.core.remaining import expected_remaining, progress_shapes
from slurm_elastic.errors import ConfigError
from slurm_elastic.testing import checked_plan, gpu_counts, make_job, make_nodes, make_snapshot, unplaced_reasons
from slurm_elastic_predictor.progress import BetaProgressModel
from slurm_elastic_predictor.throughput import ThroughputModel

# Hand-made profiles: "linear" scales perfectly at a fixed batch (t_proc proportional to the
# per-GPU batch, no communication); "flat" pays a second per step for any all-reduce.
LINEAR = ThroughputModel("linear", (1.0, 256.0), (0.001, 0.256), 256, (0.0, 0.0), (0.0, 0.0, 0.0), 4)
FLAT = ThroughputModel("flat", (1.0, 256.0), (0.001, 0.256), 256, (1.0, 1.0), (1.0, 1.0, 1.0), 4)
PROFILES = {"linear": LINEAR, "flat": FLAT}



# -- registry and parameters ---------------------------------------------------------------------


def test_registry_lists_the_baselines_and_passes_parameters() -> None:
    assert {"fifo", "tiresias", "optimus"} <= set(policies.available())
    assert policies.create("fifo", backfill=True).backfill is True  # type: ignore[attr-defined]
    t = policies.create("tiresias", thresholds=[100, 200], promote_after=60)
    assert t.thresholds == (100.0, 200.0) and t.promote_after == 60.0  # type: ignore[attr-defined]
    assert policies.create("optimus", interval=0).interval == 0.0  # type: ignore[attr-defined]


@pytest.mark.parametrize(("policy", "params", "key"), [
    ("fifo", {"backfill": "yes"}, "fifo.backfill"),
    ("tiresias", {"thresholds": (100.0, 100.0)}, "tiresias.thresholds"),
    ("tiresias", {"thresholds": (-1.0,)}, "tiresias.thresholds"),
    ("tiresias", {"thresholds": "3600"}, "tiresias.thresholds"),
    ("tiresias", {"promote_after": -5.0}, "tiresias.promote_after"),
    ("optimus", {"interval": -1.0}, "optimus.interval"),
    ("optimus", {"default_epochs_to_go": 0.5}, "optimus.default_epochs_to_go"),
    ("optimus", {"start_between_rounds": 1}, "optimus.start_between_rounds"),
])
def test_bad_parameters_name_key_value_and_rule(policy: str, params: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.") + " = .*: must"):
        policies.create(policy, **params)


# -- fifo ----------------------------------------------------------------------------------------


def test_fifo_starts_jobs_at_their_requested_size_with_the_users_batch() -> None:
    jobs = [make_job("a", requested_gpus=2, max_gpus=8), make_job("b", requested_gpus=3, max_gpus=8, submit_time=1)]
    snap = make_snapshot(make_nodes(2), jobs)
    plan, memo = checked_plan(FifoPlanner(), snap)
    assert gpu_counts(plan) == {"a": 2, "b": 3}  # 3 of 8 GPUs stay idle: no elasticity
    assert all(p.global_batch == snap.job(p.job_id).base_batch for p in plan.jobs)
    assert memo is None


def test_fifo_head_of_line_blocking_and_backfill() -> None:
    run = make_job("run", requested_gpus=2, placement=[("n000", 0), ("n000", 1)])
    head = make_job("head", requested_gpus=4, submit_time=1)
    small = make_job("small", requested_gpus=1, submit_time=2)
    snap = make_snapshot(make_nodes(1), [run, head, small])
    strict, _ = checked_plan(FifoPlanner(), snap)
    assert gpu_counts(strict) == {"run": 2}
    assert "head of the fifo queue: needs 4 GPUs, 2 are free" in unplaced_reasons(strict)["head"]
    assert "waiting behind job head" in unplaced_reasons(strict)["small"]
    backfill, _ = checked_plan(FifoPlanner(backfill=True), snap)
    assert gpu_counts(backfill) == {"run": 2, "small": 1}
    assert "backfill" in unplaced_reasons(backfill)["head"]


def test_fifo_keeps_running_jobs_where_they_are_and_never_grows_them() -> None:
    run = make_job("run", requested_gpus=1, max_gpus=8, placement=[("n000", 1), ("n000", 2), ("n000", 3)])
    snap = make_snapshot(make_nodes(2), [run])
    plan, _ = checked_plan(FifoPlanner(), snap)
    (jp,) = plan.jobs
    assert jp.placement == run.placement


def test_fifo_skips_a_job_that_can_never_fit_instead_of_blocking() -> None:
    huge = make_job("huge", min_gpus=16, max_gpus=16, requested_gpus=16)
    later = make_job("later", requested_gpus=2, submit_time=1)
    snap = make_snapshot(make_nodes(1), [huge, later])
    plan, _ = checked_plan(FifoPlanner(), snap)
    assert gpu_counts(plan) == {"later": 2}
    assert unplaced_reasons(plan)["huge"].startswith("cannot run: needs 16 GPUs, only 4")


def test_fifo_preempts_a_running_job_that_lost_its_gpus_when_there_is_no_room() -> None:
    nodes = make_nodes(2)
    nodes = (nodes[0], replace(nodes[1], state=NodeState.DOWN))
    a = make_job("a", requested_gpus=4, max_gpus=4, submit_time=1, placement=[("n000", g) for g in range(4)])
    b = make_job("b", requested_gpus=2, max_gpus=4, submit_time=0, placement=[("n001", 0), ("n001", 1)])
    snap = make_snapshot(nodes, [a, b])
    plan, _ = checked_plan(FifoPlanner(), snap)
    assert gpu_counts(plan) == {"a": 4}  # the healthy job is never preempted, though b is older
    assert unplaced_reasons(plan)["b"].startswith("preempted by fifo")


# -- tiresias ------------------------------------------------------------------------------------


def test_tiresias_queues_follow_the_thresholds() -> None:
    t = TiresiasPlanner(thresholds=(100.0, 1000.0))
    assert [t.queue_of(s) for s in (0.0, 99.9, 100.0, 999.0, 1000.0, 1e9)] == [0, 0, 1, 1, 2, 2]


def test_tiresias_preempts_the_job_with_more_attained_service_for_a_new_one() -> None:
    old = make_job("old", requested_gpus=4, max_gpus=8, run_time=2000.0, placement=[("n000", g) for g in range(4)])
    new = make_job("new", requested_gpus=4, max_gpus=8, submit_time=10)
    snap = make_snapshot(make_nodes(1), [old, new], now=2000.0)
    plan, memo = checked_plan(TiresiasPlanner(), snap)
    assert gpu_counts(plan) == {"new": 4}
    assert plan.by_job()[JobId("new")].global_batch == new.base_batch
    assert unplaced_reasons(plan)["old"].startswith("preempted by tiresias: queue 2 (8000 GPU-s attained)")
    assert isinstance(memo, TiresiasMemo) and memo.last_run[JobId("old")] == 2000.0


def test_tiresias_keeps_fixed_sizes_even_with_idle_gpus() -> None:
    run = make_job("run", requested_gpus=2, max_gpus=8, placement=[("n000", 0), ("n000", 1), ("n000", 2)])
    wait = make_job("wait", requested_gpus=3, max_gpus=8, submit_time=1)
    snap = make_snapshot(make_nodes(2), [run, wait])
    plan, _ = checked_plan(TiresiasPlanner(), snap)
    assert gpu_counts(plan) == {"run": 2, "wait": 3}  # run is brought back to its requested size
    assert plan.by_job()[JobId("run")].placement.gpu_set() <= run.placement.gpu_set()


def test_tiresias_skips_a_job_that_does_not_fit_and_runs_a_later_smaller_one() -> None:
    run = make_job("run", requested_gpus=2, placement=[("n000", 0), ("n000", 1)])
    big = make_job("big", requested_gpus=4, submit_time=1)
    small = make_job("small", requested_gpus=2, submit_time=2)
    snap = make_snapshot(make_nodes(1), [run, big, small])
    plan, _ = checked_plan(TiresiasPlanner(), snap)
    assert gpu_counts(plan) == {"run": 2, "small": 2}
    assert "queue 0 (0 GPU-s attained) needs 4 GPUs, 2 are left" in unplaced_reasons(plan)["big"]


def test_tiresias_orders_a_queue_by_submit_time() -> None:
    late = make_job("late", requested_gpus=4, submit_time=5, run_time=10.0, placement=[("n000", g) for g in range(4)])
    early = make_job("early", requested_gpus=4, submit_time=1, state=JobState.PREEMPTED, run_time=10.0)
    snap = make_snapshot(make_nodes(1), [early, late], now=50.0)
    plan, _ = checked_plan(TiresiasPlanner(), snap)
    assert gpu_counts(plan) == {"early": 4}


def test_tiresias_promotes_a_starving_job_and_restarts_its_service_count() -> None:
    nodes = make_nodes(1)
    policy = TiresiasPlanner(promote_after=300.0)
    old_run = make_job("old", requested_gpus=4, run_time=1000.0, placement=[("n000", g) for g in range(4)])
    young = make_job("young", requested_gpus=4, submit_time=900)
    plan, memo = checked_plan(policy, make_snapshot(nodes, [old_run, young], now=1000.0))
    assert gpu_counts(plan) == {"young": 4}  # old has 4000 GPU-s: queue 1

    old_wait = make_job("old", requested_gpus=4, run_time=1000.0, state=JobState.PREEMPTED)
    young_run = replace(make_job("young", requested_gpus=4, submit_time=900, placement=[("n000", g) for g in range(4)]),
                        run_time=100.0)
    # 200 s after it was last seen running: not yet (without the memo it would count from submit).
    plan, memo = checked_plan(policy, make_snapshot(nodes, [old_wait, young_run], now=1200.0), memo)
    assert gpu_counts(plan) == {"young": 4}
    # 400 s: promoted to queue 0, where it is older than young.
    snap = make_snapshot(nodes, [old_wait, young_run], now=1400.0)
    plan, memo = checked_plan(policy, snap, memo)
    assert gpu_counts(plan) == {"old": 4}
    assert "promoted to queue 0" in plan.notes[0]
    assert memo.service_offset[JobId("old")] == 4000.0
    assert gpu_counts(checked_plan(TiresiasPlanner(), snap)[0]) == {"young": 4}  # no promotion when off


# -- optimus -------------------------------------------------------------------------------------


def _linear_job(job_id: str, **kw: Any) -> Any:
    kw.setdefault("model", "linear")
    return make_job(job_id, local_batch=16, requested_gpus=4, max_local_batch=64, **kw)


def test_optimus_gives_extra_gpus_to_the_job_that_scales_best() -> None:
    jobs = [_linear_job("flat", model="flat"), _linear_job("lin", submit_time=1)]
    snap = make_snapshot(make_nodes(1), jobs, profiles=PROFILES)
    plan, memo = checked_plan(OptimusPlanner(), snap)
    assert gpu_counts(plan) == {"flat": 1, "lin": 3}
    assert isinstance(memo, OptimusMemo) and memo.last_plan_time == 0.0
    assert plan.score is not None and plan.score > 0


def test_optimus_gives_more_gpus_to_the_job_with_more_remaining_work() -> None:
    jobs = [_linear_job("short", target_epochs=2.0), _linear_job("long", target_epochs=100.0, submit_time=1)]
    snap = make_snapshot(make_nodes(2), jobs, profiles=PROFILES)
    plan, _ = checked_plan(OptimusPlanner(), snap)
    # Gains Y/(x k (k+1)) with Y 50x larger: long takes every GPU it can use.
    assert gpu_counts(plan) == {"short": 1, "long": 7}


def test_optimus_keeps_the_users_global_batch_with_accumulation() -> None:
    job = make_job("a", model="linear", local_batch=32, requested_gpus=4, max_local_batch=32)
    snap = make_snapshot(make_nodes(1, gpus_per_node=1), [job], profiles=PROFILES)
    plan, _ = checked_plan(OptimusPlanner(), snap)
    (jp,) = plan.jobs
    assert (jp.num_gpus, jp.global_batch, jp.local_batch, jp.accumulation, jp.lr) == (1, 128, 32, 4, job.base_lr)


def test_optimus_holds_the_allocation_between_rounds() -> None:
    run = _linear_job("run", placement=[("n000", 0)])
    wait = _linear_job("wait", submit_time=1)
    snap = make_snapshot(make_nodes(1), [run, wait], now=100.0, profiles=PROFILES)
    memo = OptimusMemo(last_plan_time=0.0)
    plan, new_memo = checked_plan(OptimusPlanner(), snap, memo)
    assert gpu_counts(plan) == {"run": 1}
    assert unplaced_reasons(plan)["wait"] == "waiting for the next optimus round at t=600 s"
    assert new_memo.last_plan_time == 0.0 and "between re-plans" in plan.notes[0]
    eager, _ = checked_plan(OptimusPlanner(start_between_rounds=True), snap, memo)
    assert gpu_counts(eager) == {"run": 1, "wait": 1}
    later = replace(snap, now=600.0)
    plan, new_memo = checked_plan(OptimusPlanner(), later, memo)
    assert sum(gpu_counts(plan).values()) == 4 and set(gpu_counts(plan)) == {"run", "wait"}
    assert new_memo.last_plan_time == 600.0


def test_optimus_preempts_a_running_job_that_cannot_get_its_minimum() -> None:
    first = _linear_job("first", min_gpus=4, max_gpus=4)
    run = _linear_job("run", submit_time=1, placement=[("n000", 0)])
    snap = make_snapshot(make_nodes(1), [first, run], profiles=PROFILES)
    plan, _ = checked_plan(OptimusPlanner(), snap)
    assert gpu_counts(plan) == {"first": 4}
    assert unplaced_reasons(plan)["run"].startswith("preempted by optimus: needs 1 GPUs at least, 0 are left")


# -- the shared remaining-work estimate ----------------------------------------------------------


def test_progress_shapes_prior_and_model() -> None:
    a = make_job("a", epochs_done=3.0, target_epochs=10.0)
    b = make_job("b")
    snap = make_snapshot(make_nodes(1), [a, b])
    alpha, beta, yp = progress_shapes(snap, [a, b], 10.0)
    e = a.epoch_size
    assert alpha.tolist() == [3.0, 1.0] and beta.tolist() == [7.0, 10.0] and yp.tolist() == [3.0 * e, e]
    assert expected_remaining(alpha, beta, yp).tolist() == pytest.approx([3 * e * 7 / 2, 10 * e])
    fitted = replace(snap, progress_model=BetaProgressModel.prior(5.0))
    alpha, beta, _ = progress_shapes(fitted, [a, b], 10.0)
    assert alpha.tolist() == [3.0, 1.0] and beta.tolist() == [5.0, 5.0]
    assert [len(x) for x in progress_shapes(snap, [], 10.0)] == [0, 0, 0]
