"""Which GPU a worker uses (issue 35, item 1): the rules of ``gpu_binding.bind`` (pure, no torch)."""

from __future__ import annotations

import os

import pytest

from slurm_elastic_launcher.gpu_binding import GpuBindingError, bind, parse_devices

NODE4 = {"CUDA_VISIBLE_DEVICES": "0,1,2,3", "SLURM_STEP_GPUS": "0,1,2,3", "SLURMD_NODENAME": "n1"}


@pytest.mark.parametrize("localid", ["0", "1", "2", "3"])
def test_each_task_of_a_four_gpu_node_takes_its_own_gpu(localid: str) -> None:
    """The template's step: 4 tasks, --gres=gpu:4, each sees all 4; LOCAL_RANK unset (the bug: all bound 0)."""
    b = bind({**NODE4, "SLURM_LOCALID": localid}, 4)
    assert (b.index, b.device, b.local_rank, b.source, b.shared) == (int(localid), localid, int(localid),
                                                                       "SLURM_LOCALID", False)
    assert b.report("h") == {"gpu_index": int(localid), "gpu": localid, "gpu_shared": False,
                             "slurm_localid": localid, "local_rank": int(localid), "node": "n1", "host": "h"}


def test_the_four_tasks_of_a_node_bind_four_distinct_gpus() -> None:
    devices = {bind({**NODE4, "SLURM_LOCALID": str(i)}, 4).device for i in range(4)}
    assert devices == {"0", "1", "2", "3"}


def test_a_satellite_beside_its_job_uses_its_own_gpus() -> None:
    """A joiner on a satellite on the job's node: the satellite's step sees only its GPUs (2, 3)."""
    env = {"CUDA_VISIBLE_DEVICES": "2,3", "SLURM_STEP_GPUS": "2,3"}
    assert [bind({**env, "SLURM_LOCALID": str(i)}, 2).device for i in range(2)] == ["2", "3"]
    assert [bind({**env, "SLURM_LOCALID": str(i)}, 2).index for i in range(2)] == [0, 1]


def test_slurm_gpu_index_is_reported_where_cgroups_renumber_the_visible_devices() -> None:
    b = bind({"CUDA_VISIBLE_DEVICES": "0,1", "SLURM_STEP_GPUS": "2,3", "SLURM_LOCALID": "1"}, 2)
    assert (b.index, b.device) == (1, "3")


def test_inside_slurm_the_slot_is_slurm_localid_not_an_inherited_local_rank() -> None:
    """A LOCAL_RANK exported at submit time reaches every task alike: SLURM_LOCALID decides."""
    b = bind({**NODE4, "SLURM_LOCALID": "2", "LOCAL_RANK": "0"}, 4)
    assert (b.index, b.local_rank) == (2, 2)


def test_outside_slurm_local_rank_else_zero() -> None:
    assert bind({"LOCAL_RANK": "1"}, 2).index == 1 and bind({"LOCAL_RANK": "1"}, 2).source == "LOCAL_RANK"
    b = bind({}, 2)
    assert (b.index, b.device, b.source, b.slurm_localid) == (0, "0", "default", None)


def test_outside_slurm_workers_may_share_gpus_as_the_step_bench_asks() -> None:
    """The step bench sets LOCAL_RANK=rank and wants rank % GPUs (gloo workers sharing a GPU)."""
    b = bind({"LOCAL_RANK": "3"}, 1)
    assert (b.index, b.shared, b.local_rank) == (0, True, 0)
    assert bind({"LOCAL_RANK": "3", "CUDA_VISIBLE_DEVICES": "0,1"}, 2).index == 1


def test_more_tasks_than_gpus_inside_slurm_is_an_error_naming_the_values() -> None:
    with pytest.raises(GpuBindingError, match=r"SLURM_LOCALID=2 but this task sees 2 GPU\(s\).*'0,1'.*rule"):
        bind({"CUDA_VISIBLE_DEVICES": "0,1", "SLURM_LOCALID": "2"}, 2)


def test_inside_slurm_sharing_only_with_gloo_asked_explicitly() -> None:
    b = bind({"CUDA_VISIBLE_DEVICES": "0,1", "SLURM_LOCALID": "3", "SLURM_ELASTIC_DIST_BACKEND": "gloo"}, 2)
    assert (b.index, b.shared) == (1, True)
    with pytest.raises(GpuBindingError):
        bind({"CUDA_VISIBLE_DEVICES": "0,1", "SLURM_LOCALID": "3", "SLURM_ELASTIC_DIST_BACKEND": "nccl"}, 2)


def test_cpu_worker_with_fake_gpus_reports_the_gpu_slurm_gave_it() -> None:
    """The dev cluster: Slurm sets CUDA_VISIBLE_DEVICES, torch counts no device."""
    b = bind({**NODE4, "SLURM_LOCALID": "3"}, 0)
    assert (b.index, b.device) == (3, "3")
    over = bind({"CUDA_VISIBLE_DEVICES": "1", "SLURM_LOCALID": "1"}, 0)  # uses no GPU: not an error
    assert (over.index, over.device) == (None, None)


