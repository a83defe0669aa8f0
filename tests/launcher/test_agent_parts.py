"""The agent split along its state machine's seams (issue 38): the counters as a typed record, the
batch policy as a function of them, and one step driver for ``run(ElasticJob)`` and the user's loop.

Finding: the user's loop drove the agent's step itself (its own ``reduce_step``, ``end_step`` and
``handle``) and started a joiner through ``Agent.await_order`` alone, which left the joiner acting
for its own allocation's run: ``run(ElasticJob)`` set the run from the order it joined by, the user's
loop did not, so a joiner of a requeued job that later became rank 0 read none of its job's orders.
Both now go through the same driver and the same joiner start.
"""

from __future__ import annotations

import ast
import json
import signal
import textwrap
from pathlib import Path
from typing import Any

import pytest

from slurm_elastic_launcher.counters import Counters

pytestmark = pytest.mark.launcher


# -- the counters ------------------------------------------------------------------------------------
def test_the_counters_read_and_write_typed_values_in_the_mapping_the_state_syncs() -> None:
    values: dict[str, Any] = {}
    counters = Counters(values)
    assert not counters.started and counters.step == 0 and counters.samples == 0  # before any state
    with pytest.raises(KeyError, match="local_batch"):
        _ = counters.local_batch  # set when the first world forms, never guessed
    counters.start(local_batch=8, workers=2, reference_workers=4)
    assert values == {"step": 0, "applied_seq": 0, "lr_scale": 1.0, "local_target": 8, "global_target": 16,
                      "global_batch0": 32, "local_batch": 8}  # the keys and values start_world always wrote
    counters.step += 1
    counters.lr_scale = 2  # stored as its field's type
    assert values["step"] == 1 and isinstance(values["lr_scale"], float)
    values.clear()  # a state arriving refills the shared mapping in place (TrainingState.apply)
    values.update({"step": 7.0, "applied_seq": "3", "lr_scale": 1, "local_target": 4, "global_target": 8,
                   "global_batch0": 8, "local_batch": 4})
    assert (counters.step, counters.applied_seq, counters.lr_scale) == (7, 3, 1.0)
    assert isinstance(counters.step, int) and isinstance(counters.lr_scale, float)
    assert counters.samples == 0  # a checkpoint written before samples were counted
    assert counters.as_dict()["applied_seq"] == 3 and "samples" not in counters.as_dict()


def test_a_counter_that_is_not_a_number_is_refused_as_its_type_refuses_it() -> None:
    counters = Counters({"step": "seven"})
    with pytest.raises(ValueError, match="seven"):
        _ = counters.step


def test_the_counters_travel_in_a_checkpoint_under_the_keys_they_always_had() -> None:
    """A checkpoint's ``extra`` written by the agent before the typed record still loads into it."""
    torch = pytest.importorskip("torch")
    from slurm_elastic_launcher.sampler import ElasticSampler, SamplerState
    from slurm_elastic_launcher.state import TrainingState
    from slurm_elastic_launcher.torch_backend import TorchOps

    model = torch.nn.Linear(2, 1)
    state = TrainingState(model, torch.optim.SGD(model.parameters(), lr=0.1), None,
                          ElasticSampler(8, SamplerState(0)), TorchOps(torch.device("cpu")))
    counters = Counters(state.extra)
    counters.start(local_batch=2, workers=2, reference_workers=2)
    counters.step, counters.samples = 5, 20
    tree = state.capture()
    assert tree["extra"] == {"step": 5, "samples": 20, "applied_seq": 0, "lr_scale": 1.0, "local_target": 2,
                             "global_target": 4, "global_batch0": 4, "local_batch": 2}
    old = {**tree, "extra": {k: v for k, v in tree["extra"].items() if k != "samples"}}  # no samples then
    state.apply(old)
    assert (counters.step, counters.samples, counters.local_batch) == (5, 0, 2)


# -- the batch policy ---------------------------------------------------------------------------------
class _Optimizer:
    def __init__(self, lr: float) -> None:
        self.param_groups = [{"lr": lr, "initial_lr": lr}]


