"""Development tooling: the local multi-node Slurm cluster the demo and the real-Slurm tests run on."""
