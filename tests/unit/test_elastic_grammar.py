"""One ``--elastic`` grammar, three readers: the SPANK plugin (C), ``job_submit.lua`` and ``contract.py``.

The same table of option values runs through

* the Python reader (:mod:`slurm_elastic.contract`): the value checks and the whole AdminComment;
* ``site_configs/dev/job_submit.lua`` under a Lua interpreter (``lua5.4``, ``lua5.3``, ``lua`` or
  ``luajit``; skipped when none is installed), with a stub ``slurm`` table, fed the job's
  ``spank_job_env`` as slurmctld holds it;
* the plugin's own option callbacks and ``slurm_spank_init_post_opt``, compiled from
  ``slurm_elastic/spank/slurm_elastic.c`` into a small harness with the installed ``<slurm/spank.h>``
  and stubs for the few Slurm functions it calls (skipped without ``cc`` or the header).

Every reader must accept exactly the same values and write the same canonical record
``slurm-elastic gpus=MIN:MAX[ batch=MIN:MAX] mode=exo|endo`` (the grammar is in the docstring of
:mod:`slurm_elastic.contract`).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from slurm_elastic import contract
from slurm_elastic.contract import ContractError, parse_elastic_request
from slurm_elastic.resources import JOB_SUBMIT_LUA

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "slurm_elastic" / "spank" / "slurm_elastic.c"
JOB_SUBMIT = JOB_SUBMIT_LUA
SPANK_H = Path("/usr/include/slurm/spank.h")

BARE = object()
"""``--elastic`` given without a value (the plugin records ``1:0``)."""

Case = tuple[object, str | None, str | None, str | None]
"""(--elastic value or BARE, --elastic-batch value or None, --elastic-mode value or None,
the record written, or None: refused)."""


def _ok(gpus: str, batch: str | None = None, mode: str = "exo") -> str:
    return f"slurm-elastic gpus={gpus}" + (f" batch={batch}" if batch is not None else "") + f" mode={mode}"


CASES: list[Case] = [
    # accepted
    ("2:8", None, None, _ok("2:8")),
    (BARE, None, None, _ok("1:0")),
    ("1:1", None, None, _ok("1:1")),
    ("1:0", None, None, _ok("1:0")),  # MAX 0: no maximum
    ("8:0", None, None, _ok("8:0")),
    ("65536:65536", None, None, _ok("65536:65536")),
    ("65536:0", None, None, _ok("65536:0")),
    ("1:65536", None, None, _ok("1:65536")),
    ("2:8", "64:512", "endo", _ok("2:8", "64:512", "endo")),
    ("2:8", "1:16777216", "exo", _ok("2:8", "1:16777216")),
    ("2:8", "16777216:16777216", None, _ok("2:8", "16777216:16777216")),
    ("2:8", "1:1", None, _ok("2:8", "1:1")),
    (BARE, None, "endo", _ok("1:0", None, "endo")),
    # GPU ranges refused: MIN >= 1, MAX 0 or MIN..65536
    *[(v, None, None, None) for v in (
        "0:4", "0:0", "4:2", "1:65537", "65537:0", "65537:65537", "2147483647:2147483647", "1:2147483647",
        "1:4294967297", "4294967297:4294967298", "99999999999999999999:1", "1:" + "9" * 400,
    )],
    # GPU ranges refused: only ASCII digits, no sign, blank, leading zero or other form
    *[(v, None, None, None) for v in (
        "²:³", "١:٢", "２:８", "2:８", "+2:8", "-1:4", " 2:8", "2:8 ", "2 :8", "2:+8", "2:-0", "02:8", "2:08",
        "2:00", "00:0", "2", "2:", ":8", "2:8:9", "", "2:8\n", "\n2:8", "0x2:8", "2.0:8", "1e1:20", "2_0:30",
        "2:8\t", "2;8", "2-8", ":", "2:8,", "2:8=1",
    )],
    # batch ranges refused (a batch range always has a maximum: leave it out for none)
    *[("2:8", v, None, None) for v in (
        "64:0", "0:64", "512:64", "1:16777217", "16777217:16777217", "1:2147483647", "६४:५१२", "064:512",
        "64:512 ", "", "64", "64:512\n", "-64:512",
    )],
    # modes refused
    *[("2:8", None, v, None) for v in ("EXO", "exo ", "", "endo\n", "fast", "exoendo", "ex", " endo")],
]

IDS = [f"{i}-{'bare' if e is BARE else repr(e)[:24]}-{b!r}-{m!r}" for i, (e, b, m, _) in enumerate(CASES)]


def _blank(*values: object) -> bool:
    return any(isinstance(v, str) and (v != v.strip() or any(c.isspace() for c in v)) for v in values)


# -- Python: contract.py -----------------------------------------------------------------------------


def _python_values(elastic: object, batch: str | None, mode: str | None) -> str | None:
    """The record the value checks give (what job_submit.lua would write), or None when refused."""
    gpus = "1:0" if elastic is BARE else str(elastic)
    try:
        lo, hi = contract.read_range("gpus", gpus)
        record = f"slurm-elastic gpus={lo}:{hi or 0}"
        if batch is not None:
            blo, bhi = contract.read_range("batch", batch)
            record += f" batch={blo}:{bhi}"
        return record + f" mode={contract.read_mode(mode if mode is not None else 'exo').value}"
    except ContractError:
        return None


@pytest.mark.parametrize(("elastic", "batch", "mode", "record"), CASES, ids=IDS)
def test_python_value_checks(elastic: object, batch: str | None, mode: str | None, record: str | None) -> None:
    assert _python_values(elastic, batch, mode) == record


@pytest.mark.parametrize(("elastic", "batch", "mode", "record"),
                         [c for c in CASES if not _blank(*c[:3])],
                         ids=[i for i, c in zip(IDS, CASES, strict=True) if not _blank(*c[:3])])
def test_python_admin_comment(elastic: object, batch: str | None, mode: str | None, record: str | None) -> None:
    """The whole AdminComment (values with blanks are left out: the comment splits on blanks, and the
    two readers before it refuse them, as the table shows)."""
    comment = _ok("1:0" if elastic is BARE else str(elastic), batch, mode if mode is not None else "exo")
    try:
        req = parse_elastic_request(comment, job_id="7")
    except ContractError as exc:
        assert record is None, exc
        assert str(exc).startswith("job 7: AdminComment ")
        return
    assert req is not None
    got = _ok(f"{req.min_gpus}:{req.max_gpus or 0}",
              None if req.min_batch is None else f"{req.min_batch}:{req.max_batch}", req.mode.value)
    assert got == record


def test_python_limits_are_the_documented_ones() -> None:
    assert (contract.MAX_GPUS, contract.MAX_BATCH) == (65536, 2**24)
    for word in ("65536", "16777216", "no maximum", "ASCII"):
        assert word in (contract.__doc__ or "")


# -- the two other readers, one process for the whole table ------------------------------------------


def _hex(value: object) -> str:
    if value is None:
        return "-"
    if value is BARE:
        return "~"
    return str(value).encode().hex() or "="  # "=": the empty value


def _table() -> str:
    return "".join(f"{_hex(e)} {_hex(b)} {_hex(m)}\n" for e, b, m, _ in CASES)


def _records(out: str) -> list[str | None]:
    got: list[str | None] = []
    for line in out.splitlines():
        word, _, rest = line.partition(" ")
        got.append(bytes.fromhex(rest).decode() if word == "OK" else None)
    assert len(got) == len(CASES), out
    return got


def _compare(got: list[str | None]) -> None:
    wrong = [f"{IDS[i]}: got {g!r}, want {c[3]!r}" for i, (g, c) in enumerate(zip(got, CASES, strict=True))
             if g != c[3]]
    assert not wrong, "\n".join(wrong)


_LUA_DRIVER = r"""
local function unhex(h)
  if h == "-" then return nil end
  if h == "=" then return "" end
  return (h:gsub("..", function(x) return string.char(tonumber(x, 16)) end))
