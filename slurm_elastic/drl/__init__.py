"""DL2's learned scheduler (``drl``) outside the pure core: model files, training, the command.

This package owns what the pure :mod:`slurm_elastic.core.drl` must not do: reading and writing
model files and the file-loading factory of the ``drl`` policy (:mod:`~slurm_elastic.drl.weights`,
numpy only; listed by :mod:`slurm_elastic.policies`), training a policy in the simulator with
torch (:mod:`~slurm_elastic.drl.train`) and the ``slurm-elastic train-drl`` command
(:mod:`~slurm_elastic.drl.command`). Only ``train`` (and ``command``, lazily) imports torch, so the
daemon plans with a trained model without torch and without a GPU. The shipped model is
``data/longhorn.npz`` (see ``docs/drl.md`` for the command that made it).
"""
