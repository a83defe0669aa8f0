"""The wire form of the channel between the daemon and a job: signed orders in, signed reports out.

This module owns, in one place, the bytes both sides sign and check: the daemon signs orders with
:func:`sign_order` and checks reports with :func:`verify_report` (``slurm_elastic.channel`` imports
them from here); the launcher checks orders with :meth:`Order.parse` and signs reports with
:func:`sign_report`. It imports nothing but the standard library, so the controller may import it
while the launcher never imports the controller.

Wire form: one line of sorted, compact, ASCII JSON (``json.dumps(..., sort_keys=True,
separators=(",", ":"))``) holding the body and ``mac``, the hex HMAC-SHA256, keyed with the job's
secret, of :func:`canonical` of the body (the same JSON without ``mac``). Every line names its job
(``job_id``); a line for another job is refused, so each side can speak only for its own job.

* An order is ``{"job_id", "seq", "kind", "workers", "local_batch", "mac"}``, and ``"run"`` when the
  job has been requeued: ``seq`` ≥ 1 increases by one per order of the job, ``kind`` is one of
  :data:`ORDER_KINDS`, ``workers`` the worker ids of the new world in rank order (unique, non-empty
  for a resize), ``local_batch`` ≥ 0 (0: keep the policy's), ``run`` ≥ 1 the run of the job the order
  is for (Slurm's restart count; absent: the first run, 0). A requeued job starts its workers again,
  so the orders of an earlier run name workers that are gone: the launcher acts only on its run's.
* A report is any JSON object with ``job_id`` and ``kind`` (one of :data:`REPORT_KINDS`); its fields
  are described in :mod:`.reports`, which writes them. The job identity a report may carry is
  bounded here, for both sides: ``model`` matches :data:`MODEL_NAME` and ``params`` is an integer
  in ``1..``:data:`PARAMS_MAX` (:func:`identity_problem`).

Verification never raises on hostile input: a line that is not JSON (or not UTF-8), not an object,
lacks a field, or carries a ``mac`` that is not a string of hex digits is refused like a bad MAC.

It also owns the signing of the launcher's control values (:func:`sign_value`, :func:`open_value`):
every value the launcher, or torch's rendezvous, writes to the job's TCPStore, the training state a
worker sends a peer, and the checkpoint. Wire form (fixed layout, checked before anything is
decoded): ``MAC ‖ payload``, where ``MAC`` is the 64 lowercase hex digits of HMAC-SHA256, keyed
with the job's secret, over ``b"slurm-elastic/value/v1\0" ‖ u32be(len(job_id)) ‖ job_id ‖
u32be(len(key)) ‖ key ‖ payload`` (``job_id`` and ``key`` UTF-8). Binding the key and the job means a
value cannot be replayed under another key or in another job. A value shorter than its MAC, longer
than the reader's cap, or whose MAC does not match (including one that is not hex or not ASCII) is
refused with :class:`ValueRejectedError` naming the rule; nothing else is raised.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MAC_KEY = "mac"
ORDER_KINDS = ("resize", "stop")
REPORT_KINDS = ("progress", "resize", "end", "left")
_ORDER_FIELDS = frozenset({"job_id", "seq", "kind", "workers", "local_batch"})
_ORDER_OPTIONAL = frozenset({"run"})
MODEL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
"""A report's ``model`` (the name the user gives the model): 1 to 64 ASCII letters, digits, ``_ . -``."""
MODEL_NAME_RULE = "1 to 64 of A-Z a-z 0-9 _ . -"
PARAMS_MAX = 10**13
"""Largest ``params`` (the model's parameter count) a report may carry."""


class OrderRejectedError(ValueError):
    """An order names another job, has a bad MAC or is malformed."""


class ValueRejectedError(ValueError):
    """A signed control value that does not verify; the message is the rule it breaks."""


class _RefusedError(ValueError):
    """A signed line that does not verify: ``malformed`` (not even a signed object) or a bad MAC."""

    def __init__(self, reason: str, malformed: bool = True) -> None:
        super().__init__(reason)
        self.malformed = malformed


