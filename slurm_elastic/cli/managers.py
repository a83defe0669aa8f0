"""The center managers' subcommand: the GPU allocation ``report``."""

from __future__ import annotations

import argparse
import json
import logging
from typing import TYPE_CHECKING

from slurm_elastic.errors import ConfigError

if TYPE_CHECKING:
    pass

from slurm_elastic.cli.common import window

log = logging.getLogger(__name__)


def cmd_report(args: argparse.Namespace) -> int:
    from slurm_elastic.config import Config, load
    from slurm_elastic.reports import allocation
    from slurm_elastic.whatif import cluster_gpus, read_accounting
    from slurm_elastic.wiring import default_profiles

    since, until = window(args)
    records = read_accounting(since, until, account=args.account)
    from_store = None
    if args.store:
        from slurm_elastic.store import Store

        if not args.store.is_file():
            raise ConfigError(f"--store {args.store}: no such file (rule: the daemon's existing state database)")
        store = Store(args.store)
        try:
            from_store = store.report_inputs(str(r.job_id) for r in records)
        finally:
            store.close()
    cfg = load(args.config) if args.config else Config()
    tables = allocation.allocation_tables(records, since=since.timestamp(), until=until.timestamp(),
                                          total_gpus=cluster_gpus() or None,
                                          journal=from_store.journal if from_store is not None else None,
                                          progress=from_store.progress if from_store is not None else None,
                                          satellites=from_store.satellites if from_store is not None else None,
                                          profiles=default_profiles(cfg.daemon.profiles),
                                          default_model=cfg.daemon.default_model)
    if args.format == "html":
        paths = allocation.write_html(tables, args.out)
    else:
        paths = (allocation.write_csv if args.format == "csv" else allocation.write_json)(tables, args.out)
    print(json.dumps({"summary": tables["summary"], "by_account": tables["by_account"],
                      "files": [str(p) for p in paths]}, indent=2))
    return 0
