"""IBM's workloads (MASCOTS'20): the four job categories of Table I, mixed or one per benchmark.

This module owns :func:`ibm_categories` (high, low, bursty and our overload arrivals) and
:func:`ibm_category` (Fig. 5's single-category benchmarks). Randomness comes only from the seed
passed in.
"""

from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np

from slurm_elastic.errors import TraceError
from slurm_elastic.sim.workload import SimJobSpec, requested_time, single_gpu_time
from slurm_elastic_predictor.profiles import MODEL_DEFAULTS

# IBM Table I, mapped onto the shipped profiles by scaling behaviour (documented in ibm_categories).
_IBM_CATEGORIES: tuple[tuple[str, str, int, int, float, bool, int | None], ...] = (
    # name, profile, min batch, max batch, single-GPU minutes, elastic, per-GPU batch limit
    ("1-compute-bound", "imagenet", 32, 256, 16.0, True, 32),  # Table II: up to 32 per GPU
    ("2-communication-bound", "ncf", 16, 256, 21.0, True, None),
    ("3-balanced", "cifar10", 16, 1024, 41.0, True, None),
    ("4-not-elastic", "cifar10", 128, 128, 27.0, False, None),
)
IBM_KMAX = 10
IBM_OVERLOAD = 1.5


def _ibm_job(job_id: str, t: float, category: tuple[str, str, int, int, float, bool, int | None],
             batch: int) -> SimJobSpec:
    """A job of one IBM category at Random-BS batch ``batch``, its length scaled to the category's."""
    name, profile, bmin, bmax, minutes_1gpu, elastic, limit = category
    spec = SimJobSpec(
        job_id=job_id, submit_time=round(t, 3), model=profile, requested_gpus=1, min_gpus=1,
        max_gpus=IBM_KMAX if elastic else 1, base_batch=batch, min_batch=bmin, max_batch=bmax,
        epoch_size=MODEL_DEFAULTS[profile][1], category=name, max_local_batch=limit,
    )
    return replace(spec, work_scale=60.0 * minutes_1gpu / single_gpu_time(spec))


@functools.cache
def ibm_mean_request_s() -> float:
    """The expected GPU-seconds of an IBM job at its request (one GPU at its Random-BS batch), over
    the categories (uniform) and each category's batches (uniform): the work one arrival brings."""
    per_category = []
    for category in _IBM_CATEGORIES:
        bmin, bmax = category[2], category[3]
        per_category.append(float(np.mean([requested_time(_ibm_job("0", 0.0, category, b))
                                           for b in range(bmin, bmax + 1)])))
    return float(np.mean(per_category))


