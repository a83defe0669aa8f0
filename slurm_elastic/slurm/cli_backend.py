"""The CLI backend: Slurm's records read with ``squeue --json`` and ``sinfo --json``.

This module owns :class:`SlurmCli`, a record source for :mod:`slurm_elastic.observe`: every node
(``sinfo --json`` on 22.05, ``sinfo -N --json`` from 23.02) and every job (``squeue --json``) as
typed records. It only reads; it never changes Slurm, and it does not build snapshots.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from slurm_elastic.slurm.commands import Runner, run_command, run_json, slurm_release
from slurm_elastic.slurm.dialects import detect_version
from slurm_elastic.slurm.records import JobRecord, NodeRecord, parse_jobs, parse_nodes


@dataclass
class SlurmCli:
    """Reads Slurm through its commands (argv lists via ``runner``).

    Args:
        runner: runs a command, returns stdout (default: :func:`~slurm_elastic.slurm.commands.run_command`).

    Raises:
        UnsupportedSlurmVersion: at creation, when ``sinfo --version`` names a release not read here.
    """

    runner: Runner = run_command
    release: tuple[int, int, int] = field(init=False)
    refused: dict[str, str] = field(init=False, default_factory=dict)
    """The job records of the last read that did not parse, by job id, with the reason (left out)."""
    refused_nodes: dict[str, str] = field(init=False, default_factory=dict)
    """The node records of the last read that did not parse, by node name, with the reason (left out)."""
    dialect: str = field(init=False, default="")
    """The JSON dialect of the last document read (``data_parser/v0.0.42 (Slurm 24.11's default) from
    Slurm 24.11.1``), for ``status`` and ``check-config``; ``""`` before the first read."""

    def __post_init__(self) -> None:
        self.release = slurm_release(self.runner)
        self._sinfo = ["sinfo", "--json"] if self.release[:2] == (22, 5) else ["sinfo", "-N", "--json"]

    def _document(self, argv: list[str]) -> dict[str, Any]:
        doc = run_json(self.runner, argv)
        self.dialect = detect_version(doc).describe()
        return doc

    def nodes(self) -> list[NodeRecord]:
        """Every node (``sinfo --json`` on 22.05; ``sinfo -N --json`` from 23.02); one whose record does
        not parse is left out and named in :attr:`refused_nodes`."""
        refused: dict[str, str] = {}
        nodes = parse_nodes(self._document(self._sinfo), refused)
        self.refused_nodes = refused
        return nodes

    def jobs(self) -> list[JobRecord]:
        """Every job Slurm lists (``squeue --json``); one whose record does not parse is left out and
        named in :attr:`refused`."""
        refused: dict[str, str] = {}
        jobs = parse_jobs(self._document(["squeue", "--json"]), refused)
        self.refused = refused
        return jobs

    def read(self) -> tuple[list[NodeRecord], list[JobRecord]]:
        """Every node, then every job."""
        return self.nodes(), self.jobs()
