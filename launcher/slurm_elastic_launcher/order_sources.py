"""Where a worker's agent reads its orders from: a file, or the job's store.

This module owns the order sources (:class:`OrderSource`): they hand over raw orders only, and the
agent authenticates each one (:meth:`.orders.Order.parse`). ``SLURM_ELASTIC_ORDERS`` names the
source (:func:`make_order_source`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from . import control
from .agent_types import KeyValue
from .env import LauncherEnv
from .orders import Order


class OrderSource(Protocol):
    """Where raw orders come from (a file, the job's store, later the daemon's channel)."""

    def read(self) -> list[str]:
        """All raw orders currently available (authentication is the agent's job)."""


class FileOrderSource:
    """Orders as JSON lines in a file (tests, manual operation).

    Args:
        path: the file; missing means no orders yet.
    """

    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def read(self) -> list[str]:
        """Non-empty lines of the file (bytes that are not UTF-8 read as U+FFFD: that line is refused)."""
        try:
            text = self.path.read_bytes().decode(errors="replace")
        except FileNotFoundError:
            return []
        return [line for line in text.splitlines() if line.strip()]



class StoreOrderSource:
    """Orders in the job's TCPStore: ``orders/<seq>`` for seq = 1, 2, … (:mod:`.control`).

    Args:
        kv: store access.
    """

    MAX_ORDERS = 1 << 16
    """Orders kept at most (a job gets one per resize)."""

    def __init__(self, kv: KeyValue) -> None:
        self.kv = kv
        self._cache: list[str] = []

    def read(self) -> list[str]:
        """Orders published so far (cached; one store round trip when nothing is new).

        A key that is absent or refused (not signed for it) ends the read; it is read again next time,
        so a forgery the daemon's order then overwrites hides nothing.
        """
        while len(self._cache) < self.MAX_ORDERS:
            raw = self.kv.store_get(control.order_key(len(self._cache) + 1))
            if raw is None:
                break
            self._cache.append(raw)
        return list(self._cache)

    @staticmethod
    def publish(kv: KeyValue, order: Order) -> None:
        """Publish a signed order under its number (what the daemon, or a test acting as it, does)."""
        kv.store_set(control.order_key(order.seq), order.to_json())



def make_order_source(env: LauncherEnv, kv: KeyValue) -> OrderSource:
    """The order source named by ``SLURM_ELASTIC_ORDERS``."""
    if env.orders.startswith("file:"):
        return FileOrderSource(env.orders.removeprefix("file:"))
    return StoreOrderSource(kv)
