"""The fuzz families of whole documents, files and argument vectors: Slurm's JSON documents and
command output, the site configuration, trace CSVs and the command line.

Each family writes its hostile input into the case's folder, feeds it to the entry point that
reads it and names the outcome (``accepted`` or the documented error); what is accepted is then
used the way the daemon or the command uses it (a configuration runs a daemon round, a trace a
short simulation), so a value that passes validation and breaks later is found too.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import logging
import os
import random
import signal
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from slurm_elastic.config import load
from slurm_elastic.errors import ConfigError, TraceError
from slurm_elastic.fuzz.case import CaseResult, attempt, attempt_any
from slurm_elastic.fuzz.fuzzed_cluster import NOW, FuzzCluster, elastic, job_json, profiles, squeue_doc
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
from slurm_elastic.slurm.dialects import SlurmJsonError
from slurm_elastic.slurm.json_records import parse_jobs, parse_nodes, parse_sacct
from slurm_elastic.slurm.runner import SlurmCommandError, run_command, run_json

Command = Callable[[Sequence[str]], int]
"""The ``slurm-elastic`` command's entry point (:func:`slurm_elastic.cli.main`), handed in by the caller."""

# -- Slurm's documents and command output -----------------------------------------------------------


def _meta(dialect: str, command: Sequence[str], sacct: bool = False) -> dict[str, Any]:
    if dialect == "22.05":
        kind = "openapi/dbv0.0.38" if sacct else "openapi/v0.0.38"
        return {"plugin": {"type": kind, "name": "Slurm OpenAPI"},
                "Slurm": {"version": {"major": 22, "micro": 8, "minor": 5}, "release": "22.05.8"}}
    return {"plugin": {"type": "", "name": "", "data_parser": "data_parser/v0.0.44"}, "command": list(command),
            "slurm": {"version": {"major": "25", "micro": "7", "minor": "11"}, "release": "25.11.7"}}


def nodes_doc(dialect: str, shape: str) -> dict[str, Any]:
    """Three nodes of four GPUs as ``sinfo --json`` (22.05), ``sinfo -N --json`` or ``scontrol show
    node --json`` (25.11) prints them."""
    if dialect == "22.05":
        return {"meta": _meta(dialect, ()), "errors": [], "nodes": [
            {"name": f"n{i:03d}", "state": "mixed", "state_flags": [], "gres": "gpu:v100:4",
             "gres_used": "gpu:v100:1(IDX:0)", "partitions": ["gpu"], "reason": ""} for i in range(3)]}
    if shape == "scontrol":
        return {"meta": _meta(dialect, ("show", "node")), "errors": [], "warnings": [], "nodes": [
            {"name": f"n{i:03d}", "state": ["MIXED"], "gres": "gpu:4", "gres_used": "gpu:1(IDX:0)",
             "partitions": ["gpu"], "reason": ""} for i in range(3)]}
    return {"meta": _meta(dialect, ("sinfo",)), "errors": [], "warnings": [], "sinfo": [
        {"nodes": {"nodes": [f"n{i:03d}"]}, "node": {"state": ["MIXED"]},
         "gres": {"total": "gpu:v100:4", "used": "gpu:v100:1(IDX:0)"}, "partition": {"name": "gpu"},
         "reason": {"description": ""}} for i in range(3)]}


def sacct_doc(dialect: str) -> dict[str, Any]:
    """Two finished jobs as ``sacct --json`` prints them."""
    legacy = dialect == "22.05"
    jobs = [{
        "job_id": jid, "array": {"job_id": 0, "task": "" if not legacy else None, "task_id": None if legacy else
                                 {"set": False, "infinite": False, "number": 0}},
        "het": {"job_id": 0, "job_offset": None if legacy else {"set": False, "infinite": False, "number": 0}},
        "state": {"current": "COMPLETED" if legacy else ["COMPLETED"]},
        "tres": {"allocated": [{"type": "gres", "name": "gpu", "id": 1001, "count": 2}]},
        "nodes": "n[000-001]", "name": "train", "user": "u", "account": "acct", "partition": "gpu",
        "time": {"elapsed": 600, "start": 1000, "submission": 900, "end": 1600},
        "comment": {"administrator": elastic("1:4") if jid == 1 else ""},
    } for jid in (1, 2)]
    return {"meta": _meta(dialect, ("sacct", "--json"), sacct=True), "errors": [], "jobs": jobs}


