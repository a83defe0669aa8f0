"""The ``slurm-elastic`` command: the only place that parses arguments or configures logging.

Subcommands:

* ``plan``      -- plan a demo cluster with a policy and print the plan (table or ``--json``).
* ``simulate``  -- replay a workload or trace under policies inside the site guards (``--config``,
  default guards, or ``--no-guards``); metrics as JSON, a report directory.
* ``reproduce`` -- the seed papers' comparisons as a markdown table (and a report); no site guards.
* ``profiles``  -- fit the throughput model on the shipped profiles and report its error.
* ``bench planner|simulate|fuzz`` -- planning latency / simulation speed / hostile-input fuzzing as JSON.
* ``devcluster up|down|status`` -- a real local Slurm dev cluster (root; see ``dev/devcluster.py``).
* ``install-plugin`` -- build the ``--elastic`` SPANK plugin and print/write its config lines.
* ``daemon``    -- the loop beside slurmctld (shadow mode, or acting through ``scontrol``).
* ``status``    -- elastic jobs: GPUs now and planned, batch, state (like squeue).
* ``check-config`` -- validate an elastic.toml without starting anything (and say which Slurm it reads).
* ``completion bash`` -- the bash completion script, made from the parser.
* ``profile``   -- measure the site's own throughput profiles through Slurm; writes the folder
  ``daemon.profiles`` names.
* ``report``    -- the center's GPU allocation report from ``sacct`` (HTML, CSV or JSON).
* ``what-if``   -- replay a window of the cluster's history under policies in the simulator (site
  guards as ``simulate``).
* ``submit``    -- render an sbatch template for an elastic launcher job and submit it.
* ``train-drl`` -- train the DL2 ``drl`` policy in the simulator and write its model file.
* ``demo``      -- end to end on the dev cluster: daemon, elastic jobs resized in place, report.

Bad input exits with status 2 and one line naming the value and the rule.

The parser is :mod:`.parser`; the handlers live by audience: :mod:`.users`, :mod:`.admins`,
:mod:`.managers`, :mod:`.developers` (helpers several share: :mod:`.common`).
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Sequence

from slurm_elastic import collector
from slurm_elastic.cli import admins, developers, heap, managers, users
from slurm_elastic.cli.parser import build_parser
from slurm_elastic.errors import ElasticError

SIMULATING = frozenset({"simulate", "reproduce", "what-if", "bench", "train-drl"})
"""The commands that run simulations or planners in a loop: they keep freed memory (:mod:`slurm_elastic.cli.heap`) and
collect garbage seldom (:func:`slurm_elastic.collector.collect_seldom`)."""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``slurm-elastic`` console script."""
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `slurm-elastic ... | head` ends quietly
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING - 10 * min(args.verbose, 2),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    handlers = {
        # users
        "submit": users.cmd_submit, "rehearse": users.cmd_rehearse, "status": users.cmd_status,
        "completion": users.cmd_completion,
        # site admins
        "daemon": admins.cmd_daemon, "check-config": admins.cmd_check_config,
        "install-plugin": admins.cmd_install_plugin, "what-if": admins.cmd_what_if, "profile": admins.cmd_profile,
        # center managers
        "report": managers.cmd_report,
        # developers
        "plan": developers.cmd_plan, "simulate": developers.cmd_simulate, "reproduce": developers.cmd_reproduce,
        "profiles": developers.cmd_profiles, "bench": lambda a: developers.cmd_bench(a, command=main),
        "devcluster": developers.cmd_devcluster, "demo": developers.cmd_demo, "train-drl": developers.cmd_train_drl,
    }
    if args.command in SIMULATING:
        heap.keep_freed_memory()
        collector.collect_seldom()
    try:
        return handlers[args.command](args)
    except ElasticError as exc:
        print(f"slurm-elastic {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if args.command not in SIMULATING:
            raise
        print(f"\nslurm-elastic {args.command}: interrupted (Ctrl-C); nothing written", file=sys.stderr)
        return 130
