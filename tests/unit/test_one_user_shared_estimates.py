"""One user cannot move a site-wide estimate for everyone (issue 37, item 5).

The finding: a job counted as finished on its own signed end report, and every finished job
weighed the same in the daemon's progress model, so 100 jobs of one user, each "ending" after 400
epochs, moved another user's job (epoch 5 of 20) far from what the honest history gives. min-jct's
mean time alone (the estimate of a new job of a kind never seen) was a plain mean over jobs too.

Now a history counts only once Slurm shows its job ``COMPLETED``, each user's histories weigh at
most one job's worth of points in a fit, and min-jct's mean is a mean over users. Each test marked
"failed before" failed on the code before the change.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from slurm_elastic.core.minjct import MinJctPlanner, WorkHistory, work_class
from slurm_elastic.core.model import JobId, JobState
from slurm_elastic.slurm.records import JobRecord
from slurm_elastic.store import ProgressRow, Store
from slurm_elastic.testing import make_job, make_nodes, make_snapshot
from slurm_elastic_predictor.progress import BetaProgressModel, ProgressPoint

from .test_hostile_job_input import Source, nodes, record, view

EPOCH = 1000
HONEST = {"alice": (1, 2), "bob": (3, 4), "carol": (5, 6), "dave": (7, 8)}
"""Four honest users, two jobs each, every job trained 20 epochs."""
HOSTILE = tuple(range(100, 200))
"""Mallory's 100 jobs, each "ending" after 400 epochs."""


