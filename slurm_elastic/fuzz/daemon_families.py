"""The daemon-level fuzz families: one job's hostile input, one daemon round, one act step.

Each family builds a :class:`~slurm_elastic.fuzz.fuzzed_cluster.FuzzCluster`, puts its hostile input in
job 7 only, and returns the outcome's name; the cluster counts a failed round and any honest job
the input touched. The input a user controls: the job's report lines and orders file (lines signed
with the job's own secret included), its files (the secret, orders, reports, join script and satellites' environment: a
FIFO, a link, a device, a sparse huge file, another user's, the wrong mode, a folder, swapped after
the daemon opened the channel), its comment (where its channel is) and its AdminComment (written
from its ``--elastic*`` values). The input Slurm controls: the job's record in ``squeue --json``.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import random
import socket
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slurm_elastic import policies
from slurm_elastic.channel import (
    COMMENT_KEY,
    JOIN_MAX_BYTES,
    ORDERS_MAX_BYTES,
    REPORTS_MAX_BYTES,
    SECRET_MAX_BYTES,
    Channel,
    ChannelError,
)
from slurm_elastic.config import Config, DaemonConfig
from slurm_elastic.contract import ELASTIC_TAG, SATELLITE_KEY
from slurm_elastic.core.actions import ActionKind
from slurm_elastic.core.model import JobId
from slurm_elastic.core.trust import fair_shares
from slurm_elastic.fuzz.case import CaseResult, attempt_any
from slurm_elastic.fuzz.fuzzed_cluster import (
    HONEST,
    HONEST_ELASTIC,
    HOSTILE,
    NOW,
    OTHER_UID,
    USER,
    FuzzCluster,
    elastic,
    report_body,
)
from slurm_elastic.fuzz.hostile import (
    HOSTILE_STRINGS,
    NON_ASCII_DIGITS,
    deep_nesting,
    hostile_number,
    hostile_value,
    huge_digits,
    mutate_bytes,
    mutate_mapping,
    pick,
    short,
)
from slurm_elastic.observe.history import LEDGER_KEY, USER_HISTORIES, Ledger
from slurm_elastic.slurm.satellites import ENV_FILE_MAX_BYTES
from slurm_elastic_launcher.orders import MAC_KEY, canonical, sign_order, sign_report

ROOT = os.geteuid() == 0
ACTS = (ActionKind.SHRINK, ActionKind.GROW, ActionKind.REBATCH, ActionKind.PREEMPT, ActionKind.DROP)
CHANNEL_ACTS = (ActionKind.SHRINK, ActionKind.GROW, ActionKind.REBATCH)
"""The actions that reach a launcher job's channel (its orders file, secret and join script)."""


def sign_any(body: dict[str, Any], secret: bytes) -> bytes:
    """A wire line of any body, signed with ``secret`` the way the launcher signs (a user holding
    the job's secret can sign anything)."""
    mac = hmac.new(secret, canonical(body), hashlib.sha256).hexdigest()
    return json.dumps({**body, MAC_KEY: mac}, sort_keys=True, separators=(",", ":")).encode()


def _finish(c: FuzzCluster, res: CaseResult, rng: random.Random, acting: bool = True,
            acts: tuple[ActionKind, ...] = ACTS) -> str:
    outcome = c.round(res)
    if acting and outcome != "round_failed":
        outcome += "+" + c.act(res, pick(rng, acts))
    return outcome


# -- report lines ---------------------------------------------------------------------------------

_IMPOSSIBLE: tuple[dict[str, Any], ...] = (
    {"world": 4096}, {"world": 0}, {"global_batch": 1 << 40}, {"throughput": 1e12}, {"t": 1e18}, {"t": 0.0},
    {"samples": 10**15}, {"samples": 0}, {"kind": "end", "t": 1e18}, {"kind": "left", "world": 10**9},
    {"kind": "resize", "pause_s": float("nan")}, {"epoch_size": -1}, {"loss": float("inf")}, {"job_id": "8"},
    {"kind": "progress", "t": NOW + 3600}, {"samples": 2**63}, {"world": 2, "global_batch": 0},
)


