"""Configuration validation and the daemon loop (with an in-memory observer)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from slurm_elastic.config import Config, DaemonConfig, load, parse
from slurm_elastic.core.model import ClusterSnapshot
from slurm_elastic.daemon import Daemon
from slurm_elastic.errors import ConfigError
from slurm_elastic.observe.observation import Observation
from slurm_elastic.resources import SITE_CONFIGS
from slurm_elastic.store import Store
from slurm_elastic.testing import make_job, make_nodes, make_snapshot


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[daemon]\npolicy = 'nope'\n", "daemon.policy = 'nope': unknown policy 'nope'"),
        ("[daemon]\npoll_interval = -1\n", "daemon.poll_interval = -1: must be >= 0.5 and <= 3600"),
        ("[daemon]\ncolour = 'blue'\n", "daemon.colour = 'blue': unknown key"),
        ("[daemon]\npartitions = 'gpu'\n", "daemon.partitions = 'gpu': must be a list"),
        ("[daemon]\ndry_run = 'yes'\n", "daemon.dry_run = 'yes': must be true or false"),
        ("[daemon]\npoll_interval = 10\nmax_idle = 5\n", "daemon.max_idle = 5.0: must be >= daemon.poll_interval"),
        ("[daemon]\npolicy = 'ones'\n[policy.ones]\ngenerations = -2\n", "ones.generations = -2: must be >= 0"),
        ("[daemon]\npolicy = 'dp'\n[policy.dp]\nspeed = 3\n", "bad parameters ['speed']"),
        ("[extra]\nx = 1\n", "extra = {'x': 1}: unknown table"),
        ("[daemon\n", "not valid TOML"),
    ],
)
def test_bad_configuration_names_key_value_and_rule(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse(text)
    assert message in str(exc.value)


def test_good_configuration_and_shipped_defaults(tmp_path: Path) -> None:
    cfg = parse("[daemon]\npartitions = ['gpu']\npolicy = 'dp'\n[policy.dp]\nmode = 'drop'\n")
    assert cfg.daemon.partitions == ("gpu",) and cfg.policy_params == {"mode": "drop"}
    assert parse("").daemon == DaemonConfig()
    with pytest.raises(ConfigError, match="cannot read configuration"):
        load(tmp_path / "missing.toml")


@dataclass
class FakeObserver:
    snapshot: ClusterSnapshot
    key: int = 0
    fail: int = 0
    nodes_left_out: dict[str, str] = field(default_factory=dict)

    def observe(self) -> ClusterSnapshot:
        if self.fail:
            self.fail -= 1
            raise RuntimeError("squeue timed out")
        return self.snapshot

    def observation(self) -> Observation:
        snap = self.observe()
        return Observation(snap.now, {}, self.key, snap)

    def poll(self) -> Observation:
        return Observation(self.snapshot.now, {}, self.key)

    def quarantined(self) -> dict[str, str]:
        return {}

    def learned(self) -> None:
        return None


def _daemon(tmp_path: Path, obs: FakeObserver, sleeps: list[float], now: list[float]) -> Daemon:
    cfg = Config(DaemonConfig(policy="dp", store=tmp_path / "s.db", poll_interval=1.0, max_idle=100.0))
    return Daemon(cfg, obs, Store(cfg.daemon.store), sleep=sleeps.append,
                  clock=lambda: now[0])


def test_daemon_plans_on_change_backs_off_on_failure_and_records_rounds(tmp_path: Path) -> None:
    snap = make_snapshot(make_nodes(2), [make_job("1", max_gpus=8)])
    obs = FakeObserver(snap, fail=2)
    sleeps: list[float] = []
    now = [0.0]
    d = _daemon(tmp_path, obs, sleeps, now)
    assert d.run(max_rounds=3) == 1  # three tries: two failed, then a round
    assert sleeps[:2] == [1.0, 2.0]  # two failed rounds: exponential backoff
    rounds = d.store.rounds()
    assert len(rounds) == 1 and rounds[0].plan.jobs[0].job_id == "1"
    assert not d.due()  # nothing changed, not idle for long
    obs.key = 1
    assert d.due()
    now[0] = 500.0
    assert d.due()  # idle for longer than max_idle


def test_a_bounded_run_whose_every_round_fails_ends(tmp_path: Path) -> None:
    """``--once`` with slurmctld down, or a test's ``run(max_rounds=...)``, tried forever before."""
    snap = make_snapshot(make_nodes(2), [make_job("1", max_gpus=8)])
    obs = FakeObserver(snap, fail=10**9)
    sleeps: list[float] = []
    d = _daemon(tmp_path, obs, sleeps, [0.0])
    assert d.run(max_rounds=2) == 0
    assert sleeps == [1.0]  # backed off after the first failed try, not after the last
    assert d.store.rounds() == []
    obs.fail = 0
    assert d.run(max_rounds=1) == 1  # the bound counts from this daemon's rounds, not its failed tries


