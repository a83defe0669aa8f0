"""The experiments: policies compared on workloads in the simulator, and the seed papers' tables.

:mod:`.comparison` runs policies x seeds (``simulate``, ``what-if``); :mod:`.papers` makes the seed
papers' tables from such runs (``reproduce``). This package sits above the simulator
(:mod:`slurm_elastic.sim`), the built-in workloads (:mod:`slurm_elastic.workloads`) and DL2's
trained models (:mod:`slurm_elastic.drl`); none of them imports it.
"""
