"""The CLI backend: Slurm's records read with ``squeue --json`` and ``sinfo --json``.

This module owns :class:`SlurmCli`, a record source for :mod:`slurm_elastic.observe`: every node
(``sinfo --json`` on 22.05, ``sinfo -N --json`` from 23.02) and every job (``squeue --json``) as
typed records. It only reads; it never changes Slurm, and it does not build snapshots.

Large queues: each document is decoded keeping only the keys the records read
(:func:`~slurm_elastic.slurm.listing_json.decode_listing`), and a record unchanged since the last
read is not read again (:class:`~slurm_elastic.slurm.read_memo.ReadMemo`, one for jobs and one for
nodes, holding the last read's records only). Slurm cannot say which jobs changed: slurmctld
answers "no change" only for the whole queue (``slurm_load_jobs`` with the last update time), and
neither ``squeue`` nor pyslurm asks it even that, so every read is a whole listing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from slurm_elastic.slurm.dialects import detect_version
from slurm_elastic.slurm.json_records import parse_jobs, parse_nodes
from slurm_elastic.slurm.listing_json import decode_listing
from slurm_elastic.slurm.read_memo import ReadMemo
from slurm_elastic.slurm.records import JobRecord, NodeRecord
from slurm_elastic.slurm.runner import Runner, run_command, slurm_release


@dataclass
class SlurmCli:
    """Reads Slurm through its commands (argv lists via ``runner``).

    Args:
        runner: runs a command, returns stdout (default: :func:`~slurm_elastic.slurm.runner.run_command`).

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
    job_memo: ReadMemo[JobRecord] = field(init=False, default_factory=ReadMemo)
    """The job records of the last read, by raw record (its ``hits`` and ``misses`` say how many were reused)."""
    node_memo: ReadMemo[NodeRecord] = field(init=False, default_factory=ReadMemo)
    """The node records of the last read, by raw record."""
    timings: dict[str, float] = field(init=False, default_factory=dict)
    """Seconds the last :meth:`read` spent running the commands, decoding their JSON and reading
    the records (``command``, ``decode``, ``records``), for ``bench observe`` and the round log."""

    def __post_init__(self) -> None:
        self.release = slurm_release(self.runner)
        self._sinfo = ["sinfo", "--json"] if self.release[:2] == (22, 5) else ["sinfo", "-N", "--json"]

    def _document(self, argv: list[str]) -> dict[str, Any]:
        t0 = time.perf_counter()
        text = self.runner(argv)
        t1 = time.perf_counter()
        doc = decode_listing(text, argv)
        self._clock("command", t1 - t0)
        self._clock("decode", time.perf_counter() - t1)
        self.dialect = detect_version(doc).describe()
        return doc

    def _clock(self, stage: str, seconds: float) -> None:
        self.timings[stage] = self.timings.get(stage, 0.0) + seconds

    def nodes(self) -> list[NodeRecord]:
        """Every node (``sinfo --json`` on 22.05; ``sinfo -N --json`` from 23.02); one whose record does
        not parse is left out and named in :attr:`refused_nodes`."""
        refused: dict[str, str] = {}
        doc = self._document(self._sinfo)
        t = time.perf_counter()
        nodes = parse_nodes(doc, refused, self.node_memo)
        self._clock("records", time.perf_counter() - t)
        self.refused_nodes = refused
        return nodes

    def jobs(self) -> list[JobRecord]:
        """Every job Slurm lists (``squeue --json``); one whose record does not parse is left out and
        named in :attr:`refused`."""
        refused: dict[str, str] = {}
        doc = self._document(["squeue", "--json"])
        t = time.perf_counter()
        jobs = parse_jobs(doc, refused, self.job_memo)
        self._clock("records", time.perf_counter() - t)
        self.refused = refused
        return jobs

    def read(self) -> tuple[list[NodeRecord], list[JobRecord]]:
        """Every node, then every job."""
        self.timings = {}
        return self.nodes(), self.jobs()
