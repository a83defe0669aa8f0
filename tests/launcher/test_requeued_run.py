"""A requeued job starts its workers again; the orders of its earlier run name workers that are gone.

Finding (seventh session): after a Slurm requeue a fresh launcher (``applied_seq`` 0) took the
previous run's last order for its own: a shrink order naming ``w0, w1`` shrank the new 4-worker
world at once, and the daemon read the old workers as the job's current ones. Orders now carry the
run (Slurm's restart count) and each side reads only its run's.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from slurm_elastic_launcher.agent import Agent  # noqa: E402
from slurm_elastic_launcher.agent_types import ElasticJob  # noqa: E402
from slurm_elastic_launcher.env import EnvError, LauncherEnv  # noqa: E402
from slurm_elastic_launcher.order_sources import FileOrderSource  # noqa: E402
from slurm_elastic_launcher.orders import Order, OrderRejectedError, sign_order  # noqa: E402
from slurm_elastic_launcher.signed_store import SignedStore, make_store  # noqa: E402
from slurm_elastic_launcher.torch_backend import TensorBatchDataset, TorchBackend  # noqa: E402

SECRET = "test-secret-0123456789abcdef"
KEY = SECRET.encode()
JOB_ID = "4242"
WORLD = ["w0", "w1", "w2", "w3"]


def _env(restart: str | None) -> dict[str, str]:
    env = {"SLURM_ELASTIC_JOB_ID": JOB_ID, "SLURM_ELASTIC_SECRET": SECRET, "SLURM_ELASTIC_WORKER_ID": "w0",
           "SLURM_ELASTIC_WORKERS": ",".join(WORLD), "SLURM_ELASTIC_STORE_PORT": "1"}
    return env if restart is None else {**env, "SLURM_RESTART_COUNT": restart}


@pytest.mark.parametrize(("restart", "run"), [(None, 0), ("", 0), ("0", 0), ("2", 2)])
def test_the_run_is_slurms_restart_count(restart: str | None, run: int) -> None:
    assert LauncherEnv.from_mapping(_env(restart)).run == run


@pytest.mark.parametrize("restart", ["-1", "x", "1.5", "１", "9" * 12])
def test_a_restart_count_that_is_not_a_count_is_refused_by_name(restart: str) -> None:
    with pytest.raises(EnvError, match="SLURM_RESTART_COUNT"):
        LauncherEnv.from_mapping(_env(restart))


def test_an_order_carries_its_run_only_after_a_requeue() -> None:
    first = sign_order(JOB_ID, 1, "resize", ["w0"], 0, KEY)
    assert '"run"' not in first and Order.parse(first, JOB_ID, KEY).run == 0  # first-run bytes unchanged
    later = sign_order(JOB_ID, 2, "resize", ["w0"], 0, KEY, run=3)
    assert Order.parse(later, JOB_ID, KEY).run == 3
    for bad in (0, -1, True, "1"):
        forged = Order(JOB_ID, 4, "resize", ("w0",)).signed(KEY).to_json()
        body = forged[:-1] + f',"run":{bad if not isinstance(bad, str) else repr(bad)}' + "}"
        with pytest.raises(OrderRejectedError):
            Order.parse(body.replace("True", "true").replace("'", '"'), JOB_ID, KEY)


@pytest.fixture
def store_port() -> Any:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    host = make_store("127.0.0.1", port, serve=True, timeout_s=5.0)
    yield port
    del host


def _rank0(port: int, orders: Path, restart: str) -> Agent:
    env = LauncherEnv.from_mapping({**_env(restart), "SLURM_ELASTIC_STORE_PORT": str(port)})
    model = torch.nn.Linear(2, 1)
    job = ElasticJob(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                     dataset=TensorBatchDataset(torch.zeros(4, 2), torch.zeros(4, 1)),
                     loss_fn=lambda m, b: m(b[0]).sum())
    backend = TorchBackend(SignedStore(make_store("127.0.0.1", port, serve=False, timeout_s=5.0), JOB_ID, KEY), 5.0)
    agent = Agent(env, backend, job, FileOrderSource(str(orders)))
    agent.ctx.members, agent.ctx.rank = tuple(WORLD), 0
    agent.counters.applied_seq = 0  # a fresh run, not resumed from a checkpoint
    return agent


def test_a_requeued_run_acts_on_its_own_orders_only(tmp_path: Path, store_port: int) -> None:
    orders = tmp_path / "job.orders"
    orders.write_text(sign_order(JOB_ID, 1, "resize", ["w0", "w1"], 0, KEY) + "\n")  # the first run's shrink
    agent = _rank0(store_port, orders, "1")
    assert agent.resize.decide()[0] == 0  # the new 4-worker world is not shrunk by the old order
    with orders.open("a") as f:
        f.write(sign_order(JOB_ID, 2, "resize", ["w0", "w2"], 0, KEY, run=1) + "\n")
    time.sleep(agent.ORDERS_EVERY_S)  # rank 0 reads the orders at most this often
    assert agent.resize.decide()[0] == 2
    assert _rank0(store_port, orders, "0").resize.decide()[0] == 1  # the first run's own order still counts there


def test_rank_0_reads_the_orders_off_the_step_path_at_most_every_orders_every_s(tmp_path: Path,
                                                                                 store_port: int) -> None:
    """A step between two reads does no I/O: a burst of steps reads the source once, and an order
    written meanwhile is acted on once the interval has passed."""
    orders = tmp_path / "job.orders"
    orders.write_text("")
    agent = _rank0(store_port, orders, "0")
    reads = []
    source_read = agent.source.read
    agent.source.read = lambda: reads.append(1) or source_read()  # type: ignore[method-assign]
    for _ in range(50):
        assert agent.resize.decide()[0] == 0
    assert len(reads) == 1
    with orders.open("a") as f:
        f.write(sign_order(JOB_ID, 1, "resize", ["w0", "w1"], 0, KEY) + "\n")
    assert agent.resize.decide()[0] == 0 and len(reads) == 1  # not yet read
    time.sleep(agent.ORDERS_EVERY_S)
    assert agent.resize.decide()[0] == 1 and len(reads) == 2
