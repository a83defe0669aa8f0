"""``slurm-elastic profile`` on the real dev cluster (issue 15, part 3): fixed-size launcher jobs
measured through Slurm, a profile folder the daemon's configuration can name, fitted back."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import DevCluster


def test_profile_measures_through_slurm_and_writes_a_folder_the_daemon_loads(cluster: DevCluster,
                                                                             tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from slurm_elastic.config import parse
    from slurm_elastic.site_profile import profile_site
    from slurm_elastic.wiring import default_profiles

    cluster.cancel_all()
    out = profile_site(tmp_path / "profiles", models=["cnn"], placements=["1", "2", "11"], batches=[32], steps=8,
                       env=cluster.env, job_timeout_s=240, say=lambda line: None)
    cnn = out["models"]["cnn"]
    assert cnn["failed"] == [] and cnn["fit"] == "fitted", cnn
    assert out["gpus_per_node"] == 4  # the dev cluster's nodes, by sinfo
    assert sorted(r["placement"] for r in cnn["rows"]) == ["1", "11", "2"], cnn
    assert all(0 < r["step_time"] < 5 for r in cnn["rows"]), cnn
    # 8 steps end before two reports pair (0.25 s apart): each such job was run again, longer
    assert all(r["steps"] > 8 for r in cnn["rows"] if r["placement"] == "1"), cnn
    cfg = parse(f'[daemon]\nprofiles = "{tmp_path / "profiles"}"\ndefault_model = "cnn"\n')
    model = default_profiles(cfg.daemon.profiles)["cnn"]
    assert model.gpus_per_node == 4
    one = next(r for r in cnn["rows"] if r["placement"] == "1")
    assert float(model.t_iter(32, 1, 1)) == pytest.approx(one["step_time"], rel=0.05)