def ibm_categories(seed: int, gpus: int = 40, arrival: str = "high", minutes: float = 240.0,
                   load: float = IBM_OVERLOAD) -> list[SimJobSpec]:
    """The IBM evaluation workload (MASCOTS'20 §IV-A, Table I).

    Jobs are drawn uniformly from the four categories. Their single-GPU lengths at the largest
    batch that fits are 16, 21, 41 and 27 minutes. The models of Table I (ResNet-50, AlexNet,
    VGG11-BN on CIFAR-100, AlexNet on Food-101) are not in the shipped profiles, so each category
    uses the profile with the same scaling behaviour: compute-bound -> imagenet (ResNet-50),
    communication-bound -> ncf, balanced -> cifar10 (ResNet-18, 11M weights like VGG11's 10M),
    not elastic -> cifar10 at a fixed batch of 128 on one GPU. Batch ranges are Table I's; the
    compute-bound category's per-GPU limit is 32 (Table II's largest per-GPU batch), the others
    keep their profile's measured limit.
    The Random-BS baseline batch (``base_batch``) is uniform in each job's range.

    Arrivals are Poisson. The base rate ``lambda`` is the completion rate of a uniformly drawn job
    on one GPU, ``1 / mean(lengths)``. ``high`` uses ``k_max * lambda`` (``k_max = 10``) per 40
    GPUs, scaled with the cluster size; ``low`` uses ``lambda`` (the paper's formula is garbled in
    our copy; ``lambda`` is our reading, documented as a choice); ``bursty`` alternates high and
    low every 60 minutes.

    Those rates offer little work: ``high`` brings ``k_max`` single-GPU jobs' worth per job length,
    about a quarter of 40 GPUs at the Random-BS batches, so nothing queues for long and admission
    never has to refuse. ``overload`` is our addition, where admission matters: Poisson at
    ``rate = load * gpus / E[w]``, with ``E[w]`` the expected GPU-seconds a job brings at its
    request (:func:`ibm_mean_request_s`: one GPU at its Random-BS batch), so the jobs bring
    ``load`` times the cluster's GPU-time (:data:`IBM_OVERLOAD`, 1.5, by default). Elastic jobs at a
    better batch need less, so the optimizer sees less than ``load``; the fixed-batch baseline sees
    it all.
    """
    if arrival not in ("high", "low", "bursty", "overload"):
        raise TraceError(f"ibm-categories arrival {arrival!r}: must be high, low, bursty or overload")
    if not 0 < load <= 100:
        raise TraceError(f"ibm-categories load {load!r}: must be above 0 and at most 100")
    rng = np.random.default_rng(seed)
    lam = 1.0 / (60.0 * float(np.mean([c[4] for c in _IBM_CATEGORIES])))
    scale = gpus / 40.0
    high, low = IBM_KMAX * lam * scale, lam * scale
    if arrival == "overload":
        high = low = load * gpus / ibm_mean_request_s()
    jobs: list[SimJobSpec] = []
    t = 0.0
    i = 0
    while True:
        bursting = arrival == "bursty" and int(t // 3600) % 2 == 0
        rate = high if arrival in ("high", "overload") or bursting else low
        t += float(rng.exponential(1.0 / rate))
        if t > minutes * 60:
            break
        category = _IBM_CATEGORIES[int(rng.integers(len(_IBM_CATEGORIES)))]
        i += 1
        jobs.append(_ibm_job(str(i), t, category, int(rng.integers(category[2], category[3] + 1))))
    return jobs


IBM_CATEGORY_MINUTES = 30.0


def largest_batch_time(spec: SimJobSpec) -> float:
    """Seconds the job takes alone on one GPU at the largest batch that fits it (no accumulation)."""
    b = min(spec.max_batch, spec.local_limit)
    return spec.epoch_size * spec.epochs_needed(b) / spec.model_truth.speed.throughput(b, b, (1,))


def ibm_category(seed: int, category: int, gpus: int = 40, minutes: float = 240.0,
                 load: float | None = None) -> list[SimJobSpec]:
    """One category of the IBM benchmarks of Fig. 5 (MASCOTS'20 §IV-A and §IV-E).

    "Each benchmark only runs jobs of a single job category; all jobs have the same length
    (execution time) irrespective of the category; it is set such that each job takes about half
    an hour to execute on a single GPU with the maximum feasible batch size." So every job of
    category ``category`` (1-4, Table I, mapped onto the shipped profiles as in
    :func:`ibm_categories`) takes :data:`IBM_CATEGORY_MINUTES` alone on one GPU at the largest
    batch that fits one GPU (:func:`largest_batch_time`), and its Random-BS batch is uniform in
    its category's range. Arrivals are the paper's high rate: Poisson at ``k_max * lambda`` per
    40 GPUs (scaled with the cluster), where ``lambda`` is the completion rate of one job on one
    GPU at the largest batch, here ``1 / 30 min``: 80 jobs expected in 240 minutes on 40 GPUs.

    That rate offers about a fifth of the cluster (as :func:`ibm_categories`' ``high``), so the
    fixed-batch baseline seldom has to drop a job. ``load`` (our addition, as ``overload`` there):
    Poisson at ``load * gpus / E[w]`` instead, ``E[w]`` the category's expected GPU-seconds at a
    job's request (one GPU, its Random-BS batch, gradient accumulation where it does not fit).
    """
    if not 1 <= category <= len(_IBM_CATEGORIES):
        raise TraceError(f"ibm-category {category!r}: must be 1 to {len(_IBM_CATEGORIES)}")
    if load is not None and not 0 < load <= 100:
        raise TraceError(f"ibm-category load {load!r}: must be above 0 and at most 100")
    kind = _IBM_CATEGORIES[category - 1]
    rng = np.random.default_rng(seed)
    if load is None:
        rate = IBM_KMAX / (60.0 * IBM_CATEGORY_MINUTES) * gpus / 40.0
    else:
        rate = load * gpus / _ibm_category_request_s(category)
    jobs: list[SimJobSpec] = []
    t = float(rng.exponential(1.0 / rate))
    while t <= minutes * 60:
        jobs.append(_ibm_category_job(kind, int(rng.integers(kind[2], kind[3] + 1)), str(len(jobs) + 1), t))
        t += float(rng.exponential(1.0 / rate))
    return jobs


@functools.cache
def _ibm_category_request_s(category: int) -> float:
    """The expected GPU-seconds of a job of :func:`ibm_category` at its request, over its batch range."""
    kind = _IBM_CATEGORIES[category - 1]
    return float(np.mean([requested_time(_ibm_category_job(kind, b)) for b in range(kind[2], kind[3] + 1)]))


def _ibm_category_job(kind: tuple[str, str, int, int, float, bool, int | None], batch: int, job_id: str = "0",
                      t: float = 0.0) -> SimJobSpec:
    """A job of one category at Random-BS batch ``batch``, :data:`IBM_CATEGORY_MINUTES` long alone on one GPU at
    the largest batch that fits it."""
    spec = _ibm_job(job_id, t, kind, batch)
    return replace(spec, work_scale=spec.work_scale * 60.0 * IBM_CATEGORY_MINUTES / largest_batch_time(spec))


IBM_CATEGORY_WORKLOADS = tuple(f"ibm-category-{i}{tail}" for tail in ("", "-overload")
                               for i in range(1, len(_IBM_CATEGORIES) + 1))
