"""DL2's simulation setup (arXiv:1909.06040, §6.2) as far as its paper gives it.

This module owns :func:`dl2_simulation` and the constants of DL2's setup (its cluster, slot, job
count and Table 1 models). Randomness comes only from the seed passed in.
"""

from __future__ import annotations

import math

import numpy as np

from slurm_elastic.sim.workload import SimJobSpec, scaled_to
from slurm_elastic.workloads.philly import philly_sizes
from slurm_elastic_predictor import portable
from slurm_elastic_predictor.profiles import MODEL_DEFAULTS

DL2_JOBS = 200
"""DL2's simulations submit "200 jobs" (§6.2)."""
DL2_GPUS = 1000
"""DL2's simulated cluster: "500 servers", each with two GPUs as its testbed's servers have."""
DL2_SLOT_S = 1200.0
"""DL2's time slot, "20 minutes"."""
DL2_MEAN_S = 147 * 60.0
"""DL2's trace: "the average job duration is 147 minutes"."""
DL2_MEDIAN_S = 90 * 60.0
"""Our choice: "over a half of jobs run for more than an hour" (Fig. 8b, shown only as a curve)."""
DL2_MAX_S = 3 * 24 * 3600.0
"""Our cap on a duration: "some for days"."""
DL2_CONCURRENT = 40
"""DL2 §6.4: "the maximal number of uncompleted jobs in all time slots is around 40"."""
DL2_MAX_GPUS = 16
"""DL2's largest job: 16 workers, one GPU each here (all-reduce workers, no parameter servers)."""
DL2_MODELS = (("ResNet-50", "imagenet"), ("VGG-16", "imagenet"), ("ResNeXt-110", "cifar10"),
              ("Inception-BN", "imagenet"), ("Seq2Seq", "deepspeech2"), ("CTC", "bert"), ("DSSM", "ncf"),
              ("WLM", "deepspeech2"))
"""DL2's Table 1 models, each with the shipped profile of its kind: ImageNet classifiers train as
``imagenet``, the CIFAR-10 one as ``cifar10``, the recurrent sequence models (translation and
language modelling) as ``deepspeech2``, sentence classification as ``bert`` and the embedding model
(word representation) as ``ncf``. A job's duration is drawn first and its work scaled to it, so the
profile gives the shape of its scaling, not its length."""


def dl2_simulation(seed: int) -> list[SimJobSpec]:
    """DL2's simulation setup as far as its paper gives it (§6.2; docs/planners.md says what we chose):
    :data:`DL2_JOBS` jobs, each a uniformly drawn Table 1 model (:data:`DL2_MODELS`); durations
    log-normal with DL2's mean of 147 minutes (median :data:`DL2_MEDIAN_S`, capped at
    :data:`DL2_MAX_S`), each the job's time at its request; requests from Philly's GPU mix
    (:data:`~slurm_elastic.workloads.philly.PHILLY_GPUS`), elastic from 1 to :data:`DL2_MAX_GPUS` GPUs.
    Arrivals are Poisson: DL2's weekly pattern is shown only as a figure, so the rate is the one at
    which Little's law puts DL2's "around 40" uncompleted jobs in the system, each taking the mean duration:
    ``40 / (147 min / 20 min)`` = 5.4 jobs per 20-minute slot."""
    rng = np.random.default_rng(seed)
    req = philly_sizes(rng, DL2_JOBS)
    sigma = math.sqrt(2 * portable.log_float(DL2_MEAN_S / DL2_MEDIAN_S))
    dur = np.minimum(DL2_MAX_S, DL2_MEDIAN_S * portable.exp(sigma * rng.standard_normal(DL2_JOBS)))
    kind = rng.integers(0, len(DL2_MODELS), size=DL2_JOBS)
    per_slot = DL2_CONCURRENT / (DL2_MEAN_S / DL2_SLOT_S)
    submit = np.cumsum(rng.exponential(DL2_SLOT_S / per_slot, size=DL2_JOBS))
    jobs = []
    for i in range(DL2_JOBS):
        k = int(req[i])
        name, model = DL2_MODELS[int(kind[i])]
        local, epoch = MODEL_DEFAULTS[model]
        spec = SimJobSpec(str(i + 1), round(float(submit[i]), 3), model, k, 1, DL2_MAX_GPUS, local * k, local,
                          local * DL2_MAX_GPUS, epoch, category=name)
        jobs.append(scaled_to(spec, float(dur[i])))
    return jobs