def test_daemon_needs_an_actuator_to_act(tmp_path: Path) -> None:
    cfg = Config(replace(DaemonConfig(), dry_run=False, store=tmp_path / "s.db"))
    with pytest.raises(ConfigError, match=r"daemon\.dry_run = false needs an actuator"):
        Daemon(cfg, FakeObserver(make_snapshot(make_nodes(1), [])), Store(tmp_path / "s.db"))


@pytest.mark.parametrize("path", sorted(SITE_CONFIGS.glob("*/elastic.toml")))
def test_every_shipped_site_config_loads(path: Path) -> None:
    """A site's configuration starts in shadow mode; the dev cluster's acts, so a newcomer trying the
    daemon there sees jobs resized (issue 17: with dry_run on, they saw no resize at all)."""
    cfg = load(path)
    assert cfg.daemon.partitions
    assert cfg.daemon.dry_run == (path.parent.name != "dev"), path


@dataclass
class RecordingActuator:
    """An actuator that carries out every action at once and records them in ``applied``."""

    applied: list[Any]

    def apply(self, seen: Observation, actions: tuple[Any, ...]) -> tuple[Any, ...]:
        from slurm_elastic.core.rounds import ActionOutcome

        self.applied.extend(actions)
        return tuple(ActionOutcome(a, True) for a in actions)

    def tend(self, seen: Observation) -> list[str]:
        return []


def test_acting_daemon_does_not_repeat_an_action_on_its_way(tmp_path: Path) -> None:
    from slurm_elastic.core.actions import Action

    applied: list[Action] = []
    act = RecordingActuator(applied)

    snap = make_snapshot(make_nodes(1), [make_job("1", max_gpus=4)], now=0.0)
    obs = FakeObserver(snap)
    now = [0.0]
    cfg = Config(DaemonConfig(policy="dp", store=tmp_path / "s.db", dry_run=False, poll_interval=1.0, max_idle=1.0))
    d = Daemon(cfg, obs, Store(cfg.daemon.store), act, sleep=lambda s: None, clock=lambda: now[0])
    d.round()
    d.round()  # the job is still pending in Slurm: the START is on its way, not repeated
    assert [a.kind.value for a in applied] == ["start"]
    obs.snapshot = make_snapshot(make_nodes(1), [make_job("1", max_gpus=4)], now=100.0)
    d.round()  # no sign of it after the in-flight timeout: planned (and acted) again
    assert [a.kind.value for a in applied] == ["start", "start"]


def test_owed_work_is_done_at_every_poll_not_only_in_rounds(tmp_path: Path) -> None:
    """A node release that falls due between rounds is done at the next poll (it waited up to
    ``max_idle`` for the next round when tending ran inside observation)."""
    from slurm_elastic.core.actions import Action
    from slurm_elastic.core.rounds import ActionOutcome

    tended: list[float] = []
    now = [0.0]

    class Act:
        def apply(self, seen: Observation, actions: tuple[Action, ...]) -> tuple[ActionOutcome, ...]:
            return tuple(ActionOutcome(a, True) for a in actions)

        def tend(self, seen: Observation) -> list[str]:
            tended.append(now[0])
            return [f"job 7 released its other nodes at {now[0]}"] if now[0] == 3.0 else []

    def sleep(s: float) -> None:
        now[0] += s

    obs = FakeObserver(make_snapshot(make_nodes(1), []))
    cfg = Config(DaemonConfig(policy="dp", store=tmp_path / "s.db", dry_run=False, poll_interval=1.0, max_idle=60.0))
    d = Daemon(cfg, obs, Store(cfg.daemon.store), Act(), sleep=sleep, clock=lambda: now[0])
    assert d.due() and d.round()  # the first poll plans
    for _ in range(5):
        assert not d.due()  # the queue did not change: no round ...
        sleep(1.0)
    assert tended == [0.0, 0.0, 1.0, 2.0, 3.0, 4.0]  # ... but the act step ran at every poll
    assert d.rounds == 1


