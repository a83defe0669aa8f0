"""``python -m slurm_elastic.cli``: the ``slurm-elastic`` command."""

import sys

from slurm_elastic.cli import main

sys.exit(main())
