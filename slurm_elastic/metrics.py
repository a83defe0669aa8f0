"""Prometheus metrics of the daemon: what it planned, what it did, how long planning took.

This module owns the metric values (updated by the daemon after each round, from the round
record) and the text exposition format served on ``/metrics`` by a small HTTP server thread. It
decides nothing and talks to no Slurm.

Metrics:

* ``slurm_elastic_rounds_total`` — rounds run;
* ``slurm_elastic_plan_refused_total`` — plans refused by ``validate_plan``;
* ``slurm_elastic_round_seconds`` — duration of the last round (observe + plan + act);
* ``slurm_elastic_actions_total{kind, outcome}`` — actions by kind, ``ok`` or ``failed``;
* ``slurm_elastic_job_gpus{job, user, what}`` — GPUs per elastic job, ``allocated`` and ``planned``;
* ``slurm_elastic_jobs{state}`` — elastic jobs running / waiting;
* ``slurm_elastic_predictor_error{job, model}`` — measured over predicted throughput minus one, for
  running jobs that report their throughput (0 = the profile is exact for this job).
"""

from __future__ import annotations

import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from slurm_elastic.core.model import JobState
from slurm_elastic.core.rounds import RoundRecord
from slurm_elastic.errors import ConfigError


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Metrics:
    """The current values, safe to read from the HTTP thread while the loop writes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.rounds = 0
        self.refused = 0
        self.round_seconds = 0.0
        self.actions: Counter[tuple[str, str]] = Counter()
        self.job_gpus: dict[tuple[str, str], tuple[int, int]] = {}
        self.jobs: Counter[str] = Counter()
        self.predictor_error: dict[tuple[str, str], float] = {}

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
            out += [f'slurm_elastic_actions_total{{kind="{k}",outcome="{o}"}} {n}'
                    for (k, o), n in sorted(self.actions.items())]
            out += ["# HELP slurm_elastic_job_gpus GPUs of each elastic job, allocated and planned.",
                    "# TYPE slurm_elastic_job_gpus gauge"]
            for (job, user), (now, plan) in sorted(self.job_gpus.items()):
                labels = f'job="{_escape(job)}",user="{_escape(user)}"'
                out.append(f'slurm_elastic_job_gpus{{{labels},what="allocated"}} {now}')
                out.append(f'slurm_elastic_job_gpus{{{labels},what="planned"}} {plan}')
            out += ["# HELP slurm_elastic_jobs Elastic jobs by state.", "# TYPE slurm_elastic_jobs gauge"]
            out += [f'slurm_elastic_jobs{{state="{s}"}} {n}' for s, n in sorted(self.jobs.items())]
            out += ["# HELP slurm_elastic_predictor_error Measured over predicted throughput, minus one.",
                    "# TYPE slurm_elastic_predictor_error gauge"]
            out += [f'slurm_elastic_predictor_error{{job="{_escape(j)}",model="{_escape(m)}"}} {e:.4f}'
                    for (j, m), e in sorted(self.predictor_error.items())]
        return "\n".join(out) + "\n"


def serve(metrics: Metrics, address: str) -> ThreadingHTTPServer:
    """Serve ``/metrics`` on ``host:port`` from a daemon thread; returns the server (``.shutdown()``).

    Raises:
        ConfigError: the address is malformed or cannot be bound.
    """
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"daemon.metrics_address = {address!r}: must be HOST:PORT")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            body = metrics.render().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return

    try:
        server = ThreadingHTTPServer((host or "127.0.0.1", int(port)), Handler)
    except OSError as exc:
        raise ConfigError(f"daemon.metrics_address = {address!r}: cannot listen: {exc.strerror}") from exc
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