@pytest.mark.parametrize(("scaling", "world", "override", "local"), [
    ("exo", 4, 0, 8),    # the per-worker batch stays: the global batch and the LR double
    ("exo", 4, 2, 2),    # an order's batch replaces the per-worker one
    ("endo", 4, 0, 4),   # the global batch stays, and so does the LR
    ("endo", 3, 0, 5),   # rounded to the world: 3 x 5 = 15 of 16
    ("endo", 4, 32, 8),  # an order's batch is the new global batch
])
def test_the_batch_policy_sets_each_worlds_batch_and_scales_the_lr_with_the_global_batch(
        scaling: str, world: int, override: int, local: int) -> None:
    from slurm_elastic_launcher.batch_policy import apply_batch_policy
    from slurm_elastic_launcher.env import ScalingMode

    counters = Counters({})
    counters.start(local_batch=8, workers=2, reference_workers=2)
    optimizer = _Optimizer(0.1)
    apply_batch_policy(counters, ScalingMode(scaling), world, optimizer, None, override)
    expected_lr = 0.1 * world * local / 16
    assert counters.local_batch == local
    assert optimizer.param_groups[0]["lr"] == pytest.approx(expected_lr)
    assert optimizer.param_groups[0]["initial_lr"] == pytest.approx(expected_lr)
    assert counters.lr_scale == pytest.approx(world * local / 16)
    apply_batch_policy(counters, ScalingMode(scaling), world, optimizer, None)  # again: nothing changes
    assert optimizer.param_groups[0]["lr"] == pytest.approx(expected_lr) and counters.local_batch == local


# -- one driver of a step -------------------------------------------------------------------------------
SPY = textwrap.dedent('''
    import json, os, sys
    import torch
    from slurm_elastic_launcher import agent as agent_module, step_driver
    calls = {"begin": [], "end": []}
    agents = []
    for name in ("begin", "end"):
        def spy(self, *args, _name=name, _real=getattr(step_driver.StepDriver, name), **kwargs):
            calls[_name].append(id(self))
            return _real(self, *args, **kwargs)
        setattr(step_driver.StepDriver, name, spy)
    real_init = agent_module.Agent.__init__
    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        agents.append(self)
    agent_module.Agent.__init__ = init
    port = sys.argv[2]
    os.environ.update(SLURM_ELASTIC_JOB_ID="1", SLURM_ELASTIC_SECRET="s" * 32, SLURM_ELASTIC_WORKER_ID="w0",
                      SLURM_ELASTIC_WORKERS="w0", SLURM_ELASTIC_STORE_PORT=port, SLURM_ELASTIC_STORE_SERVE="1",
                      SLURM_ELASTIC_EPOCHS="2", SLURM_ELASTIC_LOCAL_BATCH="4")
    import slurm_elastic_launcher
    torch.manual_seed(0)
    x, y = torch.randn(16, 3), torch.randn(16, 1)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    if MODE == "run":
        from slurm_elastic_launcher.torch_backend import TensorBatchDataset
        job = slurm_elastic_launcher.ElasticJob(model=model, optimizer=opt, dataset=TensorBatchDataset(x, y),
                                                loss_fn=lambda m, b: ((m(b[0]) - b[1]) ** 2).sum())
        steps = slurm_elastic_launcher.run(job).steps
    else:
        from torch.utils.data import TensorDataset
        world = slurm_elastic_launcher.init()
        wrapped = world.wrap(model)
        loader = world.loader(TensorDataset(x, y), batch_size=4)
        world.register(model=wrapped, optimizer=opt)
        for epoch in world.epochs(2):
            for xb, yb in loader:
                opt.zero_grad()
                loss = ((wrapped(xb) - yb) ** 2).mean()
                loss.backward()
                opt.step()
                world.step(loss)
        steps = world.result.steps
    driver = id(agents[0].driver)
    print(json.dumps({"agents": len(agents), "steps": steps, "begins": len(calls["begin"]),
                      "ends": len(calls["end"]), "one_driver": set(calls["begin"]) | set(calls["end"]) == {driver}}))
''')