def _finished(store: Store, job: int, epochs: int, t0: float = 0.0) -> None:
    """A launcher job's signed reports: a report every half epoch (loss falling, metric rising), then its end."""
    rows = [ProgressRow(t0 + i, "progress", i * EPOCH // 2, 2, 64, 100.0, loss=2.0 / (1 + i), epoch_size=EPOCH,
                        metric=min(0.95, 0.1 * (i // 2)) if i >= 2 else None) for i in range(2 * epochs)]
    rows.append(ProgressRow(t0 + 2 * epochs, "end", epochs * EPOCH, 2, 64, epoch_size=EPOCH))
    store.add_reports(str(job), rows, 0)


def _listed(job: int, user: str, states: tuple[str, ...] = ("COMPLETED",)) -> JobRecord:
    """Slurm's record of a launcher job (by default one that completed; its channel is gone)."""
    state = JobState.RUNNING if states == ("RUNNING",) else JobState.FINISHED
    return replace(record(str(job), {"n000": 1} if state is JobState.RUNNING else {}, state=state,
                          comment=f"slurm-elastic-orders=/nonexistent/job-{job}.orders"),
                   user=user, slurm_state=states)


def _remaining_epochs(model: BetaProgressModel | None, epoch: int = 5) -> float:
    """Expected epochs to go of an honest job at ``epoch`` (of 20), features as its reports give them."""
    assert model is not None
    i = 2 * epoch
    at = ProgressPoint(float(EPOCH), 2.0, float(epoch * EPOCH), 1.0 - (2.0 / (1 + i)) / 2.0, min(0.95, 0.1 * (i // 2)))
    return float(model.expected_remaining(at.vector())) / EPOCH


def _learned(tmp_path: Path, hostile: bool) -> BetaProgressModel | None:
    v = view(tmp_path, Source(nodes(1), []))
    assert v.store is not None
    listed = []
    for user, jobs in HONEST.items():
        for j in jobs:
            _finished(v.store, j, 20, t0=100.0 * j)
            listed.append(_listed(j, user))
    if hostile:
        for j in HOSTILE:
            _finished(v.store, j, 400, t0=1000.0 * j)
            listed.append(_listed(j, "mallory"))
    v.source = Source(nodes(1), listed)
    v.observe()
    assert v.learner is not None
    return v.learner.model


def test_100_jobs_of_one_user_do_not_move_another_users_progress_estimate(tmp_path: Path) -> None:
    """Failed before: 19.4 expected epochs to go from the honest history, 1.25 with mallory's jobs."""
    honest = _remaining_epochs(_learned(tmp_path / "honest", hostile=False))
    assert 15.0 < honest < 30.0  # 15 to go, as the honest history says (the model is not exact)
    attacked = _remaining_epochs(_learned(tmp_path / "attacked", hostile=True))
    assert honest / 1.25 < attacked < honest * 1.25, (honest, attacked)


def test_a_users_histories_weigh_one_job_at_most(tmp_path: Path) -> None:
    from slurm_elastic.observe.history import POINTS_PER_USER

    v = view(tmp_path, Source(nodes(1), []))
    assert v.store is not None
    for j in HOSTILE[:3]:
        _finished(v.store, j, 400, t0=1000.0 * j)
    _finished(v.store, 1, 20)
    v.source = Source(nodes(1), [*(_listed(j, "mallory") for j in HOSTILE[:3]), _listed(1, "alice")])
    v.observe()
    assert v.learner is not None and v.learner.model is not None
    # mallory's three 400-epoch jobs (800 rows each) give POINTS_PER_USER points in all, alice's one job as many
    assert v.learner.model.n_train <= 2 * POINTS_PER_USER and v.learner.summary()["jobs"] == 4


def test_the_ledger_keeps_each_users_latest_jobs_of_the_latest_users() -> None:
    from slurm_elastic.observe.history import HISTORY_USERS, USER_HISTORIES, Ledger

    ledger = Ledger()
    for j in range(3 * USER_HISTORIES):
        ledger.add(f"m{j}", "mallory")
    assert ledger.by_user() == {"mallory": [f"m{j}" for j in range(2 * USER_HISTORIES, 3 * USER_HISTORIES)]}
    for u in range(HISTORY_USERS + 20):  # mallory's latest job is now the oldest: mallory goes first
        ledger.add(f"j{u}", f"user{u}")
    ledger.add("last", "user25")
    users = ledger.by_user()
    assert len(users) == HISTORY_USERS and "mallory" not in users and "user19" not in users and "user20" in users
    assert list(users)[-1] == "user25" and users["user25"] == ["j25", "last"]
    assert ledger.completed == 3 * USER_HISTORIES + HISTORY_USERS + 21  # every job ever noted
    assert Ledger.from_json(ledger.to_json()) == ledger


def test_a_history_counts_only_once_slurm_shows_its_job_completed(tmp_path: Path) -> None:
    """Failed before: the three jobs' own end reports made them history while Slurm still ran one,
    had cancelled one and had never listed the third."""
    v = view(tmp_path, Source(nodes(1), []))
    store = v.store
    assert store is not None
    for j in (1, 2, 3):
        _finished(store, j, 20, t0=100.0 * j)
    v.source = Source(nodes(1), [_listed(1, "alice", ("RUNNING",)), _listed(2, "bob", ("CANCELLED",)),
                                 _listed(3, "carol", ("COMPLETING",))])
    v.observe()
    assert v.learner is not None and v.learner.model is None and v.learner.summary()["source"] == "prior"
    v.source = Source(nodes(1), [_listed(1, "alice"), _listed(2, "bob", ("CANCELLED",)), _listed(3, "carol")])
    v.observe()
    assert v.learner.model is None  # two completed jobs: fewer than a fit needs
    _finished(store, 4, 20, t0=400.0)
    v.source = Source(nodes(1), [_listed(4, "dave")])  # 1 to 3 left the queue: those Slurm showed completed count
    v.observe()
    model = v.learner.model
    assert model is not None and v.learner.summary()["jobs"] == 3
    # a restarted daemon knows which jobs Slurm showed completed (they have left its queue)
    again = view(tmp_path, Source(nodes(1), []))
    again.observe()
    assert again.learner is not None and again.learner.model is not None
    assert again.learner.model.weights == model.weights


def test_a_quarantined_job_is_never_history_even_when_slurm_shows_it_completed(tmp_path: Path) -> None:
    v = view(tmp_path, Source(nodes(1), []))
    assert v.store is not None
    for j in (1, 2, 3):
        _finished(v.store, j, 20, t0=100.0 * j)
    v.store.quarantine("3", "forged reports", 1.0)
    v.source = Source(nodes(1), [_listed(1, "alice"), _listed(2, "bob"), _listed(3, "carol")])
    v.observe()
    assert v.learner is not None and v.learner.model is None


# -- min-jct's WorkHistory ----------------------------------------------------------------------------


def _ended(history: WorkHistory, job_id: str, user: str, seconds_alone: float, t: float,
           kind: str = "cifar10") -> WorkHistory:
    """``history`` after a job of ``user`` ran and ended, having needed ``seconds_alone`` at its smallest size."""
    job = replace(make_job(job_id, kind, max_gpus=1, placement=[("n000", 0)]), user=user,
                  observed_throughput=100.0)
    seen = history.updated(make_snapshot(make_nodes(1), [job], now=t), {job.job_id: 100.0})
    return seen.updated(make_snapshot(make_nodes(1), [], now=t + seconds_alone), {})


def _new_job_estimate(history: WorkHistory) -> float:
    """min-jct's expected remaining samples of a new job of a kind never seen (at 100 samples/s at its smallest)."""
    job = replace(make_job("new", "imagenet", max_gpus=1, submit_time=1e6), user="erin")
    snap = make_snapshot(make_nodes(1), [job], now=2e6)
    return MinJctPlanner()._remaining(snap, [job], history, {job.job_id: 100.0})[0] / 100.0


def test_100_short_jobs_of_one_user_do_not_move_min_jcts_mean_for_everyone() -> None:
    """Failed before: 57.5 s, where the honest users' jobs needed 1000 s each."""
    history, t = WorkHistory(), 0.0
    for user in ("alice", "bob", "carol"):
        for i in range(2):
            history, t = _ended(history, f"{user}{i}", user, 1000.0, t), t + 2000.0
    honest = _new_job_estimate(history)
    assert honest == pytest.approx(1000.0)
    for i in range(100):  # mallory's jobs, cancelled a second after they started
        history, t = _ended(history, f"m{i}", "mallory", 1.0, t), t + 2.0
    assert _new_job_estimate(history) == pytest.approx((3 * 1000.0 + 1.0) / 4)  # one user, one user's weight


def test_with_one_job_per_user_or_one_user_the_mean_is_the_plain_mean_to_the_bit() -> None:
    """The simulations' workloads (one user for every job, or a job per user) are planned as before."""
    for users in (["user"] * 7, [f"u{i}" for i in range(7)]):
        history, t, plain = WorkHistory(), 0.0, (0, 0.0)
        for i, user in enumerate(users):
            seconds = 10.0 * (i + 1) / 3.0
            history = _ended(history, str(i), user, seconds, t)
            total = 0.0 + 100.0 * max(0.0, (t + seconds) - t)  # its samples: its rate over the time since seen
            n, mean = plain
            plain = (n + 1, mean + (total / 100.0 - mean) / (n + 1))
            t += 100.0
        assert history.alone == plain  # bit for bit


def test_one_user_flooding_kinds_forgets_only_their_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """Failed before: mallory's new kinds pushed alice's out of the bounded table."""
    import slurm_elastic.core.minjct as minjct

    monkeypatch.setattr(minjct, "MAX_KINDS", 4)
    history = _ended(WorkHistory(), "a", "alice", 50.0, 0.0)
    alice = work_class(replace(make_job("a", max_gpus=1), user="alice"))
    for i in range(10):  # each of mallory's jobs a kind of its own (another model or epoch size)
        job = replace(make_job(f"m{i}", max_gpus=1, placement=[("n000", 0)]), user="mallory", epoch_size=1000 + i,
                      observed_throughput=100.0)
        history = history.updated(make_snapshot(make_nodes(1), [job], now=100.0 + 2 * i), {job.job_id: 100.0})
        history = history.updated(make_snapshot(make_nodes(1), [], now=101.0 + 2 * i), {})
    assert alice in history.work and len(history.work) == 4
    assert JobId("a") not in history.seen
