"""What the fuzzing of issue 13 found, one unit at a time: each hostile value is refused by the
reader that owns it, with the module's own error naming the value and the rule (never a
TypeError, OverflowError, UnicodeError, RecursionError, a hang or a MemoryError).

The end-to-end reproducers (a daemon round over the hostile job's cluster) are in
``tests/property/test_fuzz_hostile.py`` (``FIXED``).
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from slurm_elastic import jobfiles
from slurm_elastic.errors import ConfigError
from slurm_elastic.jobfiles import JobFileError
from slurm_elastic.observe.job_reports import REPORT_NUMBER_MAX, ReportRefused, row_of
from slurm_elastic.slurm.dialects import DocKind, SlurmJsonError, Where, as_int, as_str, as_str_list, as_time
from slurm_elastic.slurm.hostlist import MAX_NAMES, expand_hostlist, parse_gres, parse_index_list, parse_tres_gpus
from slurm_elastic.slurm.runner import SlurmCommandError, run_command, run_json

WHERE = Where(DocKind.SQUEUE, "job 7")


def _report(**fields: Any) -> dict[str, Any]:
    return {"kind": "progress", "t": 1.7e9, "samples": 6400, "world": 2, "global_batch": 256,
            "throughput": 1000.0, "epoch_size": 50_000, **fields}


# -- report lines (observe/job_reports.py) -----------------------------------------------------------------

@pytest.mark.parametrize("kind", [["progress"], {"a": 1}, 3, None, "\ud800"])
def test_a_report_kind_that_is_not_a_known_string_is_refused(kind: object) -> None:
    with pytest.raises(ReportRefused, match=r"kind=.*must be one of"):
        row_of(_report(kind=kind))


@pytest.mark.parametrize(("key", "value"), [
    ("t", 10**400), ("loss", 10**400), ("throughput", 10**400), ("epoch_size", 2**64),
    ("samples", 2**63), ("world", 2**62 + 1), ("global_batch", 10**4000), ("t", 1e300),
])
def test_a_report_number_past_2_62_is_refused_as_out_of_range(key: str, value: float) -> None:
    with pytest.raises(ReportRefused, match=rf"^{key}=.*out of range \(must be <= 2\*\*62\)") as err:
        row_of(_report(**{key: value}))
    assert len(str(err.value)) < 200


def test_a_report_number_at_2_62_is_read() -> None:
    assert row_of(_report(epoch_size=REPORT_NUMBER_MAX)).epoch_size == 2**62


# -- job records (slurm/dialects.py) ---------------------------------------------------------------------

def test_a_string_with_a_lone_surrogate_is_refused() -> None:
    with pytest.raises(SlurmJsonError, match=r"key 'array_task_string': holds a lone surrogate"):
        as_str("1-3\ud800", "array_task_string", WHERE)
    with pytest.raises(SlurmJsonError, match="lone surrogate"):
        as_str_list(["RUNNING", "\udcff"], "job_state", WHERE)
    assert as_str("tr\ufffdain é", "name", WHERE) == "tr\ufffdain é"


@pytest.mark.parametrize("value", [10**400, -(10**400), 2**64, {"set": True, "infinite": False, "number": 2**64}])
def test_an_integer_past_64_bits_is_refused(value: object) -> None:
    with pytest.raises(SlurmJsonError, match="out of range") as err:
        as_int(value, "node_count", WHERE)
    assert len(str(err.value)) < 300


def test_64_bit_integers_are_read() -> None:
    assert as_int(2**64 - 2, "node_count", WHERE) == 2**64 - 2  # NO_VAL64
    assert as_int({"set": True, "infinite": False, "number": 4}, "node_count", WHERE) == 4


@pytest.mark.parametrize("value", [10**400, 2**40 + 1, -1, {"set": True, "infinite": False, "number": 2**63}])
def test_a_time_out_of_range_is_refused(value: object) -> None:
    with pytest.raises(SlurmJsonError, match=r"key 'start_time'"):
        as_time(value, "start_time", WHERE)


def test_times_in_range_are_read() -> None:
    assert as_time(1_700_000_000, "start_time", WHERE) == 1_700_000_000
    assert as_time(0, "start_time", WHERE) is None
    assert as_time({"set": False, "infinite": False, "number": 0}, "start_time", WHERE) is None
    assert float(as_time(2**40, "start_time", WHERE) or 0) == 2**40


# -- hostlists, GRES, TRES (slurm/hostlist.py) -----------------------------------------------------------

@pytest.mark.parametrize("text", ["n[000-999999999]", "r[1-1000]n[1-1000]", "a[1-60000],b[1-60000]",
                                  "n[1-99999,1-99999]"])
def test_a_hostlist_past_max_names_is_refused_at_once(text: str) -> None:
    # CPU time, not wall time: "at once" means without expanding the names first, which a loaded
    # machine's wall clock cannot tell (it failed once at 1 s of wall with the suite run twice beside it)
    t0 = time.process_time()
    with pytest.raises(SlurmJsonError, match=f"expands to more than {MAX_NAMES}"):
        expand_hostlist(text)
    assert time.process_time() - t0 < 1.0


def test_a_hostlist_of_max_names_is_read() -> None:
    assert len(expand_hostlist(f"n[1-{MAX_NAMES}]")) == MAX_NAMES


@pytest.mark.parametrize("text", ["0-99999999999", "0-99999,100000-199999"])
def test_an_index_list_past_max_names_is_refused(text: str) -> None:
    with pytest.raises(SlurmJsonError, match=f"expands to more than {MAX_NAMES}"):
        parse_index_list(text)


@pytest.mark.parametrize("text", ["n[" + "9" * 5000 + "]", "n[٣]", "n[1-" + "9" * 19 + "]"])
def test_hostlist_numbers_are_ascii_and_at_most_18_digits(text: str) -> None:
    with pytest.raises(SlurmJsonError, match="must be N or N-M with digits"):
        expand_hostlist(text)


@pytest.mark.parametrize("text", ["gpu:²", "gpu:2(CNT:²)", "gpu:2(IDX:" + "9" * 5000 + ")",
                                  "gpu:2(CNT:" + "9" * 5000 + ")"])
def test_gres_numbers_are_ascii_and_bounded(text: str) -> None:
    with pytest.raises(SlurmJsonError):
        parse_gres(text)


def test_a_tres_count_of_5000_digits_is_refused() -> None:
    with pytest.raises(SlurmJsonError, match="must be gres/gpu"):
        parse_tres_gpus("gres/gpu:" + "9" * 5000)


# -- command output (slurm/runner.py) ------------------------------------------------------------------

def _printing(data: bytes, code: int = 0) -> list[str]:
    return [sys.executable, "-c", f"import sys; sys.stdout.buffer.write({data!r}); sys.stderr.buffer.write({data!r}); "
            f"sys.exit({code})"]


def test_output_that_is_not_utf8_is_read_with_replacement_characters() -> None:
    out = run_command(_printing(b'{"name": "tr\xffain"}'))
    assert out == '{"name": "tr\ufffdain"}'
    with pytest.raises(SlurmCommandError, match=r"exit 3: .*tr\ufffdain"):
        run_command(_printing(b'{"name": "tr\xffain"}', 3))


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, '{"n": ' + "9" * 5000 + "}", '{"a": "\xff', ""])
def test_json_that_python_cannot_read_is_a_slurm_json_error(text: str) -> None:
    with pytest.raises(SlurmJsonError, match="squeue --json: output is not JSON") as err:
        run_json(lambda argv: text, ["squeue", "--json"])
    assert len(str(err.value)) < 400


# -- job files (jobfiles.py) -----------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["job\ud800.orders", "job\x00.orders"])
def test_a_job_file_name_that_is_not_a_file_name_is_a_job_file_error(name: str, tmp_path: Path) -> None:
    with pytest.raises(JobFileError, match=r"not a file name \(rule: no NUL, and encodable as UTF-8\)"):
        jobfiles.read(tmp_path / name, 0, max_size=4096)
    with pytest.raises(JobFileError, match="not a file name"):
        jobfiles.append(tmp_path / name, 0, b"x", max_size=4096)


# -- train-drl (drl/train.py) ----------------------------------------------------------------------------

@pytest.mark.parametrize("gap", [math.inf, math.nan, -1.0, 1e300])
def test_train_drl_refuses_a_round_gap_that_is_not_finite_and_in_range(gap: float) -> None:
    pytest.importorskip("torch")
    from slurm_elastic.drl.train import TrainConfig

    with pytest.raises(ConfigError, match="round_gap"):
        TrainConfig(round_gap=gap)
