"""Site configuration: ``/etc/slurm/elastic.toml`` loaded once into frozen, documented dataclasses.

This module owns the configuration schema and its validation. Every unknown key and every bad
value is refused at load time in one line with the key, the value and the rule; nothing reads the
environment or the file again after :func:`load`. Example::

    [daemon]
    partitions = ["gpu"]          # partitions whose nodes the daemon manages ([] = all)
    policy = "min-jct"            # a policy (slurm-elastic plan --list-policies); min-jct is the default
    dry_run = true                # shadow mode: plan and log, never act
    store = "/var/lib/slurm-elastic/state.db"
    poll_interval = 2.0           # seconds between cheap queue checks (0.5 .. 3600)
    max_idle = 60.0               # plan at least this often (seconds, poll_interval .. 86400)
    default_model = "cifar10"     # throughput profile of jobs that report none (a shipped profile)
    profiles = "/etc/slurm-elastic/profiles"  # site profiles (slurm-elastic profile); left out: shipped only
    seed = 0                      # planner random seed (0 .. 2**32 - 1)
    metrics_address = "127.0.0.1:9410"  # Prometheus /metrics, PORT 1..65535 ("" = off)
    backend = "auto"              # read Slurm with pyslurm when it matches, else the CLI; or "cli", "pyslurm"

    [policy.min-jct]              # parameters of the chosen policy, passed as keywords
    ftf_bound = 1.1

    [guards]                      # site limits around any policy (0 = no limit); the daemon,
                                  # simulate --config and what-if --config apply them
    cooldown_s = 300              # least seconds between two resizes of one job (<= 7 days)
    max_resizes_per_hour = 4      # an integer, <= 3600
    max_gpus_per_job = 32         # integers, <= 65536
    max_gpus_per_user = 64
    max_gpus_per_account = 128
    protect_rigid = true          # never grow elastic jobs onto GPUs queued rigid jobs need
    min_run_s = 120               # a job's run (from its start or restart, not a resize in place)
                                  # lasts this long before it may be preempted
    max_preemptions = 3           # most times one job is preempted (requeued); then it runs on

The rules: the file is a regular file of at most 1 MiB of UTF-8 TOML; every table is a table;
integers refuse floats and booleans, numbers are finite; ``poll_interval`` is at least 0.5 s (at
most two ``squeue`` calls a second: it spares slurmctld); ``store`` is an absolute file path, not a
folder, whose folder exists or can be made; ``profiles`` is an absolute path to a folder of site
profiles that all load (``slurm-elastic profile`` writes one: a sub-folder per model, each with
its ``placements.csv``, ``scalability.csv`` and ``machine.json``), used beside the shipped ones (a
site profile of a shipped name replaces it); ``default_model`` is a shipped or site throughput profile;
partition names are printable ASCII without blanks or commas. Every ``[policy.<name>]`` table
names a policy and its parameters pass that policy's types and ranges
(:data:`slurm_elastic.policies.PARAMETERS`, the same checks as ``--param``).
"""

from __future__ import annotations

import errno
import math
import os
import re
import stat
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from slurm_elastic import policies
from slurm_elastic.core.guards import Guards
from slurm_elastic.errors import ConfigError, UnknownPolicyError
from slurm_elastic.textfiles import read_text

DEFAULT_PATH = Path("/etc/slurm/elastic.toml")

MAX_CONFIG_BYTES = 1 << 20
"""Largest configuration file (1 MiB)."""

MIN_POLL_INTERVAL_S = 0.5
"""Least ``poll_interval``: at most two ``squeue`` calls a second, whatever the file says."""

MAX_POLL_INTERVAL_S = 3600.0
MAX_IDLE_S = 86_400.0
SEED_MAX = 2**32 - 1
MAX_GPUS = 65536
MAX_COOLDOWN_S = 7 * 86_400.0
MAX_RESIZES_PER_HOUR = 3600
MAX_PARTITIONS = 256
MAX_PATH_CHARS = 4096


