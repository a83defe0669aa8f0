"""bench chaos counts a satellite as an orphan only after the daemon's satellite end grace (issue 38, item 7).

The daemon lets a satellite whose job's training ended run up to ``SATELLITE_END_GRACE_S`` to end by
itself; the bench looked 3 s after the jobs left the queue, so one still exiting was an orphan.
"""

from __future__ import annotations

import pytest

from slurm_elastic.act.satellite_upkeep import SATELLITE_END_GRACE_S
from slurm_elastic.bench.live import chaos as chaos_bench

SATELLITE = ("RUNNING", "slurm-elastic-satellite=" + "ab" * 16)


def _clocked(monkeypatch: pytest.MonkeyPatch, queue_until: float) -> list[float]:
    now = [0.0]
    monkeypatch.setattr("slurm_elastic.bench.live.chaos.time.monotonic", lambda: now[0])
    monkeypatch.setattr("slurm_elastic.bench.live.chaos.time.sleep", lambda s: now.__setitem__(0, now[0] + s))
    monkeypatch.setattr(chaos_bench, "_queue", lambda env: {"12": SATELLITE} if now[0] < queue_until else {})
    return now


def test_a_satellite_ending_within_the_grace_is_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    _clocked(monkeypatch, queue_until=6.0)  # the satellite's workers took 6 s more than its job's to exit
    assert chaos_bench._satellites_end({}) == 6.0


def test_a_satellite_outliving_the_grace_is_left_for_the_count(monkeypatch: pytest.MonkeyPatch) -> None:
    _clocked(monkeypatch, queue_until=float("inf"))
    waited = chaos_bench._satellites_end({})
    assert SATELLITE_END_GRACE_S < waited <= chaos_bench.SATELLITE_SETTLE_S + 1.0


def test_other_jobs_are_not_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chaos_bench, "_queue", lambda env: {"3": ("RUNNING", "slurm-elastic-orders=/x.orders")})
    assert chaos_bench._satellites_end({}) == 0.0
