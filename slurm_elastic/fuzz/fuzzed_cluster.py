"""A small cluster for the daemon-level fuzz families: one hostile job beside honest ones.

Four jobs on three nodes of four GPUs, read the way the daemon reads them (a ``squeue --json``
document of either dialect through :func:`~slurm_elastic.slurm.json_records.parse_jobs`, with
``refused``), each launcher job with its channel files in a temporary folder:

* ``7``, the **hostile** job: a running launcher job (``gpus=1:8``) on ``n000`` and ``n002``; a family puts its
  hostile input here (its report or orders lines, its files, its AdminComment, its JSON record);
* ``8``, an honest running launcher job (``gpus=1:4``, a batch range) on ``n001``, with one signed report;
* ``9``, an honest waiting elastic job (``gpus=1:2``);
* ``10``, an honest running rigid job on ``n002``.

The honest jobs were submitted and started before the hostile one, so no request the hostile job
may legally make (its ``--elastic`` range) can push them out of a ``dp`` plan: an honest job missing
from the plan is a job one user's input touched. :meth:`FuzzCluster.round` runs one dry-run daemon
round (poll, then ``round``, as ``Daemon.run(max_rounds=1)`` does, without its retry loop) and
:meth:`FuzzCluster.act` runs the actuator with a recording runner on an action of the hostile job
and of two honest ones.
"""

from __future__ import annotations

import copy
import functools
import os
import pwd
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from slurm_elastic.channel import COMMENT_KEY
from slurm_elastic.config import Config, DaemonConfig
from slurm_elastic.contract import ELASTIC_TAG
from slurm_elastic.core.actions import Action, ActionKind
from slurm_elastic.core.model import ClusterSnapshot, JobId, NodeName, NodeState, Placement
from slurm_elastic.daemon import Daemon
from slurm_elastic.fuzz.case import CaseResult
from slurm_elastic.observe.view import ClusterView
from slurm_elastic.slurm.actuator import SlurmActuator
from slurm_elastic.slurm.json_records import parse_jobs
from slurm_elastic.slurm.records import JobRecord, NodeRecord
from slurm_elastic.store import Store
from slurm_elastic.testing import shipped_profiles
from slurm_elastic_launcher.orders import sign_report
from slurm_elastic_predictor.throughput import ThroughputModel

NOW = 10_000.0
HOSTILE = "7"
HONEST = ("8", "9", "10")
HONEST_ELASTIC = ("8", "9")
UID = os.getuid()
USER = pwd.getpwuid(UID).pw_name
OTHER_UID = 65534 if UID != 65534 else 65533
"""Another user's uid (files chowned to it are another user's; needs root)."""
SECRET_BYTES = 32


@functools.cache
def profiles() -> Mapping[str, ThroughputModel]:
    """The shipped throughput models every fuzzed cluster plans with, loaded once per process."""
    return shipped_profiles()


def elastic(gpus: str, *extra: str) -> str:
    """An elastic job's AdminComment (``contract.py`` owns the grammar; this only joins words)."""
    return " ".join((ELASTIC_TAG, f"gpus={gpus}", *extra))


def report_body(job_id: str, **fields: Any) -> dict[str, Any]:
    """A plausible progress report of ``job_id`` (2 workers, 256 samples per step)."""
    body: dict[str, Any] = {"job_id": job_id, "kind": "progress", "t": NOW - 100, "samples": 6400, "world": 2,
                            "global_batch": 256, "throughput": 1000.0, "epoch_size": 50_000}
    body.update(fields)
    return body


@dataclass
class Source:
    """A record source (the CLI backend's role) over records read from a document."""

    nodes: list[NodeRecord]
    records: list[JobRecord]
    refused: dict[str, str] = field(default_factory=dict)
    refused_nodes: dict[str, str] = field(default_factory=dict)
    release: tuple[int, int, int] = (25, 11, 7)

    @property
    def runner(self) -> Callable[[Sequence[str]], str]:
        raise AssertionError("the view never runs a command")

    def jobs(self) -> list[JobRecord]:
        return list(self.records)

    def read(self) -> tuple[list[NodeRecord], list[JobRecord]]:
        return list(self.nodes), list(self.records)


