"""The benchmarks that drive a real Slurm dev cluster (:mod:`slurm_elastic.dev`).

Each submits, kills or requeues real jobs, so one runs at a time on a machine:

* :mod:`~slurm_elastic.bench.live.reaction`: ``bench reaction`` (submit -> planned -> running, on a
  cluster already up);
* :mod:`~slurm_elastic.bench.live.load`: ``bench load`` (many elastic jobs through the acting daemon);
* :mod:`~slurm_elastic.bench.live.chaos`: ``bench chaos`` (the daemon killed at each journaled step,
  and the two faults);
* :mod:`~slurm_elastic.bench.live.fidelity`: ``bench fidelity`` (the simulator against the dev
  cluster, on one small trace of launcher jobs).
"""
