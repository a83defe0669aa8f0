"""Unit tests of the core data model: validation messages and derived values."""

from __future__ import annotations

from dataclasses import fields, replace

import pytest

from slurm_elastic.core.model import (
    CONFIGURATION_FIELDS,
    ElasticMode,
    JobState,
    Node,
    NodeName,
    NodeState,
    Placement,
    ProgressReport,
)
from slurm_elastic.errors import SnapshotError
from slurm_elastic.testing import make_job, make_nodes, make_snapshot


def test_placement_groups_and_sorts() -> None:
    p = Placement.of([("b", 1), ("a", 3), ("b", 0)])
    assert p.slots == ((NodeName("a"), (3,)), (NodeName("b"), (0, 1)))
    assert (p.num_gpus, p.num_nodes, p.per_node_counts()) == (3, 2, (2, 1))


def test_job_rejects_bad_ranges_with_value_and_rule() -> None:
    with pytest.raises(SnapshotError, match=r"GPU range 4:2 must satisfy 1 <= min <= max"):
        make_job(1, min_gpus=4, max_gpus=2)


@pytest.mark.parametrize(("change", "message"), [
    ({"min_batch": 0}, "batch range 0:"),
    ({"base_batch": 10**9}, "base batch 1000000000 must lie in"),
    ({"max_local_batch": 0}, "max per-GPU batch 0 must be >= 1"),
    ({"requested_gpus": 0}, "requested GPUs 0 must be >= 1"),
    ({"epoch_size": 0}, "epoch size 0 must be >= 1 sample"),
    ({"samples_processed": -1}, "samples processed -1 must be >= 0"),
    ({"preemptions": -1}, "preemptions -1 must be >= 0"),
    ({"base_lr": 0.0}, "base learning rate 0.0 must be > 0"),
    ({"local_batch": 0}, "local batch 0 must be > 0 exactly when running"),
    ({"release_blocks": ((NodeName("n000"), 0),)}, "release blocks"),
    ({"release_blocks": ((NodeName("n009"), 1),)}, "must be GPUs it holds"),
    ({"release_blocks": ((NodeName("n000"), 1), (NodeName("n001"), 1))}, "never all of them"),
], ids=lambda v: str(v) if isinstance(v, str) else next(iter(v)))
def test_every_job_rule_names_its_value(change: dict[str, object], message: str) -> None:
    ok = make_job(1, placement=[("n000", 0), ("n001", 0)])
    assert replace(ok, release_blocks=((NodeName("n000"), 1),)).release_blocks  # a block it holds, not all: fine
    with pytest.raises(SnapshotError, match=f"job 1: .*{message}"):
        replace(ok, **change)  # type: ignore[arg-type]


def test_a_progressed_job_is_the_job_with_its_progress_changed() -> None:
    """``Job.progressed`` copies every field but the progress (a generated copier, not ``replace``)."""
    job = replace(make_job(7, placement=[("n000", 0), ("n000", 1)], run_time=50.0, target_epochs=3.0),
                  release_blocks=((NodeName("n000"), 1),), preemptions=2, model_points=5, can_grow=False)
    report = ProgressReport(2.0, 1.5, 0.4)
    later = job.progressed(job.samples_processed + 100, 80, report)
    assert later == replace(job, samples_processed=job.samples_processed + 100, run_time=80.0, progress=report)
    assert all(getattr(later, f.name) is getattr(job, f.name) for f in fields(job)
               if f.name not in ("samples_processed", "run_time", "progress"))
    assert job.ran_for(90.0) == replace(job, run_time=90.0) and job.run_time == 50.0
    with pytest.raises(SnapshotError, match="went back from"):
        job.progressed(job.samples_processed - 1, 80.0, report)


