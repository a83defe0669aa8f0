"""The Prometheus endpoint: values after a round, served over HTTP; the shipped systemd unit."""

from __future__ import annotations

import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Sequence

import numpy as np
import pytest

from slurm_elastic import policies
from slurm_elastic.core.rounds import ActionOutcome, run_round
from slurm_elastic.daemon_metrics import Metrics, serve
from slurm_elastic.errors import ConfigError, ElasticError
from slurm_elastic.resources import SYSTEMD_UNIT
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
    m = Metrics(show_identities=True)
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
    m = Metrics(show_identities=True)
    m.observe_round(rec, 0.1)
    assert snap.jobs[0].state is JobState.RUNNING
    assert 'slurm_elastic_predictor_error{job="9",model="cifar10"} 0.1000' in m.render()


def test_bad_metrics_address_is_refused() -> None:
    with pytest.raises(ConfigError, match="must be HOST:PORT"):
        serve(Metrics(), "localhost")


def test_systemd_unit_runs_the_daemon_with_the_site_config() -> None:
    unit = SYSTEMD_UNIT.read_text()
    assert "ExecStart=/usr/local/bin/slurm-elastic daemon --config /etc/slurm/elastic.toml" in unit
    assert "ExecStartPre=/usr/local/bin/slurm-elastic check-config /etc/slurm/elastic.toml" in unit


# --- bounded HTTP serving (issue #13 item 9) -------------------------------------------------------

def _connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.settimeout(10)
    return s


