"""Training DL2's policy in the simulator: supervised warm-up, then actor-critic (torch, CPU).

This module owns :func:`train` and its :class:`TrainConfig`. The environment is the simulator
(:func:`~slurm_elastic.sim.engine.simulate`, the same ``run_round`` as the daemon) on a built-in
workload; the decisions are made by the same pure loop the ``drl`` planner runs
(:func:`~slurm_elastic.core.drl.allocate`), so what is trained is exactly what is deployed. It is
the only module of slurm-elastic that trains with torch; it must not be imported by the daemon
or the core. Randomness comes from ``TrainConfig.seed`` only (``torch.manual_seed`` and one numpy
``Generator``); torch runs on one CPU thread.

The two phases of DL2 (arXiv:1909.06040, §4.2-4.3), adapted to all-reduce jobs as ONES did:

1. Offline supervised warm-up: an existing policy (the *teacher*) is run in the simulator on
   ``warmup_traces`` workloads and each of its rounds is replayed through the decision loop as a
   sequence of DL2 actions (add one GPU to a slot's job ... stop); the policy network is fitted
   to those actions by cross entropy (Adam, ``lr_warmup``). Teachers: ``drf`` (DL2's own
   default: max-min fair GPU shares, DRF with one resource: each step adds a GPU to the job
   holding the fewest, ties to the earlier arrival) or any policy (``fifo``,
   ``tiresias``, ``optimus``, ...), whose GPU counts are reached job by job in arrival order;
   running jobs keep their minimum whatever the teacher does (no preemption). The default teacher
   is ``optimus`` re-planning every round: in our simulator it is the best of these inside the
   ``drl`` loop on ``ones-longhorn-50`` (avg JCT 1,359 s on seeds 1-3, vs 1,637 s for fifo and
   tiresias and 1,868 s for drf), and DL2 learns to improve on whichever policy it starts from.
2. Online actor-critic, one simulated workload per episode: actions are sampled from the policy
   with DL2's *job-aware exploration*: in a poor state, with probability ``epsilon`` a specified
   action replaces the policy's. For all-reduce jobs (no parameter servers, so DL2's
   worker/PS-imbalance states do not exist) the poor state is "a job waits although it could
   start, while some job holds more GPUs than it asked for"; the specified action starts the
   earliest such waiting job. The reward of a round (DL2's time slot) is, by default, minus the
   active jobs times the slots elapsed (its sum is minus the total JCT: the objective DL2 and ONES
   state); ``reward="progress"`` is DL2's per-slot proxy, the sum over jobs of the epochs trained
   since the previous round, each normalised by the job's total epochs. On ``ones-longhorn-50`` the
   proxy drove the policy away from low JCT (validation avg JCT 1,510 s after the warm-up, 1,960 s
   after 15 episodes; with the JCT reward 1,497 s), so the JCT reward is the default. Every
   decision of a round gets that round's discounted return
   ``G_t = r_t + gamma**(dt / slot_seconds) * G_{t+1}`` (DL2 gives all inferences of a slot its
   reward; rounds here are events, not fixed slots, so the discount follows time). Samples go to
   an *experience replay* buffer of ``replay`` samples; after each episode ``updates`` mini-batches
   of ``batch_size`` are drawn from it. The value network (same shape, one linear output) is fitted
   to the returns; the policy follows ``-log pi(a|s) * (G - V(s))`` (advantages standardised per
   mini-batch) minus ``entropy`` times the policy's entropy (*entropy regularisation*). The
   critic is warmed up with the policy, on the teacher's returns.

With ``standardise``, both networks see each input as ``(x - mean) / std`` with the warm-up
samples' mean and standard deviation (a fixed first module, not trained), and the saved policy has
them folded into its first layer (:func:`~slurm_elastic.drl.imitation.fold_standardisation`), so
it takes the raw state like any other. Without it, DRF is not learned at all (docs/drl.md): its
choice depends on ``allocated`` (1/16 per GPU) among inputs that reach 7-14. It is off by default
because the shipped models were trained without it.

The warm-up's summary also gives what imitation can reach: the majority-action baseline and the
ceiling the features allow (:mod:`slurm_elastic.drl.imitation`).

The policy with the lowest average JCT on the validation workloads (``eval_seeds``, evaluated
greedily after the warm-up and every ``eval_every`` episodes) is the one returned.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from torch import nn

from slurm_elastic import policies
from slurm_elastic.core.baselines import fixed_batch_sizing
from slurm_elastic.core.drl import (
    SLOT_FEATURES,
    Chooser,
    DrlPlanner,
    FeatureSpec,
    PolicyWeights,
    Step,
    allocate,
    forward,
    masked_probabilities,
)
from slurm_elastic.core.model import ClusterSnapshot, Job, JobId, JobState
from slurm_elastic.core.planner import Planner, PlanResult, build_plan
from slurm_elastic.core.sizing import Sizing
from slurm_elastic.drl.imitation import feature_ceiling, fold_standardisation, input_moments, majority_accuracy
from slurm_elastic.errors import ConfigError
from slurm_elastic.sim.engine import simulate
from slurm_elastic.sim.workload import SimJobSpec
from slurm_elastic.workloads.catalog import BUILTIN, builtin
from slurm_elastic_predictor.profiles import MODEL_DEFAULTS

FloatArr = NDArray[np.float64]
#: ``progress(done, total, text)`` after each unit of work (traces, warm-up epochs, episodes, evaluations).
Progress = Callable[[int, int, str], None]
REWARDS = ("progress", "jct")


@dataclass(frozen=True)
class TrainConfig:
    """Everything a training run depends on (recorded in the model file's ``meta``).

    Attributes:
        workload: built-in workload to train on.
        gpus, gpus_per_node: the simulated cluster.
        seed: the one seed (torch, numpy, and the training workloads' seeds drawn from it, all
            >= 10,000 so that they never coincide with evaluation seeds such as 1-5).
        jobs: use only the first ``jobs`` jobs of each workload (``None``: all; for quick runs).
        teacher: ``drf`` or a policy name (:mod:`slurm_elastic.policies`), imitated in the warm-up.
        teacher_params: the teacher's parameters (``None``: none, except ``interval = 0`` for
            ``optimus``, which then re-plans every round as the ``drl`` loop does).
        warmup_traces: teacher runs (workloads) for the warm-up.
        warmup_epochs: passes over the warm-up samples.
        episodes: actor-critic episodes (one workload each).
        slots: ``J`` job slots of the state.
        hidden: widths of the hidden layers (DL2: two of 256; 128 keeps the file small).
        lr_warmup, lr_policy, lr_value: Adam learning rates (DL2: 0.005 and 0.0001); the warm-up's
            decays linearly to a tenth over its epochs.
        batch_size: mini-batch (DL2: 256).
        gamma: discount per ``slot_seconds`` of simulated time (DL2: 0.9 per slot).
        slot_seconds: the time slot that ``gamma`` discounts (seconds).
        epsilon: job-aware exploration probability (DL2: 0.4).
        entropy: entropy weight (DL2 used 0.1 on raw advantages; ours are standardised).
        replay: experience replay buffer, samples (DL2: 8192).
        updates: mini-batch updates after each episode.
        reward: ``jct`` (minus active jobs x slots elapsed) or ``progress`` (DL2's normalised epochs).
        eval_seeds: validation workload seeds (the best policy on them is returned).
        eval_every: evaluate every this many episodes (0: only after the warm-up and at the end).
        round_gap: the simulator's least seconds between rounds.
        standardise: feed both networks ``(x - mean) / std`` with the warm-up samples' statistics
            (folded into the saved policy's first layer); needs warm-up traces. Without it the
            ``drf`` teacher is not learned (docs/drl.md); off because the shipped models were
            trained without it.
    """

    workload: str = "ones-longhorn"
    gpus: int = 64
    gpus_per_node: int = 4
    seed: int = 1
    jobs: int | None = None
    teacher: str = "optimus"
    teacher_params: dict[str, Any] | None = None
    warmup_traces: int = 32
    warmup_epochs: int = 60
    episodes: int = 15
    slots: int = 32
    hidden: tuple[int, ...] = (128, 128)
    lr_warmup: float = 5e-3
    lr_policy: float = 3e-5
    lr_value: float = 1e-3
    batch_size: int = 256
    gamma: float = 0.9
    slot_seconds: float = 300.0
    epsilon: float = 0.4
    entropy: float = 0.01
    replay: int = 8192
    updates: int = 32
    reward: str = "jct"
    eval_seeds: tuple[int, ...] = (9001, 9002)
    eval_every: int = 3
    round_gap: float = 30.0
    models: tuple[str, ...] = field(default_factory=lambda: tuple(sorted(MODEL_DEFAULTS)))
    standardise: bool = False

    def __post_init__(self) -> None:
        def rule(ok: bool, key: str, value: object, what: str) -> None:
            if not ok:
                raise ConfigError(f"train-drl {key} = {value!r}: {what}")

        rule(self.workload in BUILTIN, "workload", self.workload, f"must be one of {', '.join(BUILTIN)}")
        rule(self.gpus >= 1 and self.gpus_per_node >= 1 and self.gpus % self.gpus_per_node == 0, "gpus",
             self.gpus, f"must be a positive multiple of gpus_per_node {self.gpus_per_node}")
        rule(self.jobs is None or self.jobs >= 1, "jobs", self.jobs, "must be >= 1")
        rule(self.teacher == "drf" or self.teacher in policies.available(), "teacher", self.teacher,
             "must be drf or a policy: " + ", ".join(policies.available()))
        rule(self.teacher != "drf" or not self.teacher_params, "teacher_params", self.teacher_params,
             "drf takes no parameters")
        if self.teacher != "drf":
            policies.create(self.teacher, **self.teacher_kwargs)  # bad parameters fail now, not mid-run
        for key in ("warmup_traces", "warmup_epochs", "episodes", "updates", "eval_every"):
            rule(getattr(self, key) >= 0, key, getattr(self, key), "must be >= 0")
        rule(self.warmup_traces >= 1 or self.episodes >= 1, "episodes", self.episodes,
             "a run needs warm-up traces or episodes")
        for key in ("slots", "batch_size", "replay"):
            rule(getattr(self, key) >= 1, key, getattr(self, key), "must be >= 1")
        rule(len(self.hidden) >= 1 and all(h >= 1 for h in self.hidden), "hidden", self.hidden,
             "must be one or more positive widths")
        for key in ("lr_warmup", "lr_policy", "lr_value", "slot_seconds"):
            v = getattr(self, key)
            rule(math.isfinite(v) and v > 0, key, v, "must be > 0")
        rule(0 < self.gamma <= 1, "gamma", self.gamma, "must lie in (0, 1]")
        rule(0 <= self.epsilon <= 1, "epsilon", self.epsilon, "must lie in [0, 1]")
        rule(math.isfinite(self.entropy) and self.entropy >= 0, "entropy", self.entropy, "must be >= 0")
        rule(self.reward in REWARDS, "reward", self.reward, f"must be one of {', '.join(REWARDS)}")
        rule(math.isfinite(self.round_gap) and 0 <= self.round_gap <= 86_400, "round_gap", self.round_gap,
             "must be finite, >= 0 and <= 86400 seconds (the simulate --round-gap range)")
        rule(isinstance(self.standardise, bool), "standardise", self.standardise, "must be true or false")
        rule(not self.standardise or self.warmup_traces >= 1, "standardise", self.standardise,
             "needs warm-up traces (the statistics are the warm-up samples')")

    @property
    def teacher_kwargs(self) -> dict[str, Any]:
        """The teacher's effective parameters."""
        if self.teacher_params is None:
            return {"interval": 0.0} if self.teacher == "optimus" else {}
        return dict(self.teacher_params)

    @property
    def spec(self) -> FeatureSpec:
        """The policy's input shape."""
        return FeatureSpec(self.slots, self.models)


@dataclass(frozen=True)
class TrainResult:
    """A trained policy and the figures of its training.

    Attributes:
        weights: the returned (best validated) policy.
        summary: JSON-ready figures: warm-up loss and accuracy per epoch, episode returns,
            validation JCTs, which policy was kept.
    """

    weights: PolicyWeights
    summary: dict[str, Any]


# -- networks ------------------------------------------------------------------------------------


def _mlp(sizes: Sequence[int]) -> nn.Sequential:
    mods: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        mods.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            mods.append(nn.ReLU())
    return nn.Sequential(*mods)


class _Standardise(nn.Module):
    """``(x - mean) / std`` per input: fixed statistics, not trained."""

    def __init__(self, mean: FloatArr, std: FloatArr) -> None:
        super().__init__()
        self.stats = (mean, std)
        self.mean, self.std = torch.from_numpy(mean), torch.from_numpy(std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Divided in place: on the whole warm-up set (3 GB for DRF on dl2-simulation) one copy, not two.
        return torch.sub(x, self.mean).div_(self.std)


def to_weights(net: nn.Sequential, spec: FeatureSpec, meta: dict[str, str] | None = None) -> PolicyWeights:
    """The numpy :class:`PolicyWeights` of a torch policy network (``W`` transposed to (in, out));
    a leading :class:`_Standardise` is folded into the first layer, so the weights take the raw state."""
    layers = [(m.weight.detach().double().numpy().T.copy(), m.bias.detach().double().numpy().copy())
              for m in net if isinstance(m, nn.Linear)]
    first = net[0]
    if isinstance(first, _Standardise):
        layers[0] = fold_standardisation(*layers[0], *first.stats)
    return PolicyWeights(spec, tuple(layers), meta or {})


def to_torch(weights: PolicyWeights) -> nn.Sequential:
    """A torch network (float64) computing the same logits as :func:`~slurm_elastic.core.drl.forward`."""
    sizes = [weights.spec.input_size] + [w.shape[1] for w, _ in weights.layers]
    net = _mlp(sizes).double()
    linears = [m for m in net if isinstance(m, nn.Linear)]
    with torch.no_grad():
        for lin, (w, b) in zip(linears, weights.layers, strict=True):
            lin.weight.copy_(torch.from_numpy(np.ascontiguousarray(w.T)))
            lin.bias.copy_(torch.from_numpy(b))
    return net


# -- simulator episodes --------------------------------------------------------------------------


@dataclass
class _Round:
    now: float
    steps: list[tuple[Step, int]]
    progress: dict[JobId, float]
    active: int


class _LoopPlanner:
    """A planner running the ``drl`` decision loop with a given chooser and recording every round.

    Training only (not a policy): its record of rounds lives in an attribute, which a real
    planner must not have.
    """

    interval = 0.0
    epoch_events = False
    uses_progress = True

    def __init__(self, name: str, spec: FeatureSpec, make_chooser: Callable[[ClusterSnapshot], Chooser],
                 totals: dict[str, float]) -> None:
        self.name = name
        self.spec = spec
        self.make_chooser = make_chooser
        self.totals = totals
        self.rounds: list[_Round] = []

    def plan(self, snapshot: ClusterSnapshot, memo: Any, rng: np.random.Generator) -> PlanResult:
        alloc = allocate(snapshot, self.spec, self.make_chooser(snapshot), record=True, policy=self.name)
        progress = {j.job_id: min(1.0, j.samples_processed / (j.epoch_size * self.totals[j.job_id]))
                    for j in snapshot.elastic_jobs()}
        self.rounds.append(_Round(snapshot.now, list(alloc.steps), progress, len(snapshot.elastic_jobs())))

        def choose(job: Job, k: int) -> Sizing | None:
            return fixed_batch_sizing(job, k, snapshot)

        return PlanResult(build_plan(snapshot, self.name, alloc.counts, reasons=alloc.reasons, choose=choose), memo)


def _always(chooser: Chooser) -> Callable[[ClusterSnapshot], Chooser]:
    return lambda _snapshot: chooser


def _follow(counts: dict[JobId, int]) -> Chooser:
    """A chooser reaching ``counts`` job by job in slot order, then stopping."""

    def choose(step: Step) -> int:
        for i, job in enumerate(step.slot_jobs):
            if job is not None and step.mask[i] and step.allocated[i] < counts.get(job.job_id, 0):
                return i
        return len(step.mask) - 1 if step.mask[-1] else int(np.flatnonzero(step.mask)[0])

    return choose


def _drf(step: Step) -> int:
    """Max-min fair GPU shares: add to the allowed job holding the fewest GPUs (earliest on ties)."""
    allowed = np.flatnonzero(step.mask[:-1])
    if not len(allowed):
        return len(step.mask) - 1
    alloc = np.asarray(step.allocated)
    return int(allowed[np.argmin(alloc[allowed])])


class _TeacherPlanner(_LoopPlanner):
    """The loop driven by a policy's GPU counts (its memo kept here, training only)."""

    def __init__(self, teacher: Planner, spec: FeatureSpec, totals: dict[str, float]) -> None:
        super().__init__(f"teacher-{teacher.name}", spec, _always(_drf), totals)
        self.teacher = teacher
        self.teacher_memo: Any = None
        self.interval = teacher.interval  # the teacher's periodic re-plans, not its epoch events

    def plan(self, snapshot: ClusterSnapshot, memo: Any, rng: np.random.Generator) -> PlanResult:
        res = self.teacher.plan(snapshot, self.teacher_memo, rng)
        self.teacher_memo = res.memo
        counts = {p.job_id: p.num_gpus for p in res.plan.jobs}
        self.make_chooser = _always(_follow(counts))
        return super().plan(snapshot, memo, rng)


def _exploring(weights: PolicyWeights, rng: np.random.Generator, epsilon: float) -> Chooser:
    """Sample from the policy; in a poor state, with probability ``epsilon``, take DL2's specified action."""

    def choose(step: Step) -> int:
        p = masked_probabilities(forward(weights, step.state), step.mask)
        if epsilon > 0:
            waiting = [i for i, j in enumerate(step.slot_jobs)
                       if j is not None and step.mask[i] and step.allocated[i] == 0 and j.state is not JobState.RUNNING]
            over = any(j is not None and step.allocated[i] > j.requested_gpus for i, j in enumerate(step.slot_jobs))
            if waiting and over and rng.random() < epsilon:
                return waiting[0]
        return int(rng.choice(len(p), p=p))

    return choose


def _workload(cfg: TrainConfig, seed: int) -> list[SimJobSpec]:
    jobs = builtin(cfg.workload, seed, cfg.gpus)
    return jobs[: cfg.jobs] if cfg.jobs else jobs


def _totals(jobs: Sequence[SimJobSpec]) -> dict[str, float]:
    """Epochs each job needs at its fixed batch (the reward's normalisation, DL2's ``E_i``)."""
    return {j.job_id: j.epochs_needed(j.base_batch) for j in jobs}


def _run(cfg: TrainConfig, planner: Any, jobs: Sequence[SimJobSpec], seed: int) -> dict[str, Any]:
    return simulate(jobs, planner, gpus=cfg.gpus, gpus_per_node=cfg.gpus_per_node, seed=seed,
                    round_gap=cfg.round_gap, workload=cfg.workload)


def _returns(cfg: TrainConfig, rounds: Sequence[_Round], end: float) -> list[float]:
    """Discounted return of each round (DL2's per-slot reward, discounted by elapsed time)."""
    n = len(rounds)
    rewards = []
    for t in range(n):
        nxt = rounds[t + 1] if t + 1 < n else None
        dt = (nxt.now if nxt else end) - rounds[t].now
        if cfg.reward == "jct":
            rewards.append(-rounds[t].active * dt / cfg.slot_seconds)
        else:
            after = nxt.progress if nxt else {}
            rewards.append(sum(after.get(j, 1.0) - p for j, p in rounds[t].progress.items()))
    out = [0.0] * n
    g = 0.0
    for t in reversed(range(n)):
        dt = (rounds[t + 1].now if t + 1 < n else end) - rounds[t].now
        g = rewards[t] + (cfg.gamma ** (max(0.0, dt) / cfg.slot_seconds)) * g if t + 1 < n else rewards[t]
        out[t] = g
    return out


def _end(res: dict[str, Any], rounds: Sequence[_Round]) -> float:
    """When the episode's last job ended (the end of its last time slot)."""
    last = rounds[-1].now if rounds else 0.0
    return max((j["end"] for j in res["jobs"] if j["end"] is not None), default=last)


def _avg_jct(res: dict[str, Any]) -> float:
    jcts = [j["jct"] for j in res["jobs"]]
    if any(x is None for x in jcts):
        return math.inf
    return float(statistics.fmean(jcts))


def validation_avg_jct(cfg: TrainConfig, weights: PolicyWeights,
                       done: Callable[[int], None] | None = None) -> float:
    """The mean over ``cfg.eval_seeds`` of the greedy policy's avg JCT (``inf`` if a job never ends).

    This is the figure a training run keeps its best policy by and records in the model file's
    ``meta`` (``validation_avg_jct``), so a model's provenance can be checked by running it again.
    ``done(seed)`` is called after each validation workload.
    """
    jcts = []
    for s in cfg.eval_seeds:
        jcts.append(_avg_jct(_run(cfg, DrlPlanner(weights), _workload(cfg, s), s)))
        if done is not None:
            done(s)
    return statistics.fmean(jcts) if jcts else math.inf


# -- training ------------------------------------------------------------------------------------


def _samples(rounds: Sequence[_Round]) -> tuple[FloatArr, NDArray[np.bool_], NDArray[np.int64]]:
    steps = [s for r in rounds for s in r.steps]
    if not steps:
        return np.zeros((0, 0)), np.zeros((0, 0), dtype=bool), np.zeros(0, dtype=np.int64)
    return (np.stack([s.state for s, _ in steps]), np.stack([s.mask for s, _ in steps]),
            np.array([a for _, a in steps], dtype=np.int64))


def _masked_logits(net: nn.Sequential, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    logits: torch.Tensor = net(x)
    return logits.masked_fill(~mask, -1e9)


def train(cfg: TrainConfig, progress: Progress | None = None) -> TrainResult:
    """Train a ``drl`` policy (see the module docstring); deterministic for a given config.

    Raises:
        ConfigError: the teacher produced no decision to learn from, or a bad config.
    """
    torch.set_num_threads(1)
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    spec = cfg.spec
    total_units = cfg.warmup_traces + (cfg.warmup_epochs if cfg.warmup_traces else 0) + cfg.episodes
    n_evals = 1 + sum(1 for e in range(1, cfg.episodes + 1)
                      if e == cfg.episodes or (cfg.eval_every and e % cfg.eval_every == 0))
    total_units += n_evals * len(cfg.eval_seeds)
    done = 0

    def tick(text: str) -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total_units, text)

    policy = _mlp([spec.input_size, *cfg.hidden, spec.actions]).double()
    value = _mlp([spec.input_size, *cfg.hidden, 1]).double()
    summary: dict[str, Any] = {"config": _config_json(cfg), "warmup_loss": [], "warmup_accuracy": [],
                               "episodes": [], "validation": []}

    # 1. supervised warm-up from the teacher's decisions
    if cfg.warmup_traces:
        traces: list[_Round] = []
        trace_returns: list[float] = []
        for t in range(cfg.warmup_traces):
            wseed = int(rng.integers(10_000, 2**31 - 1))
            jobs = _workload(cfg, wseed)
            totals = _totals(jobs)
            if cfg.teacher == "drf":
                teacher: _LoopPlanner = _LoopPlanner("teacher-drf", spec, _always(_drf), totals)
            else:
                teacher = _TeacherPlanner(policies.create(cfg.teacher, **cfg.teacher_kwargs), spec, totals)
            res = _run(cfg, teacher, jobs, wseed)
            traces += teacher.rounds
            for r, g in zip(teacher.rounds, _returns(cfg, teacher.rounds, _end(res, teacher.rounds)), strict=True):
                trace_returns += [g] * len(r.steps)
            tick(f"warm-up trace {t + 1}/{cfg.warmup_traces} ({cfg.teacher}, workload seed {wseed})")
        xs, ms, acts = _samples(traces)
        if not len(acts):
            raise ConfigError(f"train-drl: teacher {cfg.teacher} made no decision to learn from")
        summary["warmup_baselines"] = {"majority": majority_accuracy(acts), "ceiling": feature_ceiling(xs, acts)}
        if cfg.standardise:
            mean, std = input_moments(xs)
            policy = nn.Sequential(_Standardise(mean, std), *policy)
            value = nn.Sequential(_Standardise(mean, std), *value)
        x, m, a = torch.from_numpy(xs), torch.from_numpy(ms), torch.from_numpy(acts)
        ret = torch.tensor(trace_returns, dtype=torch.float64)
        opt = torch.optim.Adam(policy.parameters(), lr=cfg.lr_warmup)
        opt_critic = torch.optim.Adam(value.parameters(), lr=cfg.lr_value)
        # The rate decays linearly to a tenth over the epochs (a fixed 0.005 oscillates here).
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda e: 1.0 - 0.9 * e / max(1, cfg.warmup_epochs - 1))
        gen = torch.Generator().manual_seed(cfg.seed)
        for epoch in range(cfg.warmup_epochs):
            perm = torch.randperm(len(a), generator=gen)
            losses = []
            for i in range(0, len(a), cfg.batch_size):
                idx = perm[i:i + cfg.batch_size]
                loss = nn.functional.cross_entropy(_masked_logits(policy, x[idx], m[idx]), a[idx])
                opt.zero_grad()
                loss.backward()  # type: ignore[no-untyped-call]
                opt.step()
                # The critic is warmed up on the teacher's returns too, so that the first
                # actor-critic updates compare actions with a value that already means something.
                v_loss = nn.functional.mse_loss(value(x[idx]).squeeze(1), ret[idx])
                opt_critic.zero_grad()
                v_loss.backward()  # type: ignore[no-untyped-call]
                opt_critic.step()
                losses.append(float(loss.detach()) * len(idx))
            sched.step()
            with torch.no_grad():
                acc = float((_masked_logits(policy, x, m).argmax(dim=1) == a).double().mean())
            summary["warmup_loss"].append(sum(losses) / len(a))
            summary["warmup_accuracy"].append(acc)
            tick(f"warm-up epoch {epoch + 1}/{cfg.warmup_epochs}: loss {summary['warmup_loss'][-1]:.4f}, "
                 f"accuracy {acc:.3f}")
        summary["warmup_samples"] = len(a)

    def evaluate(label: str) -> float:
        avg = validation_avg_jct(cfg, to_weights(policy, spec),
                                 lambda s: tick(f"validation ({label}) on workload seed {s}"))
        summary["validation"].append({"after": label, "avg_jct": avg if math.isfinite(avg) else None})
        return avg

    best = (evaluate("warm-up"), "warm-up", to_weights(policy, spec))

    # 2. online actor-critic with job-aware exploration, entropy regularisation and experience replay
    opt_p = torch.optim.Adam(policy.parameters(), lr=cfg.lr_policy)
    opt_v = torch.optim.Adam(value.parameters(), lr=cfg.lr_value)
    buf_x = np.zeros((cfg.replay, spec.input_size))
    buf_m = np.zeros((cfg.replay, spec.actions), dtype=bool)
    buf_a = np.zeros(cfg.replay, dtype=np.int64)
    buf_g = np.zeros(cfg.replay)
    filled = 0
    head = 0
    for ep in range(cfg.episodes):
        wseed = int(rng.integers(10_000, 2**31 - 1))
        jobs = _workload(cfg, wseed)
        w = to_weights(policy, spec)
        explorer = _LoopPlanner("drl-explore", spec, _always(_exploring(w, rng, cfg.epsilon)), _totals(jobs))
        res = _run(cfg, explorer, jobs, wseed)
        returns = _returns(cfg, explorer.rounds, _end(res, explorer.rounds))
        for r, g in zip(explorer.rounds, returns, strict=True):
            for step, action in r.steps:
                buf_x[head], buf_m[head], buf_a[head], buf_g[head] = step.state, step.mask, action, g
                head = (head + 1) % cfg.replay
                filled = min(filled + 1, cfg.replay)
        p_losses, v_losses, entropies = [], [], []
        for _ in range(cfg.updates if filled else 0):
            pick = rng.integers(0, filled, size=min(cfg.batch_size, filled))
            bx = torch.from_numpy(buf_x[pick])
            bm = torch.from_numpy(buf_m[pick])
            ba = torch.from_numpy(buf_a[pick])
            bg = torch.from_numpy(buf_g[pick])
            v = value(bx).squeeze(1)
            v_loss = nn.functional.mse_loss(v, bg)
            opt_v.zero_grad()
            v_loss.backward()  # type: ignore[no-untyped-call]
            opt_v.step()
            adv = bg - v.detach()
            adv = (adv - adv.mean()) / (adv.std() + 1e-8) if len(adv) > 1 else adv
            logp = torch.log_softmax(_masked_logits(policy, bx, bm), dim=1)
            probs = logp.exp()
            ent = -(torch.where(bm, probs * logp, torch.zeros_like(logp))).sum(dim=1)
            p_loss = -(logp.gather(1, ba[:, None]).squeeze(1) * adv).mean() - cfg.entropy * ent.mean()
            opt_p.zero_grad()
            p_loss.backward()
            opt_p.step()
            p_losses.append(float(p_loss.detach()))
            v_losses.append(float(v_loss.detach()))
            entropies.append(float(ent.mean().detach()))
        summary["episodes"].append({
            "workload_seed": wseed, "avg_jct": _avg_jct(res) if math.isfinite(_avg_jct(res)) else None,
            "return": returns[0] if returns else 0.0,
            "decisions": sum(len(r.steps) for r in explorer.rounds),
            "policy_loss": statistics.fmean(p_losses) if p_losses else None,
            "value_loss": statistics.fmean(v_losses) if v_losses else None,
            "entropy": statistics.fmean(entropies) if entropies else None,
        })
        tick(f"episode {ep + 1}/{cfg.episodes}: avg JCT {_avg_jct(res):,.0f} s while exploring")  # inf: unfinished
        last = ep + 1 == cfg.episodes
        if (cfg.eval_every and (ep + 1) % cfg.eval_every == 0) or last:
            score = evaluate(f"episode {ep + 1}")
            if score < best[0]:
                best = (score, f"episode {ep + 1}", to_weights(policy, spec))
    summary["kept"] = best[1]
    summary["kept_validation_avg_jct"] = best[0] if math.isfinite(best[0]) else None
    meta = {"trained_by": "slurm-elastic train-drl", "config": json.dumps(_config_json(cfg), sort_keys=True),
            "kept": best[1], "validation_avg_jct": f"{best[0]:.1f}", "slot_features": ",".join(SLOT_FEATURES)}
    return TrainResult(PolicyWeights(spec, best[2].layers, meta), summary)


def _config_json(cfg: TrainConfig) -> dict[str, Any]:
    out = asdict(cfg)
    out["hidden"] = list(cfg.hidden)
    out["eval_seeds"] = list(cfg.eval_seeds)
    out["models"] = list(cfg.models)
    return out
