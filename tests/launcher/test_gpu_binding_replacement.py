"""A worker started again in place of a lost one (issue 38, bug 2): it runs as a one-task step of
the allocation that holds the lost worker's GPU, sees all that allocation's GPUs on the node
(SLURM_LOCALID 0, as srun --overlap gives it on Slurm 22.05), and is told the lost worker's slot
(``SLURM_ELASTIC_SLOT``): it must take that GPU, not GPU 0 that a live worker holds."""

from __future__ import annotations

import pytest

from slurm_elastic_launcher.gpu_binding import GpuBindingError, bind

STEP = {"CUDA_VISIBLE_DEVICES": "0,1", "SLURM_STEP_GPUS": "0,1", "SLURM_LOCALID": "0", "SLURMD_NODENAME": "n1"}


def test_a_replacement_takes_the_slot_of_the_worker_it_replaces() -> None:
    b = bind({**STEP, "SLURM_ELASTIC_SLOT": "1"}, 2)
    assert (b.slot, b.source, b.index, b.device, b.local_rank) == (1, "SLURM_ELASTIC_SLOT", 1, "1", 1)
    assert b.report("h")["slurm_localid"] == "0"  # what Slurm said, reported as it is


def test_a_replacement_in_a_satellite_and_under_renumbering_cgroups() -> None:
    """A satellite holding GPUs 2,3 (cgroups renumber them 0,1): slot 1 is Slurm's GPU 3."""
    b = bind({"CUDA_VISIBLE_DEVICES": "0,1", "SLURM_STEP_GPUS": "2,3", "SLURM_LOCALID": "0",
              "SLURM_ELASTIC_SLOT": "1"}, 2)
    assert (b.index, b.device) == (1, "3")


def test_the_slot_is_only_honoured_inside_a_step_and_an_empty_one_is_none() -> None:
    assert bind({**STEP, "SLURM_ELASTIC_SLOT": ""}, 2).source == "SLURM_LOCALID"
    outside = {k: v for k, v in STEP.items() if k != "SLURM_LOCALID"}
    assert bind({**outside, "SLURM_ELASTIC_SLOT": "1"}, 2).source == "default"


@pytest.mark.parametrize("bad", ["-1", "x", "1 2", "9999999"])
def test_a_malformed_slot_is_refused_with_its_name(bad: str) -> None:
    with pytest.raises(GpuBindingError, match="SLURM_ELASTIC_SLOT"):
        bind({**STEP, "SLURM_ELASTIC_SLOT": bad}, 2)


def test_a_slot_past_the_visible_gpus_is_an_error_not_a_shared_gpu() -> None:
    with pytest.raises(GpuBindingError, match="slot 2 has no GPU"):
        bind({**STEP, "SLURM_ELASTIC_SLOT": "2"}, 2)