def _mutate_doc(rng: random.Random, doc: dict[str, Any], records_key: str) -> str:
    """One mutation of a document: its meta, its errors, its list of records or one record (nested
    one level down too)."""
    roll = rng.random()
    if roll < 0.2:
        meta = doc.get("meta")
        if isinstance(meta, dict):
            sub = pick(rng, [k for k in meta if isinstance(meta[k], dict)] or ["plugin"])
            if isinstance(meta.get(sub), dict) and rng.random() < 0.6:
                meta[sub] = mutate_mapping(rng, meta[sub])
                return f"meta.{sub} mutated: {short(meta[sub], 120)}"
            doc["meta"] = mutate_mapping(rng, meta)
        return f"meta: {short(doc.get('meta'), 120)}"
    if roll < 0.3:
        doc["errors"] = pick(rng, ([{"error": "boom", "error_number": 1}], ["x"], hostile_value(rng),
                                   [{"error_number": hostile_number(rng)}], [{"description": "Nothing found"}]))
        return f"errors: {short(doc['errors'], 120)}"
    if roll < 0.4:
        mutated = mutate_mapping(rng, doc)
        doc.clear()
        doc.update(mutated)
        return f"top level: {short(sorted(doc), 120)}"
    records = doc.get(records_key)
    if not isinstance(records, list) or not records:
        doc[records_key] = hostile_value(rng)
        return f"{records_key}: {short(doc[records_key], 120)}"
    i = rng.randrange(len(records))
    rec = records[i]
    said = []
    for _ in range(rng.randint(1, 3)):
        if not isinstance(rec, dict):
            break
        key = pick(rng, sorted(rec) or ["x"])
        if isinstance(rec.get(key), dict) and rng.random() < 0.5:
            rec[key] = mutate_mapping(rng, rec[key])
        elif isinstance(rec.get(key), list) and rec[key] and rng.random() < 0.5:
            rec[key] = [hostile_value(rng) if rng.random() < 0.5 else v for v in rec[key]]
        else:
            records[i] = rec = mutate_mapping(rng, rec, (key,))
        said.append(f"{key}={short(rec.get(key, '<missing>') if isinstance(rec, dict) else rec, 80)}")
    if rng.random() < 0.1:
        records[i] = hostile_value(rng)
        said.append(f"record {short(records[i], 80)}")
    return f"{records_key}[{i}]: " + "; ".join(said)


def _squeue(rng: random.Random) -> dict[str, Any]:
    d = rng.choice(("25.11", "22.05"))
    return squeue_doc(d, [job_json(d, i, held=[(f"n{i % 3:03d}", "0-1")] if i % 2 else (),
                                   admin=elastic("1:4") if i % 3 else "", submit=int(NOW) - 100 * i,
                                   start=int(NOW) - 50 * i) for i in range(1, 5)])


def _texts(rng: random.Random) -> str:
    base = json.dumps(_squeue(rng))
    return pick(rng, (
        deep_nesting(rng).decode(), huge_digits(rng).decode(), "NaN", "[]", "", "null", "\ufeff" + base,
        base[: rng.randrange(len(base))], '{"meta": ' + huge_digits(rng).decode() + "}",
        mutate_bytes(rng, base.encode()).decode("utf-8", "replace"), '{"a": 1} {"b": 2}', '"' + "x" * 70_000 + '"',
        '{"jobs": [' + ",".join(["{}"] * 10_000) + "]}",
    ))


