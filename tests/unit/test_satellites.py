"""Growing and shrinking launcher jobs: satellites, leaving workers, signed orders and reports (no Slurm)."""

from __future__ import annotations

import getpass
import json
import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from slurm_elastic.channel import Channel, verify
from slurm_elastic.contract import parse_elastic_request
from slurm_elastic.core.actions import Action, ActionKind
from slurm_elastic.core.model import JobId, JobState, NodeName, NodeState, Placement
from slurm_elastic.observe.inflight import owed_by_store
from slurm_elastic.observe.job_reports import ingest, runtime_of
from slurm_elastic.observe.snapshot import build_snapshot, fold
from slurm_elastic.slurm.actuator import SlurmActuator
from slurm_elastic.slurm.records import GpuRequest, JobRecord, NodeRecord, initial_workers
from slurm_elastic.slurm.satellites import (
    Inputs,
    NotExpressible,
    as_user,
    client_settings,
    leaving,
    new_satellites,
    read_env_file,
    sbatch_argv,
)
from slurm_elastic.store import ProgressRow, Store
from slurm_elastic.testing import make_job, make_nodes, make_snapshot, report_limits, shipped_profiles
from slurm_elastic_launcher.orders import Order
from slurm_elastic_launcher.reports import Reporter

USER = getpass.getuser()


WORK = "/home/alice/runs/resnet"


def rec(job_id: str, gpus: dict[str, int], *, state: JobState = JobState.RUNNING, comment: str = "",
        admin: str = "slurm-elastic gpus=1:16", batch_host: str | None = None, work_dir: str = WORK,
        user: str = USER) -> JobRecord:
    slots = tuple((NodeName(n), tuple(range(c))) for n, c in gpus.items())
    return JobRecord(JobId(job_id), int(job_id), "j", user, "acct", "gpu", state, (state.value.upper(),), 0, 0, None,
                     tuple(NodeName(n) for n in gpus), len(gpus), None, slots, GpuRequest(per_node=2), admin,
                     comment, batch_host or (next(iter(gpus)) if gpus else None), work_dir=work_dir)


def place(gpus: dict[str, int]) -> Placement:
    return Placement.of((n, g) for n, c in gpus.items() for g in range(c))


def test_initial_workers_are_block_distributed_over_the_nodes() -> None:
    r = rec("7", {"n1": 2, "n0": 2})
    assert initial_workers(r) == [("w0", "n1", "7"), ("w1", "n1", "7"), ("w2", "n0", "7"), ("w3", "n0", "7")]


def test_a_grow_is_one_satellite_per_node_with_fresh_worker_ids() -> None:
    layout = {"w0": ("n0", "7"), "w1": ("n0", "7"), "w5": ("n1", "9")}
    sats = new_satellites(place({"n0": 2}), place({"n0": 3, "n2": 2}), layout)
    assert [(s.node, s.workers) for s in sats] == [("n0", ("w6",)), ("n2", ("w7", "w8"))]
    with pytest.raises(NotExpressible, match="needs a shrink first"):
        new_satellites(place({"n0": 2}), place({"n1": 4}), layout)


def _env_file(tmp_path: Path, name: str = "job") -> Path:
    path = tmp_path / f"{name}.env"
    path.write_bytes(b"HOME=/home/alice\0")
    path.chmod(0o600)
    return path


def test_the_client_settings_come_from_the_command_environment_and_nothing_else(tmp_path: Path) -> None:
    bin_dir = tmp_path / "slurm" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "sbatch").write_text("#!/bin/sh\n")
    (bin_dir / "sbatch").chmod(0o755)
    env = {"PATH": f"/nonexistent:{bin_dir}", "SLURM_CONF": "/etc/slurm/x.conf", "DAEMON_SECRET": "leak",
           "SBATCH_EXPORT": "NONE"}
    assert client_settings(env) == [f"PATH={bin_dir}", "SLURM_CONF=/etc/slurm/x.conf"]
    assert client_settings({"PATH": "/nonexistent"}) == []


