"""The ``--elastic`` SPANK plugin: its C source (``slurm_elastic.c``) and how it is built/installed.

Owns the plugin source and :mod:`slurm_elastic.spank.build`: compiling it, refusing a plugin path
that anyone but root could change (slurmstepd loads it as root on every node), and ``--write``'s
atomic, link-refusing writes that never overwrite a site's ``job_submit.lua``. Must not talk to a
running Slurm.
"""
