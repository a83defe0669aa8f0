"""Every input a user or Slurm controls, fuzzed through the real entry points.

Hypothesis drives the seeded case builders of :mod:`slurm_elastic.fuzz` (the ones ``slurm-elastic
bench fuzz`` runs at any size) with a CI-sized budget: for every family, a case ends accepted or
refused with its documented error, the daemon round over the hostile job's cluster never fails,
and every honest job is planned and acted on.

``KNOWN`` lists the bugs this fuzzing found that are reported and not fixed yet: a case may fail
only at one of those places. Each has a reproducer run as a strict xfail: once the bug is fixed,
it passes, the xfail fails, and the entry is to be removed (the fix's proof is that test passing).
It is empty now: the reproducers of the bugs fixed in slurm_elastic (not by the earlier value checks,
which have their own tests in ``tests/unit/test_bad_values.py``) stay in ``FIXED`` as regression tests.
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
from slurm_elastic.channel import COMMENT_KEY
from slurm_elastic.cli import main
from slurm_elastic.fuzz.case import CaseResult, attempt_any
from slurm_elastic.fuzz.daemon_families import sign_any
from slurm_elastic.fuzz.fuzzed_cluster import NOW, FuzzCluster, report_body
from slurm_elastic.slurm.dialects import SlurmJsonError
from slurm_elastic.slurm.json_records import parse_jobs
from slurm_elastic.slurm.runner import SlurmCommandError, run_command, run_json
from slurm_elastic.testing import shipped_profiles

REQUIRED_KEYS = {"cases", "outcomes", "foreign_exceptions", "rounds_failed", "other_jobs_unplanned"}
EXAMPLES = {"report_lines": 100, "report_claims": 40, "shared_history": 30, "order_lines": 60, "job_files": 100,
            "admin_comment": 60, "slurm_records": 60, "slurm_docs": 150, "config": 100, "trace_csv": 40, "cli": 40}
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


KNOWN: dict[str, Known] = {}
"""Empty: every bug the fuzzing found is fixed (each one's reproducer is in :data:`FIXED`)."""

FIXED: dict[str, Callable[[Path], None]] = {
    # observe/job_reports.py row_of: a kind that is not a string is refused (the job quarantined), not a TypeError
    "report kind unhashable": lambda tmp: _round_with(tmp, _signed_report(kind=["progress"])),
    # observe/job_reports.py _number: a number past 2**62 is refused as out of range (no OverflowError in float())
    "report number too large for a float": lambda tmp: _round_with(tmp, _signed_report(t=10**400)),
    # ... and so is an integer SQLite cannot hold (store.py _insert_progress)
    "report integer too large for SQLite": lambda tmp: _round_with(tmp, _signed_report(epoch_size=2**64)),
    "report samples too large for SQLite": lambda tmp: _round_with(tmp, _signed_report(kind="left", samples=2**63)),
    # slurm/dialects.py as_str: a lone surrogate leaves the record out (no UnicodeEncodeError in the store)
    "job id not encodable": lambda tmp: _round_with(tmp, _record(array_job_id=7, array_task_string="\ud800"),
                                                    dialect="22.05"),
    # jobfiles.py _open: a path with a surrogate or a NUL is a JobFileError (the channel refused)
    "comment path not encodable": lambda tmp: _round_with(
        tmp, _record(comment=f"{COMMENT_KEY}{tmp}/job-7\ud800.orders")),
    # slurm/dialects.py as_time: a time past 2**40 leaves the record out
    "squeue time beyond a float": lambda tmp: _round_with(tmp, _record(start_time=10**400), dialect="22.05"),
    "squeue submit time beyond a float": lambda tmp: _round_with(tmp, _record(submit_time=10**400),
                                                                 dialect="22.05"),
    # slurm/hostlist.py: at most 100,000 names or GPU indices (no hang, no MemoryError)
    "hostlist range without bound": lambda tmp: _round_with(tmp, _record(nodes="n[000-999999999]")),
    "IDX range without bound": lambda tmp: _round_with(tmp, _record(gres_detail=["gpu:2(IDX:0-99999999999)"])),
    # slurm/runner.py: bytes that are not UTF-8 are replaced; deep nesting or huge integers are SlurmJsonError
    "squeue output not UTF-8": lambda tmp: _squeue_printed(tmp, b'{"name": "tr\xffain"}'),
    "squeue output nested": lambda tmp: _only(
        lambda: run_json(lambda argv: "[" * 100_000 + "]" * 100_000, ["squeue"]), SlurmJsonError),
    "squeue output with a huge integer": lambda tmp: _only(
        lambda: run_json(lambda argv: '{"n": ' + "9" * 5000 + "}", ["squeue"]), SlurmJsonError),
    # cli/users.py cmd_submit: --elastic by the one grammar (contract.read_range), exit 2
    "submit --elastic with superscript digits": lambda tmp: _cli(
        tmp, "submit", "--elastic", "²:³", "--dry-run", "--", "python", "x.py"),
}
"""The bugs the fuzzing found and that are fixed, each by its reproducer (which failed before its fix)."""


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
        res = fuzz.run_case(family, seed, command=main)
        assert res.outcome, "no outcome named"
        problems = unknown_problems(res)
        assert not problems, f"{family} seed {seed}: {res.described}\n" + "\n".join([*res.foreign, *res.failures])

    case()


def test_bench_fuzz_json_has_the_required_keys_and_no_unknown_problem() -> None:
    out = fuzz.run(200, seed=0, command=main)
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
    out = fuzz.run(len(fuzz.SCHEDULE), seed=7, command=main)
    again = Counter(f"{fuzz.family_of(i)}:{fuzz.run_case(fuzz.family_of(i), 7, i, command=main).outcome}"
                    for i in range(len(fuzz.SCHEDULE)))
    assert dict(again) == out["outcomes"]


# -- each known bug, until it is fixed; each fixed one, for good -------------------------------------------

@pytest.mark.parametrize("name", sorted(KNOWN))
@pytest.mark.xfail(strict=True, reason="a known bug (KNOWN): when this passes, the bug is fixed; remove its entry")
def test_known_bug_is_fixed(name: str, tmp_path: Path) -> None:
    repro = KNOWN[name].repro
    assert repro is not None
    repro(tmp_path)


@pytest.mark.parametrize("name", sorted(FIXED))
def test_fixed_bug_stays_fixed(name: str, tmp_path: Path) -> None:
    FIXED[name](tmp_path)


def test_bench_fuzz_command_prints_the_run_json(capsys: pytest.CaptureFixture[str]) -> None:
    from slurm_elastic.cli import main

    assert main(["bench", "fuzz", "--cases", str(len(fuzz.SCHEDULE)), "--seed", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= REQUIRED_KEYS | {"seconds", "families", "places", "failures"}
    assert out["cases"] == len(fuzz.SCHEDULE) and set(out["families"]) == set(fuzz.FAMILIES)
    assert (out["foreign_exceptions"], out["rounds_failed"], out["other_jobs_unplanned"]) == (0, 0, 0), out["failures"]


def test_a_config_watching_another_partition_is_not_counted_as_losing_jobs() -> None:
    """CI found seed 6240005: a config whose partition is ``1e999gpu`` rightly sees none of the
    jobs (they are in ``gpu``); the fuzz counted them as honest jobs left unplanned."""
    res = fuzz.run_case("config", 6240005, command=main)
    assert res.outcome and not unknown_problems(res), res.failures


def test_a_restart_count_past_16_bits_is_refused_for_its_job_not_an_overflow_in_the_journal() -> None:
    """CI found seed 9304839: a 25.11 ``restart_cnt`` of 2**63 passed the 64-bit bound, and shrinking
    that job raised OverflowError in the actuator (SQLite's integers are signed 64 bits). Slurm counts
    requeues in 16 bits: the record is refused and its job left out, with that reason."""
    res = fuzz.run_case("slurm_records", 9304839, command=main)
    assert res.outcome and not unknown_problems(res), res.failures