def test_satellite_sbatch_runs_as_the_user_with_the_jobs_environment_and_folder() -> None:
    client = ["PATH=/opt/slurm/bin", "SLURM_CONF=/etc/slurm/slurm.conf"]
    (sat,) = new_satellites(place({"n0": 2}), place({"n0": 2, "n3": 2}), {"w0": ("n0", "7"), "w1": ("n0", "7")})
    prefix = ["setpriv", "--reuid=1000", "--regid=1000", "--init-groups", "--reset-env", "--"]
    inputs = Inputs(script=5, env=6, name="job.join")  # sealed copies of the checked bytes, never the user's paths
    argv = sbatch_argv(rec("7", {"n0": 2}), sat, inputs, as_user=prefix, client=client)
    assert argv == [*prefix, "env", "-i", f"--chdir={WORK}", *client,
                    "sbatch", "--parsable", "--export-file=/proc/self/fd/6", f"--chdir={WORK}", "--job-name=job.join",
                    "--nodes=1", "--nodelist=n3", "--ntasks-per-node=2", "--gres=gpu:2", "--account=acct",
                    "--partition=gpu", "/proc/self/fd/5", "7", "w2", "w3"]
    assert inputs.fds == (5, 6)
    # the daemon's own user too: the environment is cleared all the same, nothing of ours but the client settings
    argv = sbatch_argv(rec("7", {"n0": 2}), sat, inputs, as_user=as_user(USER, USER), client=client)
    assert argv[:4 + len(client)] == ["env", "-i", f"--chdir={WORK}", *client, "sbatch"]


def test_as_user_switches_with_setpriv_without_pam() -> None:
    import pwd

    me = pwd.getpwuid(os.getuid())
    other = next((p for p in pwd.getpwall() if p.pw_name != me.pw_name), None)
    assert as_user(me.pw_name, me.pw_name) == []
    if other is not None:
        assert as_user(other.pw_name, me.pw_name) == ["setpriv", f"--reuid={other.pw_uid}", f"--regid={other.pw_gid}",
                                                      "--init-groups", "--reset-env", "--"]
    with pytest.raises(NotExpressible, match="'no-such-user-x' is unknown"):
        as_user("no-such-user-x", me.pw_name)


def test_a_satellite_needs_the_jobs_saved_environment_and_folder(tmp_path: Path) -> None:
    (sat,) = new_satellites(place({"n0": 2}), place({"n0": 2, "n3": 2}), {"w0": ("n0", "7"), "w1": ("n0", "7")})
    env = tmp_path / "job.env"
    with pytest.raises(NotExpressible, match=r"no saved environment .*job\.env .*older slurm-elastic.*daemon's env"):
        read_env_file(rec("7", {"n0": 2}), env)
    _env_file(tmp_path)
    assert read_env_file(rec("7", {"n0": 2}), env) == b"HOME=/home/alice\0"
    env.chmod(0o622)
    with pytest.raises(NotExpressible, match="must not be writable by group or others"):
        read_env_file(rec("7", {"n0": 2}), env)
    env.unlink()
    os.mkfifo(env)  # never opened to wait on: refused by its descriptor
    with pytest.raises(NotExpressible, match="not a regular file"):
        read_env_file(rec("7", {"n0": 2}), env)
    env.unlink()
    env.symlink_to(_env_file(tmp_path, "other"))
    with pytest.raises(NotExpressible, match="symbolic link"):
        read_env_file(rec("7", {"n0": 2}), env)
    env.unlink()
    _env_file(tmp_path)
    with pytest.raises(NotExpressible, match="unknown user"):
        read_env_file(rec("7", {"n0": 2}, user="no-such-user-x"), env)
    for bad in ("", "relative/dir"):
        with pytest.raises(NotExpressible, match=r"working directory .* unknown or not absolute"):
            sbatch_argv(rec("7", {"n0": 2}, work_dir=bad), sat, Inputs(5, 6, "job.join"))


def test_leaving_frees_whole_allocations_per_node_satellites_first() -> None:
    parent = rec("7", {"n0": 2, "n1": 2}, batch_host="n0")
    layout = {"w0": ("n0", "7"), "w1": ("n0", "7"), "w2": ("n1", "7"), "w3": ("n1", "7"),
              "w4": ("n1", "9"), "w5": ("n2", "10"), "w6": ("n2", "10")}
    current = list(layout)
    before = place({"n0": 2, "n1": 3, "n2": 2})
    out = leaving(parent, current, layout, before, place({"n0": 2, "n1": 2}))
    assert out.workers == ("w4", "w5", "w6") and out.satellites == ("10", "9") and out.parent_nodes == ("n0", "n1")
    out = leaving(parent, current, layout, before, place({"n0": 2, "n2": 2}))
    assert set(out.workers) == {"w2", "w3", "w4"} and out.parent_nodes == ("n0",)
    # one GPU fewer on n0 is not a whole block, but the 1-GPU satellite on n1 is: it leaves instead
    out = leaving(parent, current, layout, before, place({"n0": 1, "n1": 3, "n2": 2}))
    assert out.workers == ("w4",) and out.satellites == ("9",) and out.parent_nodes == ("n0", "n1")
    no_small = {w: v for w, v in layout.items() if w != "w4"}
    two = place({"n0": 2, "n1": 2, "n2": 2})
    with pytest.raises(NotExpressible, match="no whole blocks free exactly 1 GPU"):  # part of a block would idle
        leaving(parent, list(no_small), no_small, two, place({"n0": 2, "n1": 1, "n2": 2}))
    with pytest.raises(NotExpressible, match="never the batch host"):
        leaving(parent, list(no_small), no_small, two, place({"n0": 1}))


