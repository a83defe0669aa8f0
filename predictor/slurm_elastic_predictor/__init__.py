"""Throughput and progress predictors of slurm-elastic (pure numpy/scipy, used by both sides).

* :mod:`slurm_elastic_predictor.throughput` -- the IBM job-scalability model
  ``t_iter(b, k) = t_proc(ceil(b/k)) + t_comm(p, k)`` fitted from measured profiles.
* :mod:`slurm_elastic_predictor.progress` -- the ONES Beta progress model.
"""

__version__ = "0.1.0"
