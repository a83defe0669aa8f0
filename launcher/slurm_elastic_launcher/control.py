"""The launcher's control keys in the job's TCPStore: their names, their payloads and the checks of both.

This module owns what the workers of one job tell each other through the store: an order published
there, a joiner's "ready", rank 0's "go" for a switch, and the survivors' rendezvous after a lost
worker. Each key's payload is one line of sorted, compact, ASCII JSON; :mod:`.torch_backend`'s
``SignedStore`` signs it (:func:`.orders.sign_value`: the MAC binds the key and the job) and checks the
MAC before any payload reaches the ``read_*`` functions here. A ``read_*`` function checks the shape of
a verified payload and raises :class:`ControlRejectedError` naming the rule it breaks, and nothing
else, whatever the payload holds. The agent then treats the key as absent.

Keys and payloads:

* ``orders/<seq>``: an order's wire line (:meth:`.orders.Order.to_json`), checked by ``Order.parse``.
* ``o<seq>/epoch``: ``{"epoch":E}``, rank 0 to the joiners of order ``seq``: the job's epoch now,
  rewritten when it changes while they warm up (a joiner's loop labels its first pass with it).
* ``o<seq>/ready/<worker>``: ``{"ready":true}``, a joiner warmed up for order ``seq``, or
  ``{"epoch":E,"ready":true}``, one whose warm-up pass the script's loop labelled epoch ``E``: rank 0
  switches it in only while the job is in epoch ``E``.
* ``o<seq>/go``: ``{"members":[...],"order":"<order line>"}``, rank 0's switch to order ``seq``: the
  workers of the world it leaves (rank order) and the order itself.
* ``<gen>/who/<worker>``: ``{"commit":true|false}``, a survivor of generation ``gen``'s loss, and
  whether it holds a commit.
* ``<gen>/leader``: ``{"worker":"<id>"}``, the survivor that decides (the first to claim the key).
* ``<gen>/members``: ``{"members":[...],"src":"<id>"|null}``, the survivors in rank order and the one
  whose commit everybody rolls back to.

These are logical names: what the logs, the events and the MACs use. In the store every key (these,
and torch's own rendezvous keys under ``<gen>/``) lives under :func:`store_key` of its logical name,
``k/`` and 32 hex digits of an HMAC with the job's secret, so nobody without the secret can name a
key before it exists: garbage written in advance at a predictable name (``o0.r/leader``) lands where
no worker looks. Each key is hidden on its own: a name seen once it exists (``Store.list_keys``) tells
nothing of the others of its generation.

It imports nothing but the standard library and :mod:`.orders`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .orders import Order, OrderRejectedError

MAX_WORKERS = 1 << 16
"""A member list longer than this is refused (a job has at most this many workers)."""


class ControlRejectedError(ValueError):
    """A verified control payload of the wrong shape; the message is the rule it breaks."""


KEY_DOMAIN = b"slurm-elastic/key/v1\0"
"""Domain of the HMAC that hides a key's name (apart from the values' MACs, ``orders.VALUE_DOMAIN``)."""
KEY_HEX_DIGITS = 32
"""Hex digits of a hidden name (128 bits)."""


def store_key(key: str, job_id: str, secret: bytes) -> str:
    """The name under which the logical key ``key`` of job ``job_id`` lives in the job's store.

    ``k/`` and the first :data:`KEY_HEX_DIGITS` lowercase hex digits of HMAC-SHA256, keyed with the
    job's secret, over ``KEY_DOMAIN ‖ u32be(len(job_id)) ‖ job_id ‖ u32be(len(key)) ‖ key`` (UTF-8).
    The same in every worker of the job; unpredictable without the secret, so no other user can
    write a key of the job before the job does (a compare-and-set it claims, a rendezvous address).
    """
    job = job_id.encode("utf-8", "surrogatepass")
    name = key.encode("utf-8", "surrogatepass")
    h = hmac.new(secret, KEY_DOMAIN + len(job).to_bytes(4, "big") + job + len(name).to_bytes(4, "big") + name,
                 hashlib.sha256)
    return "k/" + h.hexdigest()[:KEY_HEX_DIGITS]


def order_key(seq: int) -> str:
    """Key of the order numbered ``seq`` (store order source)."""
    return f"orders/{seq}"


def ready_key(seq: int, worker: str) -> str:
    """Key a joiner of order ``seq`` sets once warmed up."""
    return f"o{seq}/ready/{worker}"


def epoch_key(seq: int) -> str:
    """Key rank 0 sets to the job's epoch while the joiners of order ``seq`` warm up."""
    return f"o{seq}/epoch"


def go_key(seq: int) -> str:
    """Key rank 0 sets when it switches to order ``seq``."""
    return f"o{seq}/go"


def who_key(gen: str, worker: str) -> str:
    """Key a survivor of generation ``gen``'s loss sets."""
    return f"{gen}/who/{worker}"


def leader_key(gen: str) -> str:
    """Key the deciding survivor of ``gen``'s loss claims."""
    return f"{gen}/leader"


def members_key(gen: str) -> str:
    """Key of the survivors' decision after ``gen``'s loss."""
    return f"{gen}/members"


