"""Durable state of the daemon: rounds, the action journal and job progress, in SQLite (WAL).

This module owns the database file and its schema. Its contract with the daemon:

* every action is written *before* it runs (:meth:`Store.begin_action`, state ``running``) and
  again *after* (:meth:`Store.finish_action`, ``done`` or ``failed`` with the message), each in its
  own committed transaction, so a daemon killed in between finds the action in
  :meth:`Store.unfinished_actions` on restart and reconciles it against Slurm instead of losing
  or repeating it; each step of an action (one Slurm command, one order) is written before it
  runs, with what it will produce or look for, and its outcome (the Slurm ids it produced)
  after it (:meth:`Store.add_step`), so the restarted daemon resumes or undoes exactly the steps
  that ran;
* one acting daemon per store: :meth:`Store.hold` takes an exclusive lock on ``<store>.lock``
  for the life of the process;
* every round is recorded with its plan (as JSON) and the one-line summary;
* progress reports from jobs' launchers (samples, loss, metric, throughput at a configuration,
  resize pauses, the model's name and parameter count, the epochs the job trains and, where they
  differ, what ``slurm-elastic submit`` said) are appended, never updated, together with
  how far the job's report file has been read, in one transaction, so a restarted daemon neither
  loses nor repeats a report;
* the workers of each launcher job (which node and which Slurm allocation each runs in), the
  satellite allocations the daemon submitted to grow jobs, and the node releases it still owes,
  so that a satellite is counted as part of its job and a shrink knows which workers to order
  out and when to give their nodes back;
* the jobs in quarantine: a job whose own input (a report line, its Slurm record) broke a rule,
  with the first reason, so that ``status``, ``/metrics`` and a restarted daemon name it.

Every row comes back typed (:class:`ProgressRow`, :class:`JournalEntry`, :class:`RoundRecord`
with its :class:`~slurm_elastic.core.model.Plan`, :class:`Release`, :class:`Step`,
:class:`ReportInputs`); only a step's own detail and the daemon's ``meta`` values are free-form JSON.

A file that is not a database, or one another process keeps locked for ``LOCK_WAIT_S``, is a
:class:`StoreError` naming the file and the rule, never a traceback or a hang.

It must not talk to Slurm or decide anything; it stores and returns. Times are seconds since the
epoch, passed in by the caller (the store reads no clock).
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import stat
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

from slurm_elastic.core.actions import Action
from slurm_elastic.core.model import Plan
from slurm_elastic.store.rows import (
    PROGRESS_COLUMNS,
    JournalEntry,
    ProgressRow,
    Release,
    ReportInputs,
    RoundRecord,
    Step,
    StoreError,
    action_from_json,
    action_to_json,
    plan_from_json,
    plan_to_json,
    progress_row,
    round_of,
)
from slurm_elastic.store.schema import LOCK_WAIT_S, MIGRATIONS, SCHEMA, SCHEMA_VERSION

__all__ = ["LOCK_WAIT_S", "SCHEMA_VERSION", "JournalEntry", "ProgressRow", "Release", "ReportInputs", "RoundRecord",
           "Step", "Store", "StoreError", "action_from_json", "action_to_json", "plan_from_json", "plan_to_json"]


class Store:
    """The daemon's SQLite database.

    Args:
        path: database file (created with its folder if missing).
        read_only: open an existing store for reading only (``status`` beside a running daemon):
            nothing is created, migrated or written, and any write raises.
    """

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self.path = path
        self._lock_fd: int | None = None
        try:
            if read_only:
                if not path.is_file():
                    raise StoreError(f"store {path}: no such file (rule: a reader opens an existing store)")
                self._db = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True, isolation_level=None,
                                           timeout=LOCK_WAIT_S)
                self._check_schema()
                return
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.is_dir():
                raise StoreError(f"store {path}: a directory (rule: the store is a file)")
            self._db = sqlite3.connect(path, isolation_level=None, timeout=LOCK_WAIT_S)
        except OSError as exc:
            raise StoreError(f"store {path}: {exc.strerror or exc}") from None
        except sqlite3.Error as exc:
            raise StoreError(f"store {path}: {exc}") from None
        try:
            self._open()
        except sqlite3.OperationalError as exc:
            self._db.close()
            if "locked" in str(exc) or "busy" in str(exc):
                raise StoreError(f"store {path}: locked by another process for {LOCK_WAIT_S:.0f} s "
                                 "(rule: one daemon per store)") from None
            raise StoreError(f"store {path}: {exc}") from None
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise StoreError(f"store {path}: {exc} (rule: a slurm-elastic SQLite store; move the file "
                             "aside to start a new one)") from None

    def _check_schema(self) -> None:
        try:
            row = self._db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        except sqlite3.Error as exc:
            self._db.close()
            raise StoreError(f"store {self.path}: {exc}") from None
        if row is None or int(row[0]) != SCHEMA_VERSION:
            self._db.close()
            raise StoreError(f"store {self.path}: schema version {row[0] if row else 'none'}, this slurm-elastic "
                             f"reads {SCHEMA_VERSION}")

    def _open(self) -> None:
        path = self.path
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.executescript(SCHEMA)  # idempotent; executescript manages its own transaction
        with self._tx():
            row = self._db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
            if row is None:
                self._db.execute("INSERT INTO meta(key, value) VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
            elif int(row[0]) in MIGRATIONS:
                for stmt in MIGRATIONS[int(row[0])]:
                    self._db.execute(stmt)
                self._db.execute("UPDATE meta SET value=? WHERE key='schema'", (str(SCHEMA_VERSION),))
            elif int(row[0]) != SCHEMA_VERSION:
                raise StoreError(f"{path}: schema version {row[0]}, this slurm-elastic reads {SCHEMA_VERSION}")

    def close(self) -> None:
        """Close the connection (and give up the acting lock, if held)."""
        self._db.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def hold(self) -> None:
        """Take the acting lock (``<store>.lock``, ``flock``, exclusive) for as long as this store is
        open; again on the same store: nothing. The lock dies with the process, so a killed daemon
        never leaves it behind.

        Raises:
            StoreError: another process holds it (another daemon acts on this store), or the lock
                file breaks a rule (a link, not a regular file).
        """
        if self._lock_fd is not None:
            return
        lock = self.path.with_name(self.path.name + ".lock")
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise StoreError(f"store {self.path}: lock file {lock}: {exc.strerror or exc} (rule: a regular "
                             "file, never a link)") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise StoreError(f"store {self.path}: lock file {lock} is not a regular file")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
                raise StoreError(f"store {self.path}: another daemon (pid {holder}) acts on it (rule: one "
                                 "acting daemon per store; stop it first)") from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except BaseException:
            os.close(fd)
            raise
        self._lock_fd = fd

    @contextmanager
    def _tx(self) -> Iterator[None]:
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise StoreError(f"store {self.path}: {exc} (waited {LOCK_WAIT_S:.0f} s; rule: one daemon per "
                             "store)") from None
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    # -- rounds -----------------------------------------------------------------------------------

    def record_round(self, t: float, plan: Plan, summary: str, violations: tuple[str, ...]) -> int:
        """Store one round; returns its id."""
        with self._tx():
            cur = self._db.execute(
                "INSERT INTO rounds(t, policy, summary, plan, violations) VALUES (?, ?, ?, ?, ?)",
                (t, plan.policy, summary, plan_to_json(plan), json.dumps(list(violations))),
            )
        return int(cur.lastrowid or 0)

    def rounds(self, since: float = 0.0) -> list[RoundRecord]:
        """Rounds at or after ``since``, oldest first."""
        rows = self._db.execute(
            "SELECT id, t, policy, summary, plan, violations FROM rounds WHERE t >= ? ORDER BY id", (since,)
        ).fetchall()
        return [round_of(r) for r in rows]

    def last_round(self) -> RoundRecord | None:
        """The latest round (one row read, however long the daemon has run)."""
        row = self._db.execute(
            "SELECT id, t, policy, summary, plan, violations FROM rounds ORDER BY id DESC LIMIT 1").fetchone()
        return round_of(row) if row is not None else None

    # -- the action journal -----------------------------------------------------------------------

    def begin_action(self, action: Action, t: float, round_id: int | None = None) -> int:
        """Journal an action as running, before it runs; returns its id."""
        with self._tx():
            cur = self._db.execute(
                "INSERT INTO actions(round_id, job_id, kind, body, state, started) VALUES (?, ?, ?, ?, 'running', ?)",
                (round_id, action.job_id, action.kind.value, action_to_json(action), t),
            )
        return int(cur.lastrowid or 0)

    def finish_action(self, action_id: int, ok: bool, t: float, message: str = "") -> None:
        """Journal the outcome of an action.

        Raises:
            StoreError: no running action has that id (finished twice, or never begun).
        """
        with self._tx():
            cur = self._db.execute(
                "UPDATE actions SET state=?, message=?, finished=? WHERE id=? AND state='running'",
                ("done" if ok else "failed", message, t, action_id),
            )
            if cur.rowcount != 1:
                raise StoreError(f"action {action_id} is not running: cannot record its outcome twice")

    def _entries(self, where: str, args: tuple[Any, ...]) -> list[JournalEntry]:
        rows = self._db.execute(
            f"SELECT id, round_id, body, state, message, started, finished FROM actions WHERE {where} ORDER BY id",
            args,
        ).fetchall()
        return [JournalEntry(r[0], r[1], action_from_json(r[2]), r[3], r[4], r[5], r[6]) for r in rows]

    def add_step(self, action_id: int, name: str, detail: Mapping[str, Any], t: float) -> None:
        """Journal one step of a running action: before it runs, what it will do and look for; after,
        what it produced (the Slurm ids)."""
        with self._tx():
            self._db.execute("INSERT INTO steps(action_id, seq, name, detail, t) VALUES (?, (SELECT COALESCE("
                             "MAX(seq), 0) + 1 FROM steps WHERE action_id = ?), ?, ?, ?)",
                             (action_id, action_id, name, json.dumps(dict(detail), sort_keys=True), t))

    def steps_of(self, action_id: int) -> list[Step]:
        """The steps of an action, in order."""
        return [Step(str(n), json.loads(d), float(t)) for n, d, t in self._db.execute(
            "SELECT name, detail, t FROM steps WHERE action_id = ? ORDER BY seq", (action_id,))]

    def step_details(self, name: str) -> list[dict[str, Any]]:
        """The detail of every step called ``name``, of any action, oldest first."""
        return [json.loads(d) for (d,) in self._db.execute(
            "SELECT detail FROM steps WHERE name = ? ORDER BY action_id, seq", (name,))]

    def unfinished_actions(self) -> list[JournalEntry]:
        """Actions begun and never finished (the daemon died in between), oldest first."""
        return self._entries("state = 'running'", ())

    def actions_between(self, t0: float, t1: float) -> list[JournalEntry]:
        """Actions started at or after ``t0`` and before ``t1``, oldest first."""
        return self._entries("started >= ? AND started < ?", (t0, t1))

    def actions_of(self, job_id: str) -> list[JournalEntry]:
        """Every journaled action of one job, oldest first."""
        return self._entries("job_id = ?", (job_id,))

    # -- progress ---------------------------------------------------------------------------------

    def add_progress(self, job_id: str, row: ProgressRow) -> None:
        """Append one progress row of a job."""
        with self._tx():
            self._insert_progress(job_id, row)

    def _insert_progress(self, job_id: str, r: ProgressRow) -> None:
        if r.samples < 0 or r.world < 0 or r.global_batch < 0:
            raise StoreError(
                f"job {job_id}: progress samples={r.samples}, world={r.world}, batch={r.global_batch} must be >= 0"
            )
        self._db.execute(
            f"INSERT INTO progress(job_id, {PROGRESS_COLUMNS}) VALUES ({', '.join('?' * 18)})",
            (job_id, r.t, r.kind, r.samples, r.world, r.global_batch, r.throughput, r.loss, r.metric, r.pause_s,
             r.epoch_size, ",".join(r.lost), r.nodes, r.model, r.params, r.epochs, r.submitted_epochs,
             r.submitted_local_batch),
        )

    def add_reports(self, job_id: str, rows: Iterable[ProgressRow], offset: int) -> None:
        """Append a job's verified launcher reports and the report file offset read up to, atomically.

        Raises:
            StoreError: a row has a negative count (nothing is stored then).
        """
        with self._tx():
            for r in rows:
                self._insert_progress(job_id, r)
            self._db.execute("INSERT INTO report_offsets(job_id, offset) VALUES (?, ?) "
                             "ON CONFLICT(job_id) DO UPDATE SET offset=excluded.offset", (job_id, offset))

    def quarantine(self, job_id: str, reason: str, t: float) -> bool:
        """Put a job in quarantine with ``reason`` (the first reason is kept); whether it is new."""
        with self._tx():
            cur = self._db.execute("INSERT INTO quarantine(job_id, t, reason) VALUES (?, ?, ?) "
                                   "ON CONFLICT(job_id) DO NOTHING", (job_id, t, reason[:500]))
        return cur.rowcount == 1

    def first_submits(self, seen: Mapping[str, float]) -> dict[str, float]:
        """Each job's first submit time: the earliest this store saw (Slurm resets a job's submit
        time when it is requeued) or, for a job new to it, the one in ``seen``, which is kept."""
        known = self.submit_times(seen)
        new = {j: t for j, t in seen.items() if j not in known}
        if new:
            with self._tx():
                self._db.executemany("INSERT INTO submit_times(job_id, t) VALUES (?, ?) ON CONFLICT(job_id) "
                                     "DO NOTHING", sorted(new.items()))
        return {**new, **{j: min(t, seen[j]) for j, t in known.items()}}

    def submit_times(self, job_ids: Iterable[str]) -> dict[str, float]:
        """The first submit times this store keeps for these jobs."""
        out: dict[str, float] = {}
        ids = list(job_ids)
        for i in range(0, len(ids), 500):
            chunk = ids[i:i + 500]
            marks = ",".join("?" * len(chunk))
            out.update({str(j): float(t) for j, t in self._db.execute(
                f"SELECT job_id, t FROM submit_times WHERE job_id IN ({marks})", chunk)})
        return out

    def quarantined(self) -> dict[str, str]:
        """Every job ever put in quarantine, with its reason."""
        return {str(j): str(r) for j, r in self._db.execute("SELECT job_id, reason FROM quarantine ORDER BY t")}

    def report_offset(self, job_id: str) -> int:
        """How far the job's report file has been read (bytes)."""
        r = self._db.execute("SELECT offset FROM report_offsets WHERE job_id = ?", (job_id,)).fetchone()
        return int(r[0]) if r else 0

    def progress_of(self, job_id: str) -> list[ProgressRow]:
        """Every progress row of a job, oldest first."""
        rows = self._db.execute(f"SELECT {PROGRESS_COLUMNS} FROM progress WHERE job_id = ? ORDER BY t, id",
                                (job_id,)).fetchall()
        return [progress_row(r) for r in rows]

    def finished_jobs(self, limit: int) -> list[str]:
        """The jobs whose launcher reported the end of their training, latest end first (at most ``limit``)."""
        rows = self._db.execute("SELECT job_id FROM progress WHERE kind='end' GROUP BY job_id ORDER BY MAX(t) DESC "
                                "LIMIT ?", (limit,)).fetchall()
        return [str(r[0]) for r in rows]

    def finished_count(self) -> int:
        """How many jobs' launchers reported the end of their training."""
        return int(self._db.execute("SELECT COUNT(DISTINCT job_id) FROM progress WHERE kind='end'").fetchone()[0])

    def meta(self, key: str) -> str | None:
        """A value the daemon keeps between runs (e.g. its fitted progress model), or ``None``."""
        row = self._db.execute("SELECT value FROM meta WHERE key=?", (f"daemon.{key}",)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        """Keep ``value`` under ``key`` (see :meth:`meta`)."""
        with self._tx():
            self._db.execute("INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET "
                             "value=excluded.value", (f"daemon.{key}", value))

    def report_inputs(self, job_ids: Iterable[str]) -> ReportInputs:
        """What the allocation report takes from the store for these jobs and the jobs their
        satellites belong to (:class:`ReportInputs`)."""
        satellites = self.satellites(include_ended=True)
        ids = set(job_ids) | set(satellites.values())
        return ReportInputs({j: self.actions_of(j) for j in ids}, {j: self.progress_of(j) for j in ids}, satellites)

    # -- workers and satellites -------------------------------------------------------------------

    def add_workers(self, job_id: str, workers: list[tuple[str, str, str]], run: int = 0) -> None:
        """Record the workers a job's run ``run`` starts with, as ``(worker, node, alloc)``. The
        workers of an earlier run are forgotten: a requeue started every worker again, on nodes of
        its new allocation, under the same ids. Within a run, a worker already known is kept."""
        with self._tx():
            if self.workers_run(job_id) not in (None, run):
                self._db.execute("DELETE FROM workers WHERE job_id = ?", (job_id,))
            self._db.execute("INSERT INTO worker_runs(job_id, run) VALUES (?, ?) ON CONFLICT(job_id) DO UPDATE "
                             "SET run=excluded.run", (job_id, run))
            self._db.executemany("INSERT OR IGNORE INTO workers(job_id, worker, node, alloc) VALUES (?, ?, ?, ?)",
                                 [(job_id, w, n, a) for w, n, a in workers])

    def workers_run(self, job_id: str) -> int | None:
        """The run of a job the recorded workers belong to (``None``: none recorded)."""
        row = self._db.execute("SELECT run FROM worker_runs WHERE job_id = ?", (job_id,)).fetchone()
        if row is not None:
            return int(row[0])
        known = self._db.execute("SELECT 1 FROM workers WHERE job_id = ? LIMIT 1", (job_id,)).fetchone()
        return 0 if known else None

    def workers_of(self, job_id: str) -> dict[str, tuple[str, str]]:
        """Every worker recorded for a job's latest run (:meth:`add_workers`): worker id -> (node,
        Slurm allocation)."""
        rows = self._db.execute("SELECT worker, node, alloc FROM workers WHERE job_id = ?", (job_id,)).fetchall()
        return {r[0]: (r[1], r[2]) for r in rows}

    def add_satellite(self, sat_id: str, parent: str, t: float, workers: list[tuple[str, str]]) -> None:
        """Record a satellite allocation of ``parent`` and its workers ``(worker, node)``."""
        with self._tx():
            self._db.execute("INSERT INTO satellites(sat_id, parent, submitted) VALUES (?, ?, ?)", (sat_id, parent, t))
            self._db.executemany("INSERT INTO workers(job_id, worker, node, alloc) VALUES (?, ?, ?, ?)",
                                 [(parent, w, n, sat_id) for w, n in workers])

    def satellites(self, include_ended: bool = False) -> dict[str, str]:
        """Satellite job id -> parent job id (by default only those not yet seen ended)."""
        where = "" if include_ended else " WHERE ended IS NULL"
        return {r[0]: r[1] for r in self._db.execute(f"SELECT sat_id, parent FROM satellites{where}").fetchall()}

    def add_release(self, job_id: str, nodes: list[str], world: int, leaving: int, t: float) -> None:
        """Record that ``job_id`` keeps only ``nodes`` once ``leaving`` workers left its ``world``-worker group."""
        with self._tx():
            self._db.execute("INSERT INTO releases(job_id, nodes, world, leaving, ordered) VALUES (?, ?, ?, ?, ?) "
                             "ON CONFLICT(job_id) DO UPDATE SET nodes=excluded.nodes, world=excluded.world, "
                             "leaving=excluded.leaving, ordered=excluded.ordered",
                             (job_id, json.dumps(nodes), world, leaving, t))

    def releases(self) -> list[Release]:
        """Node releases ordered and not yet done, oldest order first."""
        rows = self._db.execute(
            "SELECT job_id, nodes, world, leaving, ordered FROM releases ORDER BY ordered").fetchall()
        return [Release(str(r[0]), tuple(str(n) for n in json.loads(r[1])), int(r[2]), int(r[3]), float(r[4]))
                for r in rows]

    def drop_release(self, job_id: str) -> None:
        """Forget a node release (done, or its job ended)."""
        with self._tx():
            self._db.execute("DELETE FROM releases WHERE job_id = ?", (job_id,))

    def satellite_times(self) -> dict[str, float]:
        """Satellite job id -> when it was submitted (all satellites)."""
        return {r[0]: r[1] for r in self._db.execute("SELECT sat_id, submitted FROM satellites").fetchall()}

    def end_satellite(self, sat_id: str, t: float) -> None:
        """Mark a satellite as ended (seen gone from the queue, or cancelled)."""
        with self._tx():
            self._db.execute("UPDATE satellites SET ended=? WHERE sat_id=? AND ended IS NULL", (t, sat_id))

    def lost_workers(self, job_id: str, since: float | None = None) -> set[str]:
        """Every worker a recovery of the job went on without (its reports' ``lost``), by the reports
        written at or after ``since`` when given (a requeued job's run: its workers started again
        under the same ids, and those an earlier run lost are back)."""
        rows = self._db.execute("SELECT lost FROM progress WHERE job_id = ? AND lost != '' AND t >= ?",
                                (job_id, float("-inf") if since is None else since))
        return {w for (lost,) in rows for w in str(lost).split(",") if w}

    def latest_progress(self, job_id: str) -> ProgressRow | None:
        """The newest progress row of a job, if any."""
        r = self._db.execute(f"SELECT {PROGRESS_COLUMNS} FROM progress WHERE job_id = ? ORDER BY t DESC, id DESC "
                             "LIMIT 1", (job_id,)).fetchone()
        return None if r is None else progress_row(r)
