"""Prometheus metrics of the daemon: what it planned, what it did, how long planning took.

This module owns the metric values (updated by the daemon after each round, from the round
record), their text exposition, and the bounded HTTP endpoint that serves it on ``/metrics``
(:class:`MetricsServer`: one thread, no thread per connection, timeouts, a connection cap, a
request size cap). It also reads Slurm's ``PrivateData`` out of ``scontrol show config`` text
(:func:`private_data_of`, pure); running that command is the ``daemon`` command's business. It
decides nothing and talks to no Slurm.

Metrics, always:

* ``slurm_elastic_rounds_total`` — rounds run;
* ``slurm_elastic_plan_refused_total`` — plans refused by ``validate_plan``;
* ``slurm_elastic_round_seconds`` — duration of the last round (observe + plan + act);
* ``slurm_elastic_actions_total{kind, outcome}`` — actions by kind, ``ok`` or ``failed``;
* ``slurm_elastic_gpus{what}`` — GPUs of all elastic jobs, ``allocated`` and ``planned``;
* ``slurm_elastic_jobs{state}`` — elastic jobs running / waiting;
* ``slurm_elastic_quarantined_jobs`` — jobs whose own input broke a rule;
* ``slurm_elastic_node_left_out{node, reason}`` — 1 per node whose record Slurm printed oddly
  (left out of the snapshot; node names are not private in Slurm).

Only when identities may be shown (``Metrics(show_identities=True)``; the daemon allows it when
Slurm's ``PrivateData`` has neither ``jobs`` nor ``users``, and hides them when it cannot tell):

* ``slurm_elastic_job_gpus{job, user, what}`` — GPUs per elastic job, ``allocated`` and ``planned``;
* ``slurm_elastic_predictor_error{job, model}`` — measured over predicted throughput minus one, for
  running jobs that report their throughput (0 = the profile is exact for this job);
* ``slurm_elastic_job_quarantined{job_id, reason}`` — 1 per quarantined job (reason cut to 200
  characters).

Label values are escaped and made one line whatever a job put in them.
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
import selectors
import socket
import threading
import time
import unicodedata
from collections import Counter
from collections.abc import Mapping
from typing import Any

from slurm_elastic.core.model import JobState
from slurm_elastic.core.remaining import outlook
from slurm_elastic.core.rounds import RoundRecord
from slurm_elastic.errors import ConfigError, ElasticError

log = logging.getLogger(__name__)


#: Longest quarantine reason shown in a label (characters; longer ones end with an ellipsis).
REASON_CHARS = 200

#: Flags of Slurm's ``PrivateData`` that make user names and job ids private.
IDENTITY_FLAGS = frozenset({"jobs", "users", "all"})

_PRIVATE_DATA = re.compile(r"^\s*PrivateData\s*=(.*)$", re.MULTILINE)
_FLAG = re.compile(r"^[a-z_]+$")


class PrivateDataError(ElasticError):
    """``scontrol show config`` did not say what Slurm's ``PrivateData`` is."""


def private_data_of(text: str) -> frozenset[str]:
    """The flags of ``PrivateData`` in the output of ``scontrol show config`` (``none`` -> empty).

    Raises:
        PrivateDataError: no ``PrivateData`` line, more than one, or a value that is not a
            comma-separated list of lower-case words (the caller then hides identities).
    """
    found = _PRIVATE_DATA.findall(text)
    if len(found) != 1:
        raise PrivateDataError(f"scontrol show config: {len(found)} PrivateData lines, expected exactly one")
    value = found[0].strip().lower()
    flags = frozenset(f.strip() for f in value.split(","))
    if not value or not all(_FLAG.match(f) for f in flags):
        raise PrivateDataError(f"scontrol show config: PrivateData = {found[0].strip()[:80]!r}: "
                               "expected none or comma-separated words such as jobs,usage,users")
    return frozenset() if flags == {"none"} else flags


def identities_private(flags: frozenset[str]) -> bool:
    """Whether Slurm's ``PrivateData`` flags keep user names and job ids from other users."""
    return bool(flags & IDENTITY_FLAGS)


