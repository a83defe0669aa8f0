"""``slurm-elastic profile`` on the real dev cluster: fixed-size launcher jobs measured through
Slurm, a profile folder the daemon's configuration can name, fitted back, and ``bench fidelity``
run on it."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import DevCluster


def test_a_profile_measured_through_slurm_is_loaded_by_the_daemon_and_runs_bench_fidelity(
        cluster: DevCluster, tmp_path: Path) -> None:
    """Two scenarios on one profile, as they share the session cluster: ``slurm-elastic profile``
    measures fixed-size launcher jobs through Slurm into a folder the daemon's configuration can
    name; then ``bench fidelity`` in CI, small (3 short jobs, 3 placements), runs a trace for real
    on that profile and in the simulator: every job completed with every sample once, both JCTs
    measured, and each rung of the physics ladder simulated. The figures themselves come from the
    benchmark (its own 3 x 2 cluster, 12 jobs, its own profile)."""
    pytest.importorskip("torch")
    from slurm_elastic.bench.live.fidelity import MODEL, PHYSICS, bench_fidelity, replay_fidelity
    from slurm_elastic.config import parse
    from slurm_elastic.site_profile import profile_site
    from slurm_elastic.wiring import default_profiles

    cluster.cancel_all()
    measured = profile_site(tmp_path / "profiles", models=[MODEL], placements=["1", "2", "11"], batches=[32],
                            steps=8, env=cluster.env, job_timeout_s=240, say=lambda line: None)
    cnn = measured["models"][MODEL]
    assert cnn["failed"] == [] and cnn["fit"] == "fitted", cnn
    assert measured["gpus_per_node"] == 4  # the dev cluster's nodes, by sinfo
    assert sorted(r["placement"] for r in cnn["rows"]) == ["1", "11", "2"], cnn
    assert all(0 < r["step_time"] < 5 for r in cnn["rows"]), cnn
    # 8 steps end before two reports pair (0.25 s apart): each such job was run again, longer
    assert all(r["steps"] > 8 for r in cnn["rows"] if r["placement"] == "1"), cnn
    cfg = parse(f'[daemon]\nprofiles = "{tmp_path / "profiles"}"\ndefault_model = "{MODEL}"\n')
    model = default_profiles(cfg.daemon.profiles)[MODEL]
    assert model.gpus_per_node == 4
    one = next(r for r in cnn["rows"] if r["placement"] == "1")
    assert float(model.t_iter(32, 1, 1)) == pytest.approx(one["step_time"], rel=0.05)

    out = bench_fidelity(root=cluster.root, jobs=3, placements=("1", "2", "11"), bring_up=False, timeout_s=300,
                         alone_s=(4.0, 8.0), mean_gap_s=3.0, measured=measured, say=lambda line: None)
    assert out["completed"] == 3 and out["samples_exact"] == 3, out
    assert out["real_avg_jct_s"] > 0 and out["sim_avg_jct_s"] > 0 and out["ratio"] > 0, out
    assert list(out["ladder"]) == ["profiles", *(f"+{p}" for p in PHYSICS)], out
    assert out["physics"]["overhead_s"] > 0 and out["physics"]["host_cores"] >= 1, out
    # start-up and ending only add time; every job has both JCTs
    assert out["ladder"]["+overhead"]["sim_avg_jct_s"] >= out["ladder"]["+pauses"]["sim_avg_jct_s"], out
    assert all(j["real_jct_s"] and j["sim_jct_s"] for j in out["per_job"]), out
    # the real run is recorded: simulating it again gives the same figures, without a cluster
    assert replay_fidelity(Path(out["work"])) == out
