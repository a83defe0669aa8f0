"""The daemon's order channel: signatures the launcher accepts, the file rules it enforces, and the
shared wire form (``slurm_elastic_launcher.orders``) refusing hostile lines without raising."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from pathlib import Path

import pytest

from slurm_elastic.channel import Channel, ChannelError, sign, verify

USER = "root"  # the tests run as root; the files they make are root's


def _channel(tmp_path: Path, secret: str = "s" * 32, mode: int = 0o600) -> Path:
    secret_file = tmp_path / "job-1"
    secret_file.write_text(secret)
    orders = tmp_path / "job-1.orders"
    orders.write_text("")
    for f in (secret_file, orders):
        f.chmod(mode)
    return orders


def test_signed_orders_are_accepted_by_the_launcher() -> None:
    wire = pytest.importorskip("slurm_elastic_launcher.orders")
    line = sign("42", 1, "resize", ["w0", "w2"], 0, b"k" * 32)
    order = wire.Order.parse(line, "42", b"k" * 32)
    assert order.workers == ("w0", "w2") and order.seq == 1
    with pytest.raises(wire.OrderRejectedError):
        wire.Order.parse(line, "43", b"k" * 32)
    with pytest.raises(wire.OrderRejectedError):
        wire.Order.parse(line, "42", b"x" * 32)


def test_channel_appends_numbered_orders_and_remembers_the_workers(tmp_path: Path) -> None:
    orders = _channel(tmp_path)
    ch = Channel.open("42", USER, f"first slurm-elastic-orders={orders}")
    assert ch.workers(["w0", "w1", "w2"]) == ["w0", "w1", "w2"]
    assert ch.send("resize", ["w0", "w1"]) == 1
    assert ch.send("resize", ["w0"]) == 2
    assert ch.workers(["w0", "w1", "w2"]) == ["w0"]
    assert [o.seq for o in ch.history()] == [1, 2]


@pytest.mark.parametrize("case", ["no comment", "relative", "symlink", "mode", "short secret", "other owner"])
def test_untrustworthy_channels_are_refused(tmp_path: Path, case: str) -> None:
    orders = _channel(tmp_path, secret="short" if case == "short secret" else "s" * 32,
                      mode=0o644 if case == "mode" else 0o600)
    comment = f"slurm-elastic-orders={orders}"
    if case == "no comment":
        comment = "hello"
    elif case == "relative":
        comment = "slurm-elastic-orders=job-1.orders"
    elif case == "symlink":
        link = tmp_path / "link.orders"
        link.symlink_to(orders)
        (tmp_path / "link").symlink_to(tmp_path / "job-1")
        comment = f"slurm-elastic-orders={link}"
    elif case == "other owner":
        os.chown(orders, 12345, 12345)
    with pytest.raises(ChannelError):
        Channel.open("42", USER, comment)


# -- the wire form, owned by slurm_elastic_launcher.orders -------------------------------------------

SECRET = b"k" * 32
GOLDEN_ORDER = ('{"job_id":"42","kind":"resize","local_batch":16,'
                '"mac":"0cf8490c1cc8a391822408984818a64b329ff6fb286fd3c5d3dcc007b38a88e8","seq":3,"workers":["w0","w2"]}')
GOLDEN_REPORT = ('{"job_id":"42","kind":"progress","loss":null,'
                 '"mac":"91183ace98bf146454d92db86f716395bcbb3af97da37dbac948df28c3223a1f","samples":10,"t":1.5,'
                 '"worker":"w\\u00e9"}')


def test_the_wire_form_is_frozen_and_both_sides_share_it() -> None:
    from slurm_elastic_launcher import orders as wire
    from slurm_elastic_launcher.orders import Order, sign_report

    assert sign("42", 3, "resize", ["w0", "w2"], 16, SECRET) == GOLDEN_ORDER
    assert Order("42", 3, "resize", ("w0", "w2"), 16).signed(SECRET).to_json() == GOLDEN_ORDER
    report = {"job_id": "42", "kind": "progress", "t": 1.5, "loss": None, "samples": 10, "worker": "wé"}
    assert sign_report(report, SECRET) == GOLDEN_REPORT
    assert verify(GOLDEN_REPORT, "42", SECRET) == report
    assert sign is wire.sign_order and verify is wire.verify_report  # one implementation, not two copies
    assert wire.verify_order(GOLDEN_ORDER, "42", SECRET) == Order.parse(GOLDEN_ORDER, "42", SECRET)
    with pytest.raises(ValueError, match="must not hold 'mac'"):
        sign_report({**report, "mac": "00"}, SECRET)


def _resigned(body: object) -> str:
    """``body`` with a MAC that is right for it (so only its shape can get it refused)."""
    from slurm_elastic_launcher.orders import canonical

    assert isinstance(body, dict)
    return json.dumps({**body, "mac": hmac.new(SECRET, canonical(body), hashlib.sha256).hexdigest()})


HOSTILE = {
    "non-ASCII mac": GOLDEN_REPORT.replace('"mac":"9', '"mac":"é'),
    "non-ASCII mac of the right length": GOLDEN_REPORT.replace('"mac":"9', '"mac":"\\u00e9'),
    "lone surrogate mac": GOLDEN_REPORT.replace('"mac":"9', '"mac":"\\ud800'),
    "int mac": '{"job_id":"42","kind":"progress","mac":5}',
    "no mac": '{"job_id":"42","kind":"progress"}',
    "JSON list": '[1, 2]',
    "JSON string": '"job_id"',
    "replaced bytes": '{"job_id":"42","mac":"\ufffd\ufffd"}',
    "not JSON": "{not json",
    "empty": "",
    "deep": "[" * 100_000,
    "huge int": '{"mac":"0","seq":' + "9" * 5000 + "}",
}


@pytest.mark.parametrize("line", list(HOSTILE.values()), ids=list(HOSTILE))
def test_hostile_lines_are_refused_never_raised(line: str) -> None:
    assert verify(line, "42", SECRET) is None


@pytest.mark.parametrize("line", [b'{"job_id":"42","mac":"\xff\xff"}', b"\xff", GOLDEN_REPORT.encode() + b"\xff"])
def test_lines_that_are_not_utf8_are_refused(line: bytes) -> None:
    assert verify(line, "42", SECRET) is None


def test_the_report_reader_counts_hostile_lines_as_refused(tmp_path: Path) -> None:
    orders = _channel(tmp_path, secret=SECRET.decode())
    ch = Channel.open("42", USER, f"slurm-elastic-orders={orders}")
    hostile = [b'{"job_id":"42","mac":"\xff\xfe"}', b'{"job_id":"42","mac":"\xc3\xa9"}', b"[1]", b'{"mac":5}', b"\xff"]
    ch.reports_path.write_bytes(b"\n".join([*hostile, GOLDEN_REPORT.encode()]) + b"\n")
    ch.reports_path.chmod(0o600)
    reports, end, refused = ch.reports()
    assert [r["samples"] for r in reports] == [10] and len(refused) == len(hostile)
    assert end == ch.reports_path.stat().st_size


@pytest.mark.parametrize(
    "body",
    [
        {"job_id": "42", "seq": 1, "kind": "stop", "workers": []},  # no local_batch
        {"job_id": "42", "seq": 1, "kind": "stop", "workers": [], "local_batch": 0, "extra": 1},
        {"job_id": "42", "seq": "1", "kind": "stop", "workers": [], "local_batch": 0},
        {"job_id": "42", "seq": True, "kind": "stop", "workers": [], "local_batch": 0},
        {"job_id": 42, "seq": 1, "kind": "stop", "workers": [], "local_batch": 0},
        {"job_id": "42", "seq": 1, "kind": "resize", "workers": ["w0", 1], "local_batch": 0},
        {"job_id": "42", "seq": 1, "kind": "resize", "workers": "w0", "local_batch": 0},
    ],
)
def test_a_signed_order_of_the_wrong_shape_is_refused(body: dict[str, object]) -> None:
    from slurm_elastic_launcher.orders import verify_order

    good = {"job_id": "42", "seq": 1, "kind": "stop", "workers": [], "local_batch": 0}
    assert verify_order(_resigned(good), "42", SECRET) is not None
    assert verify_order(_resigned(body), "42", SECRET) is None
