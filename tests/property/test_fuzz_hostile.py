"""Every input a user or Slurm controls, fuzzed through the real entry points (issue 13, "What proves it").

Hypothesis drives the seeded case builders of :mod:`slurm_elastic.fuzz` (the ones ``slurm-elastic
bench fuzz`` runs at any size) with a CI-sized budget: for every family, a case ends accepted or
refused with its documented error, the daemon round over the hostile job's cluster never fails,
and every honest job is planned and acted on.

``KNOWN`` lists the bugs this fuzzing found that are reported and not fixed yet: a case may fail
only at one of those places. Each has a reproducer run as a strict xfail: once the bug is fixed,
it passes, the xfail fails, and the entry is to be removed (the fix's proof is that test passing).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_elastic import fuzz
from slurm_elastic.errors import ConfigError, TraceError
from slurm_elastic.fuzz.case import CaseResult, attempt_any
from slurm_elastic.fuzz.cluster import NOW, FuzzCluster, report_body
from slurm_elastic.fuzz.daemon_families import sign_any
from slurm_elastic.orders import COMMENT_KEY
from slurm_elastic.slurm.commands import SlurmCommandError, run_command, run_json
from slurm_elastic.slurm.dialects import SlurmJsonError
from slurm_elastic.slurm.records import parse_jobs
from slurm_elastic.testing import shipped_profiles

REQUIRED_KEYS = {"cases", "outcomes", "foreign_exceptions", "rounds_failed", "other_jobs_unplanned"}
EXAMPLES = {"report_lines": 100, "order_lines": 60, "job_files": 100, "admin_comment": 60, "slurm_records": 60,
            "slurm_docs": 150, "config": 100, "trace_csv": 40, "cli": 40}
"""Examples per family: the file runs in about 30 s on two cores (a hang costs its case's 5 s)."""


# -- the bugs found and reported, not fixed yet --------------------------------------------------------

@dataclass(frozen=True)
class Known:
    """A reported bug: the places it shows (``CaseResult.places``) in which families, for which
    inputs, and a reproducer that passes once it is fixed."""

    reason: str
    place: str
    families: str = ".*"
    described: str = ".*"
    repro: Callable[[Path], None] | None = None


def _round_with(tmp: Path, change: Callable[[FuzzCluster], None], dialect: str | None = None) -> None:
    """One dry-run round over the fuzz cluster with ``change`` applied to the hostile job (bounded)."""
    res = CaseResult("repro")
    with fuzz.contained(3):
        c = FuzzCluster.build(random.Random(0), tmp, shipped_profiles())
        if dialect is not None:
            c.dialect = dialect
        change(c)
        try:
            c.round(res)
        except fuzz.CaseTimeout as exc:
            res.note_foreign("round (hung)", exc)
        finally:
            if c.view is not None and c.view.store is not None:
                c.view.store.close()
    assert not res.places, res.places


def _signed_report(**fields: object) -> Callable[[FuzzCluster], None]:
    def change(c: FuzzCluster) -> None:
        c.append_reports("7", [sign_any(report_body("7", **{"t": NOW - 50, "samples": 12800, **fields}),
                                        c.secrets["7"])])
    return change


def _record(**fields: object) -> Callable[[FuzzCluster], None]:
    return lambda c: c.hostile_record.update(fields)


def _only(fn: Callable[[], object], *expected: type[BaseException], seconds: float = 10) -> None:
    """``fn`` is accepted or raises one of ``expected``, within ``seconds``."""
    res = CaseResult("repro")
    with fuzz.contained(seconds):
        try:
            attempt_any(res, "repro", fn, expected)
        except fuzz.CaseTimeout as exc:
            res.note_foreign("repro (hung)", exc)
    assert not res.foreign, res.foreign


def _config(tmp: Path, text: bytes) -> None:
    from slurm_elastic.config import load

    (tmp / "e.toml").write_bytes(text)
    _only(lambda: load(tmp / "e.toml"), ConfigError)


def _config_round(tmp: Path, text: bytes) -> None:
    """Refused, or a daemon round with it plans every job."""
    from slurm_elastic.config import load

    (tmp / "e.toml").write_bytes(text)
    try:
        cfg = load(tmp / "e.toml")
    except ConfigError:
        return
    (tmp / "cluster").mkdir()
    res = CaseResult("repro")
    with fuzz.contained(3):
        c = FuzzCluster.build(random.Random(0), tmp / "cluster", shipped_profiles())
        c.round(res, cfg)
        if c.view is not None and c.view.store is not None:
            c.view.store.close()
    assert not res.places, res.places


def _trace(tmp: Path, text: str, round_gap: float = 30.0) -> None:
    from slurm_elastic import policies
    from slurm_elastic.sim.engine import simulate
    from slurm_elastic.sim.workload import load_trace

    (tmp / "t.csv").write_text(text)
    _only(lambda: simulate(load_trace(tmp / "t.csv"), policies.create("dp"), gpus=8, round_gap=round_gap),
          TraceError, ConfigError, seconds=3)


def _cli(tmp: Path, *argv: str) -> None:
    from slurm_elastic.cli import main

    @contextlib.contextmanager
    def quiet() -> Iterator[None]:
        home = os.environ.get("HOME")
        os.environ["HOME"] = str(tmp)
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                yield
        finally:
            os.environ["HOME"] = home or ""

    def call() -> int:
        with quiet():
            try:
                return main(list(argv))
            except SystemExit as exc:
                return exc.code if isinstance(exc.code, int) else 2

    codes: list[int] = []
    _only(lambda: codes.append(call()), seconds=3)
    assert codes and codes[0] in (0, 2), codes


def _squeue_printed(tmp: Path, raw: bytes) -> None:
    (tmp / "out").write_bytes(raw)
    _only(lambda: parse_jobs(run_json(lambda argv: run_command(["cat", str(tmp / "out")]), ["squeue"]), {}),
          SlurmJsonError, SlurmCommandError)


_TRACE = "job_id,submit_time,num_gpus,duration\n"

KNOWN: dict[str, Known] = {
    "report kind unhashable": Known(
        "observe/progress.py row_of: a signed report whose kind is a list or an object raises TypeError "
        "(`kind not in REPORT_KINDS`), which ingest does not catch: the round fails for every job",
        r"TypeError in slurm_elastic/observe/progress\.py:row_of", "report_lines",
        repro=lambda tmp: _round_with(tmp, _signed_report(kind=["progress"]))),
    "report number too large for a float": Known(
        "observe/progress.py _number: a signed report with t (or loss, throughput …) = 10**400 raises "
        "OverflowError in float(): the round fails for every job",
        r"OverflowError in slurm_elastic/observe/progress\.py:_number", "report_lines",
        repro=lambda tmp: _round_with(tmp, _signed_report(t=10**400))),
    "report integer too large for SQLite": Known(
        "store.py _insert_progress: a signed report with epoch_size = 2**64 (or a 'left' report with "
        "samples = 2**63), within every bound, raises OverflowError from sqlite3: the round fails",
        r"OverflowError in slurm_elastic/store\.py:_insert_progress", "report_lines",
        repro=lambda tmp: _round_with(tmp, _signed_report(epoch_size=2**64))),
    "job id not encodable": Known(
        "store.py report_offset: a job id holding a lone surrogate (array_task_string '\\ud800' makes the id "
        "'N_[\\ud800]') raises UnicodeEncodeError from sqlite3: the round fails",
        r"UnicodeEncodeError in slurm_elastic/store\.py:\S+", "slurm_records",
        repro=lambda tmp: _round_with(tmp, _record(array_job_id=7, array_task_string="\ud800"), dialect="22.05")),
    "comment path not encodable": Known(
        "jobfiles.py _open: a comment naming a path with a lone surrogate (slurm-elastic-orders=/x\\ud800.orders) "
        "raises UnicodeEncodeError from os.open, which Channel.open and ingest do not catch: the round fails",
        r"UnicodeEncodeError in slurm_elastic/jobfiles\.py:_open", "job_files",
        repro=lambda tmp: _round_with(tmp, _record(comment=f"{COMMENT_KEY}{tmp}/job-7\ud800.orders"))),
    "trace batch beyond int64": Known(
        "core/sizing.py (best_exo_batches, sizes), core/dynprog.py _table: a trace's batch_size or max_batch past "
        "2**63 (sim/workload.py bounds them only below) raises OverflowError while planning (int64 arrays): the "
        "simulation fails",
        r"OverflowError in slurm_elastic/core/(sizing|dynprog|efq)\.py:\w+", "trace_csv|cli",
        repro=lambda tmp: _trace(tmp, f"job_id,submit_time,num_gpus,duration,batch_size\na,0,1,60,{2**64}\n")),
    "squeue time beyond a float": Known(
        "slurm/dialects.py as_time accepts any integer: a record's start_time/resize_time of 10**400 raises "
        "OverflowError in float() in observe/snapshot.py _elastic_job (build_snapshot catches only ElasticError, "
        "ValueError), a submit_time of 10**400 in observe/bounds.py limits_of: the round fails",
        r"OverflowError in slurm_elastic/observe/(snapshot\.py:_elastic_job|bounds\.py:limits_of)", "slurm_records",
        repro=lambda tmp: _round_with(tmp, _record(start_time=10**400), dialect="22.05")),
    "hostlist or IDX range without bound": Known(
        "slurm/hostlist.py expand_hostlist / parse_index_list: nodes n[000-999999999] or gres_detail "
        "IDX:0-99999999999 are expanded element by element without a cap (a hang or MemoryError, which "
        "parse_jobs(refused) does not catch): the round fails",
        r"(CaseTimeout|MemoryError) in slurm_elastic/slurm/hostlist\.py:\S+|round failed: the document was not read"
        r"|CaseTimeout in slurm_records case \(hung\)",  # the alarm fired while the huge list was being freed
        "slurm_records",
        repro=lambda tmp: _round_with(tmp, _record(nodes="n[000-999999999]"))),
    "squeue output not UTF-8": Known(
        "slurm/commands.py run_command: output that is not UTF-8 (a job name of the user's bytes) raises "
        "UnicodeDecodeError (text=True, strict), not SlurmCommandError: every read of the queue fails",
        r"UnicodeDecodeError in slurm_elastic/slurm/commands\.py:run_command", "slurm_docs",
        repro=lambda tmp: _squeue_printed(tmp, b'{"name": "tr\xffain"}')),
    "squeue output nested or with huge numbers": Known(
        "slurm/commands.py run_json: output nested past the recursion limit raises RecursionError, an integer "
        "of more than 4300 digits ValueError; only JSONDecodeError becomes SlurmJsonError",
        r"(RecursionError|ValueError) in slurm_elastic/slurm/commands\.py:run_json", "slurm_docs",
        repro=lambda tmp: _only(lambda: run_json(lambda argv: "[" * 100_000 + "]" * 100_000, ["squeue"]),
                                SlurmJsonError)),
    "config not UTF-8": Known(
        "config.py load: a file that is not UTF-8 raises UnicodeDecodeError (only OSError is caught)",
        r"UnicodeDecodeError in slurm_elastic/config\.py:load", "config|cli",
        repro=lambda tmp: _config(tmp, b'[daemon]\npolicy = "dp\xff"\n')),
    "config nested": Known(
        "config.py parse: TOML nested past the recursion limit (a = [[[[…]]]]) raises RecursionError from tomllib",
        r"RecursionError in slurm_elastic/config\.py:parse", "config|cli",
        repro=lambda tmp: _config(tmp, b"a = " + b"[" * 5000 + b"]" * 5000)),
    "config daemon not a table": Known(
        "config.py _daemon: `daemon = 1` (not a table) raises TypeError",
        r"TypeError in slurm_elastic/config\.py:_daemon", "config|cli",
        repro=lambda tmp: _config(tmp, b"daemon = 1\n")),
    "policy parameter of the wrong type": Known(
        "policies.create checks parameter names, not types: [policy.dp] interval = \"dp\" (ones, optimus, drl "
        "alike) raises TypeError in the planner's __init__ instead of ConfigError",
        r"TypeError in slurm_elastic/core/\w+\.py:__(post_)?init__", "config|cli",
        repro=lambda tmp: _config(tmp, b'[daemon]\npolicy = "dp"\n[policy.dp]\ninterval = "dp"\n')),
    "config default_model without a profile": Known(
        "config.py: daemon.default_model is not checked against the profiles; default_model = \"nope\" is "
        "accepted and then every elastic job is left out of every round (no throughput profile)",
        r"other jobs unplanned: .*no throughput profile.*", "config",
        repro=lambda tmp: _config_round(tmp, b'[daemon]\npolicy = "dp"\ndefault_model = "nope"\n')),
    "guard limit inf or nan": Known(
        "core/guards.py plan: [guards] max_gpus_per_user = inf (or nan; config.py and Guards accept any number "
        ">= 0) raises OverflowError (ValueError) in int(cap) at the first round",
        r"(OverflowError|ValueError) in slurm_elastic/core/guards\.py:\S+", "config|cli",
        repro=lambda tmp: _config_round(tmp, b'[daemon]\npolicy = "dp"\n[guards]\nmax_gpus_per_user = inf\n')),
    "trace num_gpus without bound": Known(
        "sim/workload.py: a trace's num_gpus has no upper bound: 2**64 makes _packed build a tuple of that many "
        "elements (MemoryError, or all the machine's memory without a limit), 1e308 overflows in _trace_job "
        "(int(gpus * elastic_range) of inf)",
        r"(MemoryError|OverflowError) in slurm_elastic/sim/workload\.py:(_packed|_trace_job)", "trace_csv|cli",
        repro=lambda tmp: _trace(tmp, _TRACE + f"a,0,{2**64},60\n")),
    "trace row longer than its header": Known(
        "sim/workload.py load_trace: a row with more fields than the header raises AttributeError ('list' has no "
        "strip: DictReader's restkey None)", r"AttributeError in slurm_elastic/sim/workload\.py:\S+",
        "trace_csv|cli", repro=lambda tmp: _trace(tmp, _TRACE + "a,0,1,60,extra\n")),
    "trace field over the csv limit": Known(
        "sim/workload.py load_trace: a field over 131072 characters raises _csv.Error",
        r"Error in slurm_elastic/sim/workload\.py:load_trace", "trace_csv|cli",
        repro=lambda tmp: _trace(tmp, _TRACE + "a," + "1" * 200_000 + ",1,60\n")),
    "simulate round gap inf or nan": Known(
        "sim/engine.py simulate: round_gap = inf or nan (slurm-elastic simulate --round-gap inf) passes the "
        "`round_gap < 0` check and the simulation never ends",
        r"CaseTimeout in slurm_elastic/(sim|core)/\S+", "trace_csv|cli", r".*round.gap(=|', ')(nan|inf|1e400)",
        repro=lambda tmp: _trace(tmp, _TRACE + "a,0,1,60\n", round_gap=float("inf"))),
    "negative seed": Known(
        "cli: plan --seed -1 and bench planner --seed -1 are accepted by argparse (type=int) and raise "
        "ValueError from numpy.random.default_rng (cli/developers.py cmd_plan, bench.py bench_planner)",
        r"ValueError in slurm_elastic/(cli/developers\.py:cmd_plan|bench\.py:bench_planner)", "cli",
        repro=lambda tmp: _cli(tmp, "plan", "--seed", "-1", "--gpus", "4", "--jobs", "1", "--policy", "dp")),
    "submit --elastic with superscript digits": Known(
        "cli/users.py cmd_submit: --elastic ²:³ passes str.isdigit() and int() raises ValueError",
        r"ValueError in slurm_elastic/cli/users\.py:cmd_submit", "cli",
        repro=lambda tmp: _cli(tmp, "submit", "--elastic", "²:³", "--dry-run", "--", "python", "x.py")),
}


def unknown_problems(res: CaseResult, *, by_input: bool = True) -> list[str]:
    """The problems of a case that no entry of :data:`KNOWN` explains (``by_input``: its input too)."""
    return [p for p in res.places if not any(
        re.fullmatch(k.place, p) and re.fullmatch(k.families, res.family)
        and (not by_input or re.match(k.described, res.described, re.DOTALL)) for k in KNOWN.values())]


# -- the families ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("family", fuzz.FAMILIES)
def test_hostile_input_is_refused_or_accepted_and_touches_its_job_only(family: str) -> None:
    @settings(max_examples=EXAMPLES[family], deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.integers(min_value=0, max_value=2**32 - 1))
    def case(seed: int) -> None:
        res = fuzz.run_case(family, seed)
        assert res.outcome, "no outcome named"
        problems = unknown_problems(res)
        assert not problems, f"{family} seed {seed}: {res.described}\n" + "\n".join([*res.foreign, *res.failures])

    case()


def test_bench_fuzz_json_has_the_required_keys_and_no_unknown_problem() -> None:
    out = fuzz.run(200, seed=0)
    json.dumps(out)  # what `bench fuzz --json` prints
    assert set(out) >= REQUIRED_KEYS
    assert out["cases"] == 200
    assert sum(out["outcomes"].values()) == sum(out["families"].values()) == out["cases"]
    assert set(out["families"]) == set(fuzz.FAMILIES)
    places = [p.split(": ", 1) for p in out["places"]]
    strays = [f"{fam}: {p}" for fam, p in places if unknown_problems(CaseResult(fam, places=[p]), by_input=False)]
    assert not strays, json.dumps(out["failures"], indent=1)[:5000]
    if not KNOWN:
        assert (out["foreign_exceptions"], out["rounds_failed"], out["other_jobs_unplanned"]) == (0, 0, 0)


def test_a_case_is_rebuilt_from_its_seed_and_index() -> None:
    out = fuzz.run(len(fuzz.SCHEDULE), seed=7)
    again = Counter(f"{fuzz.family_of(i)}:{fuzz.run_case(fuzz.family_of(i), 7, i).outcome}"
                    for i in range(len(fuzz.SCHEDULE)))
    assert dict(again) == out["outcomes"]


# -- each known bug, until it is fixed ------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(KNOWN))
@pytest.mark.xfail(strict=True, reason="a known bug (KNOWN): when this passes, the bug is fixed; remove its entry")
def test_known_bug_is_fixed(name: str, tmp_path: Path) -> None:
    repro = KNOWN[name].repro
    assert repro is not None
    repro(tmp_path)
