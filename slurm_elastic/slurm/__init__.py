"""Adapters: the only code that talks to Slurm (squeue/sinfo/sacct/scontrol, pyslurm)."""
