"""The site admins' subcommands: ``daemon``, ``check-config``, ``install-plugin``, ``what-if``."""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slurm_elastic import __version__

if TYPE_CHECKING:
    from slurm_elastic.slurm.runner import Runner

from slurm_elastic.cli.common import (
    ProgressBar,
    policy_specs,
    simulation_pool,
    site_cadence,
    site_guards,
    view,
    window,
    with_backend,
)
from slurm_elastic.errors import ConfigError

log = logging.getLogger(__name__)

#: Reads Slurm's configuration; ``show`` changes nothing (tests/unit/test_shape.py flags argv *lists*
#: that begin with scontrol, since most of its subcommands change Slurm).
SHOW_CONFIG = ("scontrol", "show", "config")


def cmd_daemon(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from slurm_elastic.config import load
    from slurm_elastic.daemon import install_signal_handlers
    from slurm_elastic.store import Store

    cfg = with_backend(load(args.config), args.backend)
    if args.dry_run:
        cfg = replace(cfg, daemon=replace(cfg.daemon, dry_run=True))
    if args.verbose == 0:
        logging.getLogger().setLevel(logging.INFO)
    from slurm_elastic.wiring import slurm_daemon

    store = Store(cfg.daemon.store)
    cluster = view(cfg, store)  # the daemon settles the journal before its first round (at its first poll, Actor.tend)
    daemon = slurm_daemon(cfg, cluster, store)
    install_signal_handlers(daemon)
    if cfg.daemon.metrics_address:
        from slurm_elastic.daemon_metrics import serve

        shown, why = metrics_identities_shown(cluster.source.runner)
        daemon.metrics.show_identities = shown
        log.info("/metrics on %s %s: %s", cfg.daemon.metrics_address,
                 "names jobs and users" if shown else "shows counts only", why)
        serve(daemon.metrics, cfg.daemon.metrics_address)
    log.info("slurm-elastic %s: policy %s, partitions %s, %s, store %s", __version__, cfg.daemon.policy,
             ",".join(cfg.daemon.partitions) or "all", "shadow mode" if cfg.daemon.dry_run else "acting",
             cfg.daemon.store)
    if args.once:
        ran = daemon.run(max_rounds=1)
        if ran < 1:
            print("slurm-elastic daemon --once: the round failed (the log says why)", file=sys.stderr)
            return 1
        return 0
    daemon.run()
    return 0


def metrics_identities_shown(runner: Runner) -> tuple[bool, str]:
    """Whether ``/metrics`` may name jobs and users, by Slurm's ``PrivateData``, and why (one line).

    Runs ``scontrol show config`` through ``runner``. Anyone who can connect to ``/metrics`` reads it,
    so job ids and user names are shown only when Slurm shows them to every user: ``PrivateData``
    without ``jobs``, ``users`` (or ``all``). When the configuration cannot be read they are hidden.
    """
    from slurm_elastic.daemon_metrics import IDENTITY_FLAGS, identities_private, private_data_of
    from slurm_elastic.errors import ElasticError

    try:
        flags = private_data_of(runner(SHOW_CONFIG))
    except (ElasticError, OSError) as exc:
        return False, f"Slurm's PrivateData unknown ({exc}): job ids and user names hidden"
    if identities_private(flags):
        hidden = ",".join(sorted(flags & IDENTITY_FLAGS))
        return False, f"Slurm's PrivateData includes {hidden}: job ids and user names hidden"
    return True, f"Slurm's PrivateData = {','.join(sorted(flags)) or 'none'}: jobs and users are public"


def cmd_check_config(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from slurm_elastic.config import load

    cfg = load(args.file)
    print(json.dumps({"daemon": asdict(cfg.daemon), "policy_params": cfg.policy_params, "slurm": _slurm_seen(cfg)},
                     indent=2, default=str))
    return 0


def _slurm_seen(cfg: Any) -> dict[str, str]:
    """The Slurm the daemon would read with this configuration: its release and JSON dialect (or
    pyslurm), found by reading its nodes and jobs once; or why it cannot be read from here."""
    from slurm_elastic.errors import ElasticError
    from slurm_elastic.slurm.dialects import release_text
    from slurm_elastic.slurm.pyslurm_backend import choose_source

    try:
        source = choose_source(prefer=cfg.daemon.backend)
        source.read()
    except ElasticError as exc:
        return {"release": "", "read_through": "", "error": str(exc)[:500]}
    return {"release": release_text(source.release), "read_through": getattr(source, "dialect", "")}


def cmd_profile(args: argparse.Namespace) -> int:
    """Measure site profiles through Slurm (:mod:`slurm_elastic.site_profile`); print the JSON summary."""
    from slurm_elastic.site_profile import parse_batches, parse_models, parse_placements, profile_site

    out = profile_site(args.out, models=parse_models(args.models), placements=parse_placements(args.placements),
                       batches=parse_batches(args.batches), steps=args.steps, partition=args.partition,
                       say=lambda line: print(line, file=sys.stderr))
    print(json.dumps(out, indent=2))
    return 0


def cmd_install_plugin(args: argparse.Namespace) -> int:
    """Build the plugin where only root can change it; print its lines; with ``--write``, write them.

    Everything ``--write`` would touch is checked before anything is built or written: a site's own
    ``job_submit.lua`` (or a link there) is never overwritten: the lines to merge go to stdout, the
    refusal (exit 2) to stderr, and nothing is written.
    """
    from slurm_elastic.spank.build import (
        JobSubmitExistsError,
        check_site_files,
        install_lines,
        install_plugin,
        plugstack_line,
        slurm_include_dir,
        write_plugstack,
    )

    if args.write:
        try:
            check_site_files(args.write)
        except JobSubmitExistsError as exc:
            print(exc.merge)
            raise
    if args.site_files:
        _check_site_files_free(args.site_files)
    include = slurm_include_dir(args.slurm_prefix)
    built_for = _check_plugin_release(include, args.slurm_prefix, writing=args.write is not None)
    plugin, notes = install_plugin(args.out, include_dir=include)
    for note in (built_for, *notes):
        print(f"note: {note}", file=sys.stderr)
    line = plugstack_line(plugin)
    print(f"# plugstack.conf:\n{line}")
    print("# slurm.conf:\n" + "\n".join(install_lines()))
    if args.write:
        try:
            done = write_plugstack(args.write, line)
        except JobSubmitExistsError as exc:
            print(exc.merge)
            raise
        lua = f"wrote {done.job_submit}" if done.wrote_job_submit else f"{done.job_submit} is already slurm-elastic's"
        print(f"wrote {done.plugstack}; {lua}", file=sys.stderr)
    if args.site_files:
        for written in _write_site_files(args.site_files):
            print(f"wrote {written}", file=sys.stderr)
    return 0


def _check_plugin_release(include: Path, prefix: Path | None, *, writing: bool) -> str:
    """Refuse to build a plugin the running Slurm would refuse to load: Slurm loads a SPANK plugin only
    into the major.minor release whose headers built it, and a ``required`` line to a refused plugin
    fails every ``sbatch``. The running release is the answering slurmctld's (``scontrol show
    config``), else the installed ``slurmctld -V``'s; when neither tells, ``--write`` is refused.
    Returns the note to print once the plugin is built."""
    from slurm_elastic.slurm.dialects import release_text
    from slurm_elastic.spank.build import header_release

    built = header_release(include)
    running, source = _running_release(prefix)
    shown = release_text(built)
    if running is None:
        if writing:
            raise ConfigError(f"install-plugin --write: cannot tell which Slurm runs here (no slurmctld answers "
                              f"and none is installed) to check the plugin's release {shown} ({include}) against "
                              "(rule: a plugstack line only for a plugin of the running Slurm's major.minor); "
                              "start slurmctld or give --slurm-prefix")
        return f"built against Slurm {shown} ({include}); no running Slurm to check it against"
    if running[:2] != built[:2]:
        raise ConfigError(f"install-plugin: the headers in {include} are Slurm {shown} but {source} is Slurm "
                          f"{release_text(running)} (rule: Slurm loads a SPANK plugin only into the "
                          "major.minor it was built for); give --slurm-prefix of the running Slurm")
    return f"built against Slurm {shown} ({include}), as {source} runs"


def _running_release(prefix: Path | None) -> tuple[tuple[int, int, int] | None, str]:
    """The running Slurm's release and where it was read, or ``(None, "")``."""
    from slurm_elastic.errors import ElasticError
    from slurm_elastic.slurm.runner import controller_release, release_in, run_command, with_slurm_prefix

    env = with_slurm_prefix(os.environ, prefix)
    try:
        return controller_release(lambda argv: run_command(argv, env=env, timeout=15)), "the running slurmctld"
    except ElasticError:
        pass
    program = (prefix / "sbin" / "slurmctld") if prefix is not None else shutil.which("slurmctld", path=os.pathsep.join(
        [env.get("PATH", ""), "/usr/sbin", "/usr/local/sbin"]))
    if program is None or not Path(program).exists():
        return None, ""
    try:
        text = run_command([str(program), "-V"], env=env, timeout=15)
    except ElasticError:
        return None, ""
    release = release_in(text)
    return (release, f"the installed {program}") if release is not None else (None, "")


def _site_files(folder: Path) -> dict[Path, Path]:
    """Where ``install-plugin --site-files`` writes each shipped file: target -> packaged source."""
    from slurm_elastic.resources import EXAMPLE_CONFIG, SYSTEMD_UNIT

    return {folder / SYSTEMD_UNIT.name: SYSTEMD_UNIT, folder / EXAMPLE_CONFIG.name: EXAMPLE_CONFIG}


def _check_site_files_free(folder: Path) -> None:
    """Refuse (before anything is built or written) a ``--site-files`` folder that is not a folder or
    already holds one of the files."""
    if not folder.is_dir():
        raise ConfigError(f"--site-files {folder}: not a folder (rule: an existing folder)")
    for target in _site_files(folder):
        if target.exists() or target.is_symlink():
            raise ConfigError(f"--site-files {folder}: {target} exists (rule: a shipped file is never written over "
                              "an existing one; merge it by hand, or choose another folder)")


def _write_site_files(folder: Path) -> list[Path]:
    """Write the systemd unit and the configuration into ``folder`` (0644, new files only, no link followed)."""
    written = []
    for target, source in _site_files(folder).items():
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as fh:
            fh.write(source.read_bytes())
        written.append(target)
    return written


def cmd_what_if(args: argparse.Namespace) -> int:
    from slurm_elastic.experiments.comparison import parse_seeds
    from slurm_elastic.whatif import read_accounting, skipped_jobs, what_if

    seeds = parse_seeds(args.seeds)
    pols = policy_specs(args.policy, args.param)
    guards = site_guards(args)
    since, until = window(args)
    records = read_accounting(since, until, account=args.account, steps=not args.no_site_physics)
    bar = ProgressBar(len(seeds) * len(pols), enabled=not args.quiet and sys.stderr.isatty())
    with simulation_pool(args) as pool:
        results = what_if(records, pols, seeds, args.gpus, args.gpus_per_node, elastic_range=args.elastic_range,
                          resize_cost=args.resize_cost, guards=guards, site_physics=not args.no_site_physics,
                          cadence=site_cadence(args), progress=bar.step, pool=pool)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1, default=float))
    if args.report:
        from slurm_elastic.reports.simulation import write_report

        write_report(results, args.report, title=f"What-if: history {since:%Y-%m-%d %H:%M} – {until:%Y-%m-%d %H:%M} "
                                                 f"on {args.gpus} GPUs ({results[0]['site_physics']['described']})")
    skipped = skipped_jobs(records)
    summary = {"replayed_jobs": results[0]["metrics"]["jobs"], "skipped_jobs_without_gpus": len(skipped),
               "site_physics": results[0].get("site_physics"),
               "runs": [{"policy": r["policy"], "seed": r["seed"], **r["metrics"]} for r in results]}
    print(json.dumps(summary, indent=2, default=float))
    return 0
