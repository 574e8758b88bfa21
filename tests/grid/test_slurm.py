"""The Slurm executor on a real Slurm (started by the session fixture): arrays, the %N cap, scancel, merging."""

from __future__ import annotations

import json
import os
import signal

import pytest

from sonic_hep.workflows.grid.merge import merge
from sonic_hep.workflows.grid.status import collect, wait
from sonic_hep.workflows.grid.submit import SubmitRequest, resubmit, submit
from sonic_hep.workflows.grid.task import Task
from tests.grid.conftest import SIZES, max_concurrent, reports, single_run, wait_for
from tests.grid.samples import analysis_config, assert_same_events

pytestmark = pytest.mark.slurm


def test_job_array_respects_the_cap_and_merges_to_the_single_run(tmp_path, inputs, slurm, sonic_cli):
    config = analysis_config(tmp_path / "analysis.yaml")
    task_dir = tmp_path / "task"
    result = sonic_cli("submit", config, "--input", *inputs, "--output-dir", task_dir, "--executor", "slurm",
                       "--events-per-job", "110", "--max-running", "2", "-E", "time=00:10:00", "--wait",
                       "--timeout", "180", env=slurm.env, check=True)
    assert "3 done" in result.stdout
    script = next((task_dir / "logs").glob("slurm-submit-*.sh")).read_text()
    assert "#SBATCH --array=0-2%2" in script and "#SBATCH --time=00:10:00" in script
    task = Task(task_dir)
    array_ids = {task.submission(i).batch_id for i in task.indices}
    assert {r["batch_id"] for r in reports(task_dir)} == array_ids  # each job ran as its own array task
    assert len({b.split("_")[0] for b in array_ids}) == 1
    assert max_concurrent(task_dir) <= 2
    assert sum(r["events"] for r in reports(task_dir)) == sum(SIZES)
    merge(task, tmp_path / "merged.root")
    assert_same_events(tmp_path / "merged.root", single_run(config, inputs, tmp_path / "single.root"))


def test_cancelled_and_killed_jobs_are_detected_and_resubmitted(tmp_path, inputs, slurm, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    gate = tmp_path / "release"
    config = analysis_config(tmp_path / "held.yaml", gate=gate)
    task = submit(SubmitRequest(config=str(config), output_dir=str(tmp_path / "task"),
                                inputs=[str(p) for p in inputs], executor="slurm")).task

    def running(index: int) -> bool:
        path = task.files(index).report
        return path.exists() and json.loads(path.read_text())["state"] == "running"

    wait_for(lambda: running(0) and running(1), timeout=60, what="jobs 0 and 1 to start")
    slurm.run("scancel", task.submission(0).batch_id)  # SIGTERM: the job reports it
    os.kill(json.loads(task.files(1).report.read_text())["pid"], signal.SIGKILL)  # as the OOM killer would
    wait_for(lambda: not running(0), timeout=60, what="job 0 to report its SIGTERM")
    gate.touch()  # job 2 goes on only now: the outcome does not depend on how fast the jobs are
    statuses = wait(task, interval=0.3, timeout=120)
    assert [s.state for s in statuses] == ["failed", "failed", "done"], [s.reason for s in statuses]
    assert "SIGTERM" in statuses[0].reason
    assert statuses[1].reason.startswith("killed: ended without reporting (slurm ")
    assert not task.files(0).output.exists() and not task.files(1).output.exists()

    assert resubmit(task).submitted == [0, 1]
    statuses = wait(task, interval=0.3, timeout=120)
    assert [s.state for s in statuses] == ["done"] * 3 and [s.attempt for s in statuses] == [2, 2, 1]
    assert collect(task)[0][0].submission.batch_id != statuses[0].submission.history[0]["batch_id"]
    merge(task, tmp_path / "merged.root")
    fast = analysis_config(tmp_path / "fast.yaml")  # the same event tree, without burning CPU
    assert_same_events(tmp_path / "merged.root", single_run(fast, inputs, tmp_path / "single.root"))


def test_a_resubmission_while_an_earlier_array_runs_keeps_to_max_running(tmp_path, inputs, slurm, monkeypatch):
    """Each submission is its own array with its own ``%N``; the new one waits for the earlier one."""
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    # the node has 2 cores: only with oversubscription could a third job run beside two, as on a real cluster
    assert slurm.run("scontrol", "update", "PartitionName=test", "OverSubscribe=FORCE:4").returncode == 0
    gate = tmp_path / "release"
    config = analysis_config(tmp_path / "held.yaml", gate=gate)
    task = submit(SubmitRequest(config=str(config), output_dir=str(tmp_path / "task"), executor="slurm",
                                inputs=[str(p) for p in inputs], max_running=2)).task

    def running() -> list[int]:
        return [i for i in task.indices if task.report(i) is not None and task.report(i).state == "running"]

    def held_by_dependency() -> bool:
        shown = slurm.run("squeue", "--noheader", "--format=%r", f"--jobs={task.submission(0).batch_id}")
        return "Dependency" in shown.stdout

    try:
        wait_for(lambda: running() == [0, 1], timeout=60, what="jobs 0 and 1 to run (2 is held by %2)")
        slurm.run("scancel", task.submission(0).batch_id)
        wait_for(lambda: running() == [1, 2], timeout=60, what="job 2 to take job 0's place")
        first_array = task.submission(1).batch_id.split("_")[0]
        assert resubmit(task).submitted == [0]  # while 1 and 2 still run, held by the gate
        script = sorted((task.directory / "logs").glob("slurm-submit-*.sh"), key=lambda p: p.stat().st_mtime)[-1]
        assert f"#SBATCH --dependency=afterany:{first_array}" in script.read_text()
        wait_for(lambda: 0 in running() or held_by_dependency(), timeout=60, what="job 0 to run or to wait")
        assert running() == [1, 2]  # job 0 waits for the earlier array instead of running as a third
    finally:
        gate.touch()  # no job is left held, whatever happened
        slurm.run("scontrol", "update", "PartitionName=test", "OverSubscribe=NO")
    statuses = wait(task, interval=0.3, timeout=120)
    assert [s.state for s in statuses] == ["done"] * 3 and statuses[0].attempt == 2, [s.reason for s in statuses]
    assert max_concurrent(task.directory) <= 2  # the final attempts' start and end times
