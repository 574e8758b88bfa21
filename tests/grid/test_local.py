"""The local executor end to end: real job processes, a killed job, unreadable inputs, merging."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import uproot

from sonic_hep.workflows.grid.errors import GridError, IncompleteTask
from sonic_hep.workflows.grid.merge import merge
from sonic_hep.workflows.grid.status import wait
from sonic_hep.workflows.grid.submit import SubmitRequest, resubmit, submit
from sonic_hep.workflows.grid.task import Task
from tests.conftest import shared_path
from tests.grid.conftest import SIZES, max_concurrent, reports, single_run, submit_and_wait, wait_for
from tests.grid.samples import analysis_config, assert_same_events


def test_split_by_events_run_cap_and_merge_equal_single_run(tmp_path, inputs, sonic_cli):
    config = analysis_config(tmp_path / "analysis.yaml", histogram=True)
    task_dir = tmp_path / "task"
    result = sonic_cli("submit", config, "--input", *inputs, "--output-dir", task_dir, "--events-per-job", "110",
                       "--max-running", "2", "--wait", "--timeout", "120", check=True)
    assert "3 done" in result.stdout and "at most 2 running" in result.stderr
    job1 = json.loads((task_dir / "jobs/0001/job.json").read_text())
    assert job1["inputs"] == [str(p) for p in inputs] and job1["first_entry"] == 110  # 110-119, 0-79, 0-19
    assert "--first-entry 110 --max-events 110" in (task_dir / "jobs/0001/command.sh").read_text()
    assert [r["events"] for r in reports(task_dir)] == [110, 110, sum(SIZES) - 220]
    assert max_concurrent(task_dir) <= 2

    summary = json.loads(sonic_cli("status", task_dir, "--json", check=True).stdout)
    assert summary["counts"]["done"] == 3 and summary["timing"]["events"] == sum(SIZES)
    assert all(job["timing"]["events_per_s"] > 0 for job in summary["jobs"])

    merged = tmp_path / "merged.root"
    sonic_cli("merge", task_dir, "--output", merged, check=True)
    single = single_run(config, inputs, tmp_path / "single.root")
    assert assert_same_events(merged, single) < sum(SIZES)  # the filter dropped some
    with uproot.open(merged) as m, uproot.open(single) as s:
        assert (m["hht/h"].values() == s["hht/h"].values()).all()  # histograms summed over the jobs
        assert json.loads(str(m["sonic_metadata"]))["events_written"] == m["Events"].num_entries

    # submitting the same task again touches nothing; a different task into the same directory is refused
    stamps = {p: p.stat().st_mtime_ns for p in task_dir.glob("jobs/*/output.root")}
    request = dict(config=str(config), output_dir=str(task_dir), inputs=[str(p) for p in inputs])
    again = submit(SubmitRequest(**request, events_per_job=110))
    assert again.submitted == [] and set(again.skipped.values()) == {"done"}
    assert stamps == {p: p.stat().st_mtime_ns for p in task_dir.glob("jobs/*/output.root")}
    with pytest.raises(GridError, match="different configuration, inputs, splitting"):
        submit(SubmitRequest(**request, events_per_job=50))


def test_killed_job_is_detected_resubmitted_and_merge_waits_for_it(tmp_path, inputs, sonic_cli):
    gate = tmp_path / "release"
    config = analysis_config(tmp_path / "held.yaml", gate=gate)
    task = submit(SubmitRequest(config=str(config), output_dir=str(tmp_path / "task"),
                                inputs=[str(p) for p in inputs], max_running=3)).task
    state = task.files(0).report
    victim = wait_for(lambda: state.exists() and json.loads(state.read_text()), what="job 0 to start")
    wait_for(lambda: list(task.files(0).directory.glob("output.root.tmp-*")), what="job 0 to write its output")
    os.killpg(victim["pid"], signal.SIGKILL)
    gate.touch()  # the other jobs go on only now: the outcome does not depend on how fast the jobs are
    statuses = wait(task, interval=0.3, timeout=120)
    assert [s.state for s in statuses] == ["failed", "done", "done"]
    assert statuses[0].reason.startswith("killed by SIGKILL")
    assert not task.files(0).output.exists()
    shown = sonic_cli("status", task.directory)
    assert shown.returncode == 1 and "killed by SIGKILL" in shown.stdout and "      | " in shown.stdout  # log tail

    with pytest.raises(IncompleteTask, match="job 0: failed"):
        merge(task, tmp_path / "merged.root")
    assert not (tmp_path / "merged.root").exists()

    sonic_cli("resubmit", task.directory, "--wait", "--timeout", "120", check=True)
    assert task.submission(0).attempt == 2 and task.submission(0).history[0]["reason"].startswith("killed by SIGKILL")
    assert task.submission(1).attempt == 1  # done jobs stay as they are
    assert not list(task.files(0).directory.glob("output.root.tmp-*"))
    merge(task, tmp_path / "merged.root")
    fast = analysis_config(tmp_path / "fast.yaml")  # the same event tree, without burning CPU
    assert_same_events(tmp_path / "merged.root", single_run(fast, inputs, tmp_path / "single.root"))


def test_a_resubmission_while_jobs_still_run_keeps_to_the_tasks_max_running(tmp_path, inputs):
    """Each submission has its own driver; the cap is the task's, so the second waits for a place."""
    gate = tmp_path / "release"
    config = analysis_config(tmp_path / "held.yaml", gate=gate)
    task = submit(SubmitRequest(config=str(config), output_dir=str(tmp_path / "task"),
                                inputs=[str(p) for p in inputs], max_running=2)).task

    def running() -> list[int]:
        return [i for i in task.indices if task.report(i) is not None and task.report(i).state == "running"]

    try:
        wait_for(lambda: running() == [0, 1], what="jobs 0 and 1 to run (2 is held by the cap)")
        os.killpg(task.report(0).pid, signal.SIGKILL)
        wait_for(lambda: running() == [1, 2], what="job 2 to take job 0's place")
        assert resubmit(task).submitted == [0]  # while 1 and 2 still run, held by the gate
        second = next(r for r in task.directory.glob("logs/driver-*.json") if json.loads(r.read_text())["jobs"] == [0])
        waiting = Path(json.loads(second.read_text())["log"])
        wait_for(lambda: 0 in running() or "waiting for a place to run" in waiting.read_text(),
                 what="the second driver to start job 0 or to wait")
        assert running() == [1, 2]  # job 0 waits for a place instead of running as a third
    finally:
        gate.touch()  # no job is left held, whatever happened
    statuses = wait(task, interval=0.3, timeout=120)
    assert [s.state for s in statuses] == ["done"] * 3 and statuses[0].attempt == 2
    assert max_concurrent(task.directory) <= 2  # the final attempts' start and end times


