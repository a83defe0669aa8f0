"""Whoever reaches the job's TCPStore cannot break its recovery (issue 37, item 4).

The recovery's keys had names anyone could predict (``o0.r/leader``, ...): garbage written there in
advance made every survivor's claim of the leader fail, and the recovery end FAILED after 9 s. Now
every key lives in the store under a name derived from its logical name with the job's secret
(:func:`.control.store_key`), so nobody without the secret can write it in advance, and a claim
finds a value that does not verify absent and takes the key over it. A hostile raw TCPStore client
plays the other user; where it writes at the hidden names it stands for one that learned them once
they existed (``Store.list_keys``), the second line of defence.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import threading
import time
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from slurm_elastic_launcher import control  # noqa: E402
from slurm_elastic_launcher.orders import sign_value  # noqa: E402
from slurm_elastic_launcher.signed_store import make_store  # noqa: E402

from .test_store_auth import JOB_ID, KEY, hidden, kill_w1_and_recover, make_agent, signed_client  # noqa: E402

GARBAGE = b"garbage written in advance by another user"


# -- the names -------------------------------------------------------------------------------------

LOGICAL = [control.leader_key("o0.r"), control.members_key("o0.r"), control.who_key("o0.r", "w0"),
           control.go_key(1), control.ready_key(1, "w2"), control.order_key(1), "o0.r//0//cpu//0/0"]


def test_store_key_names_cannot_be_predicted_without_the_secret() -> None:
    names = [hidden(k) for k in LOGICAL]
    assert all(re.fullmatch(r"k/[0-9a-f]{32}", n) for n in names), names
    assert len(set(names)) == len(names)  # one name per logical key
    assert names == [hidden(k) for k in LOGICAL]  # the same in every worker of the job
    for logical, name in zip(LOGICAL, names, strict=True):
        assert logical not in name and "o0" not in name and "leader" not in name
        assert control.store_key(logical, JOB_ID, b"another-secret-0123456789") != name
        assert control.store_key(logical, "4243", KEY) != name  # another job's names differ
    # the logical names stay what the logs and events show
    assert LOGICAL[:6] == ["o0.r/leader", "o0.r/members", "o0.r/who/w0", "o1/go", "o1/ready/w2", "orders/1"]
    # length-prefixed: no two (job, key) pairs hash the same bytes
    assert control.store_key("2/x", "4", KEY) != control.store_key("x", "42/", KEY)


def test_the_store_holds_no_key_under_its_logical_name(server: Any) -> None:
    port, _, hostile = server
    store = signed_client(port)
    store.set("o0.r/leader", b'{"worker":"w0"}')
    store.claim("o0.r/members", b"{}")
    assert store.read("o0.r/leader") == b'{"worker":"w0"}'
    keys = set(hostile.list_keys())
    assert keys == {hidden("o0.r/leader"), hidden("o0.r/members")}, keys
    assert not hostile.check(["o0.r/leader"])


def test_a_writer_that_keeps_rewriting_torch_s_predictable_rendezvous_keys_stalls_nothing(server: Any) -> None:
    """torch's keys (gloo's addresses under ``<gen>/``) are hidden too: garbage rewritten at their
    logical names, for as long as the rendezvous lasts, lands where no worker reads."""
    port, _, hostile = server
    writer, reader = signed_client(port), signed_client(port)
    reader.set_timeout(dt.timedelta(seconds=2))
    stop = threading.Event()

    def rewrite() -> None:
        while not stop.is_set():
            hostile.set("o0.r//0//cpu//0/0", GARBAGE)
            time.sleep(0.001)

    t = threading.Thread(target=rewrite)
    t.start()
    try:
        time.sleep(0.05)
        writer.set("o0.r//0//cpu//0/0", b"rank 0's address")
        assert reader.get("o0.r//0//cpu//0/0") == b"rank 0's address"
    finally:
        stop.set()
        t.join()


# -- a claim over what does not verify -------------------------------------------------------------


def test_a_claim_takes_a_key_that_holds_garbage_and_the_next_claimant_sees_it(server: Any) -> None:
    port, _, hostile = server
    first, second = signed_client(port), signed_client(port)
    for n, raw in enumerate([GARBAGE, b"0" * 64 + b"{}", sign_value("other", JOB_ID, b"{}", KEY)]):
        key = f"o{n}.r/leader"
        hostile.set(hidden(key), raw)
        hostile.wait([hidden(key)])
        assert first.claim(key, b"first") == b"first", raw
        assert second.claim(key, b"second") == b"first"
        assert first.read(key) == b"first"


def test_a_claim_takes_a_key_whose_verified_value_its_reader_refuses(server: Any) -> None:
    port, _, _ = server
    store = signed_client(port)
    store.set("o0.r/leader", b"not the shape")
    assert store.claim("o0.r/leader", b"mine", accept=lambda p: p != b"not the shape") == b"mine"
    assert store.claim("o0.r/leader", b"other", accept=lambda p: p != b"not the shape") == b"mine"


def test_a_claim_gives_up_on_a_key_deleted_and_rewritten_under_it(server: Any) -> None:
    """A writer that rewrites garbage faster than the claim cannot make it loop for ever."""
    port, _, hostile = server
    store = signed_client(port)
    key = hidden("o0.r/leader")
    stop = threading.Event()

    def rewrite() -> None:
        while not stop.is_set():
            hostile.set(key, GARBAGE)

    t = threading.Thread(target=rewrite)
    t.start()
    try:
        got = store.claim("o0.r/leader", b"mine")
    finally:
        stop.set()
        t.join()
    assert got in (None, b"mine")


# -- the survivors' agreement ------------------------------------------------------------------------


def agree(port: int, gen: str, survivors: list[str], members: list[str]) -> dict[str, Any]:
    agents = {w: make_agent(port, w, members, timeout_s="2") for w in survivors}
    out: dict[str, Any] = {}
    threads = [threading.Thread(target=lambda w=w: out.update({w: agents[w].membership.agree(gen, True)}))
               for w in agents]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return out


def test_garbage_at_the_recovery_keys_anyone_could_predict_does_not_stop_the_survivors(server: Any) -> None:
    port, _, hostile = server
    members = ["w0", "w1", "w2", "w3"]
    for gen in ("o0.r", "o0.r.r", "o1.r"):  # what another user can write before the job even starts
        for key in (control.leader_key(gen), control.members_key(gen), *(control.who_key(gen, w) for w in members)):
            hostile.set(key, GARBAGE)
    hostile.wait([control.leader_key("o1.r")])
    out = agree(port, "o0.r", ["w0", "w2", "w3"], members)  # w1 was lost
    assert out == {w: (("w0", "w2", "w3"), "w0") for w in ("w0", "w2", "w3")}


@pytest.mark.parametrize("kind", ["garbage", "forged MAC", "another secret", "signed, wrong shape"])
def test_a_leader_claim_that_does_not_verify_is_claimed_over(server: Any, kind: str) -> None:
    """Garbage, a forged MAC, and even a signed claim of the wrong shape (a worker not in the world)."""
    raw = {"garbage": GARBAGE, "forged MAC": b"f" * 64 + b'{"worker":"w0"}',
           "another secret": sign_value("o0.r/leader", JOB_ID, b'{"worker":"w0"}', b"x" * 16),
           "signed, wrong shape": sign_value("o0.r/leader", JOB_ID, b'{"worker":"evil"}', KEY)}[kind]
    port, _, hostile = server
    hostile.set(hidden("o0.r/leader"), raw)
    hostile.wait([hidden("o0.r/leader")])
    out = agree(port, "o0.r", ["w0", "w2"], ["w0", "w1", "w2"])
    assert out == {w: (("w0", "w2"), "w0") for w in ("w0", "w2")}
    leader = json.loads(signed_client(port).read("o0.r/leader") or b"null")["worker"]
    assert leader in ("w0", "w2")


# -- real worker processes ---------------------------------------------------------------------------


@pytest.mark.launcher
def test_a_job_whose_recovery_keys_were_written_in_advance_still_recovers(fake_job_factory: Any) -> None:
    job = fake_job_factory(SLURM_ELASTIC_GROUP_TIMEOUT_S="5")
    hostile = make_store("127.0.0.1", job.port, serve=False)
    workers = ["w0", "w1", "w2"]
    keys = [control.leader_key("o0.r"), control.members_key("o0.r"), *(control.who_key("o0.r", w) for w in workers),
            *(f"o0.r//0//cpu//0/{r}" for r in range(3))]  # torch's rendezvous keys of the recovered world
    for key in keys:
        hostile.set(key, GARBAGE)
    hostile.wait(keys)
    rcs = kill_w1_and_recover(job)
    assert rcs["w0"] == rcs["w2"] == 0, {w: job.output(w)[-2000:] for w in ("w0", "w2")}
    formed = [e for w in workers for e in job.events(w) if e["ev"] == "formed" and e["gen"] == "o0.r"]
    assert sorted(e["worker"] for e in formed) == ["w0", "w2"] and {e["world"] for e in formed} == {2}