def _dump(body: dict[str, Any]) -> str:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _load(payload: str, fields: frozenset[str]) -> dict[str, Any]:
    try:
        body = json.loads(payload)
    except (ValueError, RecursionError) as exc:
        raise ControlRejectedError(f"not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ControlRejectedError(f"a JSON {type(body).__name__}, not an object")
    if set(body) != fields:
        raise ControlRejectedError(f"fields must be {sorted(fields)}, not {sorted(body)[:8]}")
    return body


def _workers(value: object, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(w, str) and w for w in value):
        raise ControlRejectedError(f"{what} must be a list of non-empty worker ids")
    if not value or len(value) > MAX_WORKERS or len(set(value)) != len(value):
        raise ControlRejectedError(f"{what} must be 1..{MAX_WORKERS} unique worker ids")
    return tuple(value)


# -- ready ---------------------------------------------------------------------------------------


ANY_EPOCH = -1
"""What :func:`read_ready` returns for a joiner whose warm-up is in no loop's epoch (``run``)."""


def ready_payload(epoch: int | None = None) -> str:
    """Payload of a ``ready`` key; ``epoch``: the epoch the joiner's loop labelled its warm-up with."""
    return _dump({"ready": True} if epoch is None else {"epoch": epoch, "ready": True})


def read_ready(payload: str) -> int:
    """The epoch a ``ready`` payload's warm-up was labelled with, or :data:`ANY_EPOCH`.

    Raises:
        ControlRejectedError: not ``{"ready":true}`` nor ``{"epoch":E,"ready":true}`` with an integer E ≥ 0.
    """
    fields = frozenset({"epoch", "ready"}) if '"epoch"' in payload else frozenset({"ready"})
    body = _load(payload, fields)
    if body["ready"] is not True:
        raise ControlRejectedError("ready must be true")
    return _epoch(body) if "epoch" in body else ANY_EPOCH


def epoch_payload(epoch: int) -> str:
    """Payload of an ``epoch`` key."""
    return _dump({"epoch": epoch})


def read_epoch(payload: str) -> int:
    """The job's epoch an ``epoch`` payload gives.

    Raises:
        ControlRejectedError: not ``{"epoch":E}`` with an integer E ≥ 0.
    """
    return _epoch(_load(payload, frozenset({"epoch"})))


def _epoch(body: dict[str, Any]) -> int:
    value = body["epoch"]
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 1 << 53:
        raise ControlRejectedError("epoch must be an integer in [0, 2^53)")
    return value


# -- go ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Go:
    """Rank 0's switch: the world it leaves and the order it switches to."""

    members: tuple[str, ...]
    order: Order


def go_payload(members: Sequence[str], order: Order) -> str:
    """Payload of a ``go`` key."""
    return _dump({"members": list(members), "order": order.to_json()})


def read_go(payload: str, seq: int, job_id: str, secret: bytes) -> Go:
    """The switch a ``go`` payload announces for order ``seq``.

    Raises:
        ControlRejectedError: not the fields ``members`` and ``order``; members not 1..MAX_WORKERS
            unique ids; the order refused (:meth:`.orders.Order.parse`), numbered other than ``seq``,
            not a resize, or keeping none of ``members`` (the state would have no source).
    """
    body = _load(payload, frozenset({"members", "order"}))
    members = _workers(body["members"], "members")
    if not isinstance(body["order"], str):
        raise ControlRejectedError("order must be an order's wire line (a string)")
    try:
        order = Order.parse(body["order"], job_id, secret)
    except OrderRejectedError as exc:
        raise ControlRejectedError(f"order refused: {exc}") from None
    if order.seq != seq or order.kind != "resize":
        raise ControlRejectedError(f"order must be resize {seq}, not {order.kind} {order.seq}")
    if not set(members) & set(order.workers):
        raise ControlRejectedError("the order keeps none of members: the state has no source")
    return Go(members, order)


# -- the survivors' rendezvous -------------------------------------------------------------------


def who_payload(commit: bool) -> str:
    """Payload of a ``who`` key."""
    return _dump({"commit": commit})


def read_who(payload: str) -> bool:
    """Whether the survivor of a ``who`` payload holds a commit.

    Raises:
        ControlRejectedError: not ``{"commit":true|false}``.
    """
    commit = _load(payload, frozenset({"commit"}))["commit"]
    if not isinstance(commit, bool):
        raise ControlRejectedError("commit must be true or false")
    return commit


def leader_payload(worker: str) -> str:
    """Payload of a ``leader`` claim."""
    return _dump({"worker": worker})


def read_leader(payload: str, members: Sequence[str]) -> str:
    """The worker a ``leader`` payload names, one of ``members``.

    Raises:
        ControlRejectedError: not ``{"worker":<id>}`` with an id of ``members``.
    """
    worker = _load(payload, frozenset({"worker"}))["worker"]
    if not isinstance(worker, str) or worker not in members:
        raise ControlRejectedError("worker must be a member of the lost generation")
    return worker


def members_payload(members: Sequence[str], src: str | None) -> str:
    """Payload of a ``members`` decision."""
    return _dump({"members": list(members), "src": src})


def read_members(payload: str, old: Sequence[str]) -> tuple[tuple[str, ...], str | None]:
    """The survivors (rank order) and the source of the commit a ``members`` payload decides.

    Raises:
        ControlRejectedError: not the fields ``members`` and ``src``; members not unique ids of ``old``;
            ``src`` neither null nor one of members.
    """
    body = _load(payload, frozenset({"members", "src"}))
    members = _workers(body["members"], "members")
    if not set(members) <= set(old):
        raise ControlRejectedError("members must be workers of the lost generation")
    src = body["src"]
    if src is not None and (not isinstance(src, str) or src not in members):
        raise ControlRejectedError("src must be null or one of members")
    return members, src
