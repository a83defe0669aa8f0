"""Unit tests of place(): stability of running workers and best-fit packing."""

from __future__ import annotations

import pytest

from slurm_elastic.core.model import JobId, NodeName
from slurm_elastic.core.placement import place
from slurm_elastic.errors import InvalidPlanError
from slurm_elastic.testing import make_job, make_nodes, make_snapshot


def test_running_job_keeps_its_gpus_when_unchanged_and_grows_in_place() -> None:
    job = make_job("a", max_gpus=8, placement=[("n001", 0), ("n001", 1)])
    snap = make_snapshot(make_nodes(3), [job])
    same = place(snap, {JobId("a"): 2})[JobId("a")]
    assert same == job.placement
    grown = place(snap, {JobId("a"): 4})[JobId("a")]
    assert grown.slots == ((NodeName("n001"), (0, 1, 2, 3)),)


def test_shrink_leaves_the_node_with_fewest_workers_first() -> None:
    job = make_job("a", max_gpus=8, placement=[("n000", 0), ("n000", 1), ("n000", 2), ("n001", 0)])
    snap = make_snapshot(make_nodes(2), [job])
    shrunk = place(snap, {JobId("a"): 3})[JobId("a")]
    assert shrunk.slots == ((NodeName("n000"), (0, 1, 2)),)


def test_new_jobs_packed_best_fit() -> None:
    # n000 has 1 free GPU, n001 has 3, n002 has 4: a 3-GPU job goes to n001, a 1-GPU job to n000.
    a = make_job("a", placement=[("n000", 0), ("n000", 1), ("n000", 2), ("n001", 0)], max_gpus=8)
    b, c = make_job("b"), make_job("c")
    snap = make_snapshot(make_nodes(3), [a, b, c])
    got = place(snap, {JobId("a"): 4, JobId("b"): 3, JobId("c"): 1})
    assert got[JobId("b")].slots == ((NodeName("n001"), (1, 2, 3)),)
    assert got[JobId("c")].slots == ((NodeName("n000"), (3,)),)


def test_large_request_takes_whole_nodes() -> None:
    snap = make_snapshot(make_nodes(4), [make_job("a", max_gpus=16)])
    got = place(snap, {JobId("a"): 8})[JobId("a")]
    assert got.num_nodes == 2 and got.num_gpus == 8


def test_too_many_gpus_is_an_error() -> None:
    snap = make_snapshot(make_nodes(1), [make_job("a", max_gpus=16)])
    with pytest.raises(InvalidPlanError, match="only 4 are schedulable"):
        place(snap, {JobId("a"): 5})
