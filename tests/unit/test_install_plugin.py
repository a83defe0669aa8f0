"""``install-plugin``: the plugin slurmstepd loads as root lives only where root alone can change it, and
``--write`` never overwrites a site's ``job_submit.lua`` (nor follows a link), writing atomically.

The trust rule is injected (:class:`~slurm_elastic.spank.build.Trust`: the owners trusted, the folder
where the walk up stops) so these tests can build a trusted tree under ``tmp_path``, whose ``/tmp``
above is writable by every user. Files of another owner are made with ``os.chown`` (root only).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from slurm_elastic.cli import main
from slurm_elastic.spank import build
from slurm_elastic.spank.build import JOB_SUBMIT_LUA, Trust, UnsafePathError, check_root_only, write_plugstack

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
STRANGER = 4242


@pytest.fixture()
def trust(tmp_path: Path) -> Trust:
    """Trust our own uid (root in CI) below ``tmp_path``."""
    return Trust(owners=frozenset({os.geteuid()}), top=tmp_path)


@pytest.fixture()
def site(tmp_path: Path, trust: Trust, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A trusted ``etc`` folder, and the CLI trusting what ``trust`` trusts."""
    monkeypatch.setattr(build, "SITE_TRUST", trust)
    etc = tmp_path / "etc"
    etc.mkdir(mode=0o755)
    return etc


def _file(path: Path, text: str = "x", mode: int = 0o644) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


# --- who may change the plugin ---------------------------------------------------------------------

def test_a_plugin_below_a_folder_every_user_can_write_is_refused(tmp_path: Path) -> None:
    so = _file(tmp_path / "slurm_elastic.so")
    with pytest.raises(UnsafePathError, match=r"/tmp is writable by every user \(mode 1777\)"):
        check_root_only(so, "the plugin")


def test_a_plugin_in_a_trusted_tree_passes(tmp_path: Path, trust: Trust) -> None:
    lib = tmp_path / "lib"
    lib.mkdir(mode=0o755)
    assert check_root_only(_file(lib / "slurm_elastic.so", mode=0o755), "the plugin", trust) == ()


@needs_root
def test_a_plugin_another_user_owns_is_refused(tmp_path: Path, trust: Trust) -> None:
    so = _file(tmp_path / "slurm_elastic.so")
    os.chown(so, STRANGER, -1)
    with pytest.raises(UnsafePathError, match=rf"{so} is owned by uid {STRANGER}"):
        check_root_only(so, "the plugin", trust)


@needs_root
def test_a_folder_above_the_plugin_another_user_owns_is_refused(tmp_path: Path, trust: Trust) -> None:
    lib = tmp_path / "a" / "lib"
    lib.mkdir(parents=True, mode=0o755)
    (tmp_path / "a").chmod(0o755)
    os.chown(tmp_path / "a", STRANGER, -1)
    so = _file(lib / "slurm_elastic.so")
    with pytest.raises(UnsafePathError, match=rf"{tmp_path / 'a'} is owned by uid {STRANGER}"):
        check_root_only(so, "the plugin", trust)


@pytest.mark.parametrize(("mode", "who"), [(0o664, "its group"), (0o646, "every user")])
def test_a_plugin_others_can_write_is_refused(tmp_path: Path, trust: Trust, mode: int, who: str) -> None:
    so = _file(tmp_path / "slurm_elastic.so", mode=mode)
    with pytest.raises(UnsafePathError, match=rf"{so} is writable by {who}"):
        check_root_only(so, "the plugin", trust)


def test_a_group_writable_folder_above_is_refused(tmp_path: Path, trust: Trust) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    lib.chmod(0o2775)
    so = _file(lib / "slurm_elastic.so")
    with pytest.raises(UnsafePathError, match=rf"{lib} is writable by its group \(mode 2775\)"):
        check_root_only(so, "the plugin", trust)


def test_a_plugin_that_is_a_symbolic_link_is_refused(tmp_path: Path, trust: Trust) -> None:
    real = _file(tmp_path / "real.so")
    link = tmp_path / "slurm_elastic.so"
    link.symlink_to(real)
    with pytest.raises(UnsafePathError, match=rf"{link} is a symbolic link \(to {real}\)"):
        check_root_only(link, "the plugin", trust)


