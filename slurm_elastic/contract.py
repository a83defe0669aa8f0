"""The AdminComment grammar: an elastic job's request and a satellite's marker, read and written only here.

Two comments are ours, both starting with the tag ``slurm-elastic`` and set where users cannot
forge them (``job_submit.lua`` at submit, the daemon with ``scontrol update``):

* an elastic job's request: ``slurm-elastic gpus=MIN:MAX [batch=MIN:MAX] [mode=exo|endo]``
  (:func:`parse_elastic_request`; ``job_submit.lua`` writes it from ``--elastic*``);
* a satellite allocation's marker: ``slurm-elastic satellite-of=JOBID`` (:func:`satellite_marker`
  writes it, :func:`satellite_parent` reads it; extra ``key=value`` tokens after the tag are
  allowed, the marker wins). A satellite is fixed load, never an elastic job of its own.
* a satellite's submission token, in its Slurm comment (which its user sets at ``sbatch``, before
  the daemon knows its id): ``slurm-elastic-satellite=<32 hex digits>``
  (:func:`satellite_token_comment`, :func:`satellite_token`); the daemon journals the token before
  it submits, so a satellite whose id the daemon never learnt is found in Slurm by it.

Pure: no I/O. Every refusal is a :class:`ContractError` naming the job, the value and the rule.

**The ``--elastic`` grammar.** One grammar, read alike by its three readers: the SPANK plugin
(``slurm_elastic/spank/slurm_elastic.c``, on the submit host), ``job_submit.lua`` (in slurmctld,
which writes the AdminComment) and this module (in the daemon). ``tests/unit/test_elastic_grammar.py``
runs one table of values through all three::

    --elastic[=MIN:MAX]       GPUs: MIN in 1..65536; MAX = 0 (no maximum) or MIN..65536;
                              --elastic without a value is 1:0 (at least 1 GPU, no maximum)
    --elastic-batch=MIN:MAX   global batch (samples): MIN in 1..16777216, MAX in MIN..16777216
                              (a batch range always has a maximum; leave it out for none)
    --elastic-mode=exo|endo   exactly one of the two lower-case words (default exo)

A number is ``0`` or a non-zero ASCII digit followed by ASCII digits (``[1-9][0-9]*``): no sign,
no blank, no leading zero, no other digit (``²``, ``٣``, ``８``), no exponent or separator. So
``2147483647`` (and anything above 65536 GPUs or 16777216 samples) is refused, and ``N:0`` means
"N GPUs up, no maximum" for GPUs and is refused for a batch range. The AdminComment carries the
same values: ``slurm-elastic gpus=MIN:MAX[ batch=MIN:MAX] mode=exo|endo``.
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


SATELLITE_TOKEN_KEY = "slurm-elastic-satellite="
"""Prefix of a satellite's Slurm comment: ``slurm-elastic-satellite=<token>``."""


class ContractError(ElasticError):
    """An AdminComment starts with ``slurm-elastic`` but breaks the grammar (message: job, value, rule)."""


@dataclass(frozen=True, slots=True)
class ElasticRequest:
    """An elastic job's contract, read from its AdminComment.

    Format: ``slurm-elastic gpus=MIN:MAX [batch=MIN:MAX] [mode=exo|endo]`` (the grammar of the
    module docstring). ``gpus`` ``MAX = 0`` means no maximum (``None`` here). ``mode`` defaults to
    ``exo``.

    Attributes:
        min_gpus: fewest GPUs the job can run on (>= 1).
        max_gpus: most GPUs it can use (<= 65536), ``None`` for no limit.
        min_batch: smallest global batch (samples), ``None`` if not given.
        max_batch: largest global batch (samples, <= 16777216), ``None`` if not given.
        mode: exo- or endo-elastic.
    """

    min_gpus: int
    max_gpus: int | None
    min_batch: int | None = None
    max_batch: int | None = None
    mode: ElasticMode = ElasticMode.EXO


MAX_GPUS = 65536
"""Largest GPU count of an ``--elastic`` range."""

MAX_BATCH = 2**24
"""Largest global batch (samples) of an ``--elastic-batch`` range (16777216)."""

_LIMITS = {"gpus": MAX_GPUS, "batch": MAX_BATCH}
_NUMBER = re.compile(r"0|[1-9][0-9]{0,7}", re.ASCII)  # at most 8 digits: both limits have fewer
_MODES = tuple(m.value for m in ElasticMode)


