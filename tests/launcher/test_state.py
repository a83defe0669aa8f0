"""Training state rollback/sync, single-process, with a fake (record/replay) broadcast."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from slurm_elastic_launcher.sampler import ElasticSampler, SamplerState  # noqa: E402
from slurm_elastic_launcher.state import TrainingState  # noqa: E402
from slurm_elastic_launcher.torch_backend import TorchOps  # noqa: E402


def make_state(seed: int) -> TrainingState:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    return TrainingState(model, opt, sched, ElasticSampler(100, SamplerState(seed)), TorchOps(torch.device("cpu")),
                         extra={"step": 0})


def train(state: TrainingState, steps: int) -> None:
    for _ in range(steps):
        state.optimizer.zero_grad()  # type: ignore[attr-defined]
        state.model(torch.randn(16, 4)).pow(2).sum().backward()  # type: ignore[operator]
        state.optimizer.step()  # type: ignore[attr-defined]
        state.scheduler.step()  # type: ignore[union-attr]
        state.sampler.advance(2, 8)
        state.extra["step"] += 1


def flat(state: TrainingState) -> list[float]:
    model = [t.detach().float().reshape(-1) for t in state.model.state_dict().values()]
    opt = [t.float().reshape(-1) for s in state.optimizer.state_dict()["state"].values() for t in s.values()]
    return torch.cat(model + opt).tolist()  # type: ignore[no-any-return]


class FakeCollectives:
    """Rank src records what it broadcasts; the other rank replays it in the same order."""

    def __init__(self) -> None:
        self.buffers: list[Any] = []
        self.objects: list[Any] = []
        self.replay = False

    def broadcast(self, buffer: Any, src: int) -> None:
        if self.replay:
            buffer.copy_(self.buffers.pop(0))
        else:
            self.buffers.append(buffer.clone())

    def broadcast_object(self, obj: Any, src: int) -> Any:
        if self.replay:
            return self.objects.pop(0)
        self.objects.append(obj)
        return obj


def test_sync_makes_a_fresh_joiner_equal_to_the_source() -> None:
    old, joiner = make_state(1), make_state(2)
    train(old, 3)
    assert flat(old)[:10] != flat(joiner)[:10]
    coll = FakeCollectives()
    sent = old.sync(coll.broadcast, coll.broadcast_object, src=0, rank=0)
    assert len(coll.buffers) == 2  # one flat buffer per dtype: float32 and int64 (BatchNorm counter)
    assert {str(b.dtype) for b in coll.buffers} == {"torch.float32", "torch.int64"}
    coll.replay = True
    received = joiner.sync(coll.broadcast, coll.broadcast_object, src=0, rank=1)
    assert sent == received > 0
    assert flat(joiner) == flat(old)  # model, BN buffers and the Adam state the joiner did not have
    assert joiner.sampler.state == old.sampler.state and joiner.extra == {"step": 3}
    assert joiner.optimizer.param_groups[0]["lr"] == old.optimizer.param_groups[0]["lr"] == 5e-3  # type: ignore[attr-defined]


class FakeWire:
    """Point-to-point sends recorded per destination, received in order by that destination."""

    def __init__(self) -> None:
        self.queues: dict[int, list[Any]] = defaultdict(list)
        self.sent_tensors: list[Any] = []

    def send(self, buffer: Any, dsts: Any) -> None:
        self.sent_tensors.append(buffer)
        for d in dsts:
            self.queues[d].append(buffer.clone())

    def send_object(self, obj: Any, dsts: Any) -> None:
        for d in dsts:
            self.queues[d].append(obj)

    def receiver(self, rank: int) -> tuple[Any, Any]:
        def recv(buffer: Any, src: int) -> None:
            got = self.queues[rank].pop(0)
            assert got.shape == buffer.shape and got.dtype == buffer.dtype
            buffer.copy_(got)

        def recv_object(src: int) -> Any:
            return self.queues[rank].pop(0)

        return recv, recv_object


@pytest.mark.parametrize("large", [1 << 30, 16])
def test_send_makes_each_joiner_equal_to_the_sender(large: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(TrainingState, "LARGE", large)
    old, joiners = make_state(1), [make_state(2), make_state(3)]
    train(old, 3)
    wire = FakeWire()
    sent = old.send(wire.send, wire.send_object, [1, 2])
    live = {p.data_ptr() for p in old.model.parameters()}  # type: ignore[attr-defined]
    from_live = [t for t in wire.sent_tensors if t.data_ptr() in live]
    if large == 16:  # the 32- and 16-element weights go unpacked, from the live parameters
        assert len(from_live) == 2 and len(wire.sent_tensors) > 2
    else:
        assert not from_live and len(wire.sent_tensors) == 2  # one packed buffer per dtype
    for rank, joiner in zip([1, 2], joiners, strict=True):
        recv, recv_object = wire.receiver(rank)
        assert joiner.receive(recv, recv_object, src=0) == sent > 0
        assert flat(joiner) == flat(old) and joiner.sampler.state == old.sampler.state
        assert joiner.extra == {"step": 3}
        assert not wire.queues[rank]


def test_send_to_nobody_sends_nothing() -> None:
    wire = FakeWire()
    assert make_state(1).send(wire.send, wire.send_object, []) == 0 and not wire.queues


def test_rollback_undoes_what_the_open_step_did_to_the_scheduler_and_the_counters() -> None:
    """The user's loop steps its scheduler and counters after backward, before the boundary sees the
    lost peer: those are put back; the parameters and the optimizer were never stepped (the guard)."""
    s = make_state(3)
    counters = {"seen": 5}
    s.carried["counters"] = counters
    train(s, 3)
    lr, last = s.optimizer.param_groups[0]["lr"], s.scheduler.last_epoch  # type: ignore[attr-defined,union-attr]
    s.step_started()
    s.scheduler.step()  # type: ignore[union-attr]
    counters["seen"] += 1
    assert s.scheduler.last_epoch == last + 1  # type: ignore[union-attr]
    s.rollback()
    assert s.scheduler.last_epoch == last and s.scheduler.get_last_lr()[0] == lr  # type: ignore[union-attr]
    assert counters == {"seen": 5} and s.carried["counters"] is counters  # refilled in place


def test_after_a_step_ended_its_live_state_is_the_boundary_and_rollback_keeps_it() -> None:
    s = make_state(4)
    s.step_started()
    train(s, 1)
    s.step_ended()
    after = (flat(s), s.scheduler.last_epoch, s.sampler.state)  # type: ignore[union-attr]
    s.rollback()  # a peer lost while the worlds switch, after the step: nothing to undo
    assert (flat(s), s.scheduler.last_epoch, s.sampler.state) == after  # type: ignore[union-attr]