end
local function tohex(s)
  return (s:gsub(".", function(c) return string.format("%02x", string.byte(c)) end))
end
slurm = { SUCCESS = 0, ERROR = -1 }
function slurm.log_user(fmt, ...) io.stderr:write(string.format(fmt, ...), "\n") end
function slurm.log_info(fmt, ...) end
assert(loadfile(arg[1]))()
for line in io.lines(arg[2]) do
  local e, b, m = line:match("^(%S+) (%S+) (%S+)$")
  local env, n = {}, 0
  local function put(key, value)
    if value ~= nil then env[n] = key .. "=" .. value; n = n + 1 end
  end
  put("ELASTIC", e == "~" and "1:0" or unhex(e))  -- the plugin records a bare --elastic as 1:0
  put("ELASTIC_BATCH", unhex(b))
  put("ELASTIC_MODE", unhex(m))
  local job = { spank_job_env = env }
  local rc = slurm_job_submit(job, {}, 1000)
  if rc == slurm.SUCCESS and job.admin_comment ~= nil then
    print("OK " .. tohex(job.admin_comment))
  else
    print("REFUSED")
  end
end
"""


def _lua() -> str | None:
    for name in ("lua5.4", "lua5.3", "lua", "luajit"):
        path = shutil.which(name)
        if path:
            return path
    return None


def test_job_submit_lua_reads_the_table_alike(tmp_path: Path) -> None:
    lua = _lua()
    if lua is None:
        pytest.skip("no Lua interpreter (lua5.4, lua5.3, lua, luajit): job_submit.lua not run")
    (tmp_path / "driver.lua").write_text(_LUA_DRIVER)
    (tmp_path / "cases").write_text(_table())
    proc = subprocess.run([lua, str(tmp_path / "driver.lua"), str(JOB_SUBMIT), str(tmp_path / "cases")],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    _compare(_records(proc.stdout))


_C_HARNESS = r"""
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include PLUGIN_SOURCE

