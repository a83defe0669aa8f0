"""The job's TCPStore is hostile (issue #13, item 7): every control value is signed, every value read is
checked before anything decodes it, and a bad value is a rejected value, never an exception.

A hostile writer reaches the store's port without the job's secret: a raw TCPStore client that sets
forged keys directly. The launcher's own code paths read them: ``SignedStore``, the agent's go and
rendezvous, the state a peer sends, and (marked ``launcher``) real worker processes of the example.
Keys live in the store under names only the secret gives (:func:`.control.store_key`, issue 37 item 4,
``test_store_keys.py``); the forgeries here are written at those names (:func:`hidden`), as by a
writer that learned them once they existed, so the MAC is what refuses them.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from slurm_elastic_launcher import control  # noqa: E402
from slurm_elastic_launcher.agent import Agent  # noqa: E402
from slurm_elastic_launcher.agent_types import ElasticJob, PeerLostError  # noqa: E402
from slurm_elastic_launcher.env import LauncherEnv  # noqa: E402
from slurm_elastic_launcher.order_sources import StoreOrderSource  # noqa: E402
from slurm_elastic_launcher.orders import Order, ValueRejectedError, open_value, sign_value  # noqa: E402
from slurm_elastic_launcher.signed_store import SignedStore, make_store  # noqa: E402
from slurm_elastic_launcher.state import (  # noqa: E402
    SkeletonError,
    TensorSpec,
    _Slot,
    decode_skeleton,
    encode_skeleton,
)
from slurm_elastic_launcher.torch_backend import TensorBatchDataset, TorchBackend  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SECRET = "test-secret-0123456789abcdef"
JOB_ID = "4242"
KEY = SECRET.encode()


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def hidden(key: str) -> str:
    """The store's name of a logical key of the test job."""
    return control.store_key(key, JOB_ID, KEY)


def signed_client(port: int, secret: bytes = KEY, job_id: str = JOB_ID) -> SignedStore:
    return SignedStore(make_store("127.0.0.1", port, serve=False, timeout_s=5.0), job_id, secret)


def signed(key: str, payload: str, secret: bytes = KEY, job_id: str = JOB_ID) -> bytes:
    return sign_value(key, job_id, payload.encode(), secret)


def order(seq: int, workers: list[str], secret: bytes = KEY) -> Order:
    return Order(JOB_ID, seq, "resize", tuple(workers)).signed(secret)


# -- the wire form of a control value -------------------------------------------------------------

GOOD = sign_value("o1/go", JOB_ID, b'{"x":1}', KEY)


@pytest.mark.parametrize(
    ("raw", "rule"),
    [
        ("é".encode() * 32 + b'{"x":1}', "not 64 lowercase hex digits"),  # non-ASCII MAC
        (b"z" * 64 + b'{"x":1}', "not 64 lowercase hex digits"),  # non-hex MAC
        (GOOD[:64].upper() + GOOD[64:], "not 64 lowercase hex digits"),
        (GOOD[:40], "shorter than its 64-digit MAC"),  # truncated
        (b"", "shorter than its 64-digit MAC"),
        (GOOD[:-1], "bad MAC"),  # payload cut short
        (GOOD + b" ", "bad MAC"),
        (sign_value("o2/go", JOB_ID, b'{"x":1}', KEY), "bad MAC"),  # replayed from another key
        (sign_value("o1/go", "4243", b'{"x":1}', KEY), "bad MAC"),  # from another job
        (sign_value("o1/go", JOB_ID, b'{"x":1}', b"another-secret-0123456789"), "bad MAC"),
        (sign_value("o1/go", JOB_ID, b"x" * ((1 << 20) + 1), KEY), "over the cap"),  # huge
        ("a" * 80, "not bytes"),
        (None, "not bytes"),
        (12, "not bytes"),
    ],
)
def test_open_value_refuses_what_was_not_signed_for_this_key_and_job(raw: Any, rule: str) -> None:
    with pytest.raises(ValueRejectedError, match=rule):
        open_value(raw, "o1/go", JOB_ID, KEY)