def test_shrink_sizes_follow_the_blocks_slurm_can_free() -> None:
    comment = "slurm-elastic-orders=/x/job-1.orders"
    job = rec("7", {"n0": 2, "n1": 2}, batch_host="n0", comment=comment)
    sat = rec("9", {"n2": 1}, admin="slurm-elastic satellite-of=7")
    (folded,) = fold([job, sat], {"9": "7"})
    assert folded.release_blocks == (("n1", 2), ("n2", 1))
    nodes = [NodeRecord(NodeName(n), NodeState.UP, ("MIXED",), 2, (), (), ("gpu",)) for n in ("n0", "n1", "n2")]
    snap = build_snapshot(nodes, [folded], now=10.0, profiles=shipped_profiles())
    assert snap.job(JobId("7")).shrink_sizes == (2, 3, 4)  # 5 GPUs: free the satellite, a node, or both
    (plain,) = fold([rec("8", {"n0": 2, "n1": 2})], {})
    assert plain.release_blocks is None  # not a launcher job: requeued at any size
    (alone,) = fold([rec("6", {"n0": 2}, comment=comment)], {})
    assert alone.release_blocks == ()  # only the batch host: it cannot shrink at all


def test_fold_adds_running_satellites_to_their_running_job() -> None:
    job, sat = rec("7", {"n0": 2}), rec("9", {"n1": 2}, admin="")
    waiting = rec("10", {}, state=JobState.PENDING, admin="")
    orphan = rec("11", {"n2": 1}, admin="")
    out = fold([job, sat, waiting, orphan], {"9": "7", "10": "7", "11": "8"})
    assert [r.job_id for r in out] == ["7", "11"]
    assert out[0].placement == place({"n0": 2, "n1": 2}) and out[0].nodes == ("n0", "n1")


# -- the actuator on a launcher job --------------------------------------------------------------


def _job_files(tmp_path: Path, join: bool = True, name: str = "job-1") -> tuple[str, bytes]:
    secret = b"s" * 32
    base = tmp_path / name
    for suffix, data, mode in (("", secret, 0o600), (".orders", b"", 0o600), (".reports", b"", 0o600),
                               (".join", b"#!/bin/bash\n", 0o700), (".env", b"A=1\0", 0o600)):
        if suffix == ".join" and not join:
            continue
        path = Path(f"{base}{suffix}")
        path.write_bytes(data)
        path.chmod(mode)
    return f"slurm-elastic-orders={base}.orders", secret


def _actuator(tmp_path: Path, records: dict[str, JobRecord], ran: list[list[str]]) -> SlurmActuator:
    next_id = iter(range(100, 200))

    def runner(argv: Sequence[str]) -> str:
        ran.append(list(argv))
        return f"{next(next_id)}\n" if "sbatch" in argv else ""

    return SlurmActuator(runner, Store(tmp_path / "s.db"), clock=lambda: 5.0, records=lambda: records)


def _orders(path: Path, job_id: str, secret: bytes) -> list[Order]:
    return [Order.parse(line, job_id, secret) for line in path.read_text().splitlines()]