@dataclass(frozen=True, slots=True)
class DaemonConfig:
    """The ``[daemon]`` table.

    Attributes:
        partitions: managed partitions; empty means every partition.
        policy: planner name.
        dry_run: shadow mode (plan and log, never act).
        store: SQLite state file.
        poll_interval: seconds between change checks (0.5 .. 3600).
        max_idle: seconds after which a round runs even without a change (poll_interval .. 86400).
        default_model: throughput profile of jobs that report none (a shipped or site profile).
        profiles: folder of site throughput profiles (``slurm-elastic profile``), or None (shipped only).
        seed: planner random seed (0 .. 2**32 - 1).
        metrics_address: ``HOST:PORT`` of the Prometheus ``/metrics`` endpoint (PORT 1..65535); empty = off.
        backend: how Slurm is read: ``auto`` (pyslurm when an importable pyslurm matches the running
            Slurm, else the CLI's ``--json``), ``cli`` or ``pyslurm`` (refused at start when it cannot serve).
    """

    partitions: tuple[str, ...] = ()
    policy: str = policies.DEFAULT_POLICY
    dry_run: bool = True
    store: Path = Path("/var/lib/slurm-elastic/state.db")
    poll_interval: float = 2.0
    max_idle: float = 60.0
    default_model: str = "cifar10"
    profiles: Path | None = None
    seed: int = 0
    metrics_address: str = ""
    backend: str = "auto"


BACKENDS = ("auto", "cli", "pyslurm")
"""The values of ``daemon.backend`` (and ``--backend``)."""


@dataclass(frozen=True, slots=True)
class Config:
    """The whole file: the daemon table, the chosen policy's parameters and the site guards."""

    daemon: DaemonConfig = field(default_factory=DaemonConfig)
    policy_params: dict[str, Any] = field(default_factory=dict)
    guards: Guards = field(default_factory=Guards)


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]{1,64}", re.ASCII)
_PARTITION = re.compile(r"[\x21-\x2b\x2d-\x7e]{1,128}", re.ASCII)  # printable ASCII, no blank or comma
_PORT = re.compile(r"[1-9][0-9]{0,4}", re.ASCII)
_HOST = re.compile(r"[\x21-\x7e]{0,255}", re.ASCII)


def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else repr(key)[:80]


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 100 else f"{text[:100]}... ({len(text)} characters)"


def _bad(key: str, value: object, rule: str) -> ConfigError:
    return ConfigError(f"{key} = {_shown(value)}: {rule}")


def _table(key: str, raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise _bad(key, raw, "must be a table")
    return raw


def _number(key: str, value: Any, low: float, high: float, *, integer: bool, what: str = "") -> Any:
    """``value`` if it is an integer (``integer``; never a float or a bool) or a finite number
    (not a bool) in ``low .. high``."""
    kind = "an integer" if integer else "a finite number"
    rule = f"must be >= {low:g} and <= {high:g} ({kind}{what})"
    if isinstance(value, bool) or not isinstance(value, int if integer else int | float):
        raise _bad(key, value, rule)
    if not (math.isfinite(value) and low <= value <= high):
        raise _bad(key, value, rule)
    return value


def _store(value: Any) -> Path:
    """An absolute file path, not a folder, whose nearest existing folder is a folder."""
    rule = "must be a file path: absolute, not a folder, in a folder that exists or can be made"
    if (not isinstance(value, str) or not value.startswith("/") or value.endswith("/") or "\0" in value
            or len(value) > MAX_PATH_CHARS or Path(value).name in ("", ".", "..")):
        raise _bad("daemon.store", value, rule)
    path = Path(value)
    try:
        if stat.S_ISDIR(os.stat(path).st_mode):
            raise _bad("daemon.store", value, f"{rule} (it is a folder)")
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.ENOTDIR):
            raise _bad("daemon.store", value, f"{rule} ({exc.strerror})") from None
    for folder in path.parents:
        try:
            mode = os.stat(folder).st_mode
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                continue  # made when the store is opened
            raise _bad("daemon.store", value, f"{rule} ({folder}: {exc.strerror})") from None
        if not stat.S_ISDIR(mode):
            raise _bad("daemon.store", value, f"{rule} ({folder} is not a folder)")
        break
    return path


