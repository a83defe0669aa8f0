"""Runnable examples of the launcher: ``train_cnn.py`` (``python -m slurm_elastic_launcher.examples.train_cnn``)."""
