"""The job's long-lived TCPStore, and every value in it signed: :func:`make_store` opens (or hosts)
it, :class:`SignedStore` wraps it for the agent and for torch's own rendezvous.

Anyone who reaches the store's port can write to it, so nothing read from it is believed unsigned:
:class:`SignedStore` signs every value written through it (:func:`.orders.sign_value`) and checks
every value read before anything decodes it; a value that fails is absent to its reader, with one
log line naming the key and the rule, and a claim (compare-and-set) takes the key over it. Every
key lives in the store under a name derived from it with the job's secret
(:func:`.control.store_key`), so no other user can write one before the job does. Counters
(``Store.add``) cannot be signed: the launcher uses none. :mod:`.torch_backend` builds the job's
process groups on it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import time
from collections.abc import Callable
from typing import Any, cast

import torch.distributed as dist
from torch._C._distributed_c10d import Store, TCPStore

from .control import store_key
from .orders import ValueRejectedError, open_value, sign_value

__all__ = ["SignedStore", "make_store"]

log = logging.getLogger(__name__)


def make_store(
    host: str, port: int, serve: bool, timeout_s: float = 60.0, connect_timeout_s: float = 60.0
) -> TCPStore:
    """Open (or host, if ``serve``) the job's long-lived TCPStore (unsigned: wrap it in :class:`SignedStore`).

    Connecting waits up to ``connect_timeout_s`` whatever ``timeout_s`` is: a host whose store
    thread is starved for a few seconds (a loaded 2-core node) must not fail a worker's first
    connection, while a blocking call keeps the short timeout the caller asked for.

    Args:
        host: store host.
        port: store port.
        serve: host the store in this process.
        timeout_s: timeout of blocking store calls (get, wait), seconds.
        connect_timeout_s: how long connecting may take, seconds (at least ``timeout_s``).

    Returns:
        The store client.
    """
    store = TCPStore(
        host,
        port,
        is_master=serve,
        timeout=dt.timedelta(seconds=max(timeout_s, connect_timeout_s)),
        wait_for_workers=False,
    )
    store.set_timeout(dt.timedelta(seconds=timeout_s))
    return store



_ABSENT = b"\0slurm-elastic: absent\0"
"""Expected and desired value of the compare-and-set that reads a key without blocking (never a signed value)."""


class SignedStore(Store):
    """The job's TCPStore, every key hidden and every value signed with the job's secret.

    torch's rendezvous (gloo, NCCL, through a ``PrefixStore``) and the agent's control keys both go
    through it. Every operation takes a logical key (the full key, prefixes included) and acts on the
    store's key :func:`.control.store_key` of it, which nobody without the secret can predict; logs
    and errors name the logical key. A value is stored as :func:`.orders.sign_value` of the logical
    key and the job id; a value read back that fails :func:`.orders.open_value` (forged, replayed from
    another key or job, truncated, over ``max_bytes``) is treated as absent: the blocking :meth:`get`
    torch uses keeps waiting for a good one until the timeout, :meth:`read` returns None, and
    :meth:`claim` takes the key over it. Each refusal is logged once per key and value.

    Args:
        inner: the job's TCPStore (:func:`make_store`).
        job_id: the job's id.
        secret: the job's secret.
        max_bytes: largest payload accepted.
    """

    def __init__(self, inner: Store, job_id: str, secret: bytes, max_bytes: int = 1 << 20) -> None:
        super().__init__()
        self.inner = inner
        self.job_id = job_id
        self.secret = secret
        self.max_bytes = max_bytes
        self._timeout: dt.timedelta = getattr(inner, "timeout", dt.timedelta(seconds=300))
        self._refused: dict[str, bytes] = {}
        self._clones: list[SignedStore] = []  # a clone handed to C++ must outlive its Python side
        self._names: dict[str, str] = {}  # logical key -> its name in the store

    # -- naming ----------------------------------------------------------------------------------
    def name(self, key: str) -> str:
        """The store's name of the logical key ``key`` (:func:`.control.store_key`, cached)."""
        name = self._names.get(key)
        if name is None:
            if len(self._names) >= 4096:
                self._names.clear()
            name = self._names[key] = store_key(key, self.job_id, self.secret)
        return name

    # -- signing ---------------------------------------------------------------------------------
    def _sign(self, key: str, value: str | bytes) -> str:
        data = value.encode() if isinstance(value, str) else bytes(value)
        return cast(str, sign_value(key, self.job_id, data, self.secret))  # bytes: pybind takes them as str

    def _open(self, key: str, raw: bytes) -> bytes | None:
        try:
            return open_value(raw, key, self.job_id, self.secret, self.max_bytes)
        except ValueRejectedError as exc:
            digest = hashlib.sha256(raw).digest()
            if self._refused.get(key) != digest:
                if len(self._refused) >= 4096:
                    self._refused.clear()
                self._refused[key] = digest
                log.warning("refused store key %r: %s", key, exc)
            return None

    # -- the Store interface (torch's rendezvous calls these) ------------------------------------
    def set(self, key: str, value: str | bytes) -> None:
        """Store ``value`` under ``key``, signed."""
        self.inner.set(self.name(key), self._sign(key, value))

    def get(self, key: str) -> bytes:
        """The verified payload of ``key``, waiting for it (a refused value counts as not there yet).

        Raises:
            torch.distributed.DistStoreError: no verified value within the store's timeout.
        """
        deadline = time.monotonic() + self._timeout.total_seconds()
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise dist.DistStoreError(f"no verified value of store key {key!r} within {self._timeout}")
            self.wait([key], dt.timedelta(seconds=remaining))
            payload = self._open(key, self.inner.get(self.name(key)))
            if payload is not None:
                return payload
            time.sleep(0.05)

    def add(self, key: str, value: int) -> int:
        """Atomic add (an unsigned counter, under a hidden name: the launcher uses none)."""
        return self.inner.add(self.name(key), value)

    def check(self, keys: list[str]) -> bool:
        """Whether every key holds a value (verified or not)."""
        return self.inner.check([self.name(k) for k in keys])

    def wait(self, keys: list[str], timeout: dt.timedelta | None = None) -> None:
        """Wait until every key holds a value (verified or not).

        Raises:
            torch.distributed.DistStoreError: not within the timeout (naming the logical keys).
        """
        timeout = self._timeout if timeout is None else timeout
        try:
            self.inner.wait([self.name(k) for k in keys], timeout)
        except dist.DistStoreError as exc:
            raise dist.DistStoreError(f"no verified value of store key {keys[0] if len(keys) == 1 else keys!r} "
                                      f"within {timeout}") from exc

    def compare_set(self, key: str, expected_value: str | bytes, desired_value: str | bytes) -> bytes:
        """Set ``key`` to ``desired_value`` if it holds ``expected_value`` (empty: absent); what it holds then.

        A value there that does not verify is returned as empty bytes.
        """
        expected = self._sign(key, expected_value) if expected_value else ""
        current = self.inner.compare_set(self.name(key), expected, self._sign(key, desired_value))
        return self._open(key, current) or b""

    def delete_key(self, key: str) -> bool:
        """Delete a key."""
        return self.inner.delete_key(self.name(key))

    def num_keys(self) -> int:
        """Number of keys in the store."""
        return self.inner.num_keys()

    def set_timeout(self, timeout: dt.timedelta) -> None:
        """Timeout of blocking calls."""
        self._timeout = timeout
        self.inner.set_timeout(timeout)

    def clone(self) -> SignedStore:
        """A store on a connection of its own, signing the same way."""
        twin = SignedStore(cast(Any, self.inner).clone(), self.job_id, self.secret, self.max_bytes)
        self._clones.append(twin)
        return twin

    # -- what the agent calls --------------------------------------------------------------------
    def read(self, key: str) -> bytes | None:
        """The verified payload of ``key``, or None if it is absent or refused; never blocks.

        One round trip: a compare-and-set whose expected value no signed value equals returns what
        the key holds, and leaves an absent key absent.
        """
        raw = self.inner.compare_set(self.name(key), cast(str, _ABSENT), cast(str, _ABSENT))
        if raw == _ABSENT:
            return None
        return self._open(key, raw)

    def claim(self, key: str, value: str | bytes, accept: Callable[[bytes], bool] | None = None,
              tries: int = 8) -> bytes | None:
        """Set ``key`` to ``value`` unless it holds a verified payload ``accept`` takes; the payload it
        holds then (``value``'s own if this claim took the key), or None if ``tries`` were not enough.

        A value there that does not verify (garbage, a forged or replayed MAC), or whose payload
        ``accept`` refuses, counts as absent: the claim replaces exactly that value by a
        compare-and-set, so of claimants that found the same garbage one wins and the others read its
        claim. Only a writer that rewrites the key between every two of our round trips (it must have
        learned the hidden name) makes the claim give up, after ``tries`` round trips.
        """
        data = value.encode() if isinstance(value, str) else bytes(value)
        name, mine = self.name(key), sign_value(key, self.job_id, data, self.secret)
        expected = b""
        for _ in range(tries):
            current = self.inner.compare_set(name, cast(str, expected), cast(str, mine))  # bytes: pybind takes them
            if current == mine:
                return data
            if expected and current == expected:  # the key went away (deleted): claim an absent key
                expected = b""
                continue
            payload = self._open(key, current)
            if payload is not None and (accept is None or accept(payload)):
                return payload
            expected = current  # not a claim: take the key over exactly this value
        return None