static char env_gpus[256], env_batch[256], env_mode[256];

spank_err_t spank_option_register(spank_t sp, struct spank_option *opt) { return ESPANK_SUCCESS; }
spank_context_t spank_context(void) { return S_CTX_LOCAL; }
const char *spank_strerror(spank_err_t err) { return "stub"; }
void slurm_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}
spank_err_t spank_job_control_setenv(spank_t sp, const char *name, const char *value, int overwrite)
{
    char *dst = !strcmp(name, "ELASTIC") ? env_gpus : !strcmp(name, "ELASTIC_BATCH") ? env_batch :
            !strcmp(name, "ELASTIC_MODE") ? env_mode : NULL;
    if (!dst)
        return ESPANK_BAD_ARG;
    snprintf(dst, sizeof(env_gpus), "%s", value);
    return ESPANK_SUCCESS;
}

static char *unhex(const char *h)
{
    size_t n = strlen(h), i;
    char *out;
    if (!strcmp(h, "-") || !strcmp(h, "~"))
        return NULL;
    if (!strcmp(h, "="))
        return strdup("");
    out = calloc(n / 2 + 1, 1);
    for (i = 0; i + 1 < n; i += 2) {
        unsigned int c;
        sscanf(h + i, "%2x", &c);
        out[i / 2] = (char)c;
    }
    return out;
}

static void hexout(const char *s)
{
    for (; *s; s++)
        printf("%02x", (unsigned char)*s);
}

int main(void)
{
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, stdin) > 0) {
        char *e = strtok(line, " \n"), *b = strtok(NULL, " \n"), *m = strtok(NULL, " \n");
        char *ev = unhex(e), *bv = unhex(b), *mv = unhex(m);
        int rc;
        elastic_gpus[0] = elastic_batch[0] = elastic_mode[0] = '\0';
        env_gpus[0] = env_batch[0] = env_mode[0] = '\0';
        rc = _opt_elastic(0, ev, 0);
        if (!rc && bv)
            rc = _opt_elastic_batch(0, bv, 0);
        if (!rc && mv)
            rc = _opt_elastic_mode(0, mv, 0);
        if (!rc)
            rc = slurm_spank_init_post_opt(NULL, 0, NULL);
        if (rc) {
            printf("REFUSED\n");
        } else {
            char record[1024];
            snprintf(record, sizeof(record), "slurm-elastic gpus=%s%s%s mode=%s", env_gpus,
                 env_batch[0] ? " batch=" : "", env_batch, env_mode);
            printf("OK ");
            hexout(record);
            printf("\n");
        }
        free(ev); free(bv); free(mv);
    }
    free(line);
    return 0;
}
"""


def test_spank_plugin_reads_the_table_alike(tmp_path: Path) -> None:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or not SPANK_H.is_file():
        pytest.skip("no C compiler or no <slurm/spank.h>: the SPANK plugin's parser not compiled")
    (tmp_path / "harness.c").write_text(_C_HARNESS)
    exe = tmp_path / "harness"
    build = subprocess.run([cc, "-O1", "-Wall", "-Wno-unused-parameter", "-Werror",
                            f'-DPLUGIN_SOURCE="{PLUGIN}"', "-o", str(exe), str(tmp_path / "harness.c")],
                           capture_output=True, text=True, timeout=120, check=False)
    assert build.returncode == 0, build.stderr
    proc = subprocess.run([str(exe)], input=_table(), capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    _compare(_records(proc.stdout))