def _label(value: str, limit: int | None = None) -> str:
    """``value`` as a Prometheus label value: cut to ``limit`` characters, one line, valid UTF-8, escaped.

    Control characters and line or paragraph separators become U+FFFD (the exposition format knows
    only the escapes backslash, double quote and newline), and lone surrogates become ``?``.
    """
    if limit is not None and len(value) > limit:
        value = value[:limit] + "\u2026"
    value = value.encode("utf-8", "replace").decode("utf-8")
    value = "".join("\ufffd" if ch != "\n" and unicodedata.category(ch) in ("Cc", "Zl", "Zp") else ch
                    for ch in value)
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Metrics:
    """The current values, safe to read from the HTTP thread while the loop writes.

    ``show_identities`` (off unless the caller says so: fail closed) adds the series that name a job
    or a user: GPUs and predictor error per job, each quarantined job with its reason. Without it
    the exposition carries counts and sums only.
    """

    def __init__(self, *, show_identities: bool = False) -> None:
        self._lock = threading.Lock()
        self.show_identities = show_identities
        self.rounds = 0
        self.refused = 0
        self.round_seconds = 0.0
        self.actions: Counter[tuple[str, str]] = Counter()
        self.job_gpus: dict[tuple[str, str], tuple[int, int]] = {}
        self.jobs: Counter[str] = Counter()
        self.predictor_error: dict[tuple[str, str], float] = {}
        self.quarantined: dict[str, str] = {}
        self.nodes_left_out: dict[str, str] = {}
        self.outlooks: dict[tuple[str, str], dict[str, Any]] = {}
        self.progress_model: dict[str, Any] = {}

    def observe_round(self, rec: RoundRecord, seconds: float) -> None:
        """Fold one round into the metrics."""
        planned = {p.job_id: p.num_gpus for p in rec.plan.jobs}
        with self._lock:
            self.rounds += 1
            self.refused += bool(rec.violations)
            self.round_seconds = seconds
            for o in rec.outcomes:
                self.actions[(o.action.kind.value, "ok" if o.ok else "failed")] += 1
            self.job_gpus = {(j.job_id, j.user): (j.num_gpus, planned.get(j.job_id, 0))
                             for j in rec.snapshot.elastic_jobs()}
            self.jobs = Counter("running" if j.state is JobState.RUNNING else "waiting"
                                for j in rec.snapshot.elastic_jobs())
            self.predictor_error = {}
            for j in rec.snapshot.elastic_jobs():
                if j.observed_throughput and j.num_gpus and j.model in rec.snapshot.profiles:
                    predicted = float(rec.snapshot.profiles[j.model].throughput(
                        j.global_batch, j.num_gpus, j.placement.num_nodes))
                    if predicted > 0:
                        self.predictor_error[(j.job_id, j.model)] = j.observed_throughput / predicted - 1.0
            self.outlooks = {(j.job_id, j.user): outlook(rec.snapshot, j) for j in rec.snapshot.elastic_jobs()}

    def observe_progress_model(self, summary: Mapping[str, Any]) -> None:
        """What the progress model was learned from (:meth:`~slurm_elastic.observe.history.ProgressLearner.summary`)."""
        with self._lock:
            self.progress_model = dict(summary)

    def observe_quarantine(self, reasons: Mapping[str, str]) -> None:
        """The jobs quarantined now (job id -> one-line reason), replacing the previous set."""
        with self._lock:
            self.quarantined = dict(reasons)

    def observe_nodes_left_out(self, reasons: Mapping[str, str]) -> None:
        """The nodes left out now (name -> one-line reason), replacing the previous set."""
        with self._lock:
            self.nodes_left_out = dict(reasons)

    def render(self) -> str:
        """The Prometheus text exposition (version 0.0.4)."""
        with self._lock:
            out = [
                "# HELP slurm_elastic_rounds_total Rounds run.", "# TYPE slurm_elastic_rounds_total counter",
                f"slurm_elastic_rounds_total {self.rounds}",
                "# HELP slurm_elastic_plan_refused_total Plans refused by validate_plan.",
                "# TYPE slurm_elastic_plan_refused_total counter",
                f"slurm_elastic_plan_refused_total {self.refused}",
                "# HELP slurm_elastic_round_seconds Duration of the last round.",
                "# TYPE slurm_elastic_round_seconds gauge",
                f"slurm_elastic_round_seconds {self.round_seconds:.6f}",
                "# HELP slurm_elastic_actions_total Actions by kind and outcome.",
                "# TYPE slurm_elastic_actions_total counter",
            ]
            out += [f'slurm_elastic_actions_total{{kind="{_label(k)}",outcome="{o}"}} {n}'
                    for (k, o), n in sorted(self.actions.items())]
            out += ["# HELP slurm_elastic_gpus GPUs of all elastic jobs, allocated and planned.",
                    "# TYPE slurm_elastic_gpus gauge",
                    f'slurm_elastic_gpus{{what="allocated"}} {sum(a for a, _ in self.job_gpus.values())}',
                    f'slurm_elastic_gpus{{what="planned"}} {sum(p for _, p in self.job_gpus.values())}']
            out += ["# HELP slurm_elastic_jobs Elastic jobs by state.", "# TYPE slurm_elastic_jobs gauge"]
            out += [f'slurm_elastic_jobs{{state="{s}"}} {n}' for s, n in sorted(self.jobs.items())]
            out += ["# HELP slurm_elastic_quarantined_jobs Jobs whose own input broke a rule (planned from "
                    "priors or left out).", "# TYPE slurm_elastic_quarantined_jobs gauge",
                    f"slurm_elastic_quarantined_jobs {len(self.quarantined)}"]
            out += ["# HELP slurm_elastic_node_left_out A node whose record Slurm printed oddly, and why.",
                    "# TYPE slurm_elastic_node_left_out gauge"]
            out += [f'slurm_elastic_node_left_out{{node="{_label(n)}",reason="{_label(r, REASON_CHARS)}"}} 1'
                    for n, r in sorted(self.nodes_left_out.items())]
            if self.progress_model:
                pm = self.progress_model
                out += ["# HELP slurm_elastic_progress_model_jobs Finished jobs the progress model was fitted on "
                        "(0: the prior).", "# TYPE slurm_elastic_progress_model_jobs gauge",
                        f"slurm_elastic_progress_model_jobs {pm['jobs'] if pm['source'] == 'fitted' else 0}"]
                if pm.get("error") is not None:
                    out += ["# HELP slurm_elastic_progress_model_error Mean |predicted - true progress| on its "
                            "training points.", "# TYPE slurm_elastic_progress_model_error gauge",
                            f"slurm_elastic_progress_model_error {float(pm['error']):.4f}"]
            if self.show_identities:
                out += self._identities()
        return "\n".join(out) + "\n"

    def _identities(self) -> list[str]:
        """The series that name jobs and users (the caller holds the lock)."""
        out = ["# HELP slurm_elastic_job_gpus GPUs of each elastic job, allocated and planned.",
               "# TYPE slurm_elastic_job_gpus gauge"]
        for (job, user), (now, plan) in sorted(self.job_gpus.items()):
            labels = f'job="{_label(job)}",user="{_label(user)}"'
            out.append(f'slurm_elastic_job_gpus{{{labels},what="allocated"}} {now}')
            out.append(f'slurm_elastic_job_gpus{{{labels},what="planned"}} {plan}')
        out += ["# HELP slurm_elastic_predictor_error Measured over predicted throughput, minus one.",
                "# TYPE slurm_elastic_predictor_error gauge"]
        out += [f'slurm_elastic_predictor_error{{job="{_label(j)}",model="{_label(m)}"}} {e:.4f}'
                for (j, m), e in sorted(self.predictor_error.items())]
        out += ["# HELP slurm_elastic_job_model_points Configurations the job's own throughput model was "
                "fitted from (0: its prior profile).", "# TYPE slurm_elastic_job_model_points gauge"]
        out += [f'slurm_elastic_job_model_points{{job="{_label(j)}",user="{_label(u)}",model="{_label(o["model"])}"}} '
                f'{o["model_points"]}' for (j, u), o in sorted(self.outlooks.items())]
        out += ["# HELP slurm_elastic_job_throughput Samples/s of each running elastic job, measured and predicted.",
                "# TYPE slurm_elastic_job_throughput gauge"]
        for (j, u), o in sorted(self.outlooks.items()):
            for what in ("measured", "predicted"):
                if o[f"{what}_throughput"] is not None:
                    out.append(f'slurm_elastic_job_throughput{{job="{_label(j)}",user="{_label(u)}",what="{what}"}} '
                               f'{o[f"{what}_throughput"]:.3f}')
        out += ["# HELP slurm_elastic_job_remaining_seconds Predicted seconds of training left at the job's "
                "throughput now.", "# TYPE slurm_elastic_job_remaining_seconds gauge"]
        out += [f'slurm_elastic_job_remaining_seconds{{job="{_label(j)}",user="{_label(u)}"}} {o["remaining_s"]:.1f}'
                for (j, u), o in sorted(self.outlooks.items())
                if o["remaining_s"] is not None and math.isfinite(o["remaining_s"])]
        out += ["# HELP slurm_elastic_job_quarantined A quarantined job and why.",
                "# TYPE slurm_elastic_job_quarantined gauge"]
        out += [f'slurm_elastic_job_quarantined{{job_id="{_label(j)}",reason="{_label(r, REASON_CHARS)}"}} 1'
                for j, r in sorted(self.quarantined.items())]
        return out


