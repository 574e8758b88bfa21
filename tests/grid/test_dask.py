"""The Dask executor: a LocalCluster of worker processes (default), a running scheduler, dask-jobqueue on Slurm."""

from __future__ import annotations

import pytest

from sonic_hep.workflows.grid.merge import merge
from sonic_hep.workflows.grid.task import Task
from tests.grid.conftest import max_concurrent, single_run, submit_and_wait
from tests.grid.samples import analysis_config, assert_same_events


def test_local_cluster_runs_the_task_within_the_cap(tmp_path, inputs):
    config = analysis_config(tmp_path / "analysis.yaml")
    statuses = submit_and_wait(config, tmp_path / "task", inputs, executor="dask", max_running=2)
    assert [s.state for s in statuses] == ["done"] * 3
    assert all(s.submission.batch_id.startswith("dask:") for s in statuses)
    driver_log = next((tmp_path / "task/logs").glob("driver-dask-*.log")).read_text()
    assert "dask: LocalCluster" in driver_log and "all jobs ended" in driver_log
    assert max_concurrent(tmp_path / "task") <= 2
    merge(Task(tmp_path / "task"), tmp_path / "merged.root")
    assert_same_events(tmp_path / "merged.root", single_run(config, inputs, tmp_path / "single.root"))


def test_existing_scheduler(tmp_path, inputs):
    from distributed import LocalCluster

    config = analysis_config(tmp_path / "analysis.yaml")
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        statuses = submit_and_wait(config, tmp_path / "task", inputs[:2], executor="dask",
                                   executor_options={"scheduler": cluster.scheduler_address})
        served = cluster.scheduler.task_prefixes
        assert [s.state for s in statuses] == ["done"] * 2
        assert "run_job_process" in served  # the jobs went through this scheduler
    driver_log = next((tmp_path / "task/logs").glob("driver-dask-*.log")).read_text()
    assert cluster.scheduler_address in driver_log


@pytest.mark.slurm
def test_jobqueue_workers_on_slurm(tmp_path, inputs, slurm, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    config = analysis_config(tmp_path / "analysis.yaml")
    statuses = submit_and_wait(config, tmp_path / "task", inputs[:2], executor="dask", max_running=1,
                               executor_options={"cluster": "slurm", "memory": "1GiB", "walltime": "00:10:00"},
                               timeout=180)
    assert [s.state for s in statuses] == ["done"] * 2
    assert {s.report.batch_id for s in statuses} == {s.submission.batch_id for s in statuses}  # the driver's
    assert list((tmp_path / "task/logs").glob("dask-worker-*.err"))  # the dask worker ran as a Slurm job
