"""The real dev Slurm cluster: GPUs, the --elastic SPANK plugin + job_submit.lua record, shrinking, teardown.

Tests share one session cluster and run in file order; the last one brings it down and checks that
nothing is left behind.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from slurm_elastic.dev import devcluster, network
from slurm_elastic.dev.instance import Instance

from .conftest import DevCluster


def _names(cluster: DevCluster) -> list[str]:
    """The node names of the session's cluster (``n01..n04`` for instance 0, ``m01..`` for instance 1)."""
    return [n.name for n in devcluster.nodes_for(4, Instance(cluster.info["instance"]))]

pytestmark = pytest.mark.slurm


def test_nodes_idle_with_four_gpus(cluster: DevCluster) -> None:
    nodes = cluster.json(["sinfo", "--json"])["nodes"]
    assert sorted(n["name"] for n in nodes) == _names(cluster)
    for node in nodes:
        assert node["state"] == "idle", node
        assert node["gres"] == "gpu:v100:4", node
        assert "gres/gpu=4" in node["tres"], node
    assert cluster.info["seconds"] < 30


def test_elastic_job_gets_admin_comment(cluster: DevCluster) -> None:
    proc = cluster.run(["sbatch", "--parsable", "--elastic=2:8", "--gres=gpu:1", "--wrap", "sleep 30"], check=True)
    assert proc.stderr == ""  # e.g. no "option provided by both" warning from a doubly registered option
    job_id = int(proc.stdout.strip())
    job = cluster.job(job_id)
    assert job["admin_comment"] == "slurm-elastic gpus=2:8 mode=exo"
    cluster.run(["scancel", str(job_id)], check=True)


def test_elastic_without_value_means_no_maximum(cluster: DevCluster) -> None:
    job_id = cluster.sbatch("--elastic", "--wrap", "true")
    assert cluster.job(job_id)["admin_comment"] == "slurm-elastic gpus=1:0 mode=exo"


def test_plain_job_has_no_record(cluster: DevCluster) -> None:
    job_id = cluster.sbatch("--wrap", "true")
    assert not cluster.job(job_id)["admin_comment"]


@pytest.mark.parametrize("value", ["8:2", "abc", "0:3", "2:", ":4", "2:8:9"])
def test_bad_elastic_value_refused(cluster: DevCluster, value: str) -> None:
    proc = cluster.run(["sbatch", f"--elastic={value}", "--wrap", "true"])
    assert proc.returncode != 0
    reason = (f"sbatch: error: --elastic: invalid value '{value}': expected MIN:MAX in ASCII digits with "
              "1 <= MIN <= 65536 and MAX 0 (no maximum) or MIN <= MAX <= 65536 (e.g. --elastic=2:8)")
    assert reason in proc.stderr.splitlines(), proc.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["--elastic", "--elastic-batch=512:64"], "--elastic-batch: invalid value '512:64'"),
    (["--elastic", "--elastic-mode=both"], "--elastic-mode: invalid value 'both': expected exo or endo"),
    (["--elastic-mode=endo"], "--elastic-batch and --elastic-mode need --elastic"),
])
def test_bad_batch_or_mode_refused(cluster: DevCluster, args: list[str], message: str) -> None:
    proc = cluster.run(["sbatch", *args, "--wrap", "true"])
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr


def test_batch_and_mode_recorded(cluster: DevCluster) -> None:
    job_id = cluster.sbatch("--elastic=2:4", "--elastic-batch=64:512", "--elastic-mode=endo", "--wrap", "true")
    assert cluster.job(job_id)["admin_comment"] == "slurm-elastic gpus=2:4 batch=64:512 mode=endo"


def test_job_sees_spank_env(cluster: DevCluster) -> None:
    out = cluster.root / "jobs" / "spank-env.out"
    job_id = cluster.sbatch("--elastic=2:8", "--gres=gpu:2", f"--output={out}", "--wrap",
                            "echo ELASTIC=$SLURM_SPANK_ELASTIC CVD=$CUDA_VISIBLE_DEVICES")
    cluster.wait_state(job_id, "COMPLETED")
    assert re.search(r"ELASTIC=2:8 CVD=\d,\d", out.read_text()), out.read_text()