def slurm_docs(rng: random.Random, work: Path, res: CaseResult) -> str:
    """A whole Slurm document mutated (``squeue``, ``sinfo``, ``scontrol show node``, ``sacct``), hostile
    command output through ``run_json``, or hostile bytes through the real ``run_command``."""
    expected = (SlurmJsonError,)
    what = rng.random()
    if what < 0.25:
        doc = _squeue(rng)
        res.described = "squeue: " + _mutate_doc(rng, doc, "jobs")
        refused: dict[str, str] = {}
        a = attempt_any(res, "parse_jobs(doc, refused)", lambda: parse_jobs(copy.deepcopy(doc), refused), expected)
        b = attempt_any(res, "parse_jobs(doc)", lambda: parse_jobs(copy.deepcopy(doc)), expected)
        return f"squeue:{a}{'/refused' if refused else ''}/{b}"
    if what < 0.5:
        d = rng.choice(("25.11", "22.05"))
        doc = nodes_doc(d, rng.choice(("sinfo", "scontrol")))
        res.described = f"{d} nodes: " + _mutate_doc(rng, doc, "nodes" if "nodes" in doc else "sinfo")
        return "nodes:" + attempt_any(res, "parse_nodes", lambda: parse_nodes(doc), expected)
    if what < 0.65:
        doc = sacct_doc(rng.choice(("25.11", "22.05")))
        res.described = "sacct: " + _mutate_doc(rng, doc, "jobs")
        return "sacct:" + attempt_any(res, "parse_sacct", lambda: parse_sacct(doc), expected)
    if what < 0.85:
        text = _texts(rng)
        res.described = f"squeue output {short(text)}"
        return "output:" + attempt_any(res, "run_json", lambda: run_json(lambda argv: text, ["squeue", "--json"]),
                                       expected)
    # the real run_command reading bytes Slurm printed (a job name is the user's bytes)
    raw = json.dumps(_squeue(rng)).encode()
    raw = pick(rng, (raw.replace(b'"train"', b'"tr\xffain"'), raw.replace(b'"train"', b'"\xed\xa0\x80"'),
                     mutate_bytes(rng, raw), raw + b"\x00", raw.replace(b'"train"', b'"\xc3"')))
    out = work / "squeue.out"
    out.write_bytes(raw)
    res.described = f"squeue printed {short(raw[:200])}"

    def runner(argv: Sequence[str]) -> str:
        return run_command(["cat", str(out)])

    return "command:" + attempt_any(res, "run_command + run_json", lambda: parse_jobs(
        run_json(runner, ["squeue", "--json"]), {}), (SlurmJsonError, SlurmCommandError))


# -- the site configuration --------------------------------------------------------------------------

_POLICY_PARAMS: dict[str, tuple[str, ...]] = {
    "dp": ("mode", "kmax", "interval", "batch", "ftf_bound"), "dp-fixed": ("mode", "kmax", "interval", "ftf_bound"),
    "efq": ("alpha", "default_epochs_to_go"), "fifo": ("backfill",),
    "ones": ("population", "population_cap", "mutation_rate", "sigma", "gate", "interval", "ftf_bound"),
    "optimus": ("interval", "start_between_rounds", "default_epochs_to_go"),
    "tiresias": ("thresholds", "promote_after"), "drl": ("model", "sample", "default_epochs_to_go"),
}
TOML_VALUES: tuple[str, ...] = (
    "nan", "inf", "-inf", "+nan", "9223372036854775807", "-9223372036854775808", "99999999999999999999999", "0",
    "-1", "1e308", "1e-320", "0.5", "3", "true", "false", '""', '"x"', '"\\u0000"', "1979-05-27T07:32:00Z",
    "07:32:00", "1979-05-27", "[]", "[1, 2]", '["gpu", 1]', '[""]', "{}", "{ a = 1 }", "[[1]]", '"é"', "'lit'",
    '"""multi\nline"""', "0x10", "0o7", "0b1", "1_000", '"/dev/zero"', '"' + "x" * 70_000 + '"',
    "[" * 50 + "]" * 50, '"dp"', '"bogus"', '"127.0.0.1:9410"', '"host:"', '":99999999"',
)


