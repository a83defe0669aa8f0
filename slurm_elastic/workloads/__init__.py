"""The seed papers' workloads: the jobs of each paper's experiments, drawn from a seed.

One module per paper (:mod:`.ones`, :mod:`.ibm`, :mod:`.philly` with Ares's setup, :mod:`.dl2`), the
names ``simulate --workload`` takes (:mod:`.catalog`), and the cluster that runs a workload at a load
(:mod:`.load`). Each generator returns the simulator's jobs (:class:`~slurm_elastic.sim.workload.SimJobSpec`)
and takes its randomness only from the seed passed in. This package sits above the simulator (it
reads its physics) and below DL2's training and the experiments that run these workloads; it runs
no simulation itself.
"""
