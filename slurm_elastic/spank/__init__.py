"""The ``--elastic`` SPANK plugin: its C source (``slurm_elastic.c``) and how it is built/installed.

Owns the plugin source and :mod:`slurm_elastic.spank.build`. Must not talk to a running Slurm.
"""