def test_grow_then_shrink_a_launcher_job_in_place(tmp_path: Path) -> None:
    comment, secret = _job_files(tmp_path)
    parent = rec("7", {"n000": 2}, comment=comment)
    records = {"7": parent}
    ran: list[list[str]] = []
    act = _actuator(tmp_path, records, ran)
    snap = make_snapshot(make_nodes(3), [make_job("7", state=JobState.RUNNING, max_gpus=8,
                                                  placement=[("n000", 0), ("n000", 1)])])
    grow = Action(ActionKind.GROW, JobId("7"), place({"n000": 2}), place({"n000": 2, "n001": 2}), 128, 32, 1, 0.1)
    (out,) = act.apply(snap, (grow,))
    assert out.ok, out.message
    sbatch = ran[0][ran[0].index("sbatch"):]
    assert ran[0][:3] == ["env", "-i", f"--chdir={WORK}"]  # the daemon's own user: still a cleared environment
    assert sbatch == ["sbatch", "--parsable", sbatch[2], f"--chdir={WORK}", "--job-name=job-1.join",
                      "--nodes=1", "--nodelist=n001", "--ntasks-per-node=2", "--gres=gpu:2",
                      "--account=acct", "--partition=gpu", sbatch[11], sbatch[12], "7", "w2", "w3"]
    assert sbatch[2].startswith("--export-file=/proc/self/fd/") and sbatch[12].startswith("/proc/self/fd/")
    (token,) = [d["token"] for d in act.store.step_details("sbatch")]  # journaled before the sbatch ran
    assert sbatch[11] == f"--comment=slurm-elastic-satellite={token}" and len(token) == 32
    assert ran[1:] == [["scontrol", "update", "JobId=100", "AdminComment=slurm-elastic satellite-of=7"]]
    (order,) = _orders(tmp_path / "job-1.orders", "7", secret)
    assert order.kind == "resize" and order.workers == ("w0", "w1", "w2", "w3") and order.local_batch == 0
    assert act.store.satellites() == {"100": "7"}

    # the satellite runs; the planner shrinks the job back: the satellite's workers leave, nothing else
    records["100"] = rec("100", {"n001": 2}, admin="slurm-elastic satellite-of=7")
    ran.clear()
    shrink = Action(ActionKind.SHRINK, JobId("7"), place({"n000": 2, "n001": 2}), place({"n000": 2}), 64, 32, 1, 0.1)
    (out,) = act.apply(snap, (shrink,))
    assert out.ok and "w2,w3 leave" in out.message and "satellites 100 end" in out.message
    assert ran == []  # the job's own nodes do not change; the satellite ends by itself
    assert _orders(tmp_path / "job-1.orders", "7", secret)[-1].workers == ("w0", "w1")

    # the satellite is gone from the queue: tending records it as ended
    del records["100"]
    assert act.tend() == ["satellite 100 of job 7 ended"] and act.store.satellites() == {}


def _grown(tmp_path: Path, onto: dict[str, int]) -> tuple[SlurmActuator, dict[str, JobRecord], list[list[str]],
                                                         str, str]:
    """Job 7, running on n000's 2 GPUs, grown by one satellite per node of ``onto``: the actuator,
    the records it reads, the commands it ran, the job's comment and secret."""
    comment, secret = _job_files(tmp_path)
    records = {"7": rec("7", {"n000": 2}, comment=comment)}
    ran: list[list[str]] = []
    act = _actuator(tmp_path, records, ran)
    snap = make_snapshot(make_nodes(1 + len(onto)), [make_job("7", state=JobState.RUNNING, max_gpus=8,
                                                              placement=[("n000", 0), ("n000", 1)])])
    after = place({"n000": 2, **onto})
    grow = Action(ActionKind.GROW, JobId("7"), place({"n000": 2}), after, 32 * after.num_gpus, 32, 1, 0.1)
    assert act.apply(snap, (grow,))[0].ok
    return act, records, ran, comment, secret


def test_tend_cancels_satellites_of_ended_jobs_and_withdraws_ones_that_never_start(tmp_path: Path) -> None:
    act, records, ran, comment, secret = _grown(tmp_path, {"n001": 1, "n002": 1})
    records["100"] = rec("100", {"n001": 1}, admin="")
    records["101"] = rec("101", {}, state=JobState.PENDING, admin="")
    act.clock = lambda: 5.0 + 1000
    ran.clear()
    assert act.tend() == ["satellite 101 of job 7 did not start in 120 s: cancelled, its workers withdrawn"]
    assert ran == [["scancel", "101"]]
    assert parse_elastic_request("slurm-elastic satellite-of=7") is None  # fixed load, never an elastic job
    assert _orders(tmp_path / "job-1.orders", "7", secret)[-1].workers == ("w0", "w1", "w2")
    records["7"] = rec("7", {"n000": 2}, state=JobState.FINISHED, comment=comment)
    assert act.tend() == ["satellite 100 cancelled: job 7 is not running"]


