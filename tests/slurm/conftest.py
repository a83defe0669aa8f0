"""The real dev Slurm clusters for the ``slurm`` tests: one per pytest-xdist worker that runs them,
brought up once per session, always brought down.

Skips when Slurm (or root) is missing, unless ``SLURM_ELASTIC_REQUIRE_SLURM=1`` (set by CI): then the
missing prerequisites are a failure. With ``SLURM_ELASTIC_SLURM_PREFIX=DIR`` the cluster runs the Slurm
release built into DIR by ``scripts/build-slurm`` instead of Debian's 22.05 (``scripts/release-check``).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from slurm_elastic.dev import devcluster
from slurm_elastic.dev.instance import MAX_INSTANCES
from slurm_elastic.resources import EXAMPLE_TRAINER


def base_state(job: dict[str, Any]) -> str:
    """A job's base state from its ``squeue --json`` record: one word (22.05), or a list, base first."""
    state = job["job_state"]
    return str(state[0] if isinstance(state, list) else state)


@dataclass
class DevCluster:
    """A running dev cluster: its root, the environment for Slurm commands, and helpers to run them."""

    root: Path
    env: dict[str, str]
    info: dict[str, Any]

    def run(self, argv: Sequence[str], *, check: bool = False,
            timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """Run a Slurm command against this cluster (argv list, from the jobs folder)."""
        proc = subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=timeout,
                              cwd=self.root / "jobs", check=False)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} failed (rc {proc.returncode}): {proc.stderr.strip()}")
        return proc

    def json(self, argv: Sequence[str]) -> dict[str, Any]:
        """Run a ``--json`` Slurm command and parse its output."""
        out: dict[str, Any] = json.loads(self.run(argv, check=True).stdout)
        return out

    def sbatch(self, *args: str) -> int:
        """Submit with ``sbatch --parsable ARGS``; returns the job id."""
        return int(self.run(["sbatch", "--parsable", *args], check=True).stdout.strip().split(";")[0])

    def job(self, job_id: int) -> dict[str, Any]:
        """The job's record from ``squeue --json``."""
        for job in self.json(["squeue", "--json"])["jobs"]:
            if job["job_id"] == job_id:
                return dict(job)
        raise AssertionError(f"job {job_id} not in squeue --json")

    def log_of(self, job_id: int, lines: int = 40) -> str:
        """The last lines slurmctld and the slurmds logged about ``job_id`` (for failure messages)."""
        needles = (f"JobId={job_id} ", f"JobId={job_id}\n", f"job {job_id} ", f"StepId={job_id}.")
        found: list[str] = []
        for path in sorted((self.root / "log").glob("slurm*.log")):
            for line in path.read_text(errors="replace").splitlines():
                if any(n in line + "\n" for n in needles):
                    found.append(f"{path.name}: {line}")
        return "\n".join(found[-lines:])

    def wait_state(self, job_id: int, state: str, timeout: float = 30.0) -> dict[str, Any]:
        """Poll ``squeue --json`` until the job is in ``state``."""
        deadline = time.monotonic() + timeout
        job = self.job(job_id)
        while base_state(job) != state:
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} is {job['job_state']} ({job.get('state_reason')}), not {state}")
            time.sleep(0.3)
            job = self.job(job_id)
        return job

    def cancel_all(self) -> None:
        """``scancel`` every job (of every user) and wait until no job holds a node."""
        ids = self.run(["squeue", "-h", "-o", "%i"]).stdout.split()
        if ids:
            self.run(["scancel", *sorted(set(ids))])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            states = {base_state(j) for j in self.json(["squeue", "--json"])["jobs"]}
            if not states & {"RUNNING", "PENDING", "COMPLETING", "CONFIGURING", "SUSPENDED"}:
                return
            time.sleep(0.3)


CLUSTERS = 2
"""Dev clusters the folder's tests are spread over (``SLURM_ELASTIC_TEST_CLUSTERS`` overrides, 1 to 8):
each group of files goes to one pytest-xdist worker, which brings up a cluster of its own."""

FILE_SECONDS = {
    "test_daemon_acting.py": 371, "test_site_profile.py": 223, "test_grow_in_place.py": 190,
    "test_shrink_in_place.py": 120, "test_ported_tutorial.py": 99, "test_unit_privileges.py": 84,
    "test_daemon_shadow.py": 69, "test_report_whatif.py": 63, "test_release_paths.py": 60,
    "test_daemon_restart.py": 45, "test_requeued_launcher.py": 36, "test_devcluster.py": 31,
    "test_hostile_user.py": 18, "test_requeued_accounting.py": 12, "test_satellite_inputs.py": 5,
    "test_lost_worker_replaced.py": 300,
}
"""Seconds each file took in one ``make test`` on 2 cores (a loaded one: what matters is their ratios),
to balance the groups; a file not listed counts 30."""