def _toml(tables: dict[str, dict[str, str]], loose: dict[str, str]) -> str:
    lines = [f"{k} = {v}" for k, v in loose.items()]
    for name, body in tables.items():
        lines.append(f"[{name}]")
        lines += [f"{k} = {v}" for k, v in body.items()]
    return "\n".join(lines) + "\n"


def hostile_config(rng: random.Random) -> bytes:
    """An ``elastic.toml``, valid or with one or more hostile values, keys, tables or bytes."""
    policy = pick(rng, tuple(_POLICY_PARAMS))
    params = {k: pick(rng, TOML_VALUES) if rng.random() < 0.3 else "1" for k in rng.sample(
        _POLICY_PARAMS[policy], rng.randint(0, min(2, len(_POLICY_PARAMS[policy]))))}
    tables: dict[str, dict[str, str]] = {
        "daemon": {"partitions": '["gpu"]', "policy": f'"{policy}"', "dry_run": "true", "store": '"/tmp/state.db"',
                   "poll_interval": "2.0", "max_idle": "60.0", "default_model": '"cifar10"', "seed": "0",
                   "metrics_address": '""'},
        f"policy.{policy}": params,
        "guards": {"cooldown_s": "300", "max_resizes_per_hour": "4", "max_gpus_per_job": "32",
                   "max_gpus_per_user": "64", "max_gpus_per_account": "128", "protect_rigid": "true"},
    }
    loose: dict[str, str] = {}
    for _ in range(rng.randint(0, 3)):
        table = pick(rng, tuple(tables))
        roll = rng.random()
        if roll < 0.6 and tables[table]:
            tables[table][pick(rng, tuple(tables[table]))] = pick(rng, TOML_VALUES)
        elif roll < 0.75:
            tables[table][pick(rng, ("bogus", "seed ", "dry-run", "é"))] = pick(rng, TOML_VALUES)
        elif roll < 0.85:
            tables.pop(table)
        else:
            loose[pick(rng, ("policy", "guards", "daemon", "extra"))] = pick(rng, TOML_VALUES)
    text = _toml(tables, loose).encode()
    roll = rng.random()
    if roll < 0.15:
        text = mutate_bytes(rng, text)
    elif roll < 0.2:
        text = pick(rng, (b"", b"\xff\xfe", b"a = " + deep_nesting(rng).replace(b'{"a":', b"["),
                          b"a = " + b"[" * 5000 + b"]" * 5000, "\ufeff".encode() + text, text.replace(b"\n", b"\r\n")))
    return text


def config(rng: random.Random, work: Path, res: CaseResult) -> str:
    """An ``elastic.toml`` read by :func:`slurm_elastic.config.load`; one that is accepted runs a
    daemon round with its policy, parameters and guards."""
    path = work / "elastic.toml"
    text = hostile_config(rng)
    path.write_bytes(text)
    if rng.random() < 0.03:
        path.unlink()
        path.mkdir()
        res.described = "the configuration is a folder"
    else:
        res.described = f"elastic.toml {short(text, 1000)}"
    label, cfg = attempt(res, "config.load", lambda: load(path), (ConfigError,))
    if cfg is None:
        return label
    (work / "cluster").mkdir()
    cluster = FuzzCluster.build(rng, work / "cluster", profiles())
    try:
        return "accepted+" + cluster.round(res, cfg)
    finally:
        if cluster.view is not None and cluster.view.store is not None:
            cluster.view.store.close()


# -- trace CSVs ---------------------------------------------------------------------------------------

_TRACE_HEADER = ["job_id", "submit_time", "num_gpus", "duration", "model", "min_gpus", "max_gpus", "batch_size",
                 "min_batch", "max_batch", "user", "account"]
