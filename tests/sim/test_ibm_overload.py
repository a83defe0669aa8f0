"""Issue 16, part 1: the IBM workload at an arrival rate where admission matters. The paper's
``high`` rate offers about a quarter of 40 GPUs; ``ibm-categories-overload`` arrives at
``load x GPUs / E[w]`` (``E[w]``: a job's expected GPU-seconds at its request), so drop and queue
modes are compared where the baseline cannot keep up."""

from __future__ import annotations

import numpy as np
import pytest

from slurm_elastic import policies
from slurm_elastic.errors import TraceError
from slurm_elastic.sim.engine import simulate
from slurm_elastic.sim.workload import requested_time
from slurm_elastic.workloads.catalog import builtin
from slurm_elastic.workloads.ibm import _IBM_CATEGORIES, IBM_OVERLOAD, ibm_categories, ibm_mean_request_s
from slurm_elastic.workloads.offered_load import offered_gpus


def test_the_overload_rate_brings_load_times_the_clusters_gpu_time() -> None:
    w = ibm_mean_request_s()
    per_category = [np.mean([requested_time(j) for j in ibm_categories(s, gpus=400, arrival="overload")
                             if j.category == c[0]]) for s in (1,) for c in _IBM_CATEGORIES]
    assert w == pytest.approx(float(np.mean(per_category)), rel=0.05)  # the sampled jobs agree with E[w]
    for load, gpus in ((1.5, 40), (0.6, 80)):
        gaps = np.diff([0.0, *(j.submit_time for j in ibm_categories(1, gpus=gpus, arrival="overload",
                                                                    minutes=2400, load=load))])
        assert float(np.mean(gaps)) == pytest.approx(w / (load * gpus), rel=0.08)  # Poisson at load x G / E[w]
    jobs = builtin("ibm-categories-overload", 2, 40)
    assert IBM_OVERLOAD == 1.5 and offered_gpus(jobs) / 40 > 1.2  # the baseline's demand passes the cluster
    assert offered_gpus(builtin("ibm-categories", 2, 40)) / 40 < 0.5  # the paper's high rate does not


def test_a_bad_load_is_refused_naming_it() -> None:
    with pytest.raises(TraceError, match=r"ibm-categories load 0: must be above 0 and at most 100"):
        ibm_categories(1, arrival="overload", load=0)
    with pytest.raises(TraceError, match="must be high, low, bursty or overload"):
        ibm_categories(1, arrival="flood")


def test_under_overload_admission_and_batch_choice_matter() -> None:
    """The comparison the paper makes, at a load where it means something: dp completes more jobs
    than the fixed-batch baseline when both drop, and finishes them much sooner when both queue."""
    jobs = ibm_categories(1, gpus=16, arrival="overload", minutes=120)
    out = {}
    for mode in ("drop", "queue"):
        for name in ("dp", "dp-fixed"):
            out[(name, mode)] = simulate(jobs, policies.create(name, mode=mode), gpus=16, gpus_per_node=4,
                                         seed=1)["metrics"]
    assert out[("dp", "drop")]["jobs_completed"] > 1.2 * out[("dp-fixed", "drop")]["jobs_completed"]
    assert out[("dp-fixed", "queue")]["avg_jct"] > 2 * out[("dp", "queue")]["avg_jct"]