def test_open_value_returns_the_payload_of_a_value_signed_for_this_key_and_job() -> None:
    assert open_value(GOOD, "o1/go", JOB_ID, KEY) == b'{"x":1}'
    assert open_value(memoryview(GOOD), "o1/go", JOB_ID, KEY) == b'{"x":1}'


# -- the shapes of the control payloads ------------------------------------------------------------


def test_a_go_payload_of_the_wrong_shape_is_rejected_never_raised() -> None:
    good = order(1, ["w0", "w1", "w2"])
    body = json.loads(good.to_json())
    assert control.read_go(control.go_payload(["w0", "w1"], good), 1, JOB_ID, KEY).members == ("w0", "w1")
    bad = [
        "not json",
        "[1, 2]",
        '{"members": ["w0"]}',
        json.dumps({"members": ["w0"], "order": {**body, "mac": "é" * 64}}),  # was a TypeError
        json.dumps({"members": ["w0"], "order": json.dumps({**body, "mac": "é" * 64})}),
        json.dumps({"members": ["w0"], "order": order(1, ["w0", "w2"], b"another-secret-0123456789").to_json()}),
        json.dumps({"members": ["w0"], "order": order(2, ["w0", "w2"]).to_json()}),  # another order
        json.dumps({"members": ["w5"], "order": good.to_json()}),  # nobody stays: no source of the state
        json.dumps({"members": ["w0", "w0"], "order": good.to_json()}),
        json.dumps({"members": [], "order": good.to_json()}),
        json.dumps({"members": [1], "order": good.to_json()}),
        json.dumps({"members": "w0", "order": good.to_json()}),
        json.dumps({"members": ["w0"] + [f"x{i}" for i in range(control.MAX_WORKERS)], "order": good.to_json()}),
        "[" * 100_000,
    ]
    for payload in bad:
        with pytest.raises(control.ControlRejectedError):
            control.read_go(payload, 1, JOB_ID, KEY)


def test_rendezvous_payloads_of_the_wrong_shape_are_rejected() -> None:
    old = ["w0", "w1", "w2"]
    assert control.read_members(control.members_payload(["w0", "w2"], "w2"), old) == (("w0", "w2"), "w2")
    for payload in ['{"members": ["w0", "evil"], "src": "w0"}', '{"members": ["w0"], "src": "w2"}',
                    '{"members": ["w0"], "src": 3}', '{"members": ["w0"]}', "null", "\udcff"]:
        with pytest.raises(control.ControlRejectedError):
            control.read_members(payload, old)
    assert control.read_who(control.who_payload(True)) is True
    for payload in ['{"commit": 1}', '{"commit": true, "x": 1}', "true"]:
        with pytest.raises(control.ControlRejectedError):
            control.read_who(payload)
    with pytest.raises(control.ControlRejectedError):
        control.read_leader('{"worker": "evil"}', old)
    with pytest.raises(control.ControlRejectedError):
        control.read_ready("1")  # what a worker wrote before values were signed


def test_the_state_skeleton_is_json_and_keeps_every_type() -> None:
    tree = ({"state": {0: {"step": _Slot(0, TensorSpec("float32", ())), "k": (1, 2.5)}}, "best": float("inf"),
             "nan": float("nan"), "none": None, "flag": True, "lr": [0.1, -0.0], ("a", 1): "tuple key"},
            {"float32": 3}, [4])
    data = encode_skeleton(tree)
    data.decode("ascii")
    back = decode_skeleton(data)
    assert back[0]["state"][0]["step"] == _Slot(0, TensorSpec("float32", ()))
    assert back[0]["state"][0]["k"] == (1, 2.5) and back[0][("a", 1)] == "tuple key"
    assert back[0]["best"] == float("inf") and back[0]["nan"] != back[0]["nan"]
    assert back[1:] == ({"float32": 3}, [4]) and type(back) is tuple
    for bad in [b"not json", b"[1]", b'["p", "not base64!"]', b'["d", [[["l", []], 1]]]', b'["s", -1, "f", []]',
                b"NaN", b'["x", 1]', b"[" * 100_000]:
        with pytest.raises(SkeletonError):
            decode_skeleton(bad)