_TRACE_ROWS = [["a", "0", "2", "600", "cifar10", "1", "4", "256", "128", "512", "alice", "acct"],
               ["b", "30", "1", "300", "", "", "", "", "", "", "bob", "acct"],
               ["c", "60", "4", "900", "bert", "2", "8", "", "", "", "carol", "acct2"]]
CSV_VALUES: tuple[str, ...] = (
    *NON_ASCII_DIGITS, "nan", "inf", "-inf", "1e308", "1e-320", "-1", "0", "-0", "0.5", "1e3", "١٢", "²",
    "9" * 5000, str(2**64), "1e18", "99999999999", "", " ", '"', '"quoted, comma"', "x" * 200_000, "\x00", "a\nb",
    "imagenet", "ncf", "bogus", "é", "0x10", "1_000", "+5", "3.0", "3.5",
)


def hostile_trace(rng: random.Random) -> bytes:
    """A trace CSV, valid or with hostile cells, columns, rows or bytes."""
    header = list(_TRACE_HEADER)
    rows = [list(r) for r in _TRACE_ROWS]
    for _ in range(rng.randint(1, 3)):
        roll = rng.random()
        if roll < 0.6 and rows and header:
            row = rows[rng.randrange(len(rows))]
            if row:
                row[rng.randrange(len(row))] = pick(rng, CSV_VALUES)
        elif roll < 0.7 and header:
            col = rng.randrange(len(header))
            header.pop(col)
            rows = [r[:col] + r[col + 1:] for r in rows]
        elif roll < 0.78 and header:
            header[rng.randrange(len(header))] = pick(rng, ("job_id", "", "é", "submit_time ", "x" * 1000))
        elif roll < 0.86:
            rows.append(rng.choice((["d"], ["d"] * 20, ["a", "0", "1", "10"], [""] * len(header))))
        elif roll < 0.93:
            rows = []
        else:
            rows = rows * 50 if rng.random() < 0.5 else rows[:1]
    lines = [",".join(header)] + [",".join(_cell(c) for c in r) for r in rows]
    text = "\n".join(lines).encode("utf-8", "surrogatepass")
    roll = rng.random()
    if roll < 0.15:
        text = mutate_bytes(rng, text)
    elif roll < 0.2:
        text = pick(rng, (b"", b"\xff\xfe" + text, "\ufeff".encode() + text, text.replace(b"\n", b"\r\n"),
                          text + b"\n\n\n", text.replace(b",", b";")))
    return text


def _cell(value: str) -> str:
    """A cell holding a line break is quoted, as a real CSV writes it; anything else is written raw."""
    return '"' + value.replace('"', '""') + '"' if "\n" in value else value


def trace_csv(rng: random.Random, work: Path, res: CaseResult) -> str:
    """A trace CSV read by :func:`slurm_elastic.sim.workload.load_trace`; one that is accepted is
    simulated on 8 GPUs with a hostile round gap and resize cost."""
    from slurm_elastic import policies
    from slurm_elastic.sim.engine import simulate
    from slurm_elastic.sim.workload import load_trace

    path = work / "trace.csv"
    text = hostile_trace(rng)
    path.write_bytes(text)
    res.described = f"trace {short(text, 300)}"
    label, jobs = attempt(res, "load_trace", lambda: load_trace(path), (TraceError,))
    if jobs is None:
        return label
    gap = pick(rng, (30.0, 0.0, 1.0, float("nan"), float("inf"), -1.0, 1e308, 1e-300, 600.0))
    cost = pick(rng, ("in-place", "checkpoint", "0", "5", "nan", "-1", "inf", "1e400", "x", "", "1e308"))
    policy = pick(rng, ("dp", "fifo", "efq", "tiresias", "optimus", "dp-fixed"))
    res.described += f"; simulate {policy} round_gap={gap!r} resize_cost={cost!r}"
    return "accepted+simulate:" + attempt_any(
        res, "simulate", lambda: simulate(jobs, policies.create(policy), gpus=8, gpus_per_node=4, seed=1,
                                          round_gap=gap, resize_cost=cost), (ConfigError, TraceError))


