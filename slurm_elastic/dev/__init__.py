"""Development tooling: the local multi-node Slurm cluster the real-Slurm tests, the live benches and the
demo run on (:mod:`.devcluster`), and the demo itself (:mod:`.demo`, ``slurm-elastic demo``)."""
