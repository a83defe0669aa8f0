"""Build the ``--elastic`` SPANK plugin and produce the lines that install it.

Owns compiling ``slurm_elastic.c`` with gcc against the installed ``<slurm/spank.h>`` (Debian package
``libslurm-dev``) and the text of the ``plugstack.conf`` / ``slurm.conf`` lines. Must not edit a live
Slurm configuration by itself, nor run anything but the compiler.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from slurm_elastic.errors import ElasticError

SOURCE = Path(__file__).with_name("slurm_elastic.c")
PLUGIN_NAME = "slurm_elastic.so"
SPANK_HEADER = Path("/usr/include/slurm/spank.h")
JOB_SUBMIT_LUA = Path(__file__).resolve().parents[2] / "site_configs" / "dev" / "job_submit.lua"


class PluginBuildError(ElasticError):
    """The SPANK plugin cannot be built (missing compiler or header, or a compile error)."""


def build_plugin(out_dir: Path, *, cc: str = "gcc") -> Path:
    """Compile the SPANK plugin into ``out_dir/slurm_elastic.so``.

    Runs ``gcc -shared -fPIC -O2 -Wall -o OUT/slurm_elastic.so slurm_elastic.c``.

    Args:
        out_dir: folder for the shared object (created if missing).
        cc: the C compiler to run.

    Returns:
        The path of the built plugin.

    Raises:
        PluginBuildError: the compiler or ``slurm/spank.h`` is missing, or compiling failed.
    """
    compiler = shutil.which(cc)
    if compiler is None:
        raise PluginBuildError(f"compiler {cc!r} not found: install the Debian package gcc")
    if not SPANK_HEADER.exists():
        raise PluginBuildError(f"{SPANK_HEADER} not found: install the Debian package libslurm-dev")
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / PLUGIN_NAME
    tmp = out_dir / (PLUGIN_NAME + ".tmp")
    argv = [compiler, "-shared", "-fPIC", "-O2", "-Wall", "-Wno-unused-parameter", "-o", str(tmp), str(SOURCE)]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise PluginBuildError(f"{' '.join(argv)} failed (rc {proc.returncode}): {proc.stderr.strip()}")
    tmp.replace(out)  # atomic, so a running sbatch never loads a half-written plugin
    return out


def plugstack_line(path: Path) -> str:
    """The ``plugstack.conf`` line that loads the plugin at ``path``.

    ``required``: Slurm ignores the return codes of ``optional`` plugins, so a bad ``--elastic`` value
    would be accepted. This is safe because the plugin always returns 0 in remote context.
    """
    return f"required {path.resolve()}"


def install_lines() -> tuple[str, ...]:
    """The ``slurm.conf`` settings the plugin relies on (job_submit.lua writes the AdminComment record)."""
    return (
        "JobSubmitPlugins=lua  # with job_submit.lua (site_configs/dev/job_submit.lua) next to slurm.conf",
        "PlugStackConfig=/etc/slurm/plugstack.conf  # or wherever the plugstack line above lives",
    )


def write_plugstack(plugstack: Path, line: str) -> Path:
    """Put ``line`` into ``plugstack`` (replacing an older slurm_elastic line) and copy job_submit.lua beside it.

    Returns:
        The path of the copied ``job_submit.lua``.
    """
    old = plugstack.read_text().splitlines() if plugstack.exists() else []
    kept = [x for x in old if PLUGIN_NAME not in x]
    plugstack.parent.mkdir(parents=True, exist_ok=True)
    plugstack.write_text("\n".join([*kept, line]) + "\n")
    lua = plugstack.with_name("job_submit.lua")
    shutil.copyfile(JOB_SUBMIT_LUA, lua)
    return lua