# --- the HTTP endpoint --------------------------------------------------------------------------

READ_TIMEOUT_S = 5.0  # a client has this long from its connection to the end of its request head
WRITE_TIMEOUT_S = 5.0  # ... and this long to take the answer
MAX_CONNECTIONS = 16
MAX_REQUEST_BYTES = 8192
_LINGER_S = 1.0  # after the answer, unread input is drained this long so the close is not a reset
_DRAIN_BYTES = 65536
_ACCEPT_PAUSE_S = 0.5
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            408: "Request Timeout", 431: "Request Header Fields Too Large", 500: "Internal Server Error",
            503: "Service Unavailable"}
_REQUEST_LINE = re.compile(r"^([A-Z]+) (\S+) HTTP/1\.[01]$")


def _answer(status: int, body: bytes = b"", content_type: str = "text/plain; charset=utf-8",
            extra: str = "") -> bytes:
    """A complete HTTP/1.1 response that closes the connection."""
    if not body and status != 200:
        body = f"{status} {_REASONS[status]}\n".encode()
    head = (f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\n{extra}Connection: close\r\n\r\n")
    return head.encode("ascii") + body


class _Conn:
    """One client: what it sent so far, what it still has to take, and by when."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline
        self.inbox = bytearray()
        self.outbox = b""
        self.sent = 0
        self.state = "reading"  # then "writing", then "draining" (lingering close)
        self.drained = 0


class MetricsServer:
    """``GET /metrics`` served by one thread over non-blocking sockets (:mod:`selectors`).

    No thread per connection: an idle or slow client costs a socket and a buffer of at most
    ``max_request_bytes``. Each client has ``read_timeout`` seconds from its connection to the end
    of its request head (trickling bytes does not extend it; 408 then) and ``write_timeout`` seconds
    to take the answer. At most ``max_connections`` are open: one more closes the oldest client
    already answered or, failing that, the oldest that has not finished its request; when every one
    is being answered it gets 503 at once. One request per connection (``Connection: close``). Only
    ``GET /metrics`` (query ignored) gets the metrics: another path is 404, another method 405, a
    malformed request 400, a longer head 431, a render that fails 500 (logged). When ``accept``
    fails (out of file descriptors) accepting pauses half a second instead of spinning.
    """

    def __init__(self, metrics: Metrics, listener: socket.socket, *, read_timeout: float, write_timeout: float,
                 max_connections: int, max_request_bytes: int) -> None:
        self.metrics = metrics
        self.read_timeout = read_timeout
        self.write_timeout = write_timeout
        self.max_connections = max_connections
        self.max_request_bytes = max_request_bytes
        self._listener = listener
        self.server_address: tuple[Any, ...] = listener.getsockname()
        self._wake_r, self._wake_w = socket.socketpair()
        self._sel = selectors.DefaultSelector()
        self._conns: dict[socket.socket, _Conn] = {}  # insertion order = oldest first
        self._stopping = threading.Event()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._accept_again: float | None = None  # while accepting is paused (accept failed)

    @property
    def open_connections(self) -> int:
        """Clients connected now."""
        return len(self._conns)

    def start(self) -> None:
        """Serve from a daemon thread named ``metrics``."""
        self._thread = threading.Thread(target=self.serve_forever, name="metrics", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        """Stop serving, close every socket, and wait for the serving thread."""
        self._stopping.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if self._thread is not None:
            self._thread.join()

    def serve_forever(self) -> None:
        """The loop: accept, read, answer, expire; until :meth:`shutdown`."""
        self._listener.setblocking(False)
        self._wake_r.setblocking(False)
        self._sel.register(self._listener, selectors.EVENT_READ)
        self._sel.register(self._wake_r, selectors.EVENT_READ)
        try:
            while not self._stopping.is_set():
                now = time.monotonic()
                if self._accept_again is not None and self._accept_again <= now:
                    self._accept_again = None
                    self._sel.register(self._listener, selectors.EVENT_READ)
                wake = [c.deadline for c in self._conns.values()]
                wake += [self._accept_again] if self._accept_again is not None else []
                wait = min(wake, default=now + 60.0) - now
                for key, _ in self._sel.select(max(0.0, wait)):
                    if key.fileobj is self._listener:
                        self._accept()
                    elif key.fileobj is self._wake_r:
                        with contextlib.suppress(OSError):
                            self._wake_r.recv(64)
                    elif isinstance(key.data, _Conn) and key.data.sock in self._conns:
                        self._step(key.data)
                self._expire(time.monotonic())
        finally:
            for conn in list(self._conns.values()):
                self._close(conn)
            self._sel.close()
            for s in (self._listener, self._wake_r, self._wake_w):
                s.close()

    def _accept(self) -> None:
        for _ in range(64):  # then serve the others before accepting more
            try:
                sock, _addr = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # e.g. out of file descriptors: pause accepting rather than spin
                log.warning("metrics: accept failed (%s): not accepting for %g s", exc, _ACCEPT_PAUSE_S)
                self._sel.unregister(self._listener)
                self._accept_again = time.monotonic() + _ACCEPT_PAUSE_S
                return
            sock.setblocking(False)
            if len(self._conns) >= self.max_connections:
                # room is made by the oldest client already answered, else the oldest still sending
                oldest = next((c for c in self._conns.values() if c.state == "draining"), None) or next(
                    (c for c in self._conns.values() if c.state == "reading"), None)
                if oldest is None:
                    with contextlib.suppress(OSError):
                        sock.send(_answer(503))
                    sock.close()
                    continue
                self._close(oldest)
            conn = _Conn(sock, time.monotonic() + self.read_timeout)
            self._conns[sock] = conn
            self._sel.register(sock, selectors.EVENT_READ, conn)

    def _step(self, conn: _Conn) -> None:
        """Move one client on; whatever goes wrong with it closes it alone (a bug is logged)."""
        try:
            if conn.state == "reading":
                self._read(conn)
            elif conn.state == "writing":
                self._write(conn)
            else:
                data = conn.sock.recv(4096)
                conn.drained += len(data)
                if not data or conn.drained > _DRAIN_BYTES:
                    self._close(conn)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn)
        except Exception:
            log.exception("metrics: a connection failed")
            self._close(conn)

    def _read(self, conn: _Conn) -> None:
        data = conn.sock.recv(4096)
        if not data:
            self._close(conn)
            return
        conn.inbox += data
        end = min((i for i in (conn.inbox.find(b"\r\n\r\n"), conn.inbox.find(b"\n\n")) if i >= 0), default=-1)
        if end < 0:
            if len(conn.inbox) >= self.max_request_bytes:
                self._reply(conn, _answer(431))
            return
        if end > self.max_request_bytes:
            self._reply(conn, _answer(431))
            return
        self._reply(conn, self._answer_to(bytes(conn.inbox[:end])))

    def _answer_to(self, head: bytes) -> bytes:
        """The response to one request head."""
        try:
            line = head.split(b"\n", 1)[0].rstrip(b"\r").decode("ascii")
        except UnicodeDecodeError:
            return _answer(400)
        m = _REQUEST_LINE.match(line)
        if m is None:
            return _answer(400)
        if m.group(1) != "GET":
            return _answer(405, extra="Allow: GET\r\n")
        if m.group(2).split("?", 1)[0] != "/metrics":
            return _answer(404)
        try:
            body = self.metrics.render().encode("utf-8")
        except Exception:
            log.exception("metrics: rendering /metrics failed")
            return _answer(500)
        return _answer(200, body, "text/plain; version=0.0.4; charset=utf-8")

    def _reply(self, conn: _Conn, answer: bytes) -> None:
        conn.outbox, conn.sent, conn.state = answer, 0, "writing"
        conn.inbox.clear()
        conn.deadline = time.monotonic() + self.write_timeout
        self._sel.modify(conn.sock, selectors.EVENT_WRITE, conn)
        self._write(conn)

    def _write(self, conn: _Conn) -> None:
        conn.sent += conn.sock.send(conn.outbox[conn.sent:])
        if conn.sent < len(conn.outbox):
            return
        # all sent: half-close, then read what the client still sends so closing does not reset
        conn.sock.shutdown(socket.SHUT_WR)
        conn.state, conn.deadline = "draining", time.monotonic() + _LINGER_S
        self._sel.modify(conn.sock, selectors.EVENT_READ, conn)

    def _expire(self, now: float) -> None:
        for conn in [c for c in self._conns.values() if c.deadline <= now]:
            if conn.state == "reading":
                with contextlib.suppress(OSError):
                    conn.sock.send(_answer(408))
            self._close(conn)

    def _close(self, conn: _Conn) -> None:
        self._conns.pop(conn.sock, None)
        with contextlib.suppress(KeyError, ValueError):
            self._sel.unregister(conn.sock)
        conn.sock.close()


def serve(metrics: Metrics, address: str, *, read_timeout: float = READ_TIMEOUT_S,
          write_timeout: float = WRITE_TIMEOUT_S, max_connections: int = MAX_CONNECTIONS,
          max_request_bytes: int = MAX_REQUEST_BYTES) -> MetricsServer:
    """Serve ``/metrics`` on ``HOST:PORT`` (``[v6]:PORT`` too) from a daemon thread; returns the
    server (``.shutdown()``). The limits are those of :class:`MetricsServer`.

    Raises:
        ConfigError: the address is malformed or cannot be bound, or a limit is out of range.
    """
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"daemon.metrics_address = {address!r}: must be HOST:PORT with PORT 0-65535")
    for name, seconds in (("read_timeout", read_timeout), ("write_timeout", write_timeout)):
        if not (0 < seconds < math.inf):
            raise ConfigError(f"metrics {name} = {seconds!r}: must be above 0 (seconds)")
    if max_connections < 1:
        raise ConfigError(f"metrics max_connections = {max_connections}: must be at least 1")
    if max_request_bytes < 64:
        raise ConfigError(f"metrics max_request_bytes = {max_request_bytes}: must be at least 64")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        family, kind, proto, _, where = socket.getaddrinfo(host or "127.0.0.1", int(port), type=socket.SOCK_STREAM,
                                                           flags=socket.AI_PASSIVE)[0]
        listener = socket.socket(family, kind, proto)
    except OSError as exc:
        raise ConfigError(f"daemon.metrics_address = {address!r}: cannot listen: {exc.strerror or exc}") from exc
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(where)
        listener.listen(128)
    except OSError as exc:
        listener.close()
        raise ConfigError(f"daemon.metrics_address = {address!r}: cannot listen: {exc.strerror or exc}") from exc
    server = MetricsServer(metrics, listener, read_timeout=read_timeout, write_timeout=write_timeout,
                           max_connections=max_connections, max_request_bytes=max_request_bytes)
    server.start()
    return server