def _update_retrying(cluster: DevCluster, *args: str) -> subprocess.CompletedProcess[str]:
    """``scontrol update ...``, retried while slurmctld says the DB index is still being set."""
    deadline = time.monotonic() + 10
    while True:
        proc = cluster.run(["scontrol", "update", *args])
        if proc.returncode == 0 or "DB index" not in proc.stderr or time.monotonic() > deadline:
            return proc
        time.sleep(0.3)


def test_shrink_gpu_job_frees_gpus(cluster: DevCluster) -> None:
    cluster.cancel_all()
    job_id = cluster.sbatch("-N2", "--gres=gpu:2", "--elastic=2:8", "--wrap", "srun sleep 120")
    job = cluster.wait_state(job_id, "RUNNING")
    assert job["node_count"] == 2
    proc = _update_retrying(cluster, f"JobId={job_id}", "NumNodes=1")
    assert proc.returncode == 0, proc.stderr
    job = cluster.job(job_id)
    assert job["node_count"] == 1
    assert job["nodes"] == job["batch_host"]
    assert job["admin_comment"] == "slurm-elastic gpus=2:8 mode=exo"
    want = {name: "gpu:v100:2" if name == job["batch_host"] else "gpu:v100:0" for name in _names(cluster)}
    deadline = time.monotonic() + 15  # the nodes' GRES follow the job's shrink, not always in the same second
    while True:
        used = {n["name"]: n["gres_used"] for n in cluster.json(["sinfo", "--json"])["nodes"] if n["name"] in want}
        if all(used[name].startswith(prefix) for name, prefix in want.items()) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert all(used[name].startswith(prefix) for name, prefix in want.items()), (used, job["batch_host"])
    cluster.cancel_all()


def _our_processes(root: Path) -> list[str]:
    """Live (non-zombie) processes whose command line names the cluster root."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if stat[stat.rindex(")") + 2] != "Z" and str(root) in cmd:
            found.append(f"{proc.name} {cmd}")
    return found


def test_down_leaves_nothing_behind(cluster: DevCluster) -> None:
    """Brings the session cluster down, checks nothing is left, and brings it up again for the tests
    that run after this one (the order of test modules must not matter)."""
    recorded = devcluster.status(cluster.root)
    assert recorded["up"]
    job_id = cluster.sbatch("-N2", "--gres=gpu:1", "--wrap", "srun sleep 300")  # a job still running at down
    cluster.wait_state(job_id, "RUNNING")
    devcluster.down(cluster.root)
    assert devcluster.down(cluster.root)["stopped"] == []  # idempotent
    which = Instance(cluster.info["instance"])  # another worker's cluster may be up beside this one
    nodes = devcluster.nodes_for(4, which)
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout.split()
    assert not {n.netns for n in nodes} & set(netns), netns
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    assert f" {which.bridge}:" not in links and not any(f" {n.veth}@" in links for n in nodes), links
    routes = subprocess.run(["ip", "route"], capture_output=True, text=True, check=True).stdout
    assert f"{which.subnet_prefix}." not in routes
    assert network.hosts_tag(cluster.root) not in network.HOSTS_FILE.read_text()
    assert _our_processes(cluster.root) == []
    status = devcluster.status(cluster.root)
    assert not status["up"] and status["daemons"] == {} and status["network"]["netns"] == []
    prefix = cluster.info.get("slurm_prefix")  # the same release again (its saved state is that release's)
    devcluster.up(nodes=4, gpus_per_node=4, root=cluster.root, slurm_prefix=Path(prefix) if prefix else None,
                  instance=which.number)
    assert devcluster.status(cluster.root)["up"]


def test_the_files_are_dealt_to_the_clusters_in_balanced_groups_that_keep_shared_state_together() -> None:
    """No cluster needed: the grouping ``make test`` runs the folder with."""
    from .conftest import FILE_SECONDS, TOGETHER, cluster_groups

    files = sorted(p.name for p in Path(__file__).parent.glob("test_*.py"))
    groups = cluster_groups(files, 2)
    assert cluster_groups(list(reversed(files)), 2) == groups and set(groups) == set(files)
    for unit in TOGETHER:
        assert len({groups[f] for f in unit if f in groups}) <= 1, unit
    load = [sum(FILE_SECONDS.get(f, 30) for f in files if groups[f] == g) for g in (0, 1)]
    assert abs(load[0] - load[1]) <= max(FILE_SECONDS.values()), load
    assert set(cluster_groups(files, 1).values()) == {0}
