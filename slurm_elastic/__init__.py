"""slurm-elastic: elastic deep-learning scheduling for Slurm.

The controller side: the pure scheduling core (:mod:`slurm_elastic.core`), the Slurm adapters,
the simulator, the daemon and the command line. The in-job runtime lives in
``slurm_elastic_launcher`` and the throughput/progress predictors in ``slurm_elastic_predictor``.
"""

__version__ = "0.1.0"
