"""The benchmarks behind ``slurm-elastic bench``: figures as JSON, never asserted in tests.

One module per bench. The modules here are pure: they run the core, the simulator, the predictor or
the observer in this process on synthetic inputs, with no Slurm and no dev cluster:

* :mod:`~slurm_elastic.bench.planning`: ``bench planner`` (latency, ``--scaling``);
* :mod:`~slurm_elastic.bench.simulating`: ``bench simulate`` (the simulator on a long trace);
* :mod:`~slurm_elastic.bench.learning`: ``bench learn`` (a job's calibrated throughput model);
* :mod:`~slurm_elastic.bench.observing`: ``bench observe`` (a large site's observation rounds).

The benches that drive a real dev cluster (they change its queue and need it to themselves) live
apart, in :mod:`slurm_elastic.bench.live`. ``bench fuzz`` is :mod:`slurm_elastic.fuzz`, and
``bench step`` / ``bench resize`` are the launcher's own.
"""