def _metrics_address(value: Any) -> str:
    rule = 'must be "HOST:PORT" with PORT 1..65535 (HOST without blanks, [v6] in brackets), or "" (off)'
    if not isinstance(value, str):
        raise _bad("daemon.metrics_address", value, rule)
    if value == "":
        return value
    host, sep, port = value.rpartition(":")
    bracketed = host.startswith("[") == host.endswith("]") and (not host.startswith("[") or len(host) > 2)
    if not (sep and _PORT.fullmatch(port) and int(port) <= 65535 and _HOST.fullmatch(host) and bracketed):
        raise _bad("daemon.metrics_address", value, rule)
    return value


def _profiles(value: Any) -> tuple[Path, tuple[str, ...]]:
    """The site profile folder and the names of its profiles (each loads and fits)."""
    from slurm_elastic_predictor.errors import ProfileError
    from slurm_elastic_predictor.profiles import load_models

    rule = "must be the absolute path of a folder of site profiles (slurm-elastic profile writes one)"
    if not isinstance(value, str) or not value.startswith("/") or "\x00" in value or len(value) > 4096:
        raise _bad("daemon.profiles", value, rule)
    path = Path(value)
    if not path.is_dir():
        raise _bad("daemon.profiles", value, f"{rule}: no such folder")
    try:
        names = tuple(load_models(path))
    except ProfileError as exc:
        raise _bad("daemon.profiles", value, f"{rule}: {exc}") from None
    if not names:
        raise _bad("daemon.profiles", value, f"{rule}: it holds no profile (no <model>/placements.csv)")
    return path, names


def _default_model(value: Any, site: tuple[str, ...] = ()) -> str:
    from slurm_elastic_predictor.profiles import PROFILE_NAMES  # only when the file names one

    known = (*PROFILE_NAMES, *(n for n in site if n not in PROFILE_NAMES))
    if not isinstance(value, str) or value not in known:
        raise _bad("daemon.default_model", value, f"must be one of the shipped or site profiles: {', '.join(known)}")
    return value


def _daemon(raw: Any) -> DaemonConfig:
    raw = _table("daemon", raw)
    known = {f.name for f in fields(DaemonConfig)}
    for key in raw:
        if key not in known:
            raise _bad(f"daemon.{_key(key)}", raw[key], f"unknown key; known keys: {', '.join(sorted(known))}")
    out: dict[str, Any] = {}
    if "partitions" in raw:
        v = raw["partitions"]
        if (not isinstance(v, list) or len(v) > MAX_PARTITIONS
                or not all(isinstance(p, str) and _PARTITION.fullmatch(p) for p in v)):
            raise _bad("daemon.partitions", v, f"must be a list of at most {MAX_PARTITIONS} partition names "
                       "(1 to 128 printable ASCII characters, no blank or comma)")
        out["partitions"] = tuple(v)
    if "metrics_address" in raw:
        out["metrics_address"] = _metrics_address(raw["metrics_address"])
    if "policy" in raw:
        if not isinstance(raw["policy"], str) or not raw["policy"]:
            raise _bad("daemon.policy", raw["policy"], "must be a non-empty string")
        out["policy"] = raw["policy"]
    site: tuple[str, ...] = ()
    if "profiles" in raw:
        out["profiles"], site = _profiles(raw["profiles"])
    if "default_model" in raw:
        out["default_model"] = _default_model(raw["default_model"], site)
    if "dry_run" in raw:
        if not isinstance(raw["dry_run"], bool):
            raise _bad("daemon.dry_run", raw["dry_run"], "must be true or false")
        out["dry_run"] = raw["dry_run"]
    if "store" in raw:
        out["store"] = _store(raw["store"])
    if "poll_interval" in raw:
        out["poll_interval"] = float(_number("daemon.poll_interval", raw["poll_interval"], MIN_POLL_INTERVAL_S,
                                             MAX_POLL_INTERVAL_S, integer=False,
                                             what=" of seconds; the floor spares slurmctld"))
    if "max_idle" in raw:
        out["max_idle"] = float(_number("daemon.max_idle", raw["max_idle"], MIN_POLL_INTERVAL_S, MAX_IDLE_S,
                                        integer=False, what=" of seconds"))
    if "seed" in raw:
        out["seed"] = _number("daemon.seed", raw["seed"], 0, SEED_MAX, integer=True)
    if "backend" in raw:
        if raw["backend"] not in BACKENDS:
            raise _bad("daemon.backend", raw["backend"], f"must be one of {', '.join(BACKENDS)}")
        out["backend"] = raw["backend"]
    cfg = DaemonConfig(**out)
    if cfg.max_idle < cfg.poll_interval:
        raise _bad("daemon.max_idle", cfg.max_idle, f"must be >= daemon.poll_interval ({cfg.poll_interval})")
    return cfg