def test_a_rebatch_order_is_sent_once_until_the_job_shows_the_new_batch(tmp_path: Path) -> None:
    """Found by ``bench chaos``: a launcher job that had not reported yet (its workers were still
    importing torch) got the same REBATCH order every round, four in 7 s, because the GPU count
    alone said it had arrived. It is on its way until the job reports the new per-GPU batch."""
    from slurm_elastic.core.actions import Action, ActionKind
    from slurm_elastic.core.model import JobState

    applied: list[Action] = []
    act = RecordingActuator(applied)

    def job(local_batch: int):  # type: ignore[no-untyped-def]
        # running on both GPUs of the node at a per-GPU batch no planner chooses (7)
        seven = make_job("r", state=JobState.RUNNING, placement=[("n000", 0), ("n000", 1)], local_batch=7,
                         max_gpus=8, epochs_done=3, epochs_since_change=3, run_time=600.0)
        return replace(seven, local_batch=local_batch)

    obs = FakeObserver(make_snapshot(make_nodes(1, 2), [job(7)], now=0.0))
    now = [0.0]
    cfg = Config(DaemonConfig(policy="dp", store=tmp_path / "s.db", dry_run=False, poll_interval=1.0, max_idle=1.0))
    d = Daemon(cfg, obs, Store(cfg.daemon.store), act, sleep=lambda s: None, clock=lambda: now[0])
    d.round()
    assert [a.kind for a in applied] == [ActionKind.REBATCH]
    d.round()
    d.round()  # the job still reports its old batch: the order is on its way, not sent again
    assert len(applied) == 1
    obs.snapshot = make_snapshot(make_nodes(1, 2), [job(applied[0].local_batch)], now=5.0)
    d.round()  # it arrived: nothing to do
    assert len(applied) == 1
    obs.snapshot = make_snapshot(make_nodes(1, 2), [job(7)], now=100.0)
    d.round()  # the job went back to its own batch later: planned (and acted) again
    assert [a.kind for a in applied] == [ActionKind.REBATCH] * 2


def test_the_backend_is_chosen_by_the_configuration_or_the_flag(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    """Issue 18: the backend could not be chosen (always auto). ``daemon.backend`` and ``--backend``
    (daemon, status) name it; the view asks the chooser for it, and a bad value names the rule."""
    from slurm_elastic.cli import common, main
    from slurm_elastic.slurm import pyslurm_backend

    assert parse("").daemon.backend == "auto"
    assert parse('[daemon]\nbackend = "pyslurm"\n').daemon.backend == "pyslurm"
    with pytest.raises(ConfigError, match=r"daemon.backend.*'slurmrestd'.*must be one of auto, cli, pyslurm"):
        parse('[daemon]\nbackend = "slurmrestd"\n')
    asked: list[str] = []

    def chooser(*, prefer: str) -> Any:
        asked.append(prefer)
        raise ConfigError("stop here")

    monkeypatch.setattr(pyslurm_backend, "choose_source", chooser)
    cfg = parse(f'[daemon]\nbackend = "pyslurm"\nstore = "{tmp_path / "s.db"}"\n')
    for backend in (None, "cli"):
        with pytest.raises(ConfigError, match="stop here"):
            common.view(common.with_backend(cfg, backend))
    assert asked == ["pyslurm", "cli"]
    conf = tmp_path / "elastic.toml"
    conf.write_text(f'[daemon]\nstore = "{tmp_path / "s.db"}"\n')
    assert main(["status", "--config", str(conf), "--backend", "cli"]) == 2  # the chooser above stops it
    assert asked[-1] == "cli"
    with pytest.raises(SystemExit) as bad:
        main(["status", "--config", str(conf), "--backend", "rest"])
    assert bad.value.code == 2


def test_a_round_observes_and_plans_with_the_collector_paused(tmp_path: Path) -> None:
    """At 50,000 jobs a full collection took 0.29 s inside every round's plan (issue 18, part 5):
    the daemon pauses the collector for the round and restores it after."""
    import gc

    seen: list[bool] = []

    class Watching(FakeObserver):
        def observation(self) -> Observation:
            seen.append(gc.isenabled())
            return super().observation()

    d = _daemon(tmp_path, Watching(make_snapshot(make_nodes(2), [make_job("1", max_gpus=8)])), [], [0.0])
    plan = d.planner.plan
    d.planner.plan = lambda *a: (seen.append(gc.isenabled()), plan(*a))[1]  # type: ignore[method-assign]
    assert gc.isenabled()
    d.round()
    assert seen == [False, False] and gc.isenabled()
