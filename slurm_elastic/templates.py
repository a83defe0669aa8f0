"""Rendering of the sbatch templates (``slurm_elastic/sbatch_templates/*.sbatch.j2``) — in one function.

This module owns :func:`render` and the parameters a template gets; ``slurm-elastic submit`` and
the golden tests use it. User-supplied words (the training command and its arguments) are quoted
with :func:`shlex.quote`; every other value is validated before it reaches the script.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import jinja2

from slurm_elastic.errors import ConfigError
from slurm_elastic.resources import SBATCH_TEMPLATES

TEMPLATE_DIR = SBATCH_TEMPLATES
_SAFE = re.compile(r"[A-Za-z0-9_.:@%/+-]*")


@dataclass(frozen=True, slots=True)
class JobRequest:
    """What a user asks for (``slurm-elastic submit`` options)."""

    command: tuple[str, ...]
    min_gpus: int
    max_gpus: int
    gpus_per_node: int = 4
    start_gpus: int | None = None
    batch: str = ""
    mode: str = "exo"
    local_batch: int = 32
    epochs: int = 1
    cpus_per_task: int | None = None
    name: str = "elastic"
    time: str = ""
    account: str = ""
    partition: str = ""
    output: str = "slurm-%j.out"
    secret_file: str = ""
    umask: str = ""


def _check(req: JobRequest) -> None:
    if not req.command:
        raise ConfigError("submit: no training command given (put it after --)")
    if not req.secret_file:
        raise ConfigError("submit: no per-job secret file given")
    if not 1 <= req.min_gpus <= req.max_gpus:
        raise ConfigError(f"--elastic {req.min_gpus}:{req.max_gpus}: expected MIN:MAX with 1 <= MIN <= MAX")
    if req.mode not in ("exo", "endo"):
        raise ConfigError(f"--mode {req.mode!r}: must be exo or endo")
    if req.batch and not re.fullmatch(r"\d+:\d+", req.batch):
        raise ConfigError(f"--batch {req.batch!r}: expected MIN:MAX")
    for key in ("name", "time", "account", "partition", "output", "secret_file"):
        value = getattr(req, key)
        if not _SAFE.fullmatch(value):
            raise ConfigError(f"--{key.replace('_', '-')} {value!r}: only letters, digits and _.:@%/+- are allowed")
    if req.umask and not re.fullmatch(r"0[0-7]{3}", req.umask):
        raise ConfigError(f"umask {req.umask!r}: expected four octal digits such as 0022")
    if req.cpus_per_task is not None and not 1 <= req.cpus_per_task <= 1024:
        raise ConfigError(f"--cpus-per-task {req.cpus_per_task}: must be >= 1 and <= 1024")
    for key in ("gpus_per_node", "local_batch", "epochs"):
        if getattr(req, key) < 1:
            raise ConfigError(f"--{key.replace('_', '-')} {getattr(req, key)}: must be >= 1")


def job_files(secret_file: str) -> dict[str, str]:
    """The files of one job, all beside its secret: orders, reports, TCPStore address, join script,
    the environment it was submitted with (its satellites get it: ``sbatch --export-file``), and the
    checkpoint its rank 0 writes on a stop order or SIGTERM (preemption, time limit), which a requeued
    start resumes from (not created at submit: the launcher writes it, with its MAC beside it).

    The daemon finds them from the orders path in the job's comment (:mod:`slurm_elastic.channel`).
    """
    return {"orders_file": secret_file + ".orders", "reports_file": secret_file + ".reports",
            "store_file": secret_file + ".store", "join_file": secret_file + ".join",
            "env_file": secret_file + ".env", "checkpoint_file": secret_file + ".ckpt"}


def render(template: str, req: JobRequest, *, part: str = "sbatch", template_dir: Path = TEMPLATE_DIR) -> str:
    """Render ``<template>.<part>.j2`` for ``req``.

    ``part`` is ``"sbatch"`` (the job's batch script) or ``"join"`` (the script the daemon submits,
    as the job's user, to start extra workers that join the running job; with ``req.umask`` it sets
    that umask, the one the job itself got from sbatch at submit).

    Raises:
        ConfigError: an unknown template or part, or a value that breaks its rule.
    """
    if part not in ("sbatch", "join"):
        raise ConfigError(f"template part {part!r}: must be 'sbatch' or 'join'")
    _check(req)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(template_dir), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, autoescape=False)
    try:
        tpl = env.get_template(f"{template}.{part}.j2")
    except jinja2.TemplateNotFound:
        known = sorted(p.name.removesuffix(".sbatch.j2") for p in template_dir.glob("*.sbatch.j2"))
        raise ConfigError(f"--template {template!r}: unknown; known templates: {', '.join(known)}") from None
    start = req.start_gpus or req.min_gpus
    per_node = min(req.gpus_per_node, start)
    nodes = -(-start // per_node)
    return tpl.render(
        name=req.name, nodes=nodes, gpus_per_node=per_node, min_gpus=req.min_gpus, max_gpus=req.max_gpus,
        batch=req.batch, mode=req.mode, time=req.time, account=req.account, partition=req.partition,
        output=req.output, secret_file=shlex.quote(req.secret_file), umask=req.umask,
        **{key: shlex.quote(path) for key, path in job_files(req.secret_file).items()},
        port_base=29500, port_span=1000, local_batch=req.local_batch, epochs=req.epochs,
        cpus_per_task=req.cpus_per_task or "",
        command=" ".join(shlex.quote(w) for w in req.command),
    )


def command_words(argv: Sequence[str]) -> tuple[str, ...]:
    """The training command after ``--`` (argparse keeps the separator)."""
    words = list(argv)
    if words and words[0] == "--":
        words = words[1:]
    return tuple(words)