TOGETHER = (frozenset({"test_satellite_inputs.py", "test_unit_privileges.py", "test_lost_worker_replaced.py"}),)
"""Files that must share a worker: they change the same machine-wide things (the session's test user
and the ACLs that let it search the interpreter's folders; ``/var/lib/slurm-elastic``)."""


def cluster_groups(files: Sequence[str], clusters: int) -> dict[str, int]:
    """File name -> cluster group: the files (kept with those of :data:`TOGETHER`) dealt, slowest
    first, to the group with the fewest seconds so far. The same files give the same groups."""
    units: list[frozenset[str]] = []
    for name in sorted(set(files)):
        if any(name in unit for unit in units):
            continue
        units.append(next((t & set(files) | {name} for t in TOGETHER if name in t), frozenset({name})))
    load = [0.0] * max(1, clusters)
    out: dict[str, int] = {}
    for unit in sorted(units, key=lambda u: (-sum(FILE_SECONDS.get(f, 30) for f in u), sorted(u))):
        group = min(range(len(load)), key=lambda g: (load[g], g))
        load[group] += sum(FILE_SECONDS.get(f, 30) for f in unit)
        out.update(dict.fromkeys(unit, group))
    return out


def _clusters() -> int:
    raw = os.environ.get("SLURM_ELASTIC_TEST_CLUSTERS", str(CLUSTERS))
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_INSTANCES:
        raise pytest.UsageError(f"SLURM_ELASTIC_TEST_CLUSTERS={raw!r}: must be an integer from 1 to {MAX_INSTANCES}")
    return int(raw)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test of a file shares one dev cluster with the other files of its group: under
    pytest-xdist (``make test`` runs ``-n 3 --dist loadgroup``) each group goes to one worker, in
    order, which brings up its own cluster (:func:`cluster`), while another worker runs the rest of
    the suite in the time the clusters' jobs leave the CPUs idle."""
    here = Path(__file__).parent
    mine = [item for item in items if here in item.path.parents]
    groups = cluster_groups([item.path.name for item in mine], _clusters())
    for item in mine:
        item.add_marker(pytest.mark.xdist_group(f"dev-cluster-{groups[item.path.name]}"))


def cluster_instance() -> int:
    """This process's dev cluster instance: one per pytest-xdist worker (``gw0`` -> 0, ``gw1`` -> 1, ...;
    0 outside xdist), so that two workers' clusters never share node names, subnets or ports."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(worker[2:]) % MAX_INSTANCES if worker[2:].isdigit() else 0


def _require() -> bool:
    return os.environ.get("SLURM_ELASTIC_REQUIRE_SLURM") == "1"


@pytest.fixture(scope="session")
def dev_root() -> Iterator[Path]:
    """The root folder of this session's dev cluster, directly in /tmp.

    Not under pytest's tmp_path: that is mode 0700, and munged wants every folder above its socket
    traversable by others. Short, so the munge socket path stays short.
    """
    root = Path(tempfile.mkdtemp(prefix="slurm-elastic-test-", dir="/tmp"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def cluster(dev_root: Path) -> Iterator[DevCluster]:
    """A 4-node x 4-GPU dev cluster, up for the whole session."""
    prefix = Path(os.environ["SLURM_ELASTIC_SLURM_PREFIX"]) if os.environ.get("SLURM_ELASTIC_SLURM_PREFIX") else None
    missing = devcluster.check_prerequisites(prefix)
    if missing:
        reason = "dev Slurm cluster unavailable: " + "; ".join(missing)
        if _require():
            pytest.fail(reason + " (SLURM_ELASTIC_REQUIRE_SLURM=1)")
        pytest.skip(reason)
    try:
        info = devcluster.up(nodes=4, gpus_per_node=4, root=dev_root, slurm_prefix=prefix, instance=cluster_instance())
    except devcluster.DevClusterError as exc:
        pytest.fail(f"devcluster up failed: {exc}")
    try:
        yield DevCluster(dev_root, devcluster.slurm_env(dev_root), info)
    finally:
        devcluster.down(dev_root)


EXAMPLE = EXAMPLE_TRAINER


@pytest.fixture
def submit_example(cluster: DevCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                   capsys: pytest.CaptureFixture[str]) -> Any:
    """Submit the launcher example with ``slurm-elastic submit`` as a user whose HOME is ``tmp_path``,
    and start it now at its requested size, as the daemon would (``scontrol update StartTime=now``):
    these tests act on the running job by hand, and ``job_submit.lua``'s 10 s hold, which is there so
    a daemon can size the job first, would only make each of them wait (the hold itself is tested
    in ``test_daemon_acting.py``: a job held while no daemon runs, and one the daemon starts first).

    Returns a function ``(output_name, *submit_options, dataset_size=..., script=...) -> job id``; a
    ``script`` (a training script and its arguments) replaces the example trainer.
    """
    from slurm_elastic.cli import main

    pytest.importorskip("torch")
    cluster.cancel_all()
    for key, value in cluster.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("HOME", str(tmp_path))

    def submit(out: Path, *options: str, dataset_size: int = 512, script: Sequence[str] = ()) -> int:
        command = list(script) or [str(EXAMPLE), "--dataset-size", str(dataset_size)]
        assert main(["submit", *options, "--output", str(out), "--", sys.executable, *command]) == 0
        job = int(capsys.readouterr().out.strip())
        cluster.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], check=True)
        return job

    return submit


TEST_USER = "slurm-elastic-test"
ACL_XATTR = "system.posix_acl_access"


def _acl_search_only(owner_mode: int, uid: int) -> bytes:
    """A POSIX ACL (its xattr form) keeping ``owner_mode``'s owner bits and letting ``uid`` search only."""
    import struct

    entries = [(0x01, (owner_mode >> 6) & 7, 0xFFFFFFFF), (0x02, 1, uid), (0x04, (owner_mode >> 3) & 7, 0xFFFFFFFF),
               (0x10, 1 | ((owner_mode >> 3) & 7), 0xFFFFFFFF), (0x20, owner_mode & 7, 0xFFFFFFFF)]
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", tag, perm, who) for tag, perm, who in entries)