def canonical(body: Mapping[str, Any]) -> bytes:
    """The signed bytes of an order's or a report's body: sorted compact ASCII JSON, without ``mac``."""
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode("ascii")


def _mac(body: Mapping[str, Any], secret: bytes) -> str:
    return hmac.new(secret, canonical(body), hashlib.sha256).hexdigest()


def _sign(body: Mapping[str, Any], secret: bytes) -> str:
    if MAC_KEY in body:
        raise ValueError(f"a body to sign must not hold {MAC_KEY!r}")
    return json.dumps({**body, MAC_KEY: _mac(body, secret)}, sort_keys=True, separators=(",", ":"))


def _open(line: str | bytes, secret: bytes) -> tuple[dict[str, Any], str]:
    """The body (without ``mac``) of a signed line whose MAC matches, and that MAC.

    Raises:
        _RefusedError: not a UTF-8 JSON object with a string ``mac``, or a bad MAC.
    """
    try:
        body = json.loads(line)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError, too many digits
        raise _RefusedError(str(exc)) from None
    if not isinstance(body, dict):
        raise _RefusedError(f"a JSON {type(body).__name__}, not an object")
    mac = body.pop(MAC_KEY, None)
    if not isinstance(mac, str):
        raise _RefusedError(f"{MAC_KEY!r} is missing or not a string")
    try:
        expected = _mac(body, secret).encode("ascii")
    except (ValueError, RecursionError) as exc:  # nested just deep enough to parse, not to re-serialise
        raise _RefusedError(str(exc)) from None
    # compare bytes: hmac.compare_digest raises TypeError on a str that is not ASCII
    given = mac.encode("ascii") if mac.isascii() else b""
    if not hmac.compare_digest(given, expected):
        raise _RefusedError("bad MAC", malformed=False)
    return body, mac


# -- orders --------------------------------------------------------------------------------------


def order_body(job_id: str, seq: int, kind: str, workers: Sequence[str], local_batch: int,
               run: int = 0) -> dict[str, Any]:
    """The body of an order, without its MAC (what :func:`canonical` turns into the signed bytes);
    ``run`` is written only when it is not the first (0), so first-run orders keep their bytes."""
    body = {"job_id": job_id, "seq": seq, "kind": kind, "workers": list(workers), "local_batch": local_batch}
    return {**body, "run": run} if run else body


def sign_order(job_id: str, seq: int, kind: str, workers: Sequence[str], local_batch: int, secret: bytes,
               run: int = 0) -> str:
    """One order's wire line (no newline), signed with the job's secret."""
    return _sign(order_body(job_id, seq, kind, workers, local_batch, run), secret)