def parse(text: str, source: str = "<config>") -> Config:
    """Validate configuration text (TOML).

    Raises:
        ConfigError: naming the key, the value and the rule (or the TOML syntax error and line).
    """
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {' '.join(str(exc).split())}") from exc
    except RecursionError:
        raise ConfigError(f"{source}: not valid TOML here: arrays or tables nested too deeply") from None
    for key in raw:
        if key not in ("daemon", "policy", "guards"):
            raise _bad(_key(key), raw[key], "unknown table; known tables: daemon, policy, guards")
    daemon = _daemon(raw.get("daemon", {}))
    tables = _table("policy", raw.get("policy", {}))
    for name, table in tables.items():
        _table(f"policy.{_key(name)}", table)
        try:
            policies.validate(name, table)  # every table, the chosen policy's or not
        except UnknownPolicyError as exc:
            raise _bad(f"policy.{_key(name)}", table, str(exc)) from None
    params = tables.get(daemon.policy, {})
    try:
        policies.create(daemon.policy, **params)  # validates names and values now, not at the first round
    except UnknownPolicyError as exc:
        raise _bad("daemon.policy", daemon.policy, str(exc)) from exc
    return Config(daemon, dict(policies.check_params(daemon.policy, params)), _guards(raw.get("guards", {})))


SITE_GUARD_DEFAULTS: dict[str, Any] = {"min_run_s": 120.0, "max_preemptions": 3}
"""Guards on in every site file unless it sets them (0 turns one off): without them, a policy that
serves by submit time and Slurm's own starts preempt the same jobs over and over (issue 14)."""

_GUARD_LIMITS: dict[str, tuple[float, bool, str]] = {
    "cooldown_s": (MAX_COOLDOWN_S, False, " of seconds; 0 = no limit"),
    "max_resizes_per_hour": (MAX_RESIZES_PER_HOUR, True, "; 0 = no limit"),
    "max_gpus_per_job": (MAX_GPUS, True, "; 0 = no limit"),
    "max_gpus_per_user": (MAX_GPUS, True, "; 0 = no limit"),
    "max_gpus_per_account": (MAX_GPUS, True, "; 0 = no limit"),
    "min_run_s": (MAX_COOLDOWN_S, False, " of seconds; 0 = no limit"),
    "max_preemptions": (MAX_RESIZES_PER_HOUR, True, "; 0 = no limit"),
}


def _guards(raw: Any) -> Guards:
    raw = _table("guards", raw)
    known = {f.name for f in fields(Guards)}
    for key in raw:
        if key not in known:
            raise _bad(f"guards.{_key(key)}", raw[key], f"unknown key; known keys: {', '.join(sorted(known))}")
    if "protect_rigid" in raw and not isinstance(raw["protect_rigid"], bool):
        raise _bad("guards.protect_rigid", raw["protect_rigid"], "must be true or false")
    for key, (high, integer, what) in _GUARD_LIMITS.items():
        if key in raw:
            _number(f"guards.{key}", raw[key], 0, high, integer=integer, what=what)
    return Guards(**{**SITE_GUARD_DEFAULTS, **raw})


def _read(path: Path) -> str:
    """The file's text: opened once, a regular file, at most MAX_CONFIG_BYTES of UTF-8."""
    return read_text(path, max_bytes=MAX_CONFIG_BYTES, noun="configuration",
                     kind_rule="the configuration is a regular TOML file",
                     size_rule=f"a configuration is at most {MAX_CONFIG_BYTES} bytes", error=ConfigError)


def load(path: Path = DEFAULT_PATH) -> Config:
    """Read and validate a configuration file.

    Raises:
        ConfigError: the file cannot be read (not a regular file, over 1 MiB, not UTF-8), or breaks
            a rule (see :func:`parse`); the message starts with the file's path.
    """
    text = _read(path)
    try:
        return parse(text, str(path))
    except ConfigError as exc:
        if str(exc).startswith(f"{path}: "):
            raise
        raise ConfigError(f"{path}: {exc}") from exc