# -- the command line ---------------------------------------------------------------------------------

_BAD_INTS: tuple[str, ...] = (*NON_ASCII_DIGITS, "", "x", "1.5", "nan", "inf", "-1", "0", "1e3", "0x10", " 3",
                              "9" * 5000, "-" + "9" * 30, "²", "½", "--", "-5")
_BAD_FLOATS: tuple[str, ...] = ("nan", "inf", "-inf", "-1", "1e308", "1e400", "x", "", "0", "1e-320", "١", "-0")
_PARAMS: tuple[str, ...] = ("x", "=1", "k=", "interval=nan", "interval=-1", "interval=1e400", "interval=[1]",
                            "interval={}", "interval=true", "kmax=0", "kmax=-3", "mode=bogus", "batch=x",
                            "ftf_bound=nan", "dp.interval=1", "ones.generations=1", "é=1", "mode=drop",
                            "kmax=99999999999999999999", "thresholds=[]", "thresholds=[nan]", "alpha=nan")


def _small(rng: random.Random, good: Sequence[str], bad: Sequence[str], p_bad: float = 0.3) -> str:
    return pick(rng, tuple(bad)) if rng.random() < p_bad else pick(rng, tuple(good))


def _argv(rng: random.Random, work: Path) -> tuple[list[str], str]:
    command = pick(rng, ("plan", "plan", "check-config", "simulate", "simulate", "submit", "bench", "junk"))
    if command == "plan":
        argv = ["plan", "--policy", _small(rng, ("dp", "fifo", "efq", "tiresias", "dp-fixed"),
                                           ("", "bogus", "dp,ones", "é", "DP")),
                "--gpus", _small(rng, ("4", "8"), _BAD_INTS), "--gpus-per-node", _small(rng, ("2", "4"), _BAD_INTS),
                "--jobs", _small(rng, ("0", "2", "4"), _BAD_INTS), "--seed", _small(
                    rng, ("0", "1", str(2**70)), (*_BAD_INTS, "-1", str(-(2**70)), str(2**64))),
                "--rounds", _small(rng, ("1", "2"), _BAD_INTS, 0.15)]
        for _ in range(rng.randrange(3)):
            argv += ["--param", pick(rng, _PARAMS)]
        if rng.random() < 0.5:
            argv.append("--json")
        if rng.random() < 0.05:
            argv.append("--list-policies")
        return argv, "plan"
    if command == "check-config":
        path = work / "cli.toml"
        path.write_bytes(hostile_config(rng))
        return ["check-config", str(path)], "check-config"
    if command == "simulate":
        path = work / "cli.csv"
        path.write_bytes(hostile_trace(rng) if rng.random() < 0.6 else b"\n".join(
            ",".join(r).encode() for r in [_TRACE_HEADER, *_TRACE_ROWS]))
        argv = ["simulate", "--trace", str(path), "--gpus", _small(rng, ("8",), _BAD_INTS, 0.15), "--policy",
                _small(rng, ("dp", "fifo", "efq", "dp,fifo"), ("", ",", "bogus", "dp,dp")),
                "--seeds", _small(rng, ("1", "1-2", "3"), ("", "-", "5-1", "a", "1-", "١", "--1", "1,,2", "0-0"), 0.3),
                "--round-gap", _small(rng, ("30", "0", "5"), _BAD_FLOATS, 0.4),
                "--resize-cost", _small(rng, ("in-place", "checkpoint", "5"), ("nan", "-1", "inf", "1e400", "x", ""),
                                        0.3), "--processes", _small(rng, ("1",), ("0", "-2", "two", "9" * 40), 0.2),
                "--quiet", pick(rng, ("--no-guards", "--no-guards", "--config"))]
        if argv[-1] == "--config":
            cfg = work / "cli-guards.toml"
            cfg.write_bytes(hostile_config(rng))
            argv.append(str(cfg))
        for _ in range(rng.randrange(2)):
            argv += ["--param", pick(rng, _PARAMS)]
        return argv, "simulate"
    if command == "submit":
        argv = ["submit", "--elastic", _small(rng, ("1:4", "2:8"), ("4:1", "0:0", "١:٤", "²:³", "1", ":", "a:b",
                                                                     "9" * 5000 + ":1", "-1:2", "1:" + "9" * 30)),
                "--batch", _small(rng, ("", "32:256"), ("x", "1:2:3", "²:³", "١:٢", ":")),
                "--mode", _small(rng, ("exo", "endo"), ("", "EXO", "both")), "--gpus-per-node",
                _small(rng, ("4",), _BAD_INTS, 0.15), "--job-name", _small(rng, ("j",), ("a b", "$(x)", "é", "")),
                "--dry-run", "--", "python", "train.py"]
        return argv, "submit"
    if command == "bench":
        argv = ["bench", "planner", "--gpus", _small(rng, ("8",), _BAD_INTS, 0.3), "--jobs",
                _small(rng, ("3",), ("-1", "x", "")), "--repeat", "1", "--policy",
                _small(rng, ("dp", "fifo"), ("bogus", "")), "--seed", _small(rng, ("0",), ("-1", "x", "nan"))]
        return argv, "bench"
    return pick(rng, ([], ["bogus"], ["plan", "--bogus"], ["--version"],
                      ["-vvvvv", "plan", "--gpus", "4", "--jobs", "1"], ["plan", "--gpus"], ["simulate"],
                      ["simulate", "--workload", "x", "--trace", "y"],
                      ["check-config"], ["check-config", "/nonexistent.toml"], ["check-config", "/dev/null"],
                      ["submit"], ["plan", "--help"], ["\x00"], [pick(rng, HOSTILE_STRINGS)])), "junk"