def test_unreadable_input_is_reported_for_its_job_and_retries_are_limited(tmp_path, inputs, sonic_cli):
    broken = tmp_path / "broken.root"
    broken.write_bytes(b"this is not a ROOT file" * 100)
    file_list = tmp_path / "files.txt"
    file_list.write_text(f"# inputs\n{inputs[1]}\n{broken.name}\n")
    config = analysis_config(tmp_path / "analysis.yaml")
    statuses = submit_and_wait(config, tmp_path / "task", [file_list], max_retries=1)
    assert [s.state for s in statuses] == ["done", "failed"]
    assert statuses[1].report.exit_code == 2 and str(broken) in statuses[1].report.bad_inputs[0]
    assert "unreadable input: " in sonic_cli("status", tmp_path / "task", "--failed").stdout

    task = Task(tmp_path / "task")
    assert resubmit(task).submitted == [1]
    wait(task, interval=0.3, timeout=120)
    final = resubmit(task)
    assert final.submitted == [] and final.skipped[1].startswith("failed 2 times (retry limit 1")
    with pytest.raises(GridError, match="only failed jobs are resubmitted"):
        resubmit(task, jobs=[0])


def test_generator_task_split_into_event_ranges(tmp_path):
    config = tmp_path / "gen.yaml"
    config.write_text("source: {type: empty, events: 45, chunk_size: 10}\n"
                      "modules: {value: {type: NullProducer}}\n")
    statuses = submit_and_wait(config, tmp_path / "task", events_per_job=20, max_running=3)
    assert [s.report.events for s in statuses] == [20, 20, 5]
    merge(Task(tmp_path / "task"), tmp_path / "merged.root")
    with uproot.open(tmp_path / "merged.root") as merged:
        assert merged["Events"]["event"].array(library="np").tolist() == list(range(1, 46))


@pytest.mark.shared
def test_real_cms_nanoaod_split_and_merged(tmp_path):
    nano = shared_path("real", "root", "nanoAOD_2015_CMS_Open_Data_ttbar.root")
    config = analysis_config(tmp_path / "cms.yaml")
    statuses = submit_and_wait(config, tmp_path / "task", [nano], events_per_job=120, max_running=2)
    assert [s.report.events for s in statuses] == [120, 80]
    merge(Task(tmp_path / "task"), tmp_path / "merged.root")
    assert assert_same_events(tmp_path / "merged.root", single_run(config, [nano], tmp_path / "single.root")) > 0