def _hostile_report(rng: random.Random, secret: bytes) -> tuple[bytes, str]:
    later = report_body("7", t=NOW - 50, samples=12800)
    roll = rng.random()
    if roll < 0.3:
        body = mutate_mapping(rng, later)
        body.pop(MAC_KEY, None)
        return sign_any(body, secret), f"signed {short(body)}"
    if roll < 0.45:
        claim = pick(rng, _IMPOSSIBLE)
        return sign_any({**later, **claim}, secret), f"signed impossible claim {short(claim)}"
    if roll < 0.55:
        other = rng.choice((b"k" * 32, secret[:-1] + b"!", b""))
        return sign_any(later, other), "signed with another secret"
    if roll < 0.75:
        line = mutate_bytes(rng, sign_report(later, secret).encode())
        return line, f"mutated signed line {short(line)}"
    special: list[Callable[[], bytes]] = [
        lambda: deep_nesting(rng),
        lambda: b'{"job_id":"7","kind":"progress","samples":' + huge_digits(rng) + b',"mac":"00"}',
        lambda: b'{"job_id":"7","pad":"' + b"x" * pick(rng, ((64 << 10) + 1, 200_000, (1 << 20) + 5)) + b'"}',
        lambda: json.dumps(hostile_value(rng)).encode(),
        lambda: json.dumps({**later, MAC_KEY: hostile_value(rng)}).encode(),
        lambda: json.dumps({**later, MAC_KEY: "é" * 64}).encode(),
        lambda: pick(rng, (b"", b" ", b"\r", b"\x00" * 100, b"\xff\xfe{", b"\t\t")),
        lambda: b"\n".join([b"x", b"{}", b"[1]"] * rng.choice((1000, 30_000))),
    ]
    line = special[rng.randrange(len(special))]()
    return line, f"raw line {short(line)}"


def report_lines(rng: random.Random, c: FuzzCluster, res: CaseResult) -> str:
    """1-3 hostile lines in the hostile job's reports file (between honest ones, or last)."""
    lines: list[bytes] = []
    said: list[str] = []
    for _ in range(rng.randint(1, 3)):
        line, what = _hostile_report(rng, c.secrets["7"])
        lines.append(line)
        said.append(what)
    if rng.random() < 0.5:
        lines.append(sign_report(report_body("7", t=NOW - 40, samples=12800), c.secrets["7"]).encode())
    newline = rng.random() < 0.9
    c.append_reports("7", lines, newline=newline)
    res.described = "; ".join(said) + ("" if newline else " (no final newline)")
    return _finish(c, res, rng, acting=rng.random() < 0.3)


# -- report claims ---------------------------------------------------------------------------------

_CLAIMS: dict[str, tuple[Any, ...]] = {
    "world": (1, 2, 4, 8),
    "global_batch": (1, 64, 1024, 4096, 8192, 16384, 1 << 17),
    "throughput": (1.0, 1e3, 3e4, 1e5, 1e6),
    "epoch_size": (1, 64, 50_000, 10**9),
    "model": ("ncf", "bert", "cifar10", "imagenet", "my-net"),
    "kind": ("progress", "progress", "resize", "end"),
}


def report_claims(rng: random.Random, c: FuzzCluster, res: CaseResult) -> str:
    """1-4 signed claims of the hostile job, in its report bounds or beyond them (a batch, a
    throughput, an epoch size, a model name, an end report then more reports), under any policy:
    no honest job gets fewer GPUs than the same round without the claims gives it, except what it
    holds beyond its fair share (:mod:`slurm_elastic.core.trust`)."""
    cfg = Config(DaemonConfig(policy=pick(rng, policies.available())))
    if c.round(res, cfg) == "round_failed":
        return "round_failed"
    before = _planned_counts(c)
    lines, said, t, samples = [], [], NOW - 60.0, 6400
    for _ in range(rng.randint(1, 4)):
        claim = {key: pick(rng, values) for key, values in _CLAIMS.items() if rng.random() < 0.5}
        t, samples = t + 10.0, samples + rng.choice((0, 256, 10**4, 10**6))
        lines.append(sign_report(report_body("7", t=t, samples=samples, **claim), c.secrets["7"]).encode())
        said.append(short(claim))
    c.append_reports("7", lines)
    res.described = f"{cfg.daemon.policy}: " + "; ".join(said)
    outcome = c.round(res, cfg)
    if outcome == "round_failed" or c.snapshot is None:
        return outcome
    after, fair = _planned_counts(c), fair_shares(c.snapshot)
    for job in HONEST_ELASTIC:
        least = min(before.get(job, 0), fair.get(JobId(job), 0))
        if after.get(job, 0) < least:
            res.other_jobs_unplanned += 1
            res.note_failure(f"job {job} given {after.get(job, 0)} GPUs after job 7's claims, {before.get(job, 0)} "
                             f"before, fair share {fair.get(JobId(job), 0)}", "a report cost another job GPUs")
    return outcome