@contextlib.contextmanager
def _contained(home: Path) -> Iterator[None]:
    """A command run as a call: output captured, ``$HOME`` in the case's folder; SIGPIPE and the
    root logger (``main`` configures them) restored."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    old_home = os.environ.get("HOME")
    old_pipe = signal.getsignal(signal.SIGPIPE) if hasattr(signal, "SIGPIPE") else None
    os.environ["HOME"] = str(home)
    sink = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            yield
    finally:
        if old_home is None:
            os.environ.pop("HOME", None)
        else:
            os.environ["HOME"] = old_home
        if old_pipe is not None:
            signal.signal(signal.SIGPIPE, old_pipe)
        root.handlers[:] = handlers
        root.setLevel(level)


def cli(rng: random.Random, work: Path, res: CaseResult, main: Command) -> str:
    """``slurm-elastic`` (``main``, its entry point) with a hostile argument vector (cheap commands
    only): exit status 2 (or a return of 2) is the expected refusal, 0 acceptance; a traceback is foreign."""
    argv, command = _argv(rng, work)
    res.described = f"slurm-elastic {short(argv, 400)}"

    def call() -> int:
        with _contained(work):
            try:
                return main(argv)
            except SystemExit as exc:
                return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)

    label, code = attempt(res, f"slurm-elastic {command}", call)
    if code is None:
        return f"{command}:{label}"
    if code not in (0, 2):
        res.note_foreign_text(f"slurm-elastic {command}", f"exit: status {code}")
        return f"{command}:exit{code}"
    return f"{command}:{'accepted' if code == 0 else 'exit2'}"


Family = Callable[[random.Random, Path, CaseResult], str]


def families(command: Command) -> dict[str, Family]:
    """The tool-level families by name, the ``cli`` one calling ``command`` (the caller's
    ``slurm-elastic`` entry point: this package does not import the command it fuzzes)."""
    return {
        "slurm_docs": slurm_docs,
        "config": config,
        "trace_csv": trace_csv,
        "cli": lambda rng, work, res: cli(rng, work, res, command),
    }