def test_a_reconfigured_job_is_the_job_rebuilt_and_its_rules_still_hold() -> None:
    """``Job.reconfigured`` is ``replace`` for what changes as a job runs: the same job, and a broken
    configuration rule is refused as ``replace`` refuses it; other fields cannot be changed by it."""
    waiting = make_job(3, run_time=5.0)
    running = make_job(3, placement=[("n000", 0), ("n001", 0)])
    changes = {name: getattr(running, name) for name in CONFIGURATION_FIELDS}
    assert waiting.reconfigured(**changes) == replace(waiting, **changes) == running
    for bad in ({"placement": Placement()}, {"local_batch": 0}, {"samples_processed": -1}, {"preemptions": -1},
                {"release_blocks": ((NodeName("n000"), 1), (NodeName("n001"), 1))}):
        with pytest.raises(SnapshotError) as refused:
            running.reconfigured(**bad)
        with pytest.raises(SnapshotError) as rebuilt:
            replace(running, **bad)  # type: ignore[arg-type]
        assert str(refused.value) == str(rebuilt.value)
    with pytest.raises(TypeError, match="not configuration fields"):
        running.reconfigured(max_gpus=1)


def test_job_state_must_match_placement() -> None:
    with pytest.raises(SnapshotError, match="does not match placement"):
        make_job(1, state=JobState.RUNNING)


def test_exo_global_batch_follows_gpus_endo_stays() -> None:
    exo = make_job(1, placement=[("n000", 0), ("n000", 1)])
    endo = make_job(2, mode=ElasticMode.ENDO, requested_gpus=4, placement=[("n000", 2)])
    assert exo.global_batch == 2 * 128
    assert endo.global_batch == 4 * 128


def test_node_rejects_free_gpu_it_does_not_have() -> None:
    with pytest.raises(SnapshotError, match=r"free GPUs \[7\]"):
        Node(NodeName("x"), (0, 1), (7,))


def test_snapshot_rejects_gpu_held_twice() -> None:
    nodes = make_nodes(1)
    a = make_job(1, placement=[("n000", 0)])
    b = make_job(2, placement=[("n000", 0)])
    with pytest.raises(SnapshotError, match="held by two jobs"):
        make_snapshot(nodes, [a, b])


def test_snapshot_names_a_gpu_unknown_or_held_twice_by_one_job() -> None:
    nodes = make_nodes(2)
    fine = make_job(1, placement=[("n000", 0), ("n001", 3)])
    unknown = make_job(2, placement=[("n000", 1), ("n009", 0)])
    with pytest.raises(SnapshotError, match=r"job 2 holds GPUs n009:\(0,\) unknown to the snapshot"):
        make_snapshot(nodes, [fine, unknown])
    twice = Placement(((NodeName("n001"), (2, 2)),))
    job = make_job(3, placement=[("n001", 2)])
    object.__setattr__(job, "placement", twice)
    with pytest.raises(SnapshotError, match="GPU n001:2 is held by two jobs"):
        make_snapshot(nodes, [fine, job])
    assert len(make_snapshot(nodes, [fine, make_job(4, placement=[("n001", 2)])]).jobs) == 2


def test_snapshot_rejects_unknown_profile() -> None:
    job = make_job(1)
    bad = type(job).__new__(type(job))
    for f in fields(job):
        object.__setattr__(bad, f.name, getattr(job, f.name))
    object.__setattr__(bad, "model", "no-such-model")
    with pytest.raises(SnapshotError, match="no throughput profile named 'no-such-model'"):
        make_snapshot(make_nodes(1), [bad])


def test_schedulable_gpus_exclude_rigid_down_and_draining() -> None:
    nodes = list(make_nodes(3))
    nodes[1] = Node(nodes[1].name, nodes[1].gpus, nodes[1].gpus, NodeState.DOWN)
    nodes[2] = Node(nodes[2].name, nodes[2].gpus, nodes[2].gpus, NodeState.DRAINING)
    rigid = make_job(1, elastic=False, min_gpus=1, max_gpus=1, placement=[("n000", 0)])
    elastic_on_draining = make_job(2, placement=[("n002", 1)])
    snap = make_snapshot(nodes, [rigid, elastic_on_draining])
    got = set(snap.schedulable_gpus())
    assert got == {("n000", 1), ("n000", 2), ("n000", 3)}