def test_a_launcher_job_without_a_join_script_cannot_grow_in_place(tmp_path: Path) -> None:
    comment, _ = _job_files(tmp_path, join=False)
    act = _actuator(tmp_path, {"7": rec("7", {"n000": 2}, comment=comment)}, [])
    snap = make_snapshot(make_nodes(2), [make_job("7", state=JobState.RUNNING, max_gpus=8,
                                                  placement=[("n000", 0), ("n000", 1)])])
    grow = Action(ActionKind.GROW, JobId("7"), place({"n000": 2}), place({"n000": 2, "n001": 2}), 128, 32, 1, 0.1)
    (out,) = act.apply(snap, (grow,))
    assert not out.ok and "cannot grow in place" in out.message and "job-1.join" in out.message


def test_a_job_submitted_without_its_environment_is_not_grown_in_place(tmp_path: Path) -> None:
    comment, secret = _job_files(tmp_path)
    (tmp_path / "job-1.env").unlink()  # an older submission: only the daemon's environment to run with
    ran: list[list[str]] = []
    act = _actuator(tmp_path, {"7": rec("7", {"n000": 2}, comment=comment)}, ran)
    snap = make_snapshot(make_nodes(2), [make_job("7", state=JobState.RUNNING, max_gpus=8,
                                                  placement=[("n000", 0), ("n000", 1)])])
    grow = Action(ActionKind.GROW, JobId("7"), place({"n000": 2}), place({"n000": 2, "n001": 2}), 128, 32, 1, 0.1)
    (out,) = act.apply(snap, (grow,))
    assert not out.ok and "no saved environment" in out.message and "job-1.env" in out.message, out.message
    assert ran == []  # no sbatch, nothing as anyone
    assert _orders(tmp_path / "job-1.orders", "7", secret) == []  # refused before any order: nothing to withdraw


def test_rebatch_of_a_job_without_a_batch_range_sends_nothing(tmp_path: Path) -> None:
    comment, _ = _job_files(tmp_path)
    act = _actuator(tmp_path, {"7": rec("7", {"n000": 2}, comment=comment)}, [])
    snap = make_snapshot(make_nodes(1), [make_job("7", state=JobState.RUNNING, max_gpus=8,
                                                  placement=[("n000", 0), ("n000", 1)])])
    rebatch = Action(ActionKind.REBATCH, JobId("7"), place({"n000": 2}), place({"n000": 2}), 256, 64, 2, 0.2)
    (out,) = act.apply(snap, (rebatch,))
    assert out.ok and "nothing sent" in out.message
    assert (tmp_path / "job-1.orders").read_text() == ""


def test_a_declared_batch_range_sends_the_planned_batch(tmp_path: Path) -> None:
    comment, secret = _job_files(tmp_path)
    parent = rec("7", {"n000": 2}, comment=comment, admin="slurm-elastic gpus=1:8 batch=32:512 mode=exo")
    act = _actuator(tmp_path, {"7": parent}, [])
    snap = make_snapshot(make_nodes(1), [make_job("7", state=JobState.RUNNING, max_gpus=8,
                                                  placement=[("n000", 0), ("n000", 1)])])
    rebatch = Action(ActionKind.REBATCH, JobId("7"), place({"n000": 2}), place({"n000": 2}), 256, 64, 2, 0.2)
    assert act.apply(snap, (rebatch,))[0].ok
    (order,) = _orders(tmp_path / "job-1.orders", "7", secret)
    assert order.workers == ("w0", "w1") and order.local_batch == 128


# -- reports -------------------------------------------------------------------------------------


def test_reports_are_verified_stored_once_and_summarised(tmp_path: Path) -> None:
    comment, secret = _job_files(tmp_path)
    reports = tmp_path / "job-1.reports"
    rep = Reporter(str(reports), "7", secret, every_s=1.0)
    rep.write("progress", 100.0, step=0, samples=0, epoch=0, epoch_size=1000, world=2, local_batch=32)
    rep.add_loss(64 * 2.0, 64)
    rep.write("progress", 102.0, step=10, samples=640, epoch=0, epoch_size=1000, world=2, local_batch=32)
    rep.write("resize", 103.0, step=12, samples=768, epoch=0, epoch_size=1000, world=4, local_batch=32, pause_s=0.4)
    rep.add_loss(128 * 1.0, 128)
    rep.metric = 0.75  # the validation metric of epoch 0, set by rank 0's agent at the epoch end
    rep.write("progress", 105.0, step=20, samples=1280, epoch=1, epoch_size=1000, world=4, local_batch=32)
    forged = json.loads(reports.read_text().splitlines()[-1])
    forged["samples"] = 10**9
    with open(reports, "a") as fh:
        fh.write(json.dumps(forged) + "\n")  # MAC no longer matches
        fh.write("not json\n")
    store = Store(tmp_path / "s.db")
    r = rec("7", {"n000": 4}, comment=comment)
    assert ingest(store, [r], report_limits(200.0), 200.0) == 4
    assert ingest(store, [r], report_limits(200.0), 200.0) == 0  # read once: the offset is kept with the rows
    rows = store.progress_of("7")
    assert [x.kind for x in rows] == ["progress", "progress", "resize", "progress"]
    assert [x.metric for x in rows] == [None, None, None, 0.75]
    rt = runtime_of(rows)
    assert rt is not None
    assert rt.samples_processed == 1280 and rt.local_batch == 32 and rt.epoch_size == 1000
    assert rt.observed_throughput == pytest.approx(256.0)  # (1280 - 768) / 2 s, at the current 4 workers
    assert rt.last_change_time == 103.0 and rt.samples_at_last_change == 768
    assert rt.progress.initial_loss == 2.0 and rt.progress.current_loss == 1.0


