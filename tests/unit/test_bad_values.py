"""Bad values are refused where they come in (issue #13, item 10): elastic.toml, the command line, trace CSVs.

Every case names the value and the rule in one line; the CLI exits 2 with that one line (no
traceback, no usage block); nothing hangs (each case runs under an alarm) and nothing is written.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from slurm_elastic import config, policies
from slurm_elastic.cli import main
from slurm_elastic.config import load, parse
from slurm_elastic.errors import ConfigError, TraceError
from slurm_elastic.experiments.comparison import parse_seeds
from slurm_elastic.sim import workload
from slurm_elastic.sim.workload import load_trace


@contextlib.contextmanager
def _memory_cap(extra: int = 4 << 30) -> Iterator[None]:
    """Fail with MemoryError (not take the machine) when the body asks for ``extra`` bytes more."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    size = int(Path("/proc/self/statm").read_text().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    cap = size + extra if hard == resource.RLIM_INFINITY else min(hard, size + extra)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Fail (not hang, not take the machine) when the body runs longer than ``seconds`` or asks
    for 4 GiB more memory."""

    def ring(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        with _memory_cap():
            yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _id(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:30]}...({len(text)} chars)"


def _one_line(message: str) -> None:
    assert "\n" not in message and "Traceback" not in message, message


# -- elastic.toml ------------------------------------------------------------------------------------

ONES = "[daemon]\npolicy = 'ones'\n[policy.ones]\n"
DP = "[daemon]\npolicy = 'dp'\n[policy.dp]\n"


@pytest.mark.parametrize(("text", "message"), [
    # tables that are not tables
    ("daemon = 5\n", "daemon = 5: must be a table"),
    ("policy = 5\n", "policy = 5: must be a table"),
    ("guards = 5\n", "guards = 5: must be a table"),
    ("[policy]\nones = 5\n", "policy.ones = 5: must be a table"),
    # policy parameters: the same checks as --param
    (ONES + "generations = 'x'\n", "ones.generations = 'x': must be >= 0 and <= 1000 (an integer)"),
    (ONES + "generations = 1e9\n", "ones.generations = 1000000000.0: must be"),
    (ONES + "generations = 1000000000\n", "ones.generations = 1000000000: must be"),
    (ONES + "generations = 10.0\n", "ones.generations = 10.0: must be"),
    (ONES + "generations = true\n", "ones.generations = True: must be"),
    (ONES + "mutation_rate = nan\n", "ones.mutation_rate = nan: must be"),
    (ONES + "sigma = inf\n", "ones.sigma = inf: must be"),
    (ONES + "population = 1.5\n", "ones.population = 1.5: must be"),
    (ONES + "gate = 1\n", "ones.gate = 1: must be true or false"),
    (ONES + "ftf_bound = inf\n", "ones.ftf_bound = inf: must be"),
    (DP + "interval = 'dp'\n", "dp.interval = 'dp': must be"),
    (DP + "kmax = 2147483647\n", "dp.kmax = 2147483647: must be"),
    (DP + "mode = 5\n", "dp.mode = 5: must be"),
    ("[daemon]\npolicy = 'tiresias'\n[policy.tiresias]\nthresholds = [1, nan]\n", "tiresias.thresholds = [1, nan]"),
    ("[daemon]\npolicy = 'efq'\n[policy.efq]\nalpha = nan\n", "efq.alpha = nan: must be"),
    ("[daemon]\npolicy = 'drl'\n[policy.drl]\nmodel = 5\n", "drl.model = 5: must be"),
    # [guards]
    ("[guards]\nmax_gpus_per_job = nan\n", "guards.max_gpus_per_job = nan: must be"),
    ("[guards]\nmax_resizes_per_hour = 1.5\n", "guards.max_resizes_per_hour = 1.5: must be"),
    ("[guards]\nmax_gpus_per_user = inf\n", "guards.max_gpus_per_user = inf: must be"),
    ("[guards]\nmax_gpus_per_account = 100000\n", "guards.max_gpus_per_account = 100000: must be"),
    ("[guards]\ncooldown_s = inf\n", "guards.cooldown_s = inf: must be"),
    ("[guards]\ncooldown_s = true\n", "guards.cooldown_s = True: must be"),
    ("[guards]\ncooldown_s = -1\n", "guards.cooldown_s = -1: must be"),
    ("[guards]\nprotect_rigid = 1\n", "guards.protect_rigid = 1: must be true or false"),
    # [daemon]
    ("[daemon]\npoll_interval = 1e-9\n", "daemon.poll_interval = 1e-09: must be >= 0.5"),
    ("[daemon]\npoll_interval = nan\n", "daemon.poll_interval = nan: must be"),
    ("[daemon]\npoll_interval = 0.1\n", "daemon.poll_interval = 0.1: must be >= 0.5"),
    ("[daemon]\nmax_idle = inf\n", "daemon.max_idle = inf: must be"),
    ("[daemon]\nmax_idle = 1e9\n", "daemon.max_idle = 1000000000.0: must be"),
    ("[daemon]\nseed = -1\n", "daemon.seed = -1: must be"),
    ("[daemon]\nseed = 4294967296\n", "daemon.seed = 4294967296: must be"),
    ("[daemon]\nseed = true\n", "daemon.seed = True: must be"),
    ("[daemon]\nseed = 1.5\n", "daemon.seed = 1.5: must be"),
    ("[daemon]\nmetrics_address = '127.0.0.1:99999'\n", "daemon.metrics_address = '127.0.0.1:99999': must be"),
    ("[daemon]\nmetrics_address = '127.0.0.1:0'\n", "PORT 1..65535"),
    ("[daemon]\nmetrics_address = '127.0.0.1:²'\n", "daemon.metrics_address = '127.0.0.1:²': must be"),
    ("[daemon]\nmetrics_address = '127.0.0.1:'\n", "daemon.metrics_address = '127.0.0.1:': must be"),
    ("[daemon]\nmetrics_address = 'local host:80'\n", "daemon.metrics_address = 'local host:80': must be"),
    ("[daemon]\nmetrics_address = 9410\n", "daemon.metrics_address = 9410: must be"),
    ("[daemon]\ndefault_model = 'nope'\n", "daemon.default_model = 'nope': must be one of"),
    ("[daemon]\ndefault_model = 5\n", "daemon.default_model = 5: must be"),
    ("[daemon]\nstore = '/'\n", "daemon.store = '/': must be a file path"),
    ("[daemon]\nstore = '/tmp/'\n", "daemon.store = '/tmp/': must be a file path"),
    ("[daemon]\nstore = ''\n", "daemon.store = '': must be a file path"),
    ('[daemon]\nstore = "/a\\u0000b"\n', "daemon.store = '/a\\x00b': must be a file path"),
    ("[daemon]\npartitions = ['a b']\n", "daemon.partitions = ['a b']: must be"),
    ("[daemon]\npartitions = ['gpu,cpu']\n", "must be"),
    ("[daemon]\npartitions = ['" + "x" * 300 + "']\n", "must be"),
    ("[daemon]\npartitions = [1]\n", "daemon.partitions = [1]: must be"),
    ("[daemon]\npolicy = 5\n", "daemon.policy = 5: must be"),
], ids=_id)
def test_bad_config_values_are_refused_in_one_line(text: str, message: str) -> None:
    with deadline(10), pytest.raises(ConfigError) as exc:
        parse(text)
    assert message in str(exc.value)
    _one_line(str(exc.value))


def test_good_config_values_still_load() -> None:
    cfg = parse(ONES + "generations = 1000\nmutation_rate = 0.5\ninterval = 60\n"
                "[guards]\ncooldown_s = 30\nmax_resizes_per_hour = 6\nmax_gpus_per_job = 65536\n")
    assert cfg.policy_params["generations"] == 1000 and cfg.guards.max_gpus_per_job == 65536
    cfg = parse("[daemon]\npoll_interval = 0.5\nmax_idle = 0.5\nmetrics_address = '[::1]:65535'\nseed = 4294967295\n"
                "default_model = 'imagenet'\npartitions = ['gpu', 'v100.a_b-c']\n")
    assert cfg.daemon.seed == 2**32 - 1 and cfg.daemon.metrics_address == "[::1]:65535"
    assert parse("[guards]\ncooldown_s = 0\n").guards.cooldown_s == 0


def test_store_must_be_a_file_whose_folder_exists_or_can_be_made(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    for bad in (tmp_path, tmp_path / "file" / "state.db"):
        with pytest.raises(ConfigError, match=r"daemon\.store = .*: must be a file path"):
            parse(f"[daemon]\nstore = '{bad}'\n")
    assert parse(f"[daemon]\nstore = '{tmp_path / 'new' / 'state.db'}'\n").daemon.store == tmp_path / "new/state.db"
    assert not (tmp_path / "new").exists()  # checked, not made


def test_config_files_that_are_not_text_or_not_files(tmp_path: Path) -> None:
    bad = tmp_path / "latin1.toml"
    bad.write_bytes(b'[daemon]\npolicy = "dp\xff"\n')
    nested = tmp_path / "nested.toml"
    nested.write_bytes(b"a = " + b"[" * 5000 + b"]" * 5000)
    big = tmp_path / "big.toml"
    big.write_bytes(b"# padding\n" * 200_000)
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    for path, message in ((bad, "not UTF-8"), (nested, "nested"), (big, "larger than"), (tmp_path, "not a file"),
                          (fifo, "not a file")):
        with deadline(10), pytest.raises(ConfigError) as exc:
            load(path)
        assert str(path) in str(exc.value) and message in str(exc.value), str(exc.value)
        _one_line(str(exc.value))


@pytest.mark.parametrize(("text", "message"), [
    (b"daemon = 5\n", "daemon = 5: must be a table"),
    (b"[daemon]\npolicy = 'ones'\n[policy.ones]\ngenerations = 'x'\n", "ones.generations = 'x'"),
    (b"\xff\xfe", "not UTF-8"),
], ids=_id)
def test_check_config_prints_one_line_and_exits_2(text: bytes, message: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "elastic.toml"
    path.write_bytes(text)
    assert main(["check-config", str(path)]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.err.count("\n") == 1 and captured.out == ""
    assert captured.err.startswith(f"slurm-elastic check-config: {path}: ")


# -- policy parameters -------------------------------------------------------------------------------


def test_every_policy_parameter_has_a_type_and_range() -> None:
    import inspect

    for name in policies.available():
        factory = policies._FACTORIES[name]
        declared = {p for p in inspect.signature(factory).parameters if p != "self"}
        assert set(policies.PARAMETERS[name]) == declared, name


_WRONG: dict[str, list[Any]] = {
    "int": [1.5, 10.0, True, "x", None, math.nan, 10**30],
    "float": ["x", True, None, math.nan, math.inf, -math.inf, 1e308, [1]],
    "bool": [1, 0, "true", None],
    "choice": [5, "nope", None, ["queue"]],
    "floats": ["3600", [math.nan], [1.0] * 1000, [True], [2.0, 1.0], None],
    "path": [5, "", "a\x00b", "x" * 5000, None],
}


@pytest.mark.parametrize("name", policies.available())
def test_every_parameter_refuses_values_of_the_wrong_type_or_range(name: str) -> None:
    for param, spec in policies.PARAMETERS[name].items():
        for value in _WRONG[spec.kind]:
            if value is None and spec.optional:
                continue
            with pytest.raises(ConfigError) as exc:
                policies.create(name, **{param: value})
            assert f".{param} = " in str(exc.value) and ": must" in str(exc.value), (name, param, value, exc.value)
            _one_line(str(exc.value))


def test_parameter_limits() -> None:
    assert policies.create("ones", generations=1000).generations == 1000  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"ones\.generations = 1001: must be >= 0 and <= 1000"):
        policies.create("ones", generations=1001)
    assert policies.create("ones", sigma=None, population=None).sigma is None  # type: ignore[attr-defined]
    assert policies.create("dp", kmax=65536, interval=30).interval == 30.0
    assert policies.create("tiresias", thresholds=[100, 200.5]).thresholds == (100.0, 200.5)  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"dp\.mode = 'sideways'"):
        policies.create("dp-fixed", mode="sideways")


# -- the command line --------------------------------------------------------------------------------


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with deadline(60):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
    return code, capsys.readouterr().err


TRACE = "job_id,submit_time,num_gpus,duration\na,0,1,60\n"


@pytest.mark.parametrize(("argv", "message"), [
    (["plan", "--param", "generations=x"], "ones.generations = 'x': must be"),
    (["plan", "--seed", "-1"], "argument --seed: -1: must be >= 0 and <= 4294967295"),
    (["plan", "--seed", "4294967296"], "argument --seed: 4294967296: must be"),
    (["plan", "--param", "generations=1e308"], "ones.generations = 1e+308: must be"),
    (["plan", "--param", "generations=NaN"], "ones.generations = nan: must be"),
    (["plan", "--param", "mutation_rate=Infinity"], "ones.mutation_rate = inf: must be"),
    (["plan", "--param", "generations=" + "9" * 5000], "argument --param: 'generations=9999"),
    (["plan", "--param", "generations=" + "[" * 100_000], "argument --param: 'generations=[[[["),
    (["plan", "--param", "=3"], "must look like KEY=VALUE"),
    (["plan", "--param", "gen erations=3"], "must look like KEY=VALUE"),
    (["plan", "--gpus", "99999999"], "argument --gpus: 99999999: must be"),
    (["plan", "--gpus", "٣"], "argument --gpus: '٣' is not an integer"),
    (["plan", "--jobs", "10000000"], "argument --jobs: 10000000: must be"),
    (["plan", "--gpus", "x"], "argument --gpus: 'x' is not an integer"),
    (["plan", "--rounds", "1000000000"], "argument --rounds"),
    (["bench", "planner", "--policy", "ones", "--param", "generations=abc"], "ones.generations = 'abc': must be"),
    (["bench", "planner", "--seed", "-1"], "argument --seed: -1: must be"),
    (["bench", "planner", "--gpus", "1000000"], "argument --gpus"),
    (["bench", "simulate", "--round-gap", "nan"], "argument --round-gap: 'nan': must be a finite number"),
    (["bench", "simulate", "--seed", "-1"], "argument --seed"),
    (["simulate", "--trace", "TRACE", "--round-gap", "nan"], "argument --round-gap: 'nan': must be a finite number"),
    (["simulate", "--trace", "TRACE", "--round-gap", "inf"], "argument --round-gap: 'inf'"),
    (["simulate", "--trace", "TRACE", "--round-gap", "-1"], "argument --round-gap: -1: must be >= 0"),
    (["simulate", "--trace", "TRACE", "--round-gap", "1e300"], "argument --round-gap"),
    (["simulate", "--trace", "TRACE", "--seeds", "1-1000000000"], "--seeds '1-1000000000'"),
    (["simulate", "--trace", "TRACE", "--seeds", "٣"], "--seeds '٣'"),
    (["simulate", "--trace", "TRACE", "--seeds", "4294967296"], "--seeds '4294967296'"),
    (["simulate", "--trace", "TRACE", "--gpus", "4", "--policy", "ones", "--param", "ones.generations=1e9"],
     "ones.generations = 1000000000.0: must be"),
    (["what-if", "--since", "now-1d", "--policy", "dp", "--gpus", "8", "--elastic-range", "nan"],
     "argument --elastic-range: 'nan'"),
    (["what-if", "--since", "now-1d", "--policy", "dp", "--gpus", "8", "--elastic-range", "1e300"],
     "argument --elastic-range"),
    (["demo", "--timeout", "nan"], "argument --timeout: 'nan'"),
    (["train-drl", "--seed", "-1", "--out", "OUT"], "argument --seed: -1: must be"),
    (["train-drl", "--gpus", "-4", "--out", "OUT"], "argument --gpus"),
    (["train-drl", "--gpus", "99999999", "--out", "OUT"], "argument --gpus: 99999999: must be"),
    (["train-drl", "--jobs", "0", "--out", "OUT"], "argument --jobs: 0: must be >= 1"),
    (["train-drl", "--episodes", "99999999999", "--out", "OUT"], "argument --episodes: 99999999999: must be"),
    (["train-drl", "--seed", "٣", "--out", "OUT"], "argument --seed: '٣' is not an integer"),
    (["train-drl", "--set", "round_gap=Infinity", "--out", "OUT"], "round_gap = inf: must be finite"),
    (["submit", "--elastic", "²:³", "--dry-run", "--", "python", "x.py"], "--elastic: gpus='²:³': must be MIN:MAX"),
    (["submit", "--elastic", "2:99999", "--dry-run", "--", "python", "x.py"], "--elastic: gpus='2:99999'"),
    (["submit", "--elastic", "2:0", "--dry-run", "--", "python", "x.py"], "submit needs a maximum"),
    (["submit", "--elastic", "2:4", "--batch", "1:x", "--dry-run", "--", "python", "x.py"], "--batch: batch='1:x'"),
    (["submit", "--elastic", "2:4", "--batch", "٣:٤", "--dry-run", "--", "python", "x.py"], "--batch: batch='٣:٤'"),
    (["submit", "--elastic", "2:4", "--cpus-per-task", "0", "--dry-run", "--", "python", "x.py"],
     "argument --cpus-per-task: 0: must be >= 1 and <= 1024"),
    (["bench", "fuzz", "--cases", "-1"], "argument --cases: -1: must be >= 0"),
    (["bench", "fuzz", "--seed", "-1"], "argument --seed: -1: must be"),
], ids=_id)
def test_bad_command_line_values_exit_2_with_one_line(argv: list[str], message: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "t.csv").write_text(TRACE)
    argv = [str(tmp_path / "t.csv") if a == "TRACE" else str(tmp_path / "m.npz") if a == "OUT" else a for a in argv]
    code, err = _run(argv, capsys)
    assert code == 2 and message in err and err.count("\n") == 1, err[:2000]
    assert list(tmp_path.iterdir()) == [tmp_path / "t.csv"]  # nothing written


def test_parse_seeds_bounds() -> None:
    assert parse_seeds("1-3,7") == [1, 2, 3, 7]
    assert parse_seeds("0,4294967295") == [0, 2**32 - 1]
    for bad in ("1-1000000000", "4294967296", "٣", "1_0", " ", "1--3", "+1"):
        with deadline(10), pytest.raises(ConfigError, match="--seeds"):
            parse_seeds(bad)


# -- trace CSV ---------------------------------------------------------------------------------------

HEADER = "job_id,submit_time,num_gpus,duration\n"


@pytest.mark.parametrize(("body", "words"), [
    ("a,0,1,60,extra\n", [":2:", "5 fields", "4 columns", "'extra'"]),
    ("a,0,1\n", [":2:", "3 fields", "4 columns"]),
    ("a," + "1" * 131_073 + ",1,60\n", [":2:", "column submit_time", "131073 characters", "at most 1024"]),
    ("x" * 2000 + ",0,1,60\n", [":2:", "column job_id", "at most 1024"]),
    ('a,"' + ("1" * 60_000 + "\n") * 3 + '",1,60\n', [":2:"]),
    ("a,0,1e18,60\n", [":2:", "num_gpus = '1e18'", "<= 65536"]),
    ("a,0,65537,60\n", [":2:", "num_gpus = '65537'", "<= 65536"]),
    ("a,0,٣,60\n", [":2:", "num_gpus = '٣'"]),
    ("a,1e300,1,60\n", [":2:", "submit_time = '1e300'", "< 100000000"]),
    ("a,100000000,1,60\n", [":2:", "submit_time = '100000000'", "< 100000000", "3.2 years"]),
    ("a,nan,1,60\n", [":2:", "submit_time = 'nan'"]),
    ("a,inf,1,60\n", [":2:", "submit_time = 'inf'"]),
    ("a,-1,1,60\n", [":2:", "submit_time = '-1'"]),
    ("a,0,1,1e300\n", [":2:", "duration = '1e300'"]),
    ("a,0,1,0\n", [":2:", "duration = '0'"]),
    ("a,0,1,nan\n", [":2:", "duration = 'nan'"]),
    ("a,0\x00,1,60\n", [":2:"]),
    ("a,0,1,60\nb\x01c,0,1,60\n", [":3:", "column job_id", "printable"]),
], ids=_id)
def test_bad_trace_rows_name_file_line_column_value_and_rule(body: str, words: list[str], tmp_path: Path) -> None:
    path = tmp_path / "trace.csv"
    path.write_text(HEADER + body)
    with deadline(10), pytest.raises(TraceError) as exc:
        load_trace(path)
    text = str(exc.value)
    assert str(path) in text and all(w in text for w in words), text[:2000]
    assert len(text) < 1000
    _one_line(text)


@pytest.mark.parametrize(("header", "body", "words"), [
    ("job_id,submit_time,num_gpus,duration,max_gpus\n", "a,0,1,60,1e18\n", ["max_gpus = '1e18'", "<= 65536"]),
    ("job_id,submit_time,num_gpus,duration,batch_size\n", "a,0,1,60,99999999999999999999\n",
     ["batch_size = '99999999999999999999'", "<= 16777216"]),
    ("job_id,submit_time,num_gpus,duration,max_batch\n", "a,0,1,60,99999999999999999999\n",
     ["max_batch = '99999999999999999999'"]),
    ("job_id,job_id,submit_time,num_gpus,duration\n", "a,b,0,1,60\n", [":1:", "job_id", "twice"]),
    ("job_id,submit_time,num_gpus,duration," + "c" * 2000 + "\n", "a,0,1,60,x\n", [":1:", "at most 1024"]),
], ids=_id)
def test_bad_optional_columns_and_headers(header: str, body: str, words: list[str], tmp_path: Path) -> None:
    path = tmp_path / "trace.csv"
    path.write_text(header + body)
    with deadline(10), pytest.raises(TraceError) as exc:
        load_trace(path)
    assert str(path) in str(exc.value) and all(w in str(exc.value) for w in words), str(exc.value)[:2000]


def test_trace_file_caps_and_kinds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = tmp_path / "rows.csv"
    rows.write_text(HEADER + "a,0,1,60\nb,0,1,60\nc,0,1,60\n")
    assert len(load_trace(rows)) == 3
    monkeypatch.setattr(workload, "MAX_TRACE_ROWS", 2)
    with pytest.raises(TraceError, match=r"rows\.csv:4: more than 2 job rows"):
        load_trace(rows)
    monkeypatch.setattr(workload, "MAX_TRACE_BYTES", 40)
    with pytest.raises(TraceError, match=r"rows\.csv: larger than 40 bytes"):
        load_trace(rows)
    monkeypatch.undo()
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)
    for path in (fifo, tmp_path):
        with deadline(10), pytest.raises(TraceError, match="not a file"):
            load_trace(path)
    latin = tmp_path / "latin.csv"
    latin.write_bytes(HEADER.encode() + b"\xff,0,1,60\n")
    with pytest.raises(TraceError, match="not UTF-8"):
        load_trace(latin)


def test_a_good_trace_still_loads_with_its_defaults_clamped(tmp_path: Path) -> None:
    path = tmp_path / "trace.csv"
    path.write_text("job_id,submit_time,num_gpus,duration,model\na,0,65536,60,cifar10\nb,2591999.5,1,1e8,\n")
    a, b = load_trace(path)
    assert (a.requested_gpus, a.max_gpus, a.max_batch <= 2**24) == (65536, 65536, True)
    assert b.submit_time == 2591999.5


def test_simulate_with_a_bad_trace_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "trace.csv"
    path.write_text(HEADER + "a,0,1,60,extra\n")
    code, err = _run(["simulate", "--trace", str(path), "--policy", "dp", "--quiet"], capsys)
    assert code == 2 and f"{path}:2:" in err and err.count("\n") == 1, err


def test_the_engine_refuses_a_round_gap_that_is_not_finite(tmp_path: Path) -> None:
    from slurm_elastic.sim.engine import simulate

    path = tmp_path / "trace.csv"
    path.write_text(HEADER + "a,0,1,60\n")
    for gap in (math.nan, math.inf):
        with deadline(10), pytest.raises(ConfigError, match="round gap"):
            simulate(load_trace(path), policies.create("dp"), gpus=4, round_gap=gap)


def test_config_module_stays_cheap_to_import() -> None:
    import subprocess
    import sys

    code = "import sys, slurm_elastic.config; print('slurm_elastic_predictor.profiles' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
    assert config.DEFAULT_PATH.name == "elastic.toml"