@pytest.mark.parametrize("env", [{"SLURM_GPUS_PER_TASK": "1"}, {"SLURM_GPU_BIND": "single:1"},
                                 {"SLURM_GPU_BIND": "verbose,map_gpu:0,1"}, {"SLURM_STEP_GPUS": "4,5,6,7"}])
def test_gpus_bound_per_task_are_the_tasks_own(env: dict[str, str]) -> None:
    """--gpus-per-task=1 / --gpu-bind: each task sees its one GPU, whatever its SLURM_LOCALID."""
    b = bind({"CUDA_VISIBLE_DEVICES": "6", "SLURM_LOCALID": "2", **env}, 1)
    assert (b.index, b.device, b.local_rank) == (0, "6", 0)


def test_gpu_bind_none_is_not_a_binding() -> None:
    with pytest.raises(GpuBindingError):
        bind({"CUDA_VISIBLE_DEVICES": "0", "SLURM_LOCALID": "2", "SLURM_GPU_BIND": "none"}, 1)


def test_no_visible_device_is_a_cpu_worker() -> None:
    for env in ({}, {"CUDA_VISIBLE_DEVICES": ""}, {"CUDA_VISIBLE_DEVICES": "NoDevFiles"},
                {"CUDA_VISIBLE_DEVICES": "-1"}):
        b = bind({**env, "SLURM_LOCALID": "2"}, 0)
        assert (b.index, b.device, b.local_rank, b.visible) == (None, None, 2, ())


def test_uuids_are_kept_as_strings() -> None:
    uuids = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6,MIG-GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f/7/0"
    b = bind({"CUDA_VISIBLE_DEVICES": uuids, "SLURM_LOCALID": "1"}, 2)
    assert (b.index, b.device) == (1, "MIG-GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f/7/0")


def test_device_lists_follow_cudas_rules() -> None:
    assert parse_devices(" 0, 2 ,3") == ("0", "2", "3")
    assert parse_devices("0,1,-1,2") == ("0", "1")  # a negative index ends the list
    assert parse_devices("007") == ("7",)


@pytest.mark.parametrize("bad", ["0,,1", "0,1,0", "zero", "0;rm -rf /", "GPU-", "1.5", "0," * 1100, "\x00"])
def test_malformed_device_lists_are_refused(bad: str) -> None:
    with pytest.raises(GpuBindingError, match="CUDA_VISIBLE_DEVICES"):
        bind({"CUDA_VISIBLE_DEVICES": bad, "SLURM_LOCALID": "0"}, 1)


def test_malformed_step_gpus_are_refused() -> None:
    with pytest.raises(GpuBindingError, match="SLURM_STEP_GPUS"):
        bind({"CUDA_VISIBLE_DEVICES": "0", "SLURM_STEP_GPUS": "0,x", "SLURM_LOCALID": "0"}, 1)


@pytest.mark.parametrize("name", ["SLURM_LOCALID", "LOCAL_RANK"])
@pytest.mark.parametrize("bad", ["-1", "one", "", "1e3", "99999999", "0x1"])
def test_malformed_slots_are_refused(name: str, bad: str) -> None:
    with pytest.raises(GpuBindingError, match=f"{name}=.*non-negative integer"):
        bind({name: bad, "CUDA_VISIBLE_DEVICES": "0,1"}, 2)


def test_torch_count_bounds_the_visible_devices() -> None:
    """CUDA_VISIBLE_DEVICES lists 4 but CUDA opens 2: slot 3 has no device it could open."""
    with pytest.raises(GpuBindingError):
        bind({**NODE4, "SLURM_LOCALID": "3"}, 2)
    assert bind({**NODE4, "SLURM_LOCALID": "1"}, 2).device == "1"


def test_a_worker_started_by_srun_exports_its_local_rank_before_the_world_forms(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Task 2 of a 4-GPU node (srun sets SLURM_LOCALID, not LOCAL_RANK): once the launcher has its
    backend, and before any world forms, LOCAL_RANK is 2 and the backend reports Slurm's GPU 2
    (torch counts no GPU here: the device stays the CPU, as on the dev cluster's fake GPUs)."""
    pytest.importorskip("torch")
    import torch

    from slurm_elastic_launcher.env import LauncherEnv
    from slurm_elastic_launcher.resize_bench import free_port
    from slurm_elastic_launcher.torch_backend import job_backend

    # a worker on the dev cluster's fake GPUs: torch sees none (on a GPU machine this process's CUDA
    # was set up before the node's CUDA_VISIBLE_DEVICES below, which a real worker gets at its start)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    env = {**NODE4, "SLURM_LOCALID": "2", "SLURM_ELASTIC_JOB_ID": "35", "SLURM_ELASTIC_SECRET": "s" * 32,
           "SLURM_ELASTIC_WORKER_ID": "w2", "SLURM_ELASTIC_WORKERS": "w0,w1,w2,w3",
           "SLURM_ELASTIC_STORE_PORT": str(free_port()), "SLURM_ELASTIC_STORE_SERVE": "1"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    backend = job_backend(LauncherEnv.from_mapping(env))
    assert os.environ["LOCAL_RANK"] == "2"
    assert (backend.gpu_binding.index, backend.gpu_report["gpu"], backend.gpu_report["node"]) == (2, "2", "n1")
    assert backend.device.type == "cpu"