def test_a_report_for_another_job_or_with_a_bad_mac_is_refused() -> None:
    secret = b"k" * 32
    from slurm_elastic_launcher.orders import sign_report

    line = sign_report({"job_id": "7", "kind": "progress", "samples": 1}, secret)
    assert verify(line, "7", secret) == {"job_id": "7", "kind": "progress", "samples": 1}
    assert verify(line, "8", secret) is None
    assert verify(line, "7", b"x" * 32) is None
    assert verify("[1, 2]", "7", secret) is None


def test_channel_refuses_a_join_script_others_can_write(tmp_path: Path) -> None:
    comment, _ = _job_files(tmp_path)
    os.chmod(tmp_path / "job-1.join", 0o722)
    channel = Channel.open("7", USER, comment)
    from slurm_elastic.channel import ChannelError

    with pytest.raises(ChannelError, match="must not be writable by group or others"):
        channel.join_script()


def test_a_refused_satellite_withdraws_the_joiners_it_ordered(tmp_path: Path) -> None:
    from slurm_elastic.slurm.runner import SlurmCommandError

    comment, secret = _job_files(tmp_path)

    def runner(argv: Sequence[str]) -> str:
        raise SlurmCommandError("sbatch: error: Requested node configuration is not available")

    act = SlurmActuator(runner, Store(tmp_path / "s.db"), clock=lambda: 5.0,
                        records=lambda: {"7": rec("7", {"n000": 2}, comment=comment)})
    snap = make_snapshot(make_nodes(2), [make_job("7", state=JobState.RUNNING, max_gpus=8,
                                                  placement=[("n000", 0), ("n000", 1)])])
    grow = Action(ActionKind.GROW, JobId("7"), place({"n000": 2}), place({"n000": 2, "n001": 2}), 128, 32, 1, 0.1)
    (out,) = act.apply(snap, (grow,))
    assert not out.ok and "Requested node configuration" in out.message
    orders = _orders(tmp_path / "job-1.orders", "7", secret)
    assert [o.workers for o in orders] == [("w0", "w1", "w2", "w3"), ("w0", "w1")]  # the latest order wins
    assert act.store.satellites() == {}


def test_a_shrink_gives_its_nodes_back_once_the_job_trains_without_them(tmp_path: Path) -> None:
    comment, _ = _job_files(tmp_path)
    records = {"7": rec("7", {"n000": 2, "n001": 2}, comment=comment, batch_host="n000")}
    ran: list[list[str]] = []
    act = _actuator(tmp_path, records, ran)
    snap = make_snapshot(make_nodes(2), [make_job("7", state=JobState.RUNNING, max_gpus=8,
                                                  placement=[("n000", 0), ("n000", 1), ("n001", 0), ("n001", 1)])])
    shrink = Action(ActionKind.SHRINK, JobId("7"), place({"n000": 2, "n001": 2}), place({"n000": 2}), 64, 32, 1, 0.1)
    (out,) = act.apply(snap, (shrink,))
    assert out.ok and "w2,w3 leave" in out.message and "keeps n000 once they have left" in out.message
    assert ran == [] and act.tend() == []  # not before the job trains in its new world
    act.store.add_progress("7", ProgressRow(t=6.0, samples=640, world=2, global_batch=64, kind="resize", pause_s=0.1))
    act.clock = lambda: 7.0
    assert act.tend() == [] and ran == []  # the job trains without them, but they have not said they left
    for t in (6.2, 6.5):
        act.store.add_progress("7", ProgressRow(t=t, samples=640, world=4, global_batch=128, kind="left"))
    act.clock = lambda: 9.0
    assert act.tend() == [] and ran == []  # the leavers get EXIT_GRACE_S to exit
    act.clock = lambda: 9.6
    assert act.tend() == ["job 7 released its other nodes: keeps n000"]
    assert ran == [["scontrol", "update", "JobId=7", "NodeList=n000"]]
    assert act.store.releases() == [] and act.tend() == []  # done once


