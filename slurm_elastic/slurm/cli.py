"""The CLI backend: Slurm's own commands, run as argv lists, turned into the core's snapshot.

This module owns running ``squeue --json``, ``sinfo --json`` (22.05) or ``sinfo -N --json``
(25.11), ``sacct --json`` and ``scontrol`` — never through a shell — and :class:`SlurmObserver`,
the daemon's observer for ``run_round``. Parsing is :mod:`slurm_elastic.slurm.parse`; this module
only adds the commands, the version check at start, and the partition filter. Commands are run
through an injectable ``runner`` so the unit tests can feed recorded output.

Supported: Slurm 22.05 (JSON openapi/v0.0.38) and 25.11 (data_parser/v0.0.44). Any other version
is refused at start with the version found and the supported ones.
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from slurm_elastic.core.model import ClusterSnapshot
from slurm_elastic.errors import ElasticError
from slurm_elastic.slurm.parse import (
    JobRecord,
    JobRuntime,
    NodeRecord,
    SlurmJsonError,
    UnsupportedSlurmVersion,
    build_snapshot,
    parse_jobs,
    parse_nodes,
)
from slurm_elastic.slurm.satellites import fold
from slurm_elastic_predictor.throughput import ThroughputModel

log = logging.getLogger(__name__)

SUPPORTED_RELEASES = ((22, 5), (25, 11))
COMMAND_TIMEOUT_S = 30.0

Runner = Callable[[Sequence[str]], str]


class SlurmCommandError(ElasticError):
    """A Slurm command failed (the message has the command line, the exit code and stderr)."""


def run_command(argv: Sequence[str], env: Mapping[str, str] | None = None, timeout: float = COMMAND_TIMEOUT_S) -> str:
    """Run one Slurm command (argv list, no shell) and return its standard output.

    Raises:
        SlurmCommandError: the program is missing, timed out, or exited non-zero.
    """
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False,
                              env=dict(env) if env is not None else None)
    except FileNotFoundError as exc:
        raise SlurmCommandError(f"{argv[0]}: not found (is Slurm's client installed and on PATH?)") from exc
    except subprocess.TimeoutExpired as exc:
        raise SlurmCommandError(f"{' '.join(argv)}: no answer within {timeout:g} s") from exc
    if proc.returncode != 0:
        raise SlurmCommandError(f"{' '.join(argv)}: exit {proc.returncode}: {proc.stderr.strip()[:500]}")
    return proc.stdout


def slurm_release(runner: Runner) -> tuple[int, int, int]:
    """The running Slurm's release from ``sinfo --version`` (e.g. ``slurm 22.05.8`` -> (22, 5, 8)).

    Raises:
        UnsupportedSlurmVersion: a release this slurm-elastic does not parse.
    """
    text = runner(["sinfo", "--version"]).strip()
    m = re.search(r"(\d+)\.(\d+)\.(\d+)", text)
    if not m:
        raise UnsupportedSlurmVersion(f"sinfo --version printed {text!r}: no Slurm release found")
    release = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
    if release[:2] not in SUPPORTED_RELEASES:
        known = ", ".join(f"{a}.{b:02d}" for a, b in SUPPORTED_RELEASES)
        raise UnsupportedSlurmVersion(
            f"Slurm {'.'.join(map(str, release))} is not supported (its --json output differs); supported: {known}"
        )
    return release


def run_json(runner: Runner, argv: Sequence[str]) -> dict[str, Any]:
    """Run a ``--json`` Slurm command and return the parsed top-level object.

    Raises:
        SlurmJsonError: the output is not a JSON object.
    """
    text = runner(argv)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SlurmJsonError(f"{' '.join(argv)}: output is not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise SlurmJsonError(f"{' '.join(argv)}: output is a {type(doc).__name__}, not a JSON object")
    return doc


@dataclass
class SlurmObserver:
    """Reads the cluster through Slurm's commands; the daemon's :class:`~slurm_elastic.core.rounds.Observer`.

    Args:
        partitions: partitions whose nodes the daemon manages (empty: all).
        profiles: throughput models by name (the default model's must be present).
        clock: seconds since the epoch (the daemon passes ``time.time``).
        runner: runs a command, returns stdout (default: :func:`run_command`).
        default_model: profile of elastic jobs that report no model.
        satellites: satellite job id -> its job's id (the daemon's store); folded into their jobs.
        runtimes: what the daemon knows of jobs beyond Slurm (launcher reports), from the raw records.
    """

    partitions: tuple[str, ...]
    profiles: Mapping[str, ThroughputModel]
    clock: Callable[[], float]
    runner: Runner = run_command
    default_model: str = "cifar10"
    satellites: Callable[[], Mapping[str, str]] = dict
    runtimes: Callable[[Sequence[JobRecord]], Mapping[str, JobRuntime]] | None = None

    def __post_init__(self) -> None:
        self.release = slurm_release(self.runner)
        self.last_jobs: dict[str, JobRecord] = {}  # the records of the last observation (for the actuator)
        self._sinfo = ["sinfo", "--json"] if self.release[:2] == (22, 5) else ["sinfo", "-N", "--json"]

    def nodes(self) -> list[NodeRecord]:
        """Managed nodes (``sinfo --json``; ``sinfo -N --json`` on 25.11)."""
        recs = parse_nodes(run_json(self.runner, self._sinfo))
        if not self.partitions:
            return recs
        wanted = set(self.partitions)
        return [n for n in recs if wanted & set(n.partitions)]

    def jobs(self) -> list[JobRecord]:
        """Every job Slurm lists (``squeue --json``; ``squeue -t all --json`` is not needed)."""
        jobs = parse_jobs(run_json(self.runner, ["squeue", "--json"]))
        self.last_jobs = {j.job_id: j for j in jobs}
        return jobs

    def observe(self) -> ClusterSnapshot:
        """The snapshot now: nodes of the managed partitions and the jobs on them or waiting for them."""
        nodes = self.nodes()
        return assemble(self, nodes, self.jobs())

    def change_key(self) -> tuple[tuple[str, str, str], ...]:
        """A cheap fingerprint of the queue (job ids, states, node lists): the daemon plans when it changes."""
        return fingerprint(parse_jobs(run_json(self.runner, ["squeue", "--json"])))


class _Assembled(Protocol):
    @property
    def partitions(self) -> tuple[str, ...]: ...
    @property
    def profiles(self) -> Mapping[str, ThroughputModel]: ...
    @property
    def clock(self) -> Callable[[], float]: ...
    @property
    def default_model(self) -> str: ...
    @property
    def satellites(self) -> Callable[[], Mapping[str, str]]: ...
    @property
    def runtimes(self) -> Callable[[Sequence[JobRecord]], Mapping[str, JobRuntime]] | None: ...


def assemble(obs: _Assembled, nodes: Sequence[NodeRecord], jobs: Sequence[JobRecord]) -> ClusterSnapshot:
    """The snapshot of one observation (either backend): managed jobs, satellites folded into their
    jobs, what the launchers reported, built by :func:`~slurm_elastic.slurm.parse.build_snapshot`."""
    managed = in_partitions(jobs, obs.partitions)
    progress = obs.runtimes(managed) if obs.runtimes is not None else None
    return build_snapshot(nodes, fold(managed, obs.satellites()), now=obs.clock(), profiles=obs.profiles,
                          default_model=obs.default_model, progress=progress)


def in_partitions(jobs: Sequence[JobRecord], partitions: Sequence[str]) -> list[JobRecord]:
    """Jobs in (or, while pending, asking for) one of ``partitions``; all jobs when none are given."""
    if not partitions:
        return list(jobs)
    wanted = set(partitions)
    return [j for j in jobs if not j.partition or set(j.partition.split(",")) & wanted]


def fingerprint(jobs: Sequence[JobRecord]) -> tuple[tuple[str, str, str], ...]:
    """Job ids, states and node lists, sorted: changes whenever the queue does."""
    return tuple(sorted((j.job_id, ",".join(j.slurm_state), ",".join(j.nodes)) for j in jobs))
