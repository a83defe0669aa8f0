"""Environment contract parsing and order authentication (no torch needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_elastic_launcher.env import EnvError, LauncherEnv, ScalingMode
from slurm_elastic_launcher.membership import transfer_plan
from slurm_elastic_launcher.order_sources import FileOrderSource
from slurm_elastic_launcher.orders import Order, OrderRejectedError

SECRET = b"0123456789abcdef-secret"
BASE = {
    "SLURM_ELASTIC_JOB_ID": "77",
    "SLURM_ELASTIC_SECRET": SECRET.decode(),
    "SLURM_ELASTIC_WORKER_ID": "w1",
    "SLURM_ELASTIC_WORKERS": "w0, w1",
    "SLURM_ELASTIC_STORE_PORT": "29500",
}


def test_defaults_and_values_are_parsed() -> None:
    env = LauncherEnv.from_mapping({**BASE, "SLURM_ELASTIC_SCALING": "endo", "SLURM_ELASTIC_GROUP_TIMEOUT_S": "2.5"})
    assert env.workers == ("w0", "w1") and env.worker_id == "w1" and not env.join
    assert env.store_host == "127.0.0.1" and env.store_port == 29500 and env.secret == SECRET
    assert env.scaling is ScalingMode.ENDO and env.group_timeout_s == 2.5 and env.local_batch == 32
    assert env.orders == "store"


def test_joiner_needs_no_worker_list() -> None:
    env = LauncherEnv.from_mapping({**BASE, "SLURM_ELASTIC_WORKERS": "", "SLURM_ELASTIC_JOIN": "1"})
    assert env.join and env.workers == ()


@pytest.mark.parametrize(
    ("key", "value", "needle"),
    [
        ("SLURM_ELASTIC_STORE_PORT", "70000", "SLURM_ELASTIC_STORE_PORT='70000': must be an integer in 1..65535"),
        ("SLURM_ELASTIC_STORE_PORT", "x", "SLURM_ELASTIC_STORE_PORT='x': must be an integer"),
        ("SLURM_ELASTIC_STORE_PORT", "", "SLURM_ELASTIC_STORE_PORT is not set"),
        ("SLURM_ELASTIC_JOB_ID", "", "SLURM_ELASTIC_JOB_ID is not set"),
        ("SLURM_ELASTIC_SECRET", "short", "at least 16 characters"),
        ("SLURM_ELASTIC_SCALING", "both", "SLURM_ELASTIC_SCALING='both': must be 'exo' or 'endo'"),
        ("SLURM_ELASTIC_JOIN", "maybe", "SLURM_ELASTIC_JOIN='maybe': must be 0 or 1"),
        ("SLURM_ELASTIC_WORKERS", "", "must list the initial worker ids"),
        ("SLURM_ELASTIC_WORKERS", "w1,w1", "must be unique"),
        ("SLURM_ELASTIC_WORKER_ID", "w9", "must be one of SLURM_ELASTIC_WORKERS"),
        ("SLURM_ELASTIC_ORDERS", "http://x", "must be 'store' or 'file:PATH'"),
        ("SLURM_ELASTIC_LOCAL_BATCH", "0", "SLURM_ELASTIC_LOCAL_BATCH='0': must be an integer ≥ 1"),
        ("SLURM_ELASTIC_GROUP_TIMEOUT_S", "-1", "must be a number > 0"),
        ("SLURM_ELASTIC_DIST_BACKEND", "mpi", "SLURM_ELASTIC_DIST_BACKEND='mpi': must be 'auto', 'gloo' or 'nccl'"),
        ("SLURM_ELASTIC_DIST_BACKEND", "x" * 500, "SLURM_ELASTIC_DIST_BACKEND='" + "x" * 80 + "': must be"),
    ],
)
def test_errors_name_variable_value_and_rule(key: str, value: str, needle: str) -> None:
    with pytest.raises(EnvError) as exc:
        LauncherEnv.from_mapping({**BASE, key: value})
    assert needle in str(exc.value)


def test_signed_order_round_trips() -> None:
    order = Order("77", 3, "resize", ("w0", "w2"), 16).signed(SECRET)
    assert Order.parse(order.to_json(), "77", SECRET) == order


@pytest.mark.parametrize(
    ("order", "secret", "job", "needle"),
    [
        (Order("77", 1, "resize", ("w0",)), b"another-secret-xxxxxxxx", "77", "bad MAC"),
        (Order("78", 1, "resize", ("w0",)), SECRET, "77", "is for job '78'"),
        (Order("77", 1, "explode", ("w0",)), SECRET, "77", "kind"),
        (Order("77", 1, "resize", ()), SECRET, "77", "non-empty"),
        (Order("77", 0, "stop"), SECRET, "77", "seq"),
    ],
)
def test_orders_for_another_job_or_with_a_bad_mac_are_refused(
    order: Order, secret: bytes, job: str, needle: str
) -> None:
    with pytest.raises(OrderRejectedError, match=needle):
        Order.parse(order.signed(secret).to_json(), job, SECRET)


def test_tampered_order_is_refused() -> None:
    wire = Order("77", 2, "resize", ("w0", "w1")).signed(SECRET).to_json().replace('"w1"', '"evil"')
    with pytest.raises(OrderRejectedError, match="bad MAC"):
        Order.parse(wire, "77", SECRET)
    with pytest.raises(OrderRejectedError, match="malformed"):
        Order.parse("{not json", "77", SECRET)


_GOOD = Order("77", 2, "resize", ("w0", "w1")).signed(SECRET).to_json()


_HOSTILE = {
    "non-ASCII mac": _GOOD.replace('"mac":"', '"mac":"\\u00e9'),
    "raw non-ASCII mac": _GOOD.replace('"mac":"', '"mac":"é'),
    "lone surrogate mac": _GOOD.replace('"mac":"', '"mac":"\\ud800'),
    "int mac": '{"job_id":"77","kind":"stop","local_batch":0,"mac":5,"seq":1,"workers":[]}',
    "no mac": '{"job_id":"77","kind":"stop","local_batch":0,"seq":1,"workers":[]}',
    "JSON list": "[1, 2]",
    "JSON string": '"stop"',
    "bytes read as U+FFFD": '{"job_id":"77","mac":"\\ufffd\\ufffd"}',
    "deep": "[" * 100_000,
}


@pytest.mark.parametrize("raw", list(_HOSTILE.values()), ids=list(_HOSTILE))
def test_hostile_orders_are_refused_never_raised(raw: str) -> None:
    from slurm_elastic_launcher.orders import verify_order

    with pytest.raises(OrderRejectedError):
        Order.parse(raw, "77", SECRET)
    assert verify_order(raw, "77", SECRET) is None


def test_an_order_file_with_bytes_that_are_not_utf8_refuses_that_line_only(tmp_path: Path) -> None:
    path = tmp_path / "orders.jsonl"
    path.write_bytes(b'{"job_id":"77","mac":"\xff\xff"}\n\xff\n' + _GOOD.encode() + b"\n")
    raw = FileOrderSource(str(path)).read()
    assert len(raw) == 3
    for line in raw[:2]:
        with pytest.raises(OrderRejectedError):
            Order.parse(line, "77", SECRET)
    assert Order.parse(raw[2], "77", SECRET).workers == ("w0", "w1")
    with pytest.raises(OrderRejectedError):
        Order.parse(b'{"job_id":"77","mac":"\xff"}', "77", SECRET)


def test_file_order_source_reads_lines(tmp_path: Path) -> None:
    path = tmp_path / "orders.jsonl"
    source = FileOrderSource(str(path))
    assert source.read() == []
    path.write_text(Order("77", 1, "stop").signed(SECRET).to_json() + "\n\n")
    assert [Order.parse(r, "77", SECRET).kind for r in source.read()] == ["stop"]


def test_transfer_plan_spreads_joiners_over_the_staying_workers() -> None:
    assert transfer_plan(["a", "b"], ["a", "b", "c", "d", "e"]) == {2: 0, 3: 1, 4: 0}
    assert transfer_plan(["a", "b"], ["c", "b", "d"]) == {0: 1, 2: 1}  # only b stays
    assert transfer_plan(["a", "b", "c"], ["c", "a"]) == {}  # a shrink moves no state


def test_transfer_plan_without_a_staying_worker_is_an_error() -> None:
    with pytest.raises(ValueError, match="no worker of \\['a'\\] stays"):
        transfer_plan(["a"], ["b", "c"])