def _planned_counts(c: FuzzCluster) -> dict[str, int]:
    """GPUs per job in the cluster's last recorded round."""
    rounds = c.view.store.rounds() if c.view is not None and c.view.store is not None else []
    return {str(j.job_id): j.num_gpus for j in (rounds[-1].plan.jobs if rounds else ())}


# -- shared history --------------------------------------------------------------------------------

_STATES: tuple[tuple[str, ...], ...] = (
    ("COMPLETED",), ("COMPLETED", "COMPLETING"), ("RUNNING",), ("CANCELLED",), ("FAILED",), ("TIMEOUT",),
    ("NODE_FAIL",), ("PREEMPTED",), ("OUT_OF_MEMORY",), ("COMPLETING",))


def shared_history(rng: random.Random, c: FuzzCluster, res: CaseResult) -> str:
    """The hostile job's signed history (losses, then an ``end`` after up to 400 epochs) with any
    state Slurm may show for it: the shared progress model notes the job only when Slurm shows it
    completed and settled, never on its own end report, and never more than a user's share."""
    epochs, size = rng.choice((1, 5, 20, 400)), rng.choice((64, 1000, 50_000))
    first = report_body("7")["samples"]  # the job's honest report, already in its file
    rows = [report_body("7", t=NOW - 90 + i, samples=first + i * size // 2, epoch_size=size, loss=2.0 / (1 + i))
            for i in range(1, 2 * min(epochs, 30))]
    rows.append(report_body("7", kind="end", t=NOW - 20, samples=first + epochs * size, epoch_size=size))
    c.append_reports("7", [sign_report(r, c.secrets["7"]).encode() for r in rows])
    state = pick(rng, _STATES)
    if c.dialect == "22.05":  # one state, no flags
        state = state[:1]
    c.hostile_record["job_state"] = state[0] if c.dialect == "22.05" else list(state)
    res.described = f"{epochs} epochs of {size}, Slurm shows {'+'.join(state)}"
    outcome = c.round(res)
    if outcome == "round_failed" or c.view is None or c.view.store is None:
        return outcome
    raw = c.view.store.meta(LEDGER_KEY)
    ledger = Ledger.from_json(raw) if raw else Ledger()
    noted = HOSTILE in {job for job, _ in ledger.jobs}
    settled = state[0] == "COMPLETED" and "COMPLETING" not in state
    if noted and (not settled or HOSTILE in c.view.quarantined()):
        res.note_failure(f"job 7 noted as history while Slurm shows {'+'.join(state)}",
                         "a history counted without Slurm's word")
    if any(len(jobs) > USER_HISTORIES for jobs in ledger.by_user().values()):
        res.note_failure(f"a user holds more than {USER_HISTORIES} histories: {ledger.by_user()}",
                         "one user weighs more than one user")
    return f"{outcome}+{'noted' if noted else 'not_noted'}"


# -- order lines -----------------------------------------------------------------------------------

_ORDER_FIELDS: dict[str, tuple[Any, ...]] = {
    "seq": (0, -1, 10**30, 2**63, 1.0, True, "1", None, 10**300),
    "kind": ("grow", "", "RESIZE", None, 1, "stop", "resize"),
    "workers": ([], ["w0", "w0"], ["ghost"], [1], "w0", [""], ["w0"] * 1000, ["\x00"], ["w" * 5000], None,
                ["w0", "w9"], ["\ud800"]),
    "local_batch": (-1, 10**30, float("nan"), "8", None, 2**63, 0),
    "job_id": ("8", 7, "7 ", "", None, "٧"),
}


def _hostile_order(rng: random.Random, secret: bytes) -> tuple[bytes, str]:
    body: dict[str, Any] = {"job_id": "7", "seq": rng.randint(1, 5), "kind": "resize", "workers": ["w0", "w1"],
                            "local_batch": 0}
    roll = rng.random()
    if roll < 0.45:
        key = pick(rng, tuple(_ORDER_FIELDS))
        body[key] = pick(rng, _ORDER_FIELDS[key])
        if rng.random() < 0.3:
            body = mutate_mapping(rng, body)
            body.pop(MAC_KEY, None)
        return sign_any(body, secret), f"signed order {short(body)}"
    if roll < 0.6:
        return sign_any(body, b"k" * 32), "order signed with another secret"
    if roll < 0.85:
        line = mutate_bytes(rng, sign_order("7", 3, "resize", ["w0"], 0, secret).encode())
        return line, f"mutated signed order {short(line)}"
    special: list[Callable[[], bytes]] = [
        lambda: deep_nesting(rng),
        lambda: b'{"job_id":"7","seq":' + huge_digits(rng) + b',"kind":"resize","mac":"00"}',
        lambda: json.dumps(hostile_value(rng)).encode(),
        lambda: pick(rng, (b"x", b"1", b'{"kind":"resize"}', b"\xff", b"", b"\x00")),
    ]
    line = special[rng.randrange(len(special))]()
    return line, f"raw order line {short(line)}"


def order_lines(rng: random.Random, c: FuzzCluster, res: CaseResult) -> str:
    """Hostile lines in the hostile job's orders file; its channel read and written, then a round
    and an act step."""
    lines = []
    said = []
    for _ in range(rng.randint(1, 4)):
        line, what = _hostile_order(rng, c.secrets["7"])
        lines.append(line)
        said.append(what)
    path = Path(f"{c.base()}.orders")
    with open(path, "ab") as fh:
        fh.write(b"\n".join(lines) + b"\n")
        if rng.random() < 0.05:  # past the cap with junk
            fh.write(b"x" * (ORDERS_MAX_BYTES + 1))
            said.append("the file made larger than its cap")
    res.described = "; ".join(said)
    comment = str(c.hostile_record["comment"])
    labels = [_channel_calls(res, lambda: Channel.open("7", USER, comment))]
    labels.append(_finish(c, res, rng, acts=CHANNEL_ACTS))
    return "+".join(labels)


def _channel_calls(res: CaseResult, opener: Callable[[], Channel], before: Callable[[], None] | None = None) -> str:
    """Open the channel, optionally change its files (``before``), then every read and write of it;
    only :class:`ChannelError` may come out. Returns the labels joined."""
    channel: list[Channel] = []
    first = attempt_any(res, "Channel.open", lambda: channel.append(opener()), (ChannelError,))
    if not channel:
        return f"open:{first}"
    if before is not None:
        before()
    ch = channel[0]
    calls: list[tuple[str, Callable[[], object]]] = [
        ("history", ch.history), ("workers", lambda: ch.workers(["w0", "w1", "w2"])),
        ("send", lambda: ch.send("resize", ["w0"])), ("reports", lambda: ch.reports(0)),
        ("join_script", ch.join_script),
    ]
    got = [attempt_any(res, f"Channel.{name}", call, (ChannelError,)) for name, call in calls]
    return "channel:" + ("accepted" if all(g == "accepted" for g in got) else
                         "refused" if "foreign" not in got else "foreign")


# -- job files -------------------------------------------------------------------------------------

_TARGETS = ("", ".orders", ".reports", ".join", ".env")


_SWAPS: tuple[str, ...] = (
    "missing", "a FIFO", "a link to /dev/zero", "a link to another user's file", "a link to job 8's file",
    "a hard link to another user's file", "a folder", "sparse, 8 GiB", "sparse, one byte over its cap",
    "sparse, just under its cap", "empty", "mode 0644", "mode 0666", "mode 0620", "mode 0000", "setuid 4700",
    "a socket", "NUL bytes", "short text", "bytes that are not UTF-8", "a link in its folder's place",
)
_ROOT_SWAPS: tuple[str, ...] = ("another user's", "a character device (null)")


def _replace(rng: random.Random, c: FuzzCluster, path: Path) -> str:
    """Swap ``path`` for something hostile; returns what."""
    name = pick(rng, _SWAPS + _ROOT_SWAPS if ROOT else _SWAPS)
    try:
        _swap(rng, c, path, name)
    except OSError as exc:  # e.g. no mknod in this container: the file stays as it was
        return f"{name} (not made: {exc.strerror})"
    return name


def _swap(rng: random.Random, c: FuzzCluster, path: Path, name: str) -> None:
    other = c.work / "other-user-file"
    if not other.exists():
        other.write_bytes(c.secrets["7"])
        other.chmod(0o600)
        if ROOT:
            os.chown(other, OTHER_UID, OTHER_UID)
    suffix = path.suffix if path.suffix in _TARGETS else ""
    cap = {"": SECRET_MAX_BYTES, ".orders": ORDERS_MAX_BYTES, ".reports": REPORTS_MAX_BYTES,
           ".join": JOIN_MAX_BYTES, ".env": ENV_FILE_MAX_BYTES}[suffix]
    if name in ("missing", "a FIFO", "a link to /dev/zero", "a link to another user's file", "a link to job 8's file",
                "a hard link to another user's file", "a folder", "a socket", "a character device (null)"):
        path.unlink()
    if name == "a FIFO":
        os.mkfifo(path, 0o600)
    elif name == "a link to /dev/zero":
        path.symlink_to("/dev/zero")
    elif name == "a link to another user's file":
        path.symlink_to(other)
    elif name == "a link to job 8's file":
        path.symlink_to(Path(f"{c.base('8')}{suffix}"))
    elif name == "a hard link to another user's file":
        os.link(other, path)
    elif name == "a folder":
        path.mkdir()
    elif name == "a socket":
        _socket(path)
    elif name == "a character device (null)":
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    elif name.startswith("sparse"):
        os.truncate(path, {"sparse, 8 GiB": 8 << 30, "sparse, one byte over its cap": cap + 1}.get(name, cap - 1))
    elif name == "empty":
        os.truncate(path, 0)
    elif name.startswith(("mode", "setuid")):
        path.chmod(int(name.split()[-1], 8))
    elif name == "NUL bytes":
        path.write_bytes(b"\x00" * rng.choice((1, 15, 16, 4096)))
    elif name == "short text":
        path.write_bytes(b"short")
    elif name == "bytes that are not UTF-8":
        path.write_bytes(b"\xff\xfe" * 20)
    elif name == "a link in its folder's place":
        _linked_folder(c)
    elif name == "another user's":
        os.chown(path, OTHER_UID, OTHER_UID)


def _socket(path: Path) -> None:
    with contextlib.closing(socket.socket(socket.AF_UNIX)) as s:
        s.bind(str(path))


def _linked_folder(c: FuzzCluster) -> None:
    """The job's folder seen through a link (allowed: home folders often are)."""
    alias = c.work / "alias"
    if not alias.exists():
        alias.symlink_to(c.work)
    c.hostile_record["comment"] = f"{COMMENT_KEY}{alias}/{c.base().name}.orders"


def _hostile_comment(rng: random.Random, c: FuzzCluster) -> str:
    base = c.base()
    return pick(rng, (
        f"{COMMENT_KEY}job-7.orders", f"{COMMENT_KEY}{base}", f"{COMMENT_KEY}{base}.orders\x00x",
        f"{COMMENT_KEY}{base}\ud800.orders", f"{COMMENT_KEY}/{'d' * 5000}.orders", f"{COMMENT_KEY}/dev/zero.orders",
        f"{COMMENT_KEY}{c.work}/../{c.work.name}/job-7.orders", f"{COMMENT_KEY}{base}.orders {COMMENT_KEY}/x.orders",
        f"{COMMENT_KEY}", f"{COMMENT_KEY}/nonexistent/dir/x.orders", f"{COMMENT_KEY}{c.work}.orders",
        f"{COMMENT_KEY}{c.base('8')}.orders", f"{COMMENT_KEY}/proc/self/environ.orders",
        f"x{COMMENT_KEY}{base}.orders", f"{COMMENT_KEY}{base}.orders\n", f"{COMMENT_KEY}{base}.ORDERS",
        pick(rng, HOSTILE_STRINGS),
    ))


def job_files(rng: random.Random, c: FuzzCluster, res: CaseResult) -> str:
    """The hostile job's files swapped (before the round, or after the daemon opened its channel),
    or its comment or user changed."""
    roll = rng.random()
    comment = str(c.hostile_record["comment"])
    if roll < 0.55:
        target = Path(f"{c.base()}{pick(rng, _TARGETS)}")
        what = _replace(rng, c, target)
        res.described = f"{target.name}: {what}"
        label = "swapped"
    elif roll < 0.8:
        target = Path(f"{c.base()}{pick(rng, _TARGETS)}")
        said: list[str] = []
        label = _channel_calls(res, lambda: Channel.open("7", USER, comment),
                               before=lambda: said.append(_replace(rng, c, target)))
        res.described = f"{target.name}: {''.join(said) or 'unchanged'}, after Channel.open"
    elif roll < 0.93:
        new = _hostile_comment(rng, c)
        c.hostile_record["comment"] = new
        res.described = f"comment {short(new)}"
        label = "comment"
    else:
        user = pick(rng, ("no-such-user-x", "", "root\x00", "\ud800", "nobody", "-", "x" * 300, "8"))
        c.hostile_record["user_name"] = user
        res.described = f"user {short(user)}"
        label = "user"
    return label + "+" + _finish(c, res, rng, acts=CHANNEL_ACTS)


# -- AdminComment (written from --elastic, --elastic-batch, --elastic-mode) -------------------------

_RANGES: tuple[str, ...] = (
    *NON_ASCII_DIGITS, "1:8", "0:0", "1:0", "2:1", "1:99999999999999999999", "99999999999:0", "65536:65536",
    "1000000:0", "-1:2", "1.5:2", "1:2:3", ":", "", "a:b", "01:02", "1e3:2e3", "0x1:0x2", "9" * 5000 + ":0",
    "1:" + "9" * 5000, "1:" + "9" * 4300, "1 :2", "1:2,3", "1;2", "nan:inf", "1:8\x00", "𝟏:𝟐",
)
_MODES = ("exo", "endo", "EXO", "", "both", "exo\x00", "é", "endo endo")


def _hostile_admin(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.55:
        words = [f"gpus={pick(rng, _RANGES)}"]
        if rng.random() < 0.5:
            words.append(f"batch={pick(rng, _RANGES)}")
        if rng.random() < 0.4:
            words.append(f"mode={pick(rng, _MODES)}")
        rng.shuffle(words)
        return " ".join((ELASTIC_TAG, *words))
    if roll < 0.8:
        return pick(rng, (
            elastic("1:8", "gpus=1:2"), elastic("1:8", "foo=1"), elastic("1:8", f"{SATELLITE_KEY}=8"),
            " ".join((ELASTIC_TAG, f"{SATELLITE_KEY}=8")), " ".join((ELASTIC_TAG, f"{SATELLITE_KEY}=")),
            " ".join((ELASTIC_TAG, f"{SATELLITE_KEY}=7")), ELASTIC_TAG, ELASTIC_TAG.upper() + " gpus=1:8",
            ELASTIC_TAG + "\u00a0gpus=1:8", ELASTIC_TAG + "\u2003gpus=1:8", elastic("1:8", "mode"),
            elastic("1:8", "=", "batch="), elastic("1:8", "x" * 70_000), elastic("1:8") + "\x00",
            elastic("1:8", "batch=1:1"), elastic("1:8", "batch=1000000000:0"), elastic("8:8"), elastic("12:12"),
        ))
    if roll < 0.9:
        return pick(rng, HOSTILE_STRINGS)
    text = mutate_bytes(rng, elastic("1:8", "batch=32:512", "mode=endo").encode())
    return text.decode("utf-8", "surrogateescape")


def admin_comment(rng: random.Random, c: FuzzCluster, res: CaseResult) -> str:
    """The hostile job's AdminComment, as ``job_submit.lua`` writes it from hostile ``--elastic*``
    values (or worse)."""
    text = _hostile_admin(rng)
    c.hostile_record["admin_comment"] = text
    res.described = f"AdminComment {short(text)}"
    return _finish(c, res, rng)


# -- the job's record in squeue --json ---------------------------------------------------------------

_RECORD_KEYS = ("job_id", "job_state", "nodes", "gres_detail", "tres_per_node", "tres_per_job", "tres_per_task",
                "node_count", "batch_host", "submit_time", "start_time", "resize_time", "admin_comment", "comment",
                "user_name", "account", "partition", "array_job_id", "array_task_id", "array_task_string",
                "het_job_id", "het_job_offset", "restart_cnt", "tasks", "name", "current_working_directory")
_FIELD_VALUES: dict[str, tuple[Any, ...]] = {
    "job_state": (["RUNNING", "COMPLETING"], ["BOGUS"], [], "RUNNING", ["PENDING", "REQUEUED"], ["SUSPENDED"],
                  ["RUNNING", None], "running", ["CONFIGURING"], [["RUNNING"]]),
    "nodes": ("n[000-002]", "n[000-999999999]", "n[", "n]", "n[2-0]", "", "n000,n000", "n[000,002]", "n999",
              ",", "n[000-002,]", "n[00a-1]", "x" * 70_000),
    "gres_detail": (["gpu:99999999999(IDX:0-99999999999)"], ["gpu:2(IDX:0-1)", "gpu:1(IDX:3)", "gpu:1(IDX:0)"],
                    ["gpu:4(IDX:0-3)"], ["gpu:1(IDX:9)"], ["gpu(IDX:0)"], ["gpu:2"], [None, None], "gpu:1",
                    ["gpu:1(IDX:0-1)"], ["gpu:v100:2(IDX:0-1)", "gpu:1(IDX:2)"], [7], ["gpu:2(IDX:1-0)"],
                    ["gpu:1(IDX:٣)"], ["gpu:1(IDX:-1)"]),
    "tres_per_node": ("gres/gpu:v100:1", "gres/gpu:", "gres/gpu:99999999999999999999", "gres:gpu:-1",
                      "gres/gpu:v100=1", "gres/gpu:١", "gres/gpu:2,gres/gpu:3", "cpu=4"),
    "tres_per_task": ("gres/gpu:v100=1", "gres/gpu:1"),
    "job_id": (0, -1, 2**32, 2**64, "7", 7.5, None, {"set": True, "infinite": True, "number": 7}, True),
    "array_job_id": (7, 2**32, -1), "array_task_id": (0xFFFFFFFE, 3, -5), "het_job_id": (7, 2**40),
    "user_name": ("no-such-user-x", "", "\ud800", None, 7),
    "current_working_directory": ("\x00", "/" + "d" * 5000, "../..", None),
}


def _dialect_number(c: FuzzCluster, rng: random.Random) -> Any:
    value = hostile_number(rng)
    if c.dialect == "22.05" or rng.random() < 0.3:
        return value
    return {"set": rng.choice((True, False)), "infinite": rng.choice((False, False, True)), "number": value}


def slurm_records(rng: random.Random, c: FuzzCluster, res: CaseResult) -> str:
    """The hostile job's record in ``squeue --json`` mutated (Slurm's own fields included); it is the
    last record, so a GPU it claims twice is refused for it, not for the honest holder."""
    rec = c.hostile_record
    said = []
    for _ in range(rng.randint(1, 3)):
        key = pick(rng, _RECORD_KEYS)
        roll = rng.random()
        if roll < 0.4 and key in _FIELD_VALUES:
            rec[key] = pick(rng, _FIELD_VALUES[key])
        elif roll < 0.6 and key in ("node_count", "submit_time", "start_time", "resize_time", "tasks",
                                    "restart_cnt", "array_task_id", "het_job_offset"):
            rec[key] = _dialect_number(c, rng)
        elif roll < 0.75:
            mutated = mutate_mapping(rng, rec, (key,))
            rec.clear()
            rec.update(mutated)
        elif roll < 0.85:
            rec.pop(key, None)
        else:
            rec[key] = hostile_value(rng)
        said.append(f"{key}={short(rec.get(key, '<missing>'), 80)}")
    if str(rec.get("job_id")) in HONEST:  # Slurm never prints one id twice: that would not be one job's input
        rec["job_id"] = 77
    res.described = f"{c.dialect} record: " + "; ".join(said)
    return _finish(c, res, rng)


FAMILIES: dict[str, Callable[[random.Random, FuzzCluster, CaseResult], str]] = {
    "report_lines": report_lines,
    "report_claims": report_claims,
    "shared_history": shared_history,
    "order_lines": order_lines,
    "job_files": job_files,
    "admin_comment": admin_comment,
    "slurm_records": slurm_records,
}