@pytest.mark.parametrize("mode", ["run", "loop"])
def test_run_and_the_users_loop_drive_every_step_through_the_agents_one_step_driver(
        mode: str, start_ranks: Any) -> None:
    """``run(ElasticJob)`` and ``world.step()`` both begin and end every step through ``agent.driver``
    (8 steps: 2 epochs of 16 samples at a batch of 4, one worker)."""
    (proc,) = start_ranks(f"MODE = {mode!r}\n{SPY}", 1)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    got = json.loads(out.strip().splitlines()[-1])
    assert got == {"agents": 1, "steps": 8, "begins": got["begins"], "ends": 8, "one_driver": True}, got
    assert got["begins"] in (8, 9), got  # the user's loop begins the step after the last before it ends


def test_a_joiner_of_the_users_loop_acts_for_the_run_of_the_order_it_joins_by(tmp_path: Path, server: Any) -> None:
    """A joiner's own allocation (a satellite) has its own restart count: the job's run is its order's,
    as ``run(ElasticJob)`` always took it; the user's loop started its joiner without it."""
    torch = pytest.importorskip("torch")
    from torch.utils.data import TensorDataset

    from slurm_elastic_launcher import control
    from slurm_elastic_launcher.env import LauncherEnv
    from slurm_elastic_launcher.orders import sign_order
    from slurm_elastic_launcher.signed_store import SignedStore, make_store
    from slurm_elastic_launcher.torch_backend import TorchBackend
    from slurm_elastic_launcher.user_loop import ElasticWorld

    port, _, _ = server
    secret = "t" * 32
    orders = tmp_path / "job.orders"
    orders.write_text(sign_order("7", 3, "resize", ["w0", "w5"], 0, secret.encode(), run=2) + "\n")
    env = LauncherEnv.from_mapping({
        "SLURM_ELASTIC_JOB_ID": "7", "SLURM_ELASTIC_SECRET": secret, "SLURM_ELASTIC_WORKER_ID": "w5",
        "SLURM_ELASTIC_WORKERS": "w0", "SLURM_ELASTIC_STORE_PORT": str(port), "SLURM_ELASTIC_JOIN": "1",
        "SLURM_ELASTIC_ORDERS": f"file:{orders}", "SLURM_ELASTIC_JOIN_TIMEOUT_S": "5",
    })
    assert env.run == 0  # the satellite's own allocation was never requeued
    backend = TorchBackend(SignedStore(make_store("127.0.0.1", port, serve=False, timeout_s=5.0), "7",
                                       secret.encode()), 5.0)
    backend.store_set(control.epoch_key(3), control.epoch_payload(1))  # rank 0 told the job's epoch
    world = ElasticWorld(env, backend)
    model = world.wrap(torch.nn.Linear(2, 1))
    world.loader(TensorDataset(torch.zeros(4, 2), torch.zeros(4, 1)), batch_size=2)
    world.register(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    handler = signal.getsignal(signal.SIGTERM)
    try:
        world.start()
    finally:
        signal.signal(signal.SIGTERM, handler)
    agent = world.require_agent()
    try:
        assert world.joining is not None and world.joining.seq == 3 and world.joining_epoch == 1
        assert agent.ctx.job_run == 2
    finally:
        agent.ctx.close_log()


def test_the_users_loop_writes_nothing_into_the_agent() -> None:
    """``user_loop`` changes the agent only through its methods, driver and resize protocol: no
    assignment in it targets an attribute reached through an agent (it set ``reference_workers``,
    ``state.carried`` and ``sampler.state`` before)."""
    import slurm_elastic_launcher.user_loop as user_loop

    def through_agent(node: ast.expr) -> bool:
        while isinstance(node, ast.Attribute | ast.Subscript):
            node = node.value
            if isinstance(node, ast.Attribute) and node.attr == "agent":
                return True
        return isinstance(node, ast.Name) and node.id == "agent"

    tree = ast.parse(Path(user_loop.__file__).read_text())
    writes = [ast.unparse(t) for n in ast.walk(tree) if isinstance(n, ast.Assign | ast.AugAssign | ast.AnnAssign)
              for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
              if isinstance(t, ast.Attribute | ast.Subscript) and through_agent(t)]
    assert writes == []