def _left_by_a_killed_session(acl: bytes, uid: int) -> int | None:
    """The mode a folder had before :func:`_let_search` gave it ``acl``, if ``acl`` is exactly what it
    writes (a session killed before its teardown leaves it behind); None for any other ACL."""
    import struct

    if len(acl) != 4 + 5 * 8 or struct.unpack_from("<I", acl)[0] != 2:
        return None
    entries = [struct.unpack_from("<HHI", acl, 4 + 8 * i) for i in range(5)]
    mode = (entries[0][1] << 6) | (entries[2][1] << 3) | entries[4][1]
    return mode if acl == _acl_search_only(mode, uid) else None


def _let_search(user: pwd.struct_passwd, targets: Sequence[Path]) -> list[tuple[Path, int]]:
    """Let ``user`` search (never list or read) every folder above ``targets`` it cannot search yet.

    The tests' interpreter and its virtual environment may sit below a folder only root may enter
    (``/root`` is 0700, and pyenv lives there): the jobs of the test user run that interpreter. A
    per-user ACL entry (``u:USER:--x``) is added to just those folders. Returns what to undo.
    """
    changed: list[tuple[Path, int]] = []
    folders = {parent for t in targets for parent in Path(os.path.realpath(t)).parents}
    for folder in sorted(folders, key=lambda f: len(f.parts)):
        st = folder.stat()
        if st.st_mode & 0o001 or (st.st_uid == user.pw_uid and st.st_mode & 0o100):
            continue
        if ACL_XATTR in os.listxattr(folder):
            left = _left_by_a_killed_session(os.getxattr(folder, ACL_XATTR), user.pw_uid)
            if left is None:
                pytest.fail(f"{folder}: the test user {user.pw_name} cannot search it and it has an ACL already")
            changed.append((folder, left))  # ours, from a session killed before its teardown: undone at the end
            continue
        try:
            os.setxattr(folder, ACL_XATTR, _acl_search_only(st.st_mode, user.pw_uid))
        except OSError as exc:
            pytest.fail(f"{folder}: the test user {user.pw_name} cannot search it, and no ACL can say so: {exc}")
        changed.append((folder, stat.S_IMODE(st.st_mode)))
    return changed


@pytest.fixture(scope="session")
def test_user(cluster: DevCluster) -> Iterator[pwd.struct_passwd]:
    """A user who is not root, with a home in /home, to run jobs as (created for the session if missing).

    The dev cluster's nodes share this machine's users and file systems (slurmd runs as root), so
    its jobs run as this user; it may search the folders above this interpreter and the repository
    for the session (:func:`_let_search`). A user this fixture created is removed again, with its
    home, and every ACL entry it added.
    """
    created = False
    try:
        entry = pwd.getpwnam(TEST_USER)
    except KeyError:
        proc = subprocess.run(["useradd", "--create-home", "--user-group", "--shell", "/bin/bash", TEST_USER],
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            pytest.fail(f"useradd {TEST_USER}: {proc.stderr.strip()}")
        created = True
        entry = pwd.getpwnam(TEST_USER)
    changed = _let_search(entry, [Path(sys.executable), Path(__file__)])
    try:
        yield entry
    finally:
        cluster.cancel_all()
        for folder, mode in changed:
            os.removexattr(folder, ACL_XATTR)
            os.chmod(folder, mode)
        if created:
            subprocess.run(["userdel", "--remove", TEST_USER], capture_output=True, check=False)
