"""The shipped systemd unit stops the daemon alone: a lost worker's replacement is a detached ``srun
--overlap`` step the daemon started in the job (act/replace.py) and must outlive a stop or restart of
the daemon; the default ``KillMode=control-group`` would kill it with the daemon's cgroup."""

from __future__ import annotations

from pathlib import Path

import slurm_elastic

UNIT = Path(slurm_elastic.__file__).parent / "site_configs" / "systemd" / "slurm-elastic.service"


def _service_settings(text: str) -> dict[str, list[str]]:
    section, out = "", {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line
        elif section == "[Service]" and "=" in line:
            key, value = line.split("=", 1)
            out.setdefault(key.strip(), []).append(value.strip())
    return out


def test_stopping_the_daemon_leaves_the_replacement_workers_running() -> None:
    settings = _service_settings(UNIT.read_text())
    assert settings.get("KillMode") == ["process"], settings.get("KillMode")
    # and the capability that stops a replacement which never joined (it runs as the user) is kept
    assert "CAP_KILL" in settings["CapabilityBoundingSet"][-1].split()