@dataclass(frozen=True, slots=True)
class Order:
    """A command from the daemon to one job.

    Attributes:
        job_id: the job it is for; others refuse it.
        seq: order number, increasing per job (≥ 1).
        kind: ``"resize"`` or ``"stop"``.
        workers: worker ids of the new world in rank order (resize only).
        local_batch: new per-worker batch (exo) or global batch (endo), or 0 to keep the policy's.
        mac: hex HMAC-SHA256 over :meth:`canonical` with the job's secret.
        run: the job's run it is for (Slurm's restart count; 0: the first).
    """

    job_id: str
    seq: int
    kind: str
    workers: tuple[str, ...] = ()
    local_batch: int = 0
    mac: str = ""
    run: int = 0

    def body(self) -> dict[str, Any]:
        """Every field but the MAC."""
        return order_body(self.job_id, self.seq, self.kind, self.workers, self.local_batch, self.run)

    def canonical(self) -> bytes:
        """The signed bytes: sorted compact JSON of every field but the MAC."""
        return canonical(self.body())

    def signed(self, secret: bytes) -> Order:
        """This order with its MAC set."""
        return Order(self.job_id, self.seq, self.kind, self.workers, self.local_batch, _mac(self.body(), secret),
                     self.run)

    def to_json(self) -> str:
        """Wire form (one line)."""
        return json.dumps({**self.body(), MAC_KEY: self.mac}, sort_keys=True, separators=(",", ":"))

    @classmethod
    def parse(cls, raw: str | bytes, job_id: str, secret: bytes) -> Order:
        """Parse and authenticate one order.

        Args:
            raw: wire form.
            job_id: this job's id.
            secret: this job's secret.

        Returns:
            The verified order.

        Raises:
            OrderRejectedError: malformed, bad MAC, for another job, or not a valid order; never
                anything else, whatever ``raw`` holds.
        """
        try:
            body, mac = _open(raw, secret)
        except _RefusedError as exc:
            raise OrderRejectedError(f"{'malformed ' if exc.malformed else ''}order {_excerpt(raw)}: {exc}") from None
        if not _ORDER_FIELDS <= set(body) <= _ORDER_FIELDS | _ORDER_OPTIONAL:
            raise OrderRejectedError(f"malformed order {_excerpt(raw)}: fields must be {sorted(_ORDER_FIELDS)}, "
                                     f"and {sorted(_ORDER_OPTIONAL)} after a requeue")
        job, seq, kind, workers, local_batch = (body[k] for k in ("job_id", "seq", "kind", "workers", "local_batch"))
        run = body.get("run", 0)
        if not (isinstance(job, str) and isinstance(kind, str) and _is_int(seq) and _is_int(local_batch)
                and _is_int(run) and isinstance(workers, list) and all(isinstance(w, str) for w in workers)):
            raise OrderRejectedError(f"malformed order {_excerpt(raw)}: a field has the wrong type")
        if "run" in body and run < 1:
            raise OrderRejectedError(f"order {seq}: run {run} must be ≥ 1 (the first run writes none)")
        order = cls(job, seq, kind, tuple(workers), local_batch, mac, run)
        if order.job_id != job_id:
            raise OrderRejectedError(f"order {order.seq} is for job {order.job_id!r}, not {job_id!r}")
        if order.kind not in ORDER_KINDS or order.seq < 1:
            raise OrderRejectedError(f"order {order.seq}: kind {order.kind!r} / seq must be resize|stop / ≥ 1")
        if order.kind == "resize" and (not order.workers or len(set(order.workers)) != len(order.workers)):
            raise OrderRejectedError(f"order {order.seq}: a resize needs unique, non-empty workers")
        if order.local_batch < 0:
            raise OrderRejectedError(f"order {order.seq}: local_batch must be ≥ 0")
        return order


def verify_order(line: str | bytes, job_id: str, secret: bytes) -> Order | None:
    """The order of a wire line if it verifies (:meth:`Order.parse`), else ``None``."""
    try:
        return Order.parse(line, job_id, secret)
    except OrderRejectedError:
        return None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _excerpt(raw: str | bytes) -> str:
    return repr(raw[:200])


# -- reports -------------------------------------------------------------------------------------


def sign_report(body: Mapping[str, Any], secret: bytes) -> str:
    """The wire line (no newline) of a report ``body`` (which must not hold ``mac``), with its MAC.

    Raises:
        ValueError: ``body`` holds ``mac``.
    """
    return _sign(body, secret)


def identity_problem(model: object, params: object) -> str | None:
    """Why a report's job identity (``model``, ``params``; each ``None`` when absent) breaks its
    rule, naming the value and the rule, or ``None`` when both keep it (never raises)."""
    if model is not None and not (isinstance(model, str) and MODEL_NAME.fullmatch(model)):
        return f"model={_short(model)}: must be a string of {MODEL_NAME_RULE}"
    if params is not None and not (isinstance(params, int) and not isinstance(params, bool)
                                   and 0 < params <= PARAMS_MAX):
        return f"params={_short(params)}: must be an integer in 1..10**13"
    return None


