"""What the simulated cluster's changes and sharing cost a job, beyond its profiled speed.

This module owns :class:`ResizeCost` (the pause of each kind of change), the start-up and ending
overhead a job pays at each start (:data:`Overhead`, :func:`overhead_for`) and the share of the
host's CPU cores a worker asks (:data:`COMM_CPU_SHARE`, :func:`cpu_ask`).
:class:`~slurm_elastic.sim.cluster.VirtualCluster` applies them; the profiled speed itself is
:mod:`slurm_elastic.sim.truth`'s.

Resize costs (a job makes no progress while paused):

* ``in-place`` (default): the launcher's measured pause on our machines
  (../shared/PYTHON-STACK-FACTS.md): grow 2.7 s, shrink/move/re-batch 0.9 s; a preempted job
  that resumes restarts from a checkpoint (30 s);
* ``checkpoint``: every change is a checkpoint-restart, 30 s (Pollux's figure);
* a number: that many seconds for every change.

Three physics of a real cluster that the profiles leave out, off unless asked for
(``bench fidelity`` measured them on the dev cluster):

* ``overhead_s``: seconds a job holds its GPUs without training beyond its work: its start-up
  (Slurm launching the tasks, the interpreter and the framework loading, the data built) and its
  ending (the processes exiting, Slurm ending the job), paid as a pause at every start (the same
  JCT and GPU time as paying the ending at the end); one figure for every job, or one per node
  count the job starts on (a site's, measured from its accounting: ``what-if``), where a node count
  not measured pays the nearest measured one's (:func:`overhead_for`);
* ``equal_start``: Slurm gives a job the same GPU count on every node, so the actuator starts a job
  planned on an unequal placement at the largest equal shape inside it (its nodes x their smallest
  count, :mod:`slurm_elastic.slurm.actuator`); a later round grows it;
* ``host_cores``: the jobs' workers share this many CPU cores ``C`` (the dev cluster, where a "GPU"
  is a CPU process). A worker computes for the part ``c = min(1, step(1) / step(shape))`` of its
  step that its job's step on one GPU takes (from the profile) and spends the rest in the
  all-reduce, on the CPU too for :data:`COMM_CPU_SHARE` of it (gloo's copies and sockets) and
  waiting for the rest: it asks ``d = c + COMM_CPU_SHARE * (1 - c)`` of a core. The cores are
  shared in proportion to what is asked: with ``D`` asked in all (``k * d`` per job), each worker
  gets ``s = min(1, C / D)`` of what it asks, against ``s0 = min(1, C / (k * d))`` when its job
  ran alone (as profiled). Its busy part stretches by ``s0 / s``, so the job runs at
  ``1 / (d * s0 / s + 1 - d)`` of its profiled speed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from slurm_elastic.errors import ConfigError
from slurm_elastic.sim.job import SimJob

CHECKPOINT_RESTART_S = 30.0
IN_PLACE_GROW_S = 2.7
IN_PLACE_SHRINK_S = 0.9

COMM_CPU_SHARE = 0.75
"""The part of a worker's all-reduce (its step beyond its one-GPU step) spent on a CPU core, with
``host_cores``. Fitted with ``bench fidelity --replay`` on two recorded dev-cluster runs (seeds 0
and 1: 0 gave fidelity ratios 0.62 and 0.82, 1 gave 1.10 and 1.20, 0.75 gave 0.96 and 1.08),
then checked on a third run (docs/throughput-model.md)."""


Overhead = float | Mapping[int, float]
"""Seconds of start-up and ending a job pays at each start: one figure, or one per node count."""


def overhead_for(overhead: Overhead, nodes: int) -> float:
    """What a job starting on ``nodes`` nodes pays: the figure, or its node count's, else the nearest
    node count's given (the smaller on a tie); 0 for an empty mapping."""
    if not isinstance(overhead, Mapping):
        return overhead
    if not overhead:
        return 0.0
    return overhead[min(overhead, key=lambda n: (abs(n - nodes), n))]


def cpu_ask(job: SimJob) -> float:
    """The part of a core each worker of a running job asks (the module docstring): the part of its step
    it computes (its step on one GPU over its step on its placement), and :data:`COMM_CPU_SHARE`
    of the rest."""
    speed = job.spec.model_truth.speed
    shape = tuple(len(g) for _, g in job.placement.slots)
    one = speed.step_time(job.run_local, (1,), job.run_steps)
    computing = min(1.0, one / speed.step_time(job.run_local, shape, job.run_steps))
    return computing + COMM_CPU_SHARE * (1.0 - computing)


@dataclass(frozen=True, slots=True)
class ResizeCost:
    """Seconds of pause per kind of change."""

    grow: float
    shrink: float
    restart: float
    label: str

    @classmethod
    def parse(cls, text: str | ResizeCost) -> ResizeCost:
        """``in-place``, ``checkpoint`` or a number of seconds (a :class:`ResizeCost` as it is)."""
        if isinstance(text, ResizeCost):
            return text
        if text == "in-place":
            return cls(IN_PLACE_GROW_S, IN_PLACE_SHRINK_S, CHECKPOINT_RESTART_S, text)
        if text == "checkpoint":
            return cls(CHECKPOINT_RESTART_S, CHECKPOINT_RESTART_S, CHECKPOINT_RESTART_S, text)
        try:
            value = float(text)
        except ValueError:
            raise ConfigError(f"resize cost {text!r}: must be in-place, checkpoint or seconds >= 0") from None
        if not math.isfinite(value) or value < 0:
            raise ConfigError(f"resize cost {text!r}: must be in-place, checkpoint or seconds >= 0")
        return cls(value, value, value, f"{value:g}s")
