"""The daemon's order channel: signatures the launcher accepts, and the file rules it enforces."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from slurm_elastic.orders import Channel, ChannelError, sign

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
    agent = pytest.importorskip("slurm_elastic_launcher.agent")
    line = sign("42", 1, "resize", ["w0", "w2"], 0, b"k" * 32)
    order = agent.Order.parse(line, "42", b"k" * 32)
    assert order.workers == ("w0", "w2") and order.seq == 1
    with pytest.raises(agent.OrderRejectedError):
        agent.Order.parse(line, "43", b"k" * 32)
    with pytest.raises(agent.OrderRejectedError):
        agent.Order.parse(line, "42", b"x" * 32)


def test_channel_appends_numbered_orders_and_remembers_the_workers(tmp_path: Path) -> None:
    orders = _channel(tmp_path)
    ch = Channel.open("42", USER, f"first slurm-elastic-orders={orders}")
    assert ch.workers(["w0", "w1", "w2"]) == ["w0", "w1", "w2"]
    assert ch.send("resize", ["w0", "w1"]) == 1
    assert ch.send("resize", ["w0"]) == 2
    assert ch.workers(["w0", "w1", "w2"]) == ["w0"]
    assert [o["seq"] for o in ch.history()] == [1, 2]


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