def test_resizes_under_way_come_from_the_store_and_survive_a_restart(tmp_path: Path) -> None:
    from slurm_elastic.core.model import InFlightResize

    comment, _ = _job_files(tmp_path)
    other, _ = _job_files(tmp_path, name="job-2")
    records = {"7": rec("7", {"n000": 2}, comment=comment),
               "8": rec("8", {"n001": 2, "n002": 2}, comment=other, batch_host="n001")}
    act = _actuator(tmp_path, records, [])
    snap = make_snapshot(make_nodes(4), [
        make_job("7", state=JobState.RUNNING, max_gpus=8, placement=[("n000", 0), ("n000", 1)]),
        make_job("8", state=JobState.RUNNING, max_gpus=8, submit_time=1,
                 placement=[("n001", 0), ("n001", 1), ("n002", 0), ("n002", 1)])])
    grow = Action(ActionKind.GROW, JobId("7"), place({"n000": 2}), place({"n000": 2, "n003": 2}), 128, 32, 1, 0.1)
    shrink = Action(ActionKind.SHRINK, JobId("8"), place({"n001": 2, "n002": 2}), place({"n001": 2}), 64, 32, 1, 0.1)
    assert all(o.ok for o in act.apply(snap, (grow, shrink)))
    records["100"] = rec("100", {}, state=JobState.PENDING, admin="slurm-elastic satellite-of=7")
    fresh = SlurmActuator(act.runner, Store(tmp_path / "s.db"), clock=lambda: 6.0, records=lambda: records)
    assert set(owed_by_store(fresh.store, records, snap)) == {InFlightResize(JobId("7"), 4, 5.0),
                                                               InFlightResize(JobId("8"), 2, 5.0)}
    # a job that trained to the end is left alone while its workers exit
    fresh.store.drop_release("8")
    fresh.store.add_progress("8", ProgressRow(t=9.0, samples=100, world=4, global_batch=128, kind="end"))
    assert InFlightResize(JobId("8"), 4, 9.0) in owed_by_store(fresh.store, records, snap)
    late = Action(ActionKind.GROW, JobId("8"), place({"n001": 2, "n002": 2}), place({"n001": 2, "n002": 2, "n003": 2}),
                  192, 32, 1, 0.1)
    (out,) = fresh.apply(snap, (late,))
    assert out.ok and "finished training" in out.message and fresh.store.satellites() == {"100": "7"}


def test_a_signed_report_with_an_impossible_field_is_refused_alone(tmp_path: Path) -> None:
    """A job's own signed line with ``t=NaN``, no ``t``, a negative count or an unknown kind once
    failed the whole batch (and with it the round); now that line is refused, the others stored,
    and the file offset moves past it."""
    from slurm_elastic_launcher.orders import sign_report

    comment, secret = _job_files(tmp_path)
    good = {"job_id": "7", "kind": "progress", "t": 100.0, "samples": 64, "world": 2, "global_batch": 64,
            "throughput": 32.0}
    bad = [{**good, "t": float("nan")}, {k: v for k, v in good.items() if k != "t"}, {**good, "samples": -5},
           {**good, "kind": "boom"}, {**good, "world": True}, {**good, "samples": 10**5000}]
    lines = [sign_report(good, secret)]
    for body in bad:
        try:
            lines.append(sign_report(body, secret))
        except ValueError:  # a number too big to print: the launcher could not have written it either
            continue
    lines.append(sign_report({**good, "t": 101.0, "samples": 128}, secret))
    Path(f"{tmp_path / 'job-1'}.reports").write_text("\n".join(lines) + "\n")
    store = Store(tmp_path / "s.db")
    r = rec("7", {"n000": 2}, comment=comment)
    assert ingest(store, [r], report_limits(200.0), 200.0) == 2
    assert [x.samples for x in store.progress_of("7")] == [64, 128]
    assert store.report_offset("7") == Path(f"{tmp_path / 'job-1'}.reports").stat().st_size