def nodes() -> list[NodeRecord]:
    """Three up nodes of four GPUs in partition ``gpu``."""
    return [NodeRecord(NodeName(f"n{i:03d}"), NodeState.UP, ("IDLE",), 4, (), (), ("gpu",)) for i in range(3)]


# -- squeue --json documents ---------------------------------------------------------------------

def _n(value: int, *, is_set: bool = True) -> dict[str, Any]:
    return {"set": is_set, "infinite": False, "number": value}


def job_json(dialect: str, job_id: int, *, held: Sequence[tuple[str, str]] = (), gpus: int = 1, admin: str = "",
             comment: str = "", submit: int = 0, start: int = 0, user: str = USER) -> dict[str, Any]:
    """One job record as ``squeue --json`` prints it (``"25.11"`` or ``"22.05"``): running on the
    nodes of ``held`` (node, ``IDX`` list such as ``"0-1"``), else waiting for ``gpus`` GPUs."""
    legacy = dialect == "22.05"
    num: Callable[[int], Any] = (lambda v: v) if legacy else _n
    running = bool(held)
    detail = [f"gpu:{_count(idx)}(IDX:{idx})" for _, idx in held]
    per_node = max((_count(idx) for _, idx in held), default=gpus)
    return {
        "job_id": job_id, "name": "train", "user_name": user, "account": "acct", "partition": "gpu",
        "job_state": ("RUNNING" if running else "PENDING") if legacy else (["RUNNING"] if running else ["PENDING"]),
        "nodes": ",".join(n for n, _ in held), "gres_detail": detail,
        "tres_per_node": f"gres{':' if legacy else '/'}gpu:{per_node}", "tres_per_job": "", "tres_per_task": "",
        "node_count": num(max(1, len(held))), "batch_host": held[0][0] if held else "", "submit_time": num(submit),
        "start_time": num(start if running else 0), "resize_time": num(0), "admin_comment": admin,
        "comment": comment, "array_job_id": num(0),
        "array_task_id": None if legacy else _n(0, is_set=False), "het_job_id": num(0), "het_job_offset": num(0),
        "restart_cnt": 0, "tasks": num(sum(_count(idx) for _, idx in held) or gpus),
        "current_working_directory": "/tmp",
    }


def _count(idx: str) -> int:
    lo, _, hi = idx.partition("-")
    return int(hi or lo) - int(lo) + 1


def squeue_doc(dialect: str, jobs: list[dict[str, Any]]) -> dict[str, Any]:
    """A whole ``squeue --json`` document of ``dialect`` holding ``jobs``."""
    if dialect == "22.05":
        meta: dict[str, Any] = {"plugin": {"type": "openapi/v0.0.38", "name": "Slurm OpenAPI v0.0.38"},
                                "Slurm": {"version": {"major": 22, "micro": 8, "minor": 5}, "release": "22.05.8"}}
        return {"meta": meta, "errors": [], "jobs": jobs}
    meta = {"plugin": {"type": "", "name": "", "data_parser": "data_parser/v0.0.44"}, "command": ["squeue"],
            "slurm": {"version": {"major": "25", "micro": "7", "minor": "11"}, "release": "25.11.7"}}
    return {"jobs": jobs, "meta": meta, "errors": [], "warnings": []}


# -- channel files -----------------------------------------------------------------------------------

def write_channel(base: Path, secret: bytes) -> str:
    """A launcher job's files (secret, orders, reports, join script, the environment its satellites
    get) at ``base``; returns its comment."""
    for suffix, data, mode in (("", secret, 0o600), (".orders", b"", 0o600), (".reports", b"", 0o600),
                               (".join", b"#!/bin/bash\n", 0o700), (".env", b"PATH=/usr/bin\0", 0o600)):
        path = Path(f"{base}{suffix}")
        path.write_bytes(data)
        path.chmod(mode)
    return f"{COMMENT_KEY}{base}.orders"