def _short(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def verify_report(line: str | bytes, job_id: str, secret: bytes) -> dict[str, Any] | None:
    """The body of a signed line if its MAC matches and it names ``job_id``, else ``None`` (never raises)."""
    try:
        body, _ = _open(line, secret)
    except _RefusedError:
        return None
    return body if body.get("job_id") == job_id else None


# -- control values ------------------------------------------------------------------------------

VALUE_DOMAIN = b"slurm-elastic/value/v1\0"
VALUE_MAC_LEN = 64
"""Hex digits of a control value's MAC, in front of its payload."""
VALUE_MAX_BYTES = 1 << 20
"""Default cap of a control value's payload (a store key's value); larger ones are refused."""


def value_hmac(key: str, job_id: str, secret: bytes) -> hmac.HMAC:
    """The HMAC-SHA256 state of a control value of ``key`` in job ``job_id``, before its payload.

    Feed it the payload (in one piece or in chunks) and take ``hexdigest()``: that is the value's MAC.
    """
    job = job_id.encode("utf-8", "surrogatepass")
    name = key.encode("utf-8", "surrogatepass")
    h = hmac.new(secret, VALUE_DOMAIN, hashlib.sha256)
    h.update(len(job).to_bytes(4, "big") + job + len(name).to_bytes(4, "big") + name)
    return h


def sign_value(key: str, job_id: str, payload: bytes, secret: bytes) -> bytes:
    """The wire form of ``payload`` stored or sent under ``key`` in job ``job_id``: ``MAC ‖ payload``."""
    h = value_hmac(key, job_id, secret)
    h.update(payload)
    return h.hexdigest().encode("ascii") + payload


def open_value(raw: object, key: str, job_id: str, secret: bytes, max_bytes: int = VALUE_MAX_BYTES) -> bytes:
    """The payload of a value signed by :func:`sign_value` for ``key`` in ``job_id``.

    The MAC is checked over the exact bytes before anything is decoded; the payload is returned as
    bytes, for the caller to decode.

    Raises:
        ValueRejectedError: not bytes, shorter than its MAC (truncated), a payload over ``max_bytes``,
            a MAC that is not 64 lowercase hex digits, or one that does not match; nothing else,
            whatever ``raw`` holds.
    """
    if not isinstance(raw, bytes | bytearray | memoryview):
        raise ValueRejectedError(f"a {type(raw).__name__}, not bytes")
    try:
        view = memoryview(raw).cast("B")
    except (TypeError, ValueError) as exc:  # a non-contiguous view
        raise ValueRejectedError(f"not plain bytes: {exc}") from None
    if len(view) < VALUE_MAC_LEN:
        raise ValueRejectedError(f"{len(view)} bytes: shorter than its {VALUE_MAC_LEN}-digit MAC (truncated)")
    if len(view) - VALUE_MAC_LEN > max_bytes:  # checked before anything is hashed or copied
        raise ValueRejectedError(f"payload of {len(view) - VALUE_MAC_LEN} bytes: over the cap of {max_bytes}")
    check_value_mac(bytes(view[:VALUE_MAC_LEN]), key, job_id, view[VALUE_MAC_LEN:], secret)
    return bytes(view[VALUE_MAC_LEN:])


def check_value_mac(mac: bytes, key: str, job_id: str, payload: bytes | memoryview, secret: bytes) -> None:
    """Check a MAC kept apart from its payload (a checkpoint's ``.mac`` file), as :func:`open_value` does.

    Raises:
        ValueRejectedError: ``mac`` is not the 64 lowercase hex digits of the payload's MAC.
    """
    h = value_hmac(key, job_id, secret)
    h.update(payload)
    if not hmac.compare_digest(bytes(mac), h.hexdigest().encode("ascii")):  # bytes on both sides: no TypeError
        if len(mac) != VALUE_MAC_LEN or not all(c in b"0123456789abcdef" for c in mac):
            raise ValueRejectedError("MAC is not 64 lowercase hex digits")
        raise ValueRejectedError("bad MAC (not signed with this job's secret for this key)")
