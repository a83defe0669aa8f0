"""Site configuration: ``/etc/slurm/elastic.toml`` loaded once into frozen, documented dataclasses.

This module owns the configuration schema and its validation. Every unknown key and every bad
value is refused at load time with the key, the value and the rule; nothing reads the
environment or the file again after :func:`load`. Example::

    [daemon]
    partitions = ["gpu"]          # partitions whose nodes the daemon manages ([] = all)
    policy = "ones"               # a policy (slurm-elastic plan --list-policies)
    dry_run = true                # shadow mode: plan and log, never act
    store = "/var/lib/slurm-elastic/state.db"
    poll_interval = 2.0           # seconds between cheap queue checks
    max_idle = 60.0               # plan at least this often (seconds) even when nothing changed
    default_model = "cifar10"     # throughput profile of jobs that report none
    seed = 0                      # planner random seed
    metrics_address = "127.0.0.1:9410"  # Prometheus /metrics ("" = off)

    [policy.ones]                 # parameters of the chosen policy, passed as keywords
    generations = 10

    [guards]                      # site limits around any policy (0 = no limit); the daemon,
                                  # simulate --config and what-if --config apply them
    cooldown_s = 300              # least seconds between two resizes of one job
    max_resizes_per_hour = 4
    max_gpus_per_job = 32
    max_gpus_per_user = 64
    max_gpus_per_account = 128
    protect_rigid = true          # never grow elastic jobs onto GPUs queued rigid jobs need
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from slurm_elastic import policies
from slurm_elastic.core.guards import Guards
from slurm_elastic.errors import ConfigError, UnknownPolicyError

DEFAULT_PATH = Path("/etc/slurm/elastic.toml")


@dataclass(frozen=True, slots=True)
class DaemonConfig:
    """The ``[daemon]`` table.

    Attributes:
        partitions: managed partitions; empty means every partition.
        policy: planner name.
        dry_run: shadow mode (plan and log, never act).
        store: SQLite state file.
        poll_interval: seconds between change checks (> 0).
        max_idle: seconds after which a round runs even without a change (>= poll_interval).
        default_model: throughput profile of jobs that report none.
        seed: planner random seed.
        metrics_address: ``HOST:PORT`` of the Prometheus ``/metrics`` endpoint; empty = off.
    """

    partitions: tuple[str, ...] = ()
    policy: str = "ones"
    dry_run: bool = True
    store: Path = Path("/var/lib/slurm-elastic/state.db")
    poll_interval: float = 2.0
    max_idle: float = 60.0
    default_model: str = "cifar10"
    seed: int = 0
    metrics_address: str = ""


@dataclass(frozen=True, slots=True)
class Config:
    """The whole file: the daemon table, the chosen policy's parameters and the site guards."""

    daemon: DaemonConfig = field(default_factory=DaemonConfig)
    policy_params: dict[str, Any] = field(default_factory=dict)
    guards: Guards = field(default_factory=Guards)


def _bad(key: str, value: object, rule: str) -> ConfigError:
    return ConfigError(f"{key} = {value!r}: {rule}")


def _daemon(raw: dict[str, Any]) -> DaemonConfig:
    known = {f.name for f in fields(DaemonConfig)}
    for key in raw:
        if key not in known:
            raise _bad(f"daemon.{key}", raw[key], f"unknown key; known keys: {', '.join(sorted(known))}")
    out: dict[str, Any] = {}
    if "partitions" in raw:
        v = raw["partitions"]
        if not isinstance(v, list) or not all(isinstance(p, str) and p for p in v):
            raise _bad("daemon.partitions", v, "must be a list of partition names")
        out["partitions"] = tuple(v)
    if "metrics_address" in raw:
        v = raw["metrics_address"]
        if not isinstance(v, str) or (v and not (":" in v and v.rpartition(":")[2].isdigit())):
            raise _bad("daemon.metrics_address", v, 'must be "HOST:PORT" or "" (off)')
        out["metrics_address"] = v
    for key in ("policy", "default_model"):
        if key in raw:
            if not isinstance(raw[key], str) or not raw[key]:
                raise _bad(f"daemon.{key}", raw[key], "must be a non-empty string")
            out[key] = raw[key]
    if "dry_run" in raw:
        if not isinstance(raw["dry_run"], bool):
            raise _bad("daemon.dry_run", raw["dry_run"], "must be true or false")
        out["dry_run"] = raw["dry_run"]
    if "store" in raw:
        if not isinstance(raw["store"], str) or not raw["store"]:
            raise _bad("daemon.store", raw["store"], "must be a file path")
        out["store"] = Path(raw["store"])
    for key in ("poll_interval", "max_idle"):
        if key in raw:
            v = raw[key]
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
                raise _bad(f"daemon.{key}", v, "must be a number of seconds > 0")
            out[key] = float(v)
    if "seed" in raw:
        if isinstance(raw["seed"], bool) or not isinstance(raw["seed"], int) or raw["seed"] < 0:
            raise _bad("daemon.seed", raw["seed"], "must be an integer >= 0")
        out["seed"] = raw["seed"]
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
        raise ConfigError(f"{source}: not valid TOML: {exc}") from exc
    for key in raw:
        if key not in ("daemon", "policy", "guards"):
            raise _bad(key, raw[key], "unknown table; known tables: daemon, policy, guards")
    daemon = _daemon(raw.get("daemon", {}))
    tables = raw.get("policy", {})
    if not isinstance(tables, dict):
        raise _bad("policy", tables, "must be a table of [policy.<name>] tables")
    params = tables.get(daemon.policy, {})
    if not isinstance(params, dict):
        raise _bad(f"policy.{daemon.policy}", params, "must be a table of parameters")
    try:
        policies.create(daemon.policy, **params)  # validates names and values now, not at the first round
    except UnknownPolicyError as exc:
        raise _bad("daemon.policy", daemon.policy, str(exc)) from exc
    return Config(daemon, dict(params), _guards(raw.get("guards", {})))


def _guards(raw: Any) -> Guards:
    if not isinstance(raw, dict):
        raise _bad("guards", raw, "must be a table")
    known = {f.name for f in fields(Guards)}
    for key in raw:
        if key not in known:
            raise _bad(f"guards.{key}", raw[key], f"unknown key; known keys: {', '.join(sorted(known))}")
    if "protect_rigid" in raw and not isinstance(raw["protect_rigid"], bool):
        raise _bad("guards.protect_rigid", raw["protect_rigid"], "must be true or false")
    return Guards(**raw)


def load(path: Path = DEFAULT_PATH) -> Config:
    """Read and validate a configuration file.

    Raises:
        ConfigError: the file cannot be read, or breaks a rule (see :func:`parse`).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read configuration: {exc.strerror}") from exc
    return parse(text, str(path))
