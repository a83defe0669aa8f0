"""In-job runtime of slurm-elastic: resizes a running training job in place.

It never imports the controller package ``slurm_elastic``; its contract with the controller is the
set of ``SLURM_ELASTIC_*`` environment variables and the authenticated order channel.
"""

__version__ = "0.1.0"
