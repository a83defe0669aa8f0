"""The launcher's environment contract: every ``SLURM_ELASTIC_*`` variable it reads.

This module owns the list of variables the sbatch templates (and the daemon, when it starts joiners)
must set, their units, defaults and validation rules. It parses a mapping passed in once into a frozen
:class:`LauncherEnv`; it never reads ``os.environ`` at import time and imports nothing heavy.

Variables (name, type, default, rule):

* ``SLURM_ELASTIC_JOB_ID`` (str, required): the Slurm job id orders must name.
* ``SLURM_ELASTIC_SECRET`` (str, required): per-job secret for order HMACs; at least 16 characters.
* ``SLURM_ELASTIC_WORKER_ID`` (str, required): stable id of this worker, unique in the job.
* ``SLURM_ELASTIC_WORKERS`` (comma list, required unless joining): the initial worker ids in rank order.
* ``SLURM_ELASTIC_JOIN`` (bool, ``0``): ``1`` for a worker started by a grow order (a joiner).
* ``SLURM_ELASTIC_STORE_HOST`` (str, ``127.0.0.1``) and ``SLURM_ELASTIC_STORE_PORT`` (int 1..65535,
  required): the job's long-lived TCPStore.
* ``SLURM_ELASTIC_STORE_SERVE`` (bool, ``0``): ``1`` if this process hosts the TCPStore.
* ``SLURM_ELASTIC_ORDERS`` (``store`` or ``file:PATH``, ``store``): where resize orders come from.
* ``SLURM_ELASTIC_LOCAL_BATCH`` (int ≥ 1, ``32``): per-worker batch (samples) at the initial size.
* ``SLURM_ELASTIC_MAX_LOCAL_BATCH`` (int ≥ 1, ``256``): per-GPU batch limit; above it, gradient
  accumulation (endo mode).
* ``SLURM_ELASTIC_SCALING`` (``exo`` or ``endo``, ``exo``): exo scales the global batch with the workers
  (LR linearly); endo keeps the global batch.
* ``SLURM_ELASTIC_SEED`` (int ≥ 0, ``0``): seed of the epoch permutations.
* ``SLURM_ELASTIC_EPOCHS`` (int ≥ 1, ``1``): epochs to train before exiting.
* ``SLURM_ELASTIC_GROUP_TIMEOUT_S`` (float > 0, ``10``): collective timeout, seconds; a hung peer is
  declared lost after it.
* ``SLURM_ELASTIC_JOIN_TIMEOUT_S`` (float > 0, ``600``): how long a joiner waits for its order, seconds.
* ``SLURM_ELASTIC_SOCKET_IFNAME`` (str, empty): network interface for gloo/NCCL (``GLOO_SOCKET_IFNAME``).
* ``SLURM_ELASTIC_EVENT_LOG`` (path, empty): JSON-lines file for per-step events (tests, bench).
* ``SLURM_ELASTIC_LOG_INDICES`` (bool, ``0``): include each step's sample indices in the event log.
* ``SLURM_ELASTIC_CHECKPOINT`` (path, empty): where a ``stop`` order's checkpoint is written.
* ``SLURM_ELASTIC_RESUME`` (path, empty): checkpoint to load at start (checkpoint-restart path).
* ``SLURM_ELASTIC_REPORTS`` (path, empty): file rank 0 appends signed progress reports to (the daemon
  reads it: throughput at each size and batch, samples, loss, resize pauses); empty: no reports.
* ``SLURM_ELASTIC_REPORT_EVERY_S`` (float > 0, ``2``): least seconds between two progress reports.
* ``SLURM_ELASTIC_MODEL`` (str, empty): the model's name, sent in rank 0's reports (``model``) so the
  daemon plans the job with that model's throughput profile; 1 to 64 of ``A-Z a-z 0-9 _ . -``
  (:data:`.orders.MODEL_NAME`). ``ElasticJob.model_name``, when the training script gives one, wins.
* ``SLURM_ELASTIC_DIST_BACKEND`` (``auto``, ``gloo`` or ``nccl``, ``auto``): the collectives' library;
  ``auto`` is NCCL when CUDA is available, else gloo. ``gloo`` on a GPU moves CUDA tensors through
  the host: the way two workers can share one GPU, which NCCL refuses.

One variable is Slurm's own: ``SLURM_RESTART_COUNT`` (int ≥ 0, ``0``), how many times the job was
requeued; the initial workers act only on the orders of this run (:mod:`.orders`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from .orders import MODEL_NAME, MODEL_NAME_RULE

PREFIX = "SLURM_ELASTIC_"

_T = TypeVar("_T")


class EnvError(ValueError):
    """A ``SLURM_ELASTIC_*`` variable is missing or breaks its rule; the message names both."""


class ScalingMode(enum.Enum):
    """How a resize changes the batch: EXO scales the global batch, ENDO keeps it."""

    EXO = "exo"
    ENDO = "endo"


@dataclass(frozen=True, slots=True)
class LauncherEnv:
    """Parsed launcher environment; see the module docstring for each variable's rule.

    Attributes:
        job_id: Slurm job id that orders must name.
        secret: per-job HMAC secret (bytes of the UTF-8 value).
        worker_id: this worker's stable id.
        workers: initial worker ids in rank order (empty for a joiner).
        join: True for a worker started by a grow order.
        store_host: TCPStore host.
        store_port: TCPStore port.
        store_serve: True if this process hosts the TCPStore.
        orders: ``"store"`` or ``"file:PATH"``.
        local_batch: per-worker batch at the initial size, samples.
        max_local_batch: per-GPU batch limit, samples.
        scaling: exo or endo.
        seed: permutation seed.
        epochs: epochs to train.
        group_timeout_s: collective timeout, seconds.
        join_timeout_s: joiner wait limit, seconds.
        socket_ifname: network interface for gloo/NCCL, or empty.
        event_log: JSON-lines event file, or empty.
        log_indices: include sample indices in step events.
        checkpoint: checkpoint path for stop orders, or empty.
        resume: checkpoint to load at start, or empty.
        reports: progress report file, or empty.
        report_every_s: least seconds between two progress reports.
        model: the model's name for the reports, or empty.
        run: the job's run (``SLURM_RESTART_COUNT``; 0: never requeued).
    """

    job_id: str
    secret: bytes
    worker_id: str
    workers: tuple[str, ...]
    join: bool
    store_host: str
    store_port: int
    store_serve: bool
    orders: str
    local_batch: int
    max_local_batch: int
    scaling: ScalingMode
    seed: int
    epochs: int
    group_timeout_s: float
    join_timeout_s: float
    socket_ifname: str
    event_log: str
    log_indices: bool
    checkpoint: str
    resume: str
    reports: str = ""
    report_every_s: float = 2.0
    model: str = ""
    dist_backend: str = "auto"
    run: int = 0

    @classmethod
    def from_mapping(cls, environ: Mapping[str, str]) -> LauncherEnv:
        """Parse and validate the launcher variables.

        Args:
            environ: the process environment (``os.environ``) or a test mapping.

        Returns:
            The frozen parsed environment.

        Raises:
            EnvError: naming the variable, its value and the rule it breaks.
        """
        p = _Parser(environ)
        join = p.boolean("JOIN", False)
        workers = p.get("WORKERS", "")
        worker_ids = tuple(w.strip() for w in workers.split(",") if w.strip())
        if not join and not worker_ids:
            raise EnvError(f"{PREFIX}WORKERS={workers!r}: must list the initial worker ids unless {PREFIX}JOIN=1")
        if len(set(worker_ids)) != len(worker_ids):
            raise EnvError(f"{PREFIX}WORKERS={workers!r}: worker ids must be unique")
        worker_id = p.required("WORKER_ID")
        if not join and worker_id not in worker_ids:
            raise EnvError(f"{PREFIX}WORKER_ID={worker_id!r}: must be one of {PREFIX}WORKERS unless joining")
        secret = p.required("SECRET")
        if len(secret) < 16:
            raise EnvError(f"{PREFIX}SECRET=<{len(secret)} chars>: must be at least 16 characters")
        orders = p.get("ORDERS", "store")
        if orders != "store" and not (orders.startswith("file:") and len(orders) > 5):
            raise EnvError(f"{PREFIX}ORDERS={orders!r}: must be 'store' or 'file:PATH'")
        scaling_raw = p.get("SCALING", "exo")
        try:
            scaling = ScalingMode(scaling_raw)
        except ValueError as exc:
            raise EnvError(f"{PREFIX}SCALING={scaling_raw!r}: must be 'exo' or 'endo'") from exc
        model = p.get("MODEL", "")
        if model and not MODEL_NAME.fullmatch(model):
            raise EnvError(f"{PREFIX}MODEL={model[:80]!r}: must be empty or {MODEL_NAME_RULE}")
        dist_backend = p.get("DIST_BACKEND", "auto")
        if dist_backend not in ("auto", "gloo", "nccl"):
            raise EnvError(f"{PREFIX}DIST_BACKEND={dist_backend[:80]!r}: must be 'auto', 'gloo' or 'nccl'")
        return cls(
            job_id=p.required("JOB_ID"),
            secret=secret.encode(),
            worker_id=worker_id,
            workers=worker_ids,
            join=join,
            store_host=p.get("STORE_HOST", "127.0.0.1"),
            store_port=p.number("STORE_PORT", int, None, lambda v: 1 <= v <= 65535, "an integer in 1..65535"),
            store_serve=p.boolean("STORE_SERVE", False),
            orders=orders,
            local_batch=p.number("LOCAL_BATCH", int, 32, lambda v: v >= 1, "an integer ≥ 1"),
            max_local_batch=p.number("MAX_LOCAL_BATCH", int, 256, lambda v: v >= 1, "an integer ≥ 1"),
            scaling=scaling,
            seed=p.number("SEED", int, 0, lambda v: v >= 0, "an integer ≥ 0"),
            epochs=p.number("EPOCHS", int, 1, lambda v: v >= 1, "an integer ≥ 1"),
            group_timeout_s=p.number("GROUP_TIMEOUT_S", float, 10.0, lambda v: v > 0, "a number > 0"),
            join_timeout_s=p.number("JOIN_TIMEOUT_S", float, 600.0, lambda v: v > 0, "a number > 0"),
            socket_ifname=p.get("SOCKET_IFNAME", ""),
            event_log=p.get("EVENT_LOG", ""),
            log_indices=p.boolean("LOG_INDICES", False),
            checkpoint=p.get("CHECKPOINT", ""),
            resume=p.get("RESUME", ""),
            reports=p.get("REPORTS", ""),
            report_every_s=p.number("REPORT_EVERY_S", float, 2.0, lambda v: v > 0, "a number > 0"),
            model=model,
            dist_backend=dist_backend,
            run=_restart_count(environ),
        )


def _restart_count(environ: Mapping[str, str]) -> int:
    raw = environ.get("SLURM_RESTART_COUNT", "").strip()
    if not raw:
        return 0
    if not raw.isascii() or not raw.isdigit() or len(raw) > 9:
        raise EnvError(f"SLURM_RESTART_COUNT={raw[:80]!r}: must be an integer ≥ 0 (Slurm sets it)")
    return int(raw)


class _Parser:
    """Reads prefixed variables and produces errors that name variable, value and rule."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._env = environ

    def get(self, name: str, default: str) -> str:
        return self._env.get(PREFIX + name, default).strip()

    def required(self, name: str) -> str:
        value = self.get(name, "")
        if not value:
            raise EnvError(f"{PREFIX}{name} is not set: it is required")
        return value

    def boolean(self, name: str, default: bool) -> bool:
        raw = self.get(name, "1" if default else "0").lower()
        if raw in {"1", "true", "yes"}:
            return True
        if raw in {"0", "false", "no", ""}:
            return False
        raise EnvError(f"{PREFIX}{name}={raw!r}: must be 0 or 1")

    def number(
        self, name: str, kind: Callable[[str], _T], default: _T | None, ok: Callable[[_T], bool], rule: str
    ) -> _T:
        raw = self.get(name, "")
        if not raw:
            if default is None:
                raise EnvError(f"{PREFIX}{name} is not set: it is required ({rule})")
            return default
        try:
            value = kind(raw)
        except ValueError as exc:
            raise EnvError(f"{PREFIX}{name}={raw!r}: must be {rule}") from exc
        if not ok(value):
            raise EnvError(f"{PREFIX}{name}={raw!r}: must be {rule}")
        return value
