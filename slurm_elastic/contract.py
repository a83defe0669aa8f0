"""The AdminComment grammar: an elastic job's request and a satellite's marker, read and written only here.

Two comments are ours, both starting with the tag ``slurm-elastic`` and set where users cannot
forge them (``job_submit.lua`` at submit, the daemon with ``scontrol update``):

* an elastic job's request: ``slurm-elastic gpus=MIN:MAX [batch=MIN:MAX] [mode=exo|endo]``
  (:func:`parse_elastic_request`; ``job_submit.lua`` writes it from ``--elastic*``);
* a satellite allocation's marker: ``slurm-elastic satellite-of=JOBID`` (:func:`satellite_marker`
  writes it, :func:`satellite_parent` reads it; extra ``key=value`` tokens after the tag are
  allowed, the marker wins). A satellite is fixed load, never an elastic job of its own.

Pure: no I/O. Every refusal is a :class:`ContractError` naming the job, the value and the rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from slurm_elastic.core.model import ElasticMode
from slurm_elastic.errors import ElasticError

ELASTIC_TAG = "slurm-elastic"
"""First token of every AdminComment of ours."""

SATELLITE_KEY = "satellite-of"
"""Key of a satellite's marker: ``slurm-elastic satellite-of=<jobid>``."""


class ContractError(ElasticError):
    """An AdminComment starts with ``slurm-elastic`` but breaks the grammar (message: job, value, rule)."""


@dataclass(frozen=True, slots=True)
class ElasticRequest:
    """An elastic job's contract, read from its AdminComment.

    Format: ``slurm-elastic gpus=MIN:MAX [batch=MIN:MAX] [mode=exo|endo]``. ``MAX = 0`` means no
    maximum (``None`` here). ``mode`` defaults to ``exo``.

    Attributes:
        min_gpus: fewest GPUs the job can run on (>= 1).
        max_gpus: most GPUs it can use, ``None`` for no limit.
        min_batch: smallest global batch (samples), ``None`` if not given.
        max_batch: largest global batch (samples), ``None`` if not given or no limit.
        mode: exo- or endo-elastic.
    """

    min_gpus: int
    max_gpus: int | None
    min_batch: int | None = None
    max_batch: int | None = None
    mode: ElasticMode = ElasticMode.EXO



_RANGE = re.compile(r"^(\d+):(\d+)$")


def parse_elastic_request(admin_comment: str, *, job_id: str = "?") -> ElasticRequest | None:
    """Read the elastic contract ``slurm-elastic gpus=MIN:MAX [batch=MIN:MAX] [mode=exo|endo]``.

    Rules: the first token is literally ``slurm-elastic``; tokens are ``key=value`` separated by
    blanks, each key at most once, keys among ``gpus`` (required), ``batch``, ``mode``; ranges are
    ``MIN:MAX`` integers with ``MIN >= 1`` and ``MAX = 0`` (no maximum) or ``MAX >= MIN``; ``mode`` is
    ``exo`` (default) or ``endo``.

    Args:
        admin_comment: the job's AdminComment.
        job_id: named in error messages.

    Returns:
        The request, or ``None`` when the comment does not start with ``slurm-elastic`` (a rigid job)
        or is a satellite's (``slurm-elastic satellite-of=JOBID``, set by the daemon: fixed load
        unless folded into its job).

    Raises:
        ContractError: the comment starts with ``slurm-elastic`` but breaks a rule (the message names
            the job id, the value and the rule).
    """
    tokens = admin_comment.split()
    if not tokens or tokens[0] != ELASTIC_TAG or satellite_parent(admin_comment) is not None:
        return None

    def bad(value: str, rule: str) -> ContractError:
        return ContractError(f"job {job_id}: AdminComment {admin_comment!r}: {value!r}: {rule}")

    seen: dict[str, str] = {}
    for tok in tokens[1:]:
        key, sep, value = tok.partition("=")
        if not sep or not key or not value:
            raise bad(tok, "must be key=value")
        if key not in ("gpus", "batch", "mode"):
            raise bad(tok, "unknown key (rule: gpus, batch or mode)")
        if key in seen:
            raise bad(tok, f"{key} given twice")
        seen[key] = value
    if "gpus" not in seen:
        raise bad(admin_comment, "gpus=MIN:MAX is required")

    def rng(key: str) -> tuple[int, int | None]:
        m = _RANGE.match(seen[key])
        if not m:
            raise bad(f"{key}={seen[key]}", "must be MIN:MAX with integers")
        lo, hi = int(m.group(1)), int(m.group(2))
        if lo < 1:
            raise bad(f"{key}={seen[key]}", "MIN must be >= 1")
        if hi != 0 and hi < lo:
            raise bad(f"{key}={seen[key]}", "MAX must be 0 (no maximum) or >= MIN")
        return lo, (hi or None)

    min_gpus, max_gpus = rng("gpus")
    min_batch: int | None = None
    max_batch: int | None = None
    if "batch" in seen:
        min_batch, max_batch = rng("batch")
    mode_s = seen.get("mode", "exo")
    try:
        mode = ElasticMode(mode_s)
    except ValueError as exc:
        raise bad(f"mode={mode_s}", "must be exo or endo") from exc
    return ElasticRequest(min_gpus, max_gpus, min_batch, max_batch, mode)


# --------------------------------------------------------------------------------------------------
# Snapshot


def is_elastic(admin_comment: str) -> bool:
    """True when the AdminComment's first token is ``slurm-elastic`` (an elastic job or a satellite)."""
    tokens = admin_comment.split()
    return bool(tokens) and tokens[0] == ELASTIC_TAG


def satellite_marker(parent: str) -> str:
    """The AdminComment that marks a satellite allocation as ``parent``'s."""
    return f"{ELASTIC_TAG} {SATELLITE_KEY}={parent}"


def satellite_parent(admin_comment: str) -> str | None:
    """The parent job id of a satellite allocation (``slurm-elastic satellite-of=<jobid> ...``), else ``None``."""
    tokens = admin_comment.split()
    if not tokens or tokens[0] != ELASTIC_TAG:
        return None
    for tok in tokens[1:]:
        key, sep, value = tok.partition("=")
        if key == SATELLITE_KEY and sep and value:
            return value
    return None