# -- SignedStore over a real TCPStore --------------------------------------------------------------


def test_signed_store_reads_forged_values_as_absent_and_logs_each_once(server: Any,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    port, _, hostile = server
    store = signed_client(port)
    store.set("o1/go", b"payload")
    assert store.read("o1/go") == b"payload" and store.read("o9/absent") is None
    assert not hostile.check([hidden("o9/absent")])  # reading never creates a key
    forged = {
        "a": b"1",
        "b": "é".encode() * 32 + b"{}",
        "c": b"0" * 64 + b"{}",
        "d": hostile.get(hidden("o1/go")),  # replayed under another key
        "e": signed("e", "{}", job_id="4243"),  # another job's
        "f": signed("f", "{}", secret=b"another-secret-0123456789"),
        "g": signed("g", "x" * ((1 << 20) + 1)),  # huge
        "h": b"\0slurm-elastic: absent\0",
    }
    with caplog.at_level(logging.WARNING, logger="slurm_elastic_launcher.signed_store"):
        for key, raw in forged.items():
            hostile.set(hidden(key), raw)
            hostile.wait([hidden(key)])  # landed (a set is not acknowledged)
            assert store.read(key) is None, key
            assert store.read(key) is None
            assert store.claim(key, b"mine") == b"mine"  # a forged value is absent to a claim: taken over
            assert store.read(key) == b"mine"
    refused = [r.getMessage() for r in caplog.records if "refused store key" in r.getMessage()]
    assert len(refused) == len(forged)  # once per key (the marker of absence: refused when claimed over)
    assert any("'b'" in m and "not 64 lowercase hex digits" in m for m in refused)
    assert any("'g'" in m and "over the cap" in m for m in refused)


def test_signed_store_get_waits_past_a_forged_value_and_times_out_on_forgeries_alone(server: Any) -> None:
    port, _, hostile = server
    store, writer = signed_client(port), signed_client(port)
    hostile.set(hidden("o0//0//cpu//0/1"), b"forged address")
    timer = threading.Timer(0.3, writer.set, ("o0//0//cpu//0/1", b"real address"))
    timer.start()
    try:
        assert store.get("o0//0//cpu//0/1") == b"real address"
    finally:
        timer.cancel()
    hostile.set(hidden("o0//0//cpu//0/2"), b"forged address")
    hostile.wait([hidden("o0//0//cpu//0/2")])
    store.set_timeout(dt.timedelta(seconds=0.5))
    t0 = time.monotonic()
    with pytest.raises(torch.distributed.DistStoreError, match="no verified value"):
        store.get("o0//0//cpu//0/2")
    assert time.monotonic() - t0 < 3


def test_store_orders_read_past_nothing_forged_and_pick_up_the_real_one(server: Any) -> None:
    port, _, hostile = server
    kv = TorchBackend(signed_client(port), 5.0)
    source = StoreOrderSource(kv)
    hostile.set(hidden("orders/1"), order(1, ["w0"], b"another-secret-0123456789").to_json())  # unsigned value
    hostile.set(hidden("orders/2"), signed("orders/2", order(2, ["w0"]).to_json()))
    hostile.wait([hidden("orders/1"), hidden("orders/2")])
    assert source.read() == []
    StoreOrderSource.publish(kv, order(1, ["w0", "w1"]))
    assert [Order.parse(r, JOB_ID, KEY).seq for r in source.read()] == [1, 2]


def test_connecting_waits_for_a_slow_store_host_longer_than_a_call_may_block() -> None:
    """A store host that answers later than the call timeout (a starved 2-core node, a worker
    started before its host) is still reached; calls then time out as short as asked. CI failed
    on this: a 5-s client timeout was also the connect timeout."""
    from slurm_elastic_launcher.resize_bench import free_port

    port = free_port()
    hosts: list[Any] = []
    later = threading.Timer(2.5, lambda: hosts.append(make_store("127.0.0.1", port, serve=True)))
    later.start()
    try:
        client = make_store("127.0.0.1", port, serve=False, timeout_s=1.0)
        start = time.monotonic()
        with pytest.raises(Exception, match=r"(?i)timeout|timed out"):
            client.get("nobody-wrote-this")
        assert time.monotonic() - start < 10.0
    finally:
        later.join()


# -- the agent's go and rendezvous ----------------------------------------------------------------


def make_agent(port: int, worker: str, workers: list[str], timeout_s: str = "0.2") -> Agent:
    env = LauncherEnv.from_mapping({
        "SLURM_ELASTIC_JOB_ID": JOB_ID, "SLURM_ELASTIC_SECRET": SECRET, "SLURM_ELASTIC_WORKER_ID": worker,
        "SLURM_ELASTIC_WORKERS": ",".join(workers), "SLURM_ELASTIC_STORE_PORT": str(port),
        "SLURM_ELASTIC_GROUP_TIMEOUT_S": timeout_s,
    })
    model = torch.nn.Linear(2, 1)
    job = ElasticJob(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                     dataset=TensorBatchDataset(torch.zeros(4, 2), torch.zeros(4, 1)),
                     loss_fn=lambda m, b: m(b[0]).sum())
    backend = TorchBackend(signed_client(port), float(timeout_s))
    agent = Agent(env, backend, job, StoreOrderSource(backend))
    agent.ctx.members = tuple(workers)
    return agent


def test_a_forged_go_key_is_absent_to_a_worker_never_an_exception(server: Any,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    port, _, hostile = server
    agent = make_agent(port, "w1", ["w0", "w1"])
    real = order(1, ["w0", "w1", "w2"])
    body = json.loads(real.to_json())
    forgeries = [
        json.dumps({"members": ["w0", "w1"], "order": {**body, "mac": "é" * 64}}).encode(),  # was a TypeError
        json.dumps({"members": ["evil"], "order": real.to_json()}).encode(),  # unsigned members
        signed("o2/go", control.go_payload(["w0"], real)),  # signed, for another key
        signed("o1/go", json.dumps({"members": ["w0", "w1"], "order": {**body, "mac": "é" * 64}})),  # signed, bad shape
    ]
    with caplog.at_level(logging.WARNING):
        for raw in forgeries:
            hostile.set(hidden("o1/go"), raw)
            hostile.wait([hidden("o1/go")])
            with pytest.raises(PeerLostError, match="no go key that verifies"):
                agent.resize.announced(1)
    assert sum("'o1/go'" in r.getMessage() for r in caplog.records) == len(forgeries)
    hostile.set(hidden("o1/go"), forgeries[1])
    hostile.wait([hidden("o1/go")])
    threading.Timer(0.1, agent.backend.store_set, ("o1/go", control.go_payload(["w0", "w1"], real))).start()
    assert agent.resize.announced(1) == real


def test_the_survivors_rendezvous_neither_admits_a_forger_nor_drops_a_survivor(server: Any) -> None:
    port, _, hostile = server
    members = ["w0", "w1", "w2", "w3"]
    gen = "o0.r"
    hostile.set(hidden(f"{gen}/who/evil"), b'{"commit": true}')
    hostile.set(hidden(f"{gen}/who/w1"),
                signed(f"{gen}/who/w1", control.who_payload(True), secret=b"another-secret-012345"))
    hostile.set(hidden(f"{gen}/who/w3"), signed("o9.r/who/w3", control.who_payload(True)))  # from another generation
    hostile.set(hidden(f"{gen}/members"), json.dumps({"members": ["w0", "evil"], "src": "evil"}).encode())
    hostile.wait([hidden(f"{gen}/members")])
    agents = {w: make_agent(port, w, members, timeout_s="2") for w in ["w0", "w2", "w3"]}  # w1 was lost
    out: dict[str, Any] = {}
    threads = [threading.Thread(target=lambda w=w: out.update({w: agents[w].membership.agree(gen, w != "w2")}))
               for w in agents]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert out == {w: (("w0", "w2", "w3"), "w0") for w in agents}


# -- real worker processes -------------------------------------------------------------------------

PEER = textwrap.dedent("""
    import sys
    import torch
    import torch.distributed as dist
    from slurm_elastic_launcher.agent_types import PeerLostError
    from slurm_elastic_launcher.orders import sign_value
    from slurm_elastic_launcher.signed_store import SignedStore, make_store
    from slurm_elastic_launcher.torch_backend import TorchBackend

    class Evil:  # what a forged pickle does when it is loaded: creates the marker file
        def __init__(self, path): self.path = path
        def __reduce__(self): return (open, (self.path, "w"))

    rank, port, marker = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    store = SignedStore(make_store("127.0.0.1", port, serve=False), "4242", b"test-secret-0123456789abcdef")
    b = TorchBackend(store, 10.0)
    b.form("g", rank, 2)
    obj = ({0: (1, float("inf"))}, [2])
    if rank == 1:  # a peer in the group that sends what was not signed for this message
        dist.send_object_list([Evil(marker)], dst=0)  # the pickle torch sends
        data = sign_value("g/state/1/1", "4242", b'["l",[]]', store.secret)  # signed for another key
        dist.send(torch.tensor([len(data)]), dst=0)
        dist.send(torch.frombuffer(bytearray(data), dtype=torch.uint8), dst=0)
        dist.send(torch.tensor([1 << 40]), dst=0)  # a huge size
        b.send_object(obj, [0])
    else:
        for _ in range(3):
            try:
                print("ACCEPTED", b.recv_object(1), flush=True)
            except PeerLostError as exc:
                print("REFUSED", exc, flush=True)
        print("GOT", b.recv_object(1) == obj, flush=True)
    b.leave()
""")


@pytest.mark.launcher
def test_state_from_a_peer_is_decoded_only_once_its_mac_matches(tmp_path: Path) -> None:
    script = tmp_path / "peer.py"
    script.write_text(PEER)
    port, marker = _port(), tmp_path / "unpickled"
    store = make_store("127.0.0.1", port, serve=True)
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo"}
    procs = [subprocess.Popen([sys.executable, str(script), str(r), str(port), str(marker)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in (0, 1)]
    outs = [p.communicate(timeout=60)[0] for p in procs]
    del store
    assert not marker.exists(), "a peer's pickle was loaded before its MAC was checked"
    victim = outs[0]
    assert victim.count("REFUSED") == 3 and "ACCEPTED" not in victim, outs
    assert "bad MAC" in victim and "refused a state of 1099511627776 bytes" in victim
    assert "GOT True" in victim, outs


HOSTILE_SECRET = "another-secret-0123456789"


@pytest.mark.launcher
def test_a_worker_without_the_secret_cannot_join_the_group(fake_job_factory: Any) -> None:
    job = fake_job_factory(SLURM_ELASTIC_GROUP_TIMEOUT_S="3")
    job.start("w0", ["w0", "w1"])
    job.start("w1", ["w0", "w1"], SLURM_ELASTIC_SECRET=HOSTILE_SECRET)
    rcs = job.wait_exit(timeout=40)
    assert rcs["w0"] not in (0, -999) and rcs["w1"] not in (0, -999), rcs
    assert job.last_step("w0") == job.last_step("w1") == 0
    # its values are signed, and named, with another secret: w0 never finds the address it waits for
    assert "forming o0 as rank 0/2 failed: no verified value of store key 'o0/" in job.output("w0")


@pytest.mark.launcher
def test_forged_ready_and_go_keys_neither_switch_early_nor_hide_the_order(fake_job_factory: Any) -> None:
    job = fake_job_factory(SLURM_ELASTIC_LOG_INDICES="1")
    hostile = make_store("127.0.0.1", job.port, serve=False)
    old, new = ["w0", "w1"], ["w0", "w1", "w2"]
    for w in old:
        job.start(w, old)
    job.wait_until("two workers training", lambda: job.last_step("w0") >= 3)
    hostile.set(hidden("o1/ready/w2"), "1")  # w2 has not even started
    hostile.set(hidden("o1/go"), json.dumps({"members": ["w0", "evil"], "order": order(1, new).to_json()}))
    hostile.wait([hidden("o1/ready/w2"), hidden("o1/go")])
    seq = job.order("resize", new)
    at = job.last_step("w0")
    job.wait_until("rank 0 read the order for 15 steps", lambda: job.last_step("w0") >= at + 15)
    assert not [e for w in old for e in job.events(w) if e["ev"] in ("switch", "formed") and e["gen"] != "o0"]
    assert "refused store key 'o1/ready/w2'" in job.output("w0")
    job.start("w2")  # its order is not hidden by the forged go key, and the real go names the real world
    job.wait_until("grown to 3", lambda: job.steps_in("w2", f"o{seq}") >= 3)
    job.order("stop")
    assert job.wait_exit() == {"w0": 0, "w1": 0, "w2": 0}
    formed = [e for w in new for e in job.events(w) if e["ev"] == "formed" and e["gen"] == f"o{seq}"]
    assert sorted(e["worker"] for e in formed) == new and {e["world"] for e in formed} == {3}
    assert len({e["digest"] for e in formed}) == 1


def kill_w1_and_recover(job: Any) -> dict[str, int]:
    """Three workers train, ``w1`` is killed, the survivors re-form and are stopped: their exit codes."""
    workers = ["w0", "w1", "w2"]
    for w in workers:
        job.start(w, workers)
    job.wait_until("three workers training", lambda: job.last_step("w0") >= 5)
    job.kill("w1")
    job.wait_until("survivors re-formed", lambda: job.steps_in("w2", "o0.r") >= 3, timeout=40)
    job.order("stop")
    rcs: dict[str, int] = job.wait_exit()
    return rcs


@pytest.mark.launcher
def test_forged_recovery_keys_neither_admit_the_forger_nor_drop_a_survivor(fake_job_factory: Any) -> None:
    job = fake_job_factory(SLURM_ELASTIC_GROUP_TIMEOUT_S="5")
    hostile = make_store("127.0.0.1", job.port, serve=False)
    hostile.set(hidden("o0.r/who/evil"), json.dumps({"commit": True}))
    hostile.set(hidden("o0.r/members"), json.dumps({"members": ["w0", "evil"], "src": "evil"}))
    hostile.wait([hidden("o0.r/who/evil"), hidden("o0.r/members")])
    workers = ["w0", "w1", "w2"]
    rcs = kill_w1_and_recover(job)
    assert rcs["w0"] == rcs["w2"] == 0, {w: job.output(w)[-2000:] for w in ("w0", "w2")}
    for w in ("w0", "w2"):
        recovered = [e for e in job.events(w) if e["ev"] == "recovered"]
        assert len(recovered) == 1 and recovered[0]["world"] == 2
    formed = [e for w in workers for e in job.events(w) if e["ev"] == "formed" and e["gen"] == "o0.r"]
    assert sorted(e["worker"] for e in formed) == ["w0", "w2"] and {e["world"] for e in formed} == {2}


@pytest.mark.launcher
def test_counters_set_to_garbage_break_no_worker(fake_job_factory: Any) -> None:
    """A TCPStore client whose add meets a value that is not a number loses its connection: no counters."""
    job = fake_job_factory()
    hostile = make_store("127.0.0.1", job.port, serve=False)
    for key in ("orders/count", "orders/next", "o0.r/arrive", "o1.r/arrive"):
        for name in (key, hidden(key)):
            hostile.set(name, "evil")
            hostile.wait([name])
    workers = ["w0", "w1"]
    for w in workers:
        job.start(w, workers)
    job.wait_until("two workers training", lambda: job.last_step("w0") >= 3)
    job.order("resize", workers, local_batch=16)
    job.wait_until("rebatched", lambda: any(e["ev"] == "rebatched" for e in job.events("w1")))
    job.order("stop")
    assert job.wait_exit() == {"w0": 0, "w1": 0}
