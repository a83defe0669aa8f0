"""The Prometheus endpoint: values after a round, served over HTTP; the shipped systemd unit."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from slurm_elastic import policies
from slurm_elastic.core.rounds import ActionOutcome, run_round
from slurm_elastic.errors import ConfigError
from slurm_elastic.metrics import Metrics, serve
from slurm_elastic.testing import make_job, make_nodes, make_snapshot


class _Ports:
    def __init__(self) -> None:
        self.snap = make_snapshot(make_nodes(2), [make_job("7", max_gpus=8, user='a"b')])

    def observe(self):  # type: ignore[no-untyped-def]
        return self.snap

    def apply(self, snapshot, actions):  # type: ignore[no-untyped-def]
        return tuple(ActionOutcome(a, False, "no") for a in actions)


def test_metrics_after_a_round_are_served_on_http() -> None:
    ports = _Ports()
    rec = run_round(ports, policies.create("dp"), ports, None, np.random.default_rng(0))
    m = Metrics()
    m.observe_round(rec, 0.25)
    server = serve(m, "127.0.0.1:0")
    try:
        port = server.server_address[1]
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=5)
    finally:
        server.shutdown()
    assert "slurm_elastic_rounds_total 1" in text
    assert "slurm_elastic_round_seconds 0.250000" in text
    assert 'slurm_elastic_actions_total{kind="start",outcome="failed"} 1' in text
    assert 'slurm_elastic_job_gpus{job="7",user="a\\"b",what="allocated"} 0' in text
    planned = rec.plan.by_job()["7"].num_gpus
    assert f'slurm_elastic_job_gpus{{job="7",user="a\\"b",what="planned"}} {planned}' in text


def test_predictor_error_of_a_job_that_reports_its_throughput() -> None:
    from dataclasses import replace

    from slurm_elastic.core.model import JobState

    job = make_job("9", placement=[("n000", 0), ("n000", 1)])
    snap = make_snapshot(make_nodes(1), [job])
    predicted = float(snap.profiles["cifar10"].throughput(job.global_batch, 2, 1))
    snap = replace(snap, jobs=(replace(job, observed_throughput=1.1 * predicted),))
    ports = _Ports()
    ports.snap = snap
    rec = run_round(ports, policies.create("fifo"), ports, None, np.random.default_rng(0))
    m = Metrics()
    m.observe_round(rec, 0.1)
    assert snap.jobs[0].state is JobState.RUNNING
    assert 'slurm_elastic_predictor_error{job="9",model="cifar10"} 0.1000' in m.render()


def test_bad_metrics_address_is_refused() -> None:
    with pytest.raises(ConfigError, match="must be HOST:PORT"):
        serve(Metrics(), "localhost")


def test_systemd_unit_runs_the_daemon_with_the_site_config() -> None:
    unit = (Path(__file__).resolve().parents[2] / "site_configs" / "systemd" / "slurm-elastic.service").read_text()
    assert "ExecStart=/usr/local/bin/slurm-elastic daemon --config /etc/slurm/elastic.toml" in unit
    assert "ExecStartPre=/usr/local/bin/slurm-elastic check-config /etc/slurm/elastic.toml" in unit