def test_lost_workers_are_taken_out_of_the_order_and_their_whole_node_given_back(tmp_path: Path) -> None:
    """Issue 14, finding 3: a worker SIGKILLed, the survivors re-formed, and the job held the lost
    worker's GPU (and node) for minutes. Its recovery report names the lost workers: the daemon
    orders the survivors, and releases a node of the job's own allocation whose workers all went."""
    comment, secret = _job_files(tmp_path)
    parent = rec("7", {"n0": 2, "n1": 2}, comment=comment, batch_host="n0")
    records = {"7": parent}
    ran: list[list[str]] = []
    now = [5.0]
    act = _actuator(tmp_path, records, ran)
    act.clock = lambda: now[0]
    assert act.tend() == [] and ran == []  # nothing lost: nothing done
    act.store.add_reports("7", [ProgressRow(4.0, "resize", 640, 2, 64, pause_s=0.1, lost=("w2", "w3"))], 100)
    assert act.store.progress_of("7")[-1].lost == ("w2", "w3")
    (line,) = act.tend()
    assert "lost workers w2,w3 out of the job's order" in line and "node n1 given back" in line, line
    (order,) = _orders(tmp_path / "job-1.orders", "7", secret)
    assert order.workers == ("w0", "w1")
    (entry,) = act.store.actions_of("7")
    assert entry.action.kind is ActionKind.SHRINK and entry.state == "done"
    assert act.tend() == [] and ran == []  # the order no longer names them; the release is not due yet
    now[0] = 9.0  # EXIT_GRACE_S after the order: released
    assert act.tend() == ["job 7 released its other nodes: keeps n0"]
    assert ran == [["scontrol", "update", "JobId=7", "NodeList=n0"]]


def test_a_lost_worker_on_a_node_that_keeps_others_frees_nothing_but_leaves_the_order(tmp_path: Path) -> None:
    comment, secret = _job_files(tmp_path)
    records = {"7": rec("7", {"n0": 2, "n1": 2}, comment=comment, batch_host="n0")}
    ran: list[list[str]] = []
    act = _actuator(tmp_path, records, ran)
    act.store.add_reports("7", [ProgressRow(4.0, "resize", 640, 3, 96, pause_s=0.1, lost=("w3",))], 100)
    line, why = act.tend()  # its join script predates replacements (issue 38, bug 2): its GPU stays idle
    assert "w3 not started again" in why and "older slurm-elastic" in why, why
    assert "given back" not in line and _orders(tmp_path / "job-1.orders", "7", secret)[-1].workers == (
        "w0", "w1", "w2")
    assert act.store.releases() == [] and ran == []


def test_a_report_naming_lost_workers_is_read_and_a_bad_one_refused() -> None:
    from slurm_elastic.observe.job_reports import ReportRefused, row_of

    base = {"kind": "resize", "t": 1.0, "samples": 10, "world": 2, "global_batch": 64, "pause_s": 0.1}
    assert row_of({**base, "lost": ["w1", "w3", "w1"]}).lost == ("w1", "w3")
    assert row_of(base).lost == () and row_of({**base, "kind": "progress", "lost": ["w1"]}).lost == ()
    for bad in ("w1", ["../x"], [1], ["w" + "9" * 20], ["w1"] * 5000):
        with pytest.raises(ReportRefused, match="lost="):
            row_of({**base, "lost": bad})


@pytest.mark.parametrize("ended_at, waits", [(1000.0, True), (1000.0 - 31, False), (1000.0 + 60, False)])
def test_the_satellite_of_a_job_whose_training_ended_gets_a_grace_to_end_by_itself(
        tmp_path: Path, ended_at: float, waits: bool) -> None:
    # The job's end report says its workers are exiting, the satellite's with them: cancelling it the
    # moment its job leaves the queue would mark a finished run CANCELLED in the accounting. Past the
    # grace, or with an end report dated ahead of the daemon's clock, it is cancelled.
    act, records, ran, comment, _ = _grown(tmp_path, {"n001": 1})
    records["100"] = rec("100", {"n001": 1}, admin="")
    act.store.add_progress("7", ProgressRow(ended_at, "end", 4096, 3, 96, None, None, None, None))
    records["7"] = rec("7", {"n000": 2}, state=JobState.FINISHED, comment=comment)
    act.clock = lambda: 1000.0 + 5
    ran.clear()
    if waits:
        assert act.tend() == [] and ran == [] and act.store.satellites() == {"100": "7"}
        del records["100"]  # it ended by itself
        assert act.tend() == ["satellite 100 of job 7 ended"] and ran == []
    else:
        assert act.tend() == ["satellite 100 cancelled: job 7 is not running"]
        assert ran == [["scancel", "100"]]