@dataclass
class FuzzCluster:
    """The cluster of one case (see the module docstring); a family changes what it needs, then
    calls :meth:`round` and :meth:`act`.

    Attributes:
        work: the case's folder.
        dialect: the ``squeue --json`` dialect its document is printed in.
        secrets: each launcher job's secret.
        doc: the ``squeue --json`` document (the hostile job's record is ``doc["jobs"][-1]``).
    """

    work: Path
    dialect: str
    profiles: Mapping[str, ThroughputModel]
    secrets: dict[str, bytes] = field(default_factory=dict)
    doc: dict[str, Any] = field(default_factory=dict)
    view: ClusterView | None = None
    snapshot: ClusterSnapshot | None = None

    @classmethod
    def build(cls, rng: random.Random, work: Path, profiles: Mapping[str, ThroughputModel]) -> FuzzCluster:
        """The cluster with honest files and reports, in a random dialect."""
        c = cls(work, rng.choice(("25.11", "22.05")), profiles)
        comments = {}
        for jid in ("7", "8"):
            c.secrets[jid] = bytes(rng.randrange(33, 127) for _ in range(SECRET_BYTES))
            comments[jid] = write_channel(work / f"job-{jid}", c.secrets[jid])
        c.append_reports("8", [sign_report(report_body("8"), c.secrets["8"]).encode()])
        c.append_reports("7", [sign_report(report_body("7"), c.secrets["7"]).encode()])
        d = c.dialect
        c.doc = squeue_doc(d, [
            job_json(d, 8, held=[("n001", "0-1")], admin=elastic("1:4", "batch=32:1024"), comment=comments["8"],
                     submit=int(NOW) - 500, start=int(NOW) - 400),
            job_json(d, 9, gpus=1, admin=elastic("1:2"), submit=int(NOW) - 480),
            job_json(d, 10, held=[("n002", "0")], submit=int(NOW) - 470, start=int(NOW) - 420),
            job_json(d, 7, held=[("n000", "0-1"), ("n002", "3")], admin=elastic("1:8"), comment=comments["7"],
                     submit=int(NOW) - 450, start=int(NOW) - 300),
        ])
        return c

    # -- the hostile job's inputs ------------------------------------------------------------------

    @property
    def hostile_record(self) -> dict[str, Any]:
        """The hostile job's record in the document (change it in place)."""
        rec: dict[str, Any] = self.doc["jobs"][-1]
        return rec

    def base(self, job_id: str = HOSTILE) -> Path:
        """A launcher job's secret file (its other files add ``.orders``, ``.reports``, ``.join``)."""
        return self.work / f"job-{job_id}"

    def append_reports(self, job_id: str, lines: Sequence[bytes], *, newline: bool = True) -> None:
        with open(f"{self.base(job_id)}.reports", "ab") as fh:
            fh.write(b"\n".join(lines) + (b"\n" if newline else b""))

    # -- one round, one act step --------------------------------------------------------------------

    def records(self, res: CaseResult) -> tuple[list[JobRecord], dict[str, str]] | None:
        """The document's records as the CLI backend reads them (``None``: parse_jobs raised, recorded)."""
        refused: dict[str, str] = {}
        try:
            return parse_jobs(copy.deepcopy(self.doc), refused), refused
        except Exception as exc:  # one record never fails the read
            res.note_foreign("parse_jobs(doc, refused)", exc)
            return None

    def round(self, res: CaseResult, config: Config | None = None) -> str:
        """One dry-run round over the document (``config``'s policy, parameters, guards, partitions
        and default model; else ``dp``); counts a failed round and unplanned honest jobs.

        With ``dp`` every honest job is planned whatever the hostile job does; with another
        ``config`` its policy and guards may leave one waiting (a GPU cap per user holds all four
        jobs: they share a user), so then only an honest job left out of the snapshot or
        quarantined counts.

        Returns:
            ``left_out`` / ``quarantined`` / ``planned`` / ``unplanned`` for the hostile job, or
            ``round_failed``.
        """
        read = self.records(res)
        if read is None:
            res.rounds_failed += 1
            res.note_failure("the round could not read the document", "round failed: the document was not read")
            return "round_failed"
        records, refused = read
        cfg = config or Config(DaemonConfig(policy="dp"))
        cfg = replace(cfg, daemon=replace(cfg.daemon, store=self.work / "state.db", dry_run=True))
        store = Store(cfg.daemon.store)
        view = ClusterView(Source(nodes(), records, refused), self.profiles, lambda: NOW, cfg.daemon.partitions,
                           cfg.daemon.default_model, store)
        self.view = view
        try:
            daemon = Daemon(cfg, view, store, sleep=lambda s: None, clock=lambda: NOW)
            daemon.due()
            rec = daemon.round()
        except Exception as exc:  # the daemon loop would log this and retry: every job unplanned
            res.rounds_failed += 1
            res.note_foreign("daemon round", exc)
            return "round_failed"
        self.snapshot = rec.snapshot
        rounds = store.rounds()
        if not rounds:
            res.rounds_failed += 1
            res.note_failure("the round recorded nothing", "round failed: nothing recorded")
            return "round_failed"
        planned = {str(j.job_id) for j in rounds[-1].plan.jobs}
        seen = {j.job_id for j in rec.snapshot.jobs}
        why = view.quarantined()
        # a config that watches other partitions than the jobs' ("gpu") sees none of them, rightly
        watched = "gpu" in cfg.daemon.partitions
        missing = [j for j in HONEST if watched and (j not in seen or j in why
                   or (config is None and j in HONEST_ELASTIC and j not in planned))]
        if missing:
            res.other_jobs_unplanned += len(missing)
            res.note_failure(f"honest jobs {missing} missing from the plan {sorted(planned)}; quarantined {why}",
                             f"other jobs unplanned: {why.get(missing[0], 'not in the plan')[:120]}")
        if HOSTILE in view.left_out:
            return "left_out"
        if HOSTILE in view.quarantined():
            return "quarantined"
        return "planned" if HOSTILE in planned else "unplanned"

    def act(self, res: CaseResult, kind: ActionKind) -> str:
        """The actuator, with a recording runner, on ``kind`` for the hostile job, a new batch for
        job 8 (an order through its launcher channel) and a preempt of job 10; counts an honest action that did not run.

        Returns:
            ``act_ok`` / ``act_refused`` for the hostile job's action, or ``act_foreign``.
        """
        if self.view is None or self.snapshot is None:
            return "act_skipped"
        ran: list[str] = []

        def runner(argv: Sequence[str]) -> str:
            line = " ".join(argv)
            ran.append(line)
            if argv and argv[0] == "squeue":
                return "PENDING\n"
            return "4242;cluster\n" if "sbatch" in argv else ""

        store = self.view.store
        assert store is not None
        act = SlurmActuator(runner, store, clock=lambda: NOW, records=lambda: self.view.records if self.view else {},
                            sleep=lambda s: None)
        mine = _held(self.view.records.get(JobId(HOSTILE)))
        slots = [(n, g) for n, gs in mine.slots for g in gs]
        after = {
            ActionKind.SHRINK: Placement.of(s for s in slots if s[0] == "n000"),
            ActionKind.GROW: Placement.of([*slots, (NodeName("n001"), 2), (NodeName("n001"), 3)]),
            ActionKind.REBATCH: mine,
            ActionKind.PREEMPT: Placement(()),
            ActionKind.DROP: Placement(()),
        }[kind]
        eight = _held(self.view.records.get(JobId("8")))
        actions = (
            Action(kind, JobId(HOSTILE), mine, after, 64, 32, 1, 0.1),
            Action(ActionKind.REBATCH, JobId("8"), eight, eight, 128, 64, 1, 0.1),
            Action(ActionKind.PREEMPT, JobId("10"), _held(self.view.records.get(JobId("10"))), Placement(()),
                   0, 0, 1, 0.1),
        )
        try:
            outs = act.apply(self.snapshot, actions)
            lines = act.tend()
        except Exception as exc:  # apply journals every action's error itself
            res.note_foreign("SlurmActuator.apply/tend", exc)
            return "act_foreign"
        del lines
        for o in outs:
            if not o.ok and o.message.startswith("failed:"):
                res.note_foreign_text(f"SlurmActuator.apply ({o.action.kind.value} job {o.action.job_id})", o.message)
        honest = {str(o.action.job_id): o for o in outs[1:]}
        if not (honest["8"].ok and "order" in honest["8"].message):
            res.other_jobs_unplanned += 1
            res.note_failure(f"job 8's rebatch order was not sent: {honest['8'].message}",
                             f"other jobs unacted: {honest['8'].message[:120]}")
        if not (honest["10"].ok and "scontrol requeue 10" in ran):
            res.other_jobs_unplanned += 1
            res.note_failure(f"job 10's preempt did not run: {honest['10'].message}",
                             f"other jobs unacted: {honest['10'].message[:120]}")
        return "act_ok" if outs[0].ok else "act_refused"


def _held(rec: JobRecord | None) -> Placement:
    return rec.placement if rec is not None else Placement(())