@needs_root
def test_a_linked_folder_is_checked_by_what_it_resolves_to(tmp_path: Path, trust: Trust) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o755)
    so = _file(real / "slurm_elastic.so")
    (tmp_path / "lib").symlink_to(real)
    notes = check_root_only(tmp_path / "lib" / "slurm_elastic.so", "the plugin", trust)
    assert notes == (f"{tmp_path / 'lib'} is a symbolic link: checked what it resolves to, {real}",)
    os.chown(real, STRANGER, -1)
    with pytest.raises(UnsafePathError, match=rf"{real} is owned by uid {STRANGER}.*resolves to"):
        check_root_only(tmp_path / "lib" / so.name, "the plugin", trust)


def test_install_plugin_refuses_an_out_folder_below_tmp_and_builds_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "lib"
    assert main(["install-plugin", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "/tmp is writable by every user" in err and "slurmstepd" in err
    assert not out.exists()


# --- --write: plugstack.conf and job_submit.lua ----------------------------------------------------

def test_write_puts_the_line_and_job_submit_lua_into_a_fresh_folder(site: Path, trust: Trust) -> None:
    done = write_plugstack(site / "plugstack.conf", "required /usr/local/lib/slurm_elastic.so", trust=trust)
    assert (site / "plugstack.conf").read_text() == "required /usr/local/lib/slurm_elastic.so\n"
    assert done.job_submit == site / "job_submit.lua"
    assert (site / "job_submit.lua").read_bytes() == JOB_SUBMIT_LUA.read_bytes()
    assert {p.name for p in site.iterdir()} == {"plugstack.conf", "job_submit.lua"}  # no temp file left
    assert (site / "job_submit.lua").stat().st_mode & 0o777 == 0o644


def test_write_replaces_only_the_old_plugin_line_and_keeps_the_file_mode(site: Path, trust: Trust) -> None:
    conf = _file(site / "plugstack.conf", "optional /x/other.so\nrequired /old/slurm_elastic.so\n", mode=0o600)
    inode = conf.stat().st_ino
    write_plugstack(conf, "required /new/slurm_elastic.so", trust=trust)
    assert conf.read_text() == "optional /x/other.so\nrequired /new/slurm_elastic.so\n"
    assert conf.stat().st_mode & 0o777 == 0o600
    assert conf.stat().st_ino != inode  # a new file renamed over the old one, never rewritten in place


def test_write_runs_again_over_its_own_job_submit_lua(site: Path, trust: Trust) -> None:
    write_plugstack(site / "plugstack.conf", "required /a/slurm_elastic.so", trust=trust)
    lua = site / "job_submit.lua"
    inode = lua.stat().st_ino
    write_plugstack(site / "plugstack.conf", "required /b/slurm_elastic.so", trust=trust)
    assert lua.stat().st_ino == inode and (site / "plugstack.conf").read_text() == "required /b/slurm_elastic.so\n"


def test_write_never_overwrites_a_sites_job_submit_lua(site: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lua = _file(site / "job_submit.lua", "-- the site's own rules\n")
    rc = main(["install-plugin", "--out", str(site.parent / "lib"), "--write", str(site / "plugstack.conf")])
    out, err = capsys.readouterr()
    assert rc == 2 and err.count("\n") == 1
    assert f"{lua} exists" in err and "never overwritten" in err
    assert lua.read_text() == "-- the site's own rules\n"
    assert not (site / "plugstack.conf").exists() and not (site.parent / "lib").exists()  # nothing written
    assert f"# merge into {lua}" in out and "function slurm_job_submit(job_desc, part_list, submit_uid)" in out


def test_write_never_follows_a_link_at_job_submit_lua(site: Path, trust: Trust, tmp_path: Path) -> None:
    target = _file(tmp_path / "elsewhere.lua", "-- someone's file\n")
    (site / "job_submit.lua").symlink_to(target)
    with pytest.raises(UnsafePathError, match=r"job_submit.lua exists \(a symbolic link to .*elsewhere.lua\)"):
        write_plugstack(site / "plugstack.conf", "required /a/slurm_elastic.so", trust=trust)
    assert target.read_text() == "-- someone's file\n" and not (site / "plugstack.conf").exists()


def test_write_refuses_a_plugstack_that_is_a_link(site: Path, trust: Trust, tmp_path: Path) -> None:
    target = _file(tmp_path / "real.conf", "optional /x.so\n")
    (site / "plugstack.conf").symlink_to(target)
    with pytest.raises(UnsafePathError, match=r"plugstack.conf is a symbolic link"):
        write_plugstack(site / "plugstack.conf", "required /a/slurm_elastic.so", trust=trust)
    assert target.read_text() == "optional /x.so\n"


def test_write_refuses_a_folder_others_can_write(tmp_path: Path) -> None:
    with pytest.raises(UnsafePathError, match="/tmp is writable by every user"):
        write_plugstack(tmp_path / "plugstack.conf", "required /a/slurm_elastic.so")
    assert not (tmp_path / "plugstack.conf").exists() and not (tmp_path / "job_submit.lua").exists()


def test_install_plugin_builds_checks_and_writes(site: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lib = site.parent / "lib"
    assert main(["install-plugin", "--out", str(lib), "--write", str(site / "plugstack.conf")]) == 0
    assert (lib / "slurm_elastic.so").stat().st_mode & 0o022 == 0
    assert (site / "plugstack.conf").read_text() == f"required {lib / 'slurm_elastic.so'}\n"
    assert (site / "job_submit.lua").read_bytes() == JOB_SUBMIT_LUA.read_bytes()
    assert f"required {lib / 'slurm_elastic.so'}" in capsys.readouterr().out


def test_an_out_folder_below_a_file_is_refused_in_one_line(site: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plain = _file(site.parent / "plain")
    assert main(["install-plugin", "--out", str(plain / "lib")]) == 2
    assert f"{plain} is not a folder" in capsys.readouterr().err


def test_site_files_are_written_from_the_package_and_never_over_a_file(site: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    from slurm_elastic.resources import EXAMPLE_CONFIG, SYSTEMD_UNIT

    lib = site.parent / "lib"
    _file(site / "elastic.toml", "# the site's own\n")
    assert main(["install-plugin", "--out", str(lib), "--site-files", str(site)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{site / 'elastic.toml'} exists" in err
    assert not lib.exists() and not (site / "slurm-elastic.service").exists()  # nothing built or written
    assert (site / "elastic.toml").read_text() == "# the site's own\n"
    (site / "elastic.toml").unlink()
    assert main(["install-plugin", "--out", str(lib), "--site-files", str(site)]) == 0
    assert (site / "slurm-elastic.service").read_bytes() == SYSTEMD_UNIT.read_bytes()
    assert (site / "elastic.toml").read_bytes() == EXAMPLE_CONFIG.read_bytes()
    assert (site / "elastic.toml").stat().st_mode & 0o777 == 0o644


def test_site_files_never_follow_a_link_at_a_target(site: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    (site / "slurm-elastic.service").symlink_to(tmp_path / "elsewhere.service")  # dangling: exists() is False
    assert main(["install-plugin", "--out", str(site.parent / "lib"), "--site-files", str(site)]) == 2
    assert "slurm-elastic.service exists" in capsys.readouterr().err
    assert not (tmp_path / "elsewhere.service").exists() and not (site.parent / "lib").exists()


# --- the release the plugin is built for ----------------------------------------------------------

def _fake_slurm(tmp_path: Path, *, headers: str, ctld: str, answering: str | None) -> Path:
    """A Slurm prefix: Debian's headers claiming release ``headers``, a ``slurmctld -V`` printing
    ``ctld``, and an ``scontrol show config`` naming the running ``answering`` release (or failing)."""
    prefix = tmp_path / "slurm"
    inc = prefix / "include" / "slurm"
    inc.mkdir(parents=True)
    for header in Path("/usr/include/slurm").glob("*.h"):
        (inc / header.name).write_bytes(header.read_bytes())
    major, minor, micro = (int(p) for p in headers.split("."))
    version_h = inc / "slurm_version.h"
    version_h.write_text(version_h.read_text().replace(
        "#define SLURM_VERSION_NUMBER 0x160508", f"#define SLURM_VERSION_NUMBER 0x{major:02x}{minor:02x}{micro:02x}"))
    no_answer = "echo 'slurm_load_ctl_conf error: Unable to contact slurm controller' >&2; exit 1"
    for folder, name, text in (("sbin", "slurmctld", f"echo 'slurm {ctld}'"),
                               ("bin", "scontrol", f"echo 'SLURM_VERSION           = {answering}'" if answering
                                else no_answer)):
        (prefix / folder).mkdir(exist_ok=True)
        _file(prefix / folder / name, f"#!/bin/sh\n{text}\n", mode=0o755)
    return prefix


needs_headers = pytest.mark.skipif(not Path("/usr/include/slurm/slurm_version.h").exists(),
                                   reason="Debian's libslurm-dev headers")


@needs_headers
@pytest.mark.parametrize(("answering", "ctld", "running"), [("25.11.7", "22.05.8", "the running slurmctld"),
                                                           (None, "25.11.7", "the installed")])
def test_a_plugin_for_another_release_than_the_running_one_is_refused_before_anything_is_built(
        site: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], answering: str | None, ctld: str,
        running: str) -> None:
    prefix = _fake_slurm(tmp_path, headers="22.05.8", ctld=ctld, answering=answering)
    out = tmp_path / "lib"
    assert main(["install-plugin", "--out", str(out), "--slurm-prefix", str(prefix),
                 "--write", str(site / "plugstack.conf")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"the headers in {prefix}/include are Slurm 22.05.8 but {running}" in err
    assert "is Slurm 25.11.7 (rule: Slurm loads a SPANK plugin only into the major.minor it was built for)" in err
    assert not out.exists() and not (site / "plugstack.conf").exists()


@needs_headers
def test_the_plugin_is_built_against_the_prefix_headers_of_the_running_release(
        site: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prefix = _fake_slurm(tmp_path, headers="25.11.2", ctld="25.11.7", answering="25.11.7")
    out = tmp_path / "lib"
    assert main(["install-plugin", "--out", str(out), "--slurm-prefix", str(prefix)]) == 0
    err = capsys.readouterr().err
    assert f"built against Slurm 25.11.2 ({prefix}/include), as the running slurmctld runs" in err
    assert build.header_release(prefix / "include") == (25, 11, 2)
    # the plugin carries the headers' release: Slurm compares it with its own
    assert bytes.fromhex("020b19") in (out / "slurm_elastic.so").read_bytes()


def test_write_is_refused_when_no_running_slurm_can_be_told(site: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    prefix = _fake_slurm(tmp_path, headers="22.05.8", ctld="22.05.8", answering=None)
    (prefix / "sbin" / "slurmctld").unlink()
    assert main(["install-plugin", "--out", str(tmp_path / "lib"), "--slurm-prefix", str(prefix),
                 "--write", str(site / "plugstack.conf")]) == 2
    assert "cannot tell which Slurm runs here" in capsys.readouterr().err


def test_the_version_header_is_read_once_bounded_and_never_from_a_fifo(tmp_path: Path) -> None:
    inc = tmp_path / "include"
    (inc / "slurm").mkdir(parents=True)
    header = inc / "slurm" / "slurm_version.h"
    os.mkfifo(header)
    with pytest.raises(build.PluginBuildError, match=r"not a file \(rule: the headers of a Slurm release\)"):
        build.header_release(inc)
    header.unlink()
    header.write_text("#define SLURM_VERSION_NUMBER 0x190b07\n" + "/* */\n" * 20_000)
    with pytest.raises(build.PluginBuildError, match=r"larger than 65536 bytes"):
        build.header_release(inc)
    header.write_text("#define SLURM_VERSION 25.11\n")
    with pytest.raises(build.PluginBuildError, match=r"no SLURM_VERSION_NUMBER line"):
        build.header_release(inc)
    header.write_text("#define SLURM_VERSION_NUMBER 0x190b07\n")
    assert build.header_release(inc) == (25, 11, 7)