def _read_all(s: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (10 s at most)."""
    chunks = []
    while True:
        try:
            data = s.recv(65536)
        except ConnectionResetError:
            break
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks)


def _ask(port: int, raw: bytes) -> bytes:
    with _connect(port) as s:
        s.sendall(raw)
        return _read_all(s)


def test_250_idle_connections_hold_no_thread_each_and_a_scrape_still_works() -> None:
    server = serve(Metrics(), "127.0.0.1:0")
    idle: list[socket.socket] = []
    try:
        port = server.server_address[1]
        before = threading.active_count()
        idle = [_connect(port) for _ in range(250)]
        # the server accepts in order: once this scrape is answered, all 250 were accepted
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        held = threading.active_count() - before
    finally:
        for s in idle:
            s.close()
        server.shutdown()
    assert "slurm_elastic_rounds_total 0" in text
    assert held <= 1, f"250 idle connections hold {held} threads"


def test_connections_beyond_the_cap_are_not_kept() -> None:
    server = serve(Metrics(), "127.0.0.1:0", max_connections=4)
    idle: list[socket.socket] = []
    try:
        port = server.server_address[1]
        idle = [_connect(port) for _ in range(10)]
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        held = server.open_connections
        # the oldest idle connections made room for the newer ones: the server closed them
        dropped = [_read_all(s) for s in idle[:6]]
    finally:
        for s in idle:
            s.close()
        server.shutdown()
    assert held <= 4
    assert all(d == b"" or d.startswith(b"HTTP/1.1 503") for d in dropped), dropped


def test_an_idle_connection_is_dropped_after_the_read_timeout() -> None:
    server = serve(Metrics(), "127.0.0.1:0", read_timeout=0.2)
    try:
        with _connect(server.server_address[1]) as s:
            s.sendall(b"GET /metr")  # half a request, then nothing
            answer = _read_all(s)  # returns once the server closes (the socket's own timeout is 10 s)
    finally:
        server.shutdown()
    assert answer.startswith(b"HTTP/1.1 408 "), answer


def test_only_get_metrics_is_served_and_requests_are_bounded() -> None:
    server = serve(Metrics(), "127.0.0.1:0", max_request_bytes=1024)
    try:
        port = server.server_address[1]
        ok = _ask(port, b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n")
        other = _ask(port, b"GET /metrics/../etc HTTP/1.1\r\n\r\n")
        post = _ask(port, b"POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc")
        huge = _ask(port, b"GET /metrics HTTP/1.1\r\nX-A: " + b"a" * 5000 + b"\r\n\r\n")
        junk = _ask(port, b"\x00\xff\x16\x03\x01 hello\r\n\r\n")
        old = _ask(port, b"GET /metrics\r\n\r\n")
    finally:
        server.shutdown()
    assert ok.startswith(b"HTTP/1.1 200 OK\r\n") and b"slurm_elastic_rounds_total 0\n" in ok
    assert b"Connection: close\r\n" in ok
    assert other.startswith(b"HTTP/1.1 404 ")
    assert post.startswith(b"HTTP/1.1 405 ") and b"Allow: GET\r\n" in post
    assert huge.startswith(b"HTTP/1.1 431 ")
    assert junk.startswith(b"HTTP/1.1 400 ")
    assert old.startswith(b"HTTP/1.1 400 ")


def test_a_render_that_fails_answers_500_and_the_server_goes_on() -> None:
    class Broken(Metrics):
        def render(self) -> str:
            raise RuntimeError("boom")

    server = serve(Broken(), "127.0.0.1:0")
    try:
        port = server.server_address[1]
        first = _ask(port, b"GET /metrics HTTP/1.1\r\n\r\n")
        second = _ask(port, b"GET /metrics HTTP/1.1\r\n\r\n")
    finally:
        server.shutdown()
    assert first.startswith(b"HTTP/1.1 500 ") and second.startswith(b"HTTP/1.1 500 ")


def test_bad_limits_are_refused() -> None:
    with pytest.raises(ConfigError, match="max_connections = 0: must be at least 1"):
        serve(Metrics(), "127.0.0.1:0", max_connections=0)
    with pytest.raises(ConfigError, match="read_timeout = 0: must be above 0"):
        serve(Metrics(), "127.0.0.1:0", read_timeout=0)
    with pytest.raises(ConfigError, match="must be HOST:PORT"):
        serve(Metrics(), "127.0.0.1:99999")


# --- privacy: Slurm's PrivateData (issue #13 item 9) ----------------------------------------------

SHOW_CONFIG = """Configuration data as of 2025-01-01T00:00:00
AccountingStorageBackupHost = (null)
PreemptType             = preempt/none
PrivateData             = {}
ProctrackType           = proctrack/linuxproc
"""


@pytest.mark.parametrize(("value", "flags"), [
    ("none", frozenset()),
    ("jobs,usage,users", frozenset({"jobs", "usage", "users"})),
    ("accounts,events", frozenset({"accounts", "events"})),
    ("Jobs", frozenset({"jobs"})),
])
def test_private_data_is_read_from_scontrol_show_config(value: str, flags: frozenset[str]) -> None:
    from slurm_elastic.daemon_metrics import private_data_of

    assert private_data_of(SHOW_CONFIG.format(value)) == flags


@pytest.mark.parametrize("text", [
    "PreemptType = preempt/none\n",  # no PrivateData line
    SHOW_CONFIG.format(""),
    SHOW_CONFIG.format("jobs;rm -rf"),
    SHOW_CONFIG.format("jobs") + "PrivateData = none\n",  # two answers
])
def test_unreadable_private_data_is_refused(text: str) -> None:
    from slurm_elastic.daemon_metrics import private_data_of

    with pytest.raises(ElasticError, match="PrivateData"):
        private_data_of(text)


@pytest.mark.parametrize(("answer", "shown"), [
    (SHOW_CONFIG.format("none"), True),
    (SHOW_CONFIG.format("accounts,usage"), True),
    (SHOW_CONFIG.format("jobs"), False),
    (SHOW_CONFIG.format("users"), False),
    (SHOW_CONFIG.format("all"), False),
    ("garbage", False),
    (None, False),  # scontrol failed: fail closed
])
def test_the_daemon_shows_identities_only_when_private_data_allows(answer: str | None, shown: bool) -> None:
    from slurm_elastic.cli.admins import metrics_identities_shown
    from slurm_elastic.slurm.runner import SlurmCommandError

    seen: list[list[str]] = []

    def runner(argv: Sequence[str]) -> str:
        seen.append(list(argv))
        if answer is None:
            raise SlurmCommandError("scontrol show config: exit 1: no controller")
        return answer

    allowed, why = metrics_identities_shown(runner)
    assert allowed is shown and why
    assert seen == [["scontrol", "show", "config"]]


def _round_metrics(show: bool) -> Metrics:
    ports = _Ports()
    ports.snap = make_snapshot(make_nodes(2), [make_job("7", max_gpus=8, user="alice"),
                                               make_job("1234567", max_gpus=8, user="bob")])
    rec = run_round(ports, policies.create("dp"), ports, None, np.random.default_rng(0))
    m = Metrics(show_identities=show)
    m.observe_round(rec, 0.25)
    m.observe_quarantine({"1234567": "report line 3: t is NaN"})
    return m


def test_private_metrics_show_no_user_names_and_no_job_ids() -> None:
    text = _round_metrics(show=False).render()
    assert "alice" not in text and "bob" not in text
    assert '"7"' not in text and "1234567" not in text
    assert 'slurm_elastic_jobs{state="waiting"} 2' in text
    assert "slurm_elastic_quarantined_jobs 1" in text
    assert 'slurm_elastic_gpus{what="allocated"} 0' in text
    shown = _round_metrics(show=True).render()
    assert 'user="alice"' in shown and 'job="1234567"' in shown


def test_metrics_hide_identities_unless_told_otherwise() -> None:
    m = Metrics()
    m.observe_quarantine({"42": "bad"})
    assert "42" not in m.render()


# --- quarantined jobs -------------------------------------------------------------------------------

def test_quarantined_jobs_are_counted_and_named_when_identities_may_be_shown() -> None:
    m = Metrics(show_identities=True)
    m.observe_quarantine({"7": 'report "x"\\y\nnext', "8": "r" * 1000, "9": "ctl\r\x1b[2J \ud800 end"})
    text = m.render()
    assert "# TYPE slurm_elastic_quarantined_jobs gauge\nslurm_elastic_quarantined_jobs 3\n" in text
    assert 'slurm_elastic_job_quarantined{job_id="7",reason="report \\"x\\"\\\\y\\nnext"} 1' in text
    long = next(x for x in text.splitlines() if 'job_id="8"' in x)
    assert len(long) < 260 and long.endswith('…"} 1')
    ctl = next(x for x in text.splitlines() if 'job_id="9"' in x)
    assert "\r" not in ctl and "\x1b" not in ctl
    text.encode()  # a lone surrogate never reaches the wire
    m.observe_quarantine({})
    assert "slurm_elastic_quarantined_jobs 0\n" in m.render() and "job_quarantined{" not in m.render()


def test_every_sample_is_one_line_whatever_the_labels() -> None:
    m = Metrics(show_identities=True)
    m.observe_quarantine({"1\n2": "a\u2028b\x85c\x00d"})
    for line in m.render().splitlines():
        assert line.startswith(("#", "slurm_elastic_")), line


def test_accepting_resumes_after_accept_fails() -> None:
    import errno

    from slurm_elastic.daemon_metrics import MetricsServer

    class Flaky(socket.socket):
        fails = 2

        def accept(self):  # type: ignore[no-untyped-def]
            if self.fails:
                self.fails -= 1
                raise OSError(errno.EMFILE, "Too many open files")
            return super().accept()

    listener = Flaky(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    server = MetricsServer(Metrics(), listener, read_timeout=5, write_timeout=5, max_connections=4,
                           max_request_bytes=1024)
    server.start()
    try:
        answer = _ask(server.server_address[1], b"GET /metrics HTTP/1.1\r\n\r\n")
    finally:
        server.shutdown()
    assert answer.startswith(b"HTTP/1.1 200 OK") and listener.fails == 0