def _range_rule(key: str) -> str:
    limit = _LIMITS[key]
    if key == "gpus":
        return f"1 <= MIN <= {limit} and MAX 0 (no maximum) or MIN <= MAX <= {limit}"
    return f"1 <= MIN <= MAX <= {limit}"


def _check_range(key: str, text: str) -> tuple[int, int | None] | str:
    """``(MIN, MAX)`` of a range value, or the rule it breaks."""
    limit = _LIMITS[key]
    lo_s, sep, hi_s = text.partition(":")
    if not (sep and _NUMBER.fullmatch(lo_s) and _NUMBER.fullmatch(hi_s)):
        return (f"must be MIN:MAX with integers in ASCII digits (no sign, blank or leading zero), "
                f"{_range_rule(key)}")
    lo, hi = int(lo_s), int(hi_s)
    if not 1 <= lo <= limit:
        return f"MIN must be >= 1 and <= {limit} (rule: {_range_rule(key)})"
    if key == "gpus" and hi == 0:
        return lo, None
    if not lo <= hi <= limit:
        what = "0 (no maximum) or " if key == "gpus" else ""
        return f"MAX must be {what}>= MIN and <= {limit} (rule: {_range_rule(key)})"
    return lo, hi


def read_range(key: str, text: str) -> tuple[int, int | None]:
    """One range value of the grammar (module docstring): ``gpus`` or ``batch`` ``MIN:MAX``.

    Returns:
        ``(MIN, MAX)``, with ``MAX`` ``None`` for ``gpus`` ``MAX = 0`` (no maximum).

    Raises:
        ContractError: ``<key>='<value>': <rule>`` (numbers are ASCII digits without sign, blank or
            leading zero, at most :data:`MAX_GPUS` GPUs or :data:`MAX_BATCH` samples).
    """
    got = _check_range(key, text)
    if isinstance(got, str):
        raise ContractError(f"{key}={text!r}: {got}")
    return got


def read_mode(text: str) -> ElasticMode:
    """The ``mode`` value of the grammar: exactly ``exo`` or ``endo``.

    Raises:
        ContractError: ``"mode=<value>": must be exo or endo``.
    """
    if text not in _MODES:
        raise ContractError(f"mode={text!r}: must be exo or endo")
    return ElasticMode(text)


def parse_elastic_request(admin_comment: str, *, job_id: str = "?") -> ElasticRequest | None:
    """Read the elastic contract ``slurm-elastic gpus=MIN:MAX [batch=MIN:MAX] [mode=exo|endo]``.

    Rules: the first token is literally ``slurm-elastic``; tokens are ``key=value`` separated by
    blanks, each key at most once, keys among ``gpus`` (required), ``batch``, ``mode``; the values
    follow the grammar of the module docstring (:func:`read_range`, :func:`read_mode`): ``gpus``
    ``MIN:MAX`` with ``1 <= MIN <= 65536`` and ``MAX = 0`` (no maximum) or ``MIN <= MAX <= 65536``;
    ``batch`` ``MIN:MAX`` with ``1 <= MIN <= MAX <= 16777216``; ``mode`` ``exo`` (default) or ``endo``.

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
        got = _check_range(key, seen[key])
        if isinstance(got, str):
            raise bad(f"{key}={seen[key]}", got)
        return got

    min_gpus, max_gpus = rng("gpus")
    min_batch: int | None = None
    max_batch: int | None = None
    if "batch" in seen:
        min_batch, max_batch = rng("batch")
    mode_s = seen.get("mode", "exo")
    try:
        mode = read_mode(mode_s)
    except ContractError:
        raise bad(f"mode={mode_s}", "must be exo or endo") from None
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


def satellite_token_comment(token: str) -> str:
    """The Slurm comment a satellite is submitted with (``token``: 32 lowercase hex digits)."""
    if satellite_token(SATELLITE_TOKEN_KEY + token) != token:
        raise ValueError(f"satellite token {token[:64]!r}: must be 32 lowercase hex digits")
    return SATELLITE_TOKEN_KEY + token


def satellite_token(comment: str) -> str | None:
    """The submission token of a satellite's comment, else ``None`` (anything else in the comment: ``None``)."""
    if not comment.startswith(SATELLITE_TOKEN_KEY):
        return None
    token = comment[len(SATELLITE_TOKEN_KEY):]
    return token if len(token) == 32 and all(c in "0123456789abcdef" for c in token) else None


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
