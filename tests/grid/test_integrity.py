"""A done job's output is the one it wrote: merge refuses another job's output of the same length and
bytes changed after ``done``; status shows such a job as failed, resubmit repairs it; nobody but the job writes
into a task's job folders (``sonic merge -o``, ``sonic run -o``)."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import uproot
import yaml

from sonic_hep.workflows.grid.errors import GridError, IncompleteTask
from sonic_hep.workflows.grid.integrity import sha256_of, spec_mismatch
from sonic_hep.workflows.grid.job_folders import owning_task, refuse_task_path
from sonic_hep.workflows.grid.merge import merge
from sonic_hep.workflows.grid.splitting import JobSpec
from sonic_hep.workflows.grid.status import collect, wait
from sonic_hep.workflows.grid.submit import resubmit
from sonic_hep.workflows.grid.task import Task
from tests.grid.conftest import drivers_gone, single_run, submit_and_wait
from tests.grid.samples import analysis_config, assert_same_events, write_nano


def unfiltered_config(path):
    """The selection workflow without its event filter: every job writes as many entries as it reads."""
    config = analysis_config(path)
    raw = yaml.safe_load(config.read_text())
    del raw["modules"]["twojets"]
    config.write_text(yaml.safe_dump(raw, sort_keys=False))
    return config


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A done task of 3 jobs × 40 events over one 120-event file, and its pristine outputs."""
    base = tmp_path_factory.mktemp("integrity")
    source = write_nano(base / "in.root", 120, seed=5, first_event=1)
    config = unfiltered_config(base / "analysis.yaml")
    statuses = submit_and_wait(config, base / "task", [source], events_per_job=40, max_running=1)
    assert [s.state for s in statuses] == ["done"] * 3
    task = Task(base / "task")
    pristine = {i: task.files(i).output.read_bytes() for i in task.indices}
    return base, config, source, task, pristine


@pytest.fixture
def task(finished):
    """The finished task, its outputs and records restored after each test."""
    base, config, source, task, pristine = finished
    records = {i: (task.files(i).report.read_text(), task.files(i).submission.read_text()) for i in task.indices}
    yield task
    for i in task.indices:
        files = task.files(i)
        files.output.write_bytes(pristine[i])
        files.report.write_text(records[i][0])
        files.submission.write_text(records[i][1])
        mtime = json.loads(records[i][0])["output_mtime_ns"]
        os.utime(files.output, ns=(mtime, mtime))


def test_a_swapped_output_of_equal_length_is_refused_naming_the_job_and_its_entries(finished, task, tmp_path):
    shutil.copy(task.files(0).output, task.files(1).output)  # events 1-40 twice, 41-80 missing
    with uproot.open(task.files(1).output) as handle:
        assert handle["Events"].num_entries == 40  # as long as job 1's own: counting entries cannot tell
    with pytest.raises(IncompleteTask) as refused:
        merge(task, tmp_path / "merged.root")
    message = str(refused.value)
    assert "job 1: failed (output changed since done: it holds entries 0-39 of in.root, but job 1 was asked for " \
           "entries 40-79 of in.root" in message and "1 of 3 jobs" in message and "\n" not in message
    assert not (tmp_path / "merged.root").exists()


def test_a_forged_record_does_not_hide_a_swap(finished, task, tmp_path):
    """Even with the digest of the copied file written into job 1's record, its metadata name job 0's entries."""
    shutil.copy(task.files(0).output, task.files(1).output)
    report = json.loads(task.files(1).report.read_text())
    stat = os.stat(task.files(1).output)
    report.update(sha256=sha256_of(task.files(1).output), output_bytes=stat.st_size, output_mtime_ns=stat.st_mtime_ns)
    task.files(1).report.write_text(json.dumps(report))
    with pytest.raises(IncompleteTask, match="job 1: output.root is not its output: it holds entries 0-39"):
        merge(task, tmp_path / "merged.root")


def test_corrupted_basket_bytes_are_refused_and_status_reports_the_change(finished, task, tmp_path, sonic_cli):
    path = task.files(2).output
    report = json.loads(task.files(2).report.read_text())
    with uproot.open(path) as handle:
        seek = int(handle["Events"]["MET_pt"].member("fBasketSeek")[0])
    data = bytearray(path.read_bytes())
    for k in range(seek + 80, seek + 90):  # inside the basket's payload: the file still opens and validates
        data[k] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(report["output_mtime_ns"], report["output_mtime_ns"]))  # same size, same time
    assert [s.state for s in collect(task)[0]] == ["done"] * 3  # the cheap look (size, time) cannot see it ...
    with pytest.raises(IncompleteTask) as refused:  # ... merge recomputes the digest
        merge(task, tmp_path / "merged.root")
    assert "job 2: output.root changed after the job was marked done: sha256 " in str(refused.value)
    result = sonic_cli("status", task.directory, "--verify")  # and so does status --verify
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "output changed since done: output.root changed after the job was marked done: sha256" in result.stdout
    os.utime(path)  # now it looks modified: plain status rehashes it and says so
    result = sonic_cli("status", task.directory)
    assert result.returncode == 1 and "sha256" in result.stdout


def test_a_changed_output_is_resubmitted_and_the_merge_equals_the_single_run(finished, task, tmp_path):
    base, config, source, _, _ = finished
    task.files(1).output.unlink()
    statuses, _ = collect(task)
    assert statuses[1].state == "failed" and "output.root is missing" in statuses[1].reason
    outcome = resubmit(task)
    assert outcome.submitted == [1]
    assert [s.state for s in wait(task, interval=0.3, timeout=120)] == ["done"] * 3
    drivers_gone(task.directory)
    merge(task, tmp_path / "merged.root")
    assert_same_events(tmp_path / "merged.root", single_run(config, [source], tmp_path / "single.root"))


def test_merge_and_run_never_write_into_a_job_folder(finished, task, tmp_path, sonic_cli):
    base, config, source, _, pristine = finished
    target = task.files(0).output
    result = sonic_cli("merge", task.directory, "--output", target)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and f"lies inside the task {task.directory}" in result.stderr
    link = tmp_path / "elsewhere"
    link.symlink_to(task.files(1).directory)  # the same folder by another name
    result = sonic_cli("run", config, "-i", source, "-o", link / "output.root", "--no-progress")
    assert result.returncode == 1 and "Traceback" not in result.stderr and "lies inside the task" in result.stderr
    assert "processed" not in result.stderr  # refused before the first event
    assert [task.files(i).output.read_bytes() == pristine[i] for i in task.indices] == [True] * 3
    assert [s.state for s in collect(task)[0]] == ["done"] * 3
    assert not list(task.files(0).directory.glob("output.root.tmp-*"))


@pytest.mark.parametrize("where, why", [
    ("{task}/jobs", "lies inside the task"), ("{task}", "lies inside the task"),
    ("{task}/logs/m.root", "lies inside the task"), ("{source}", "is an input of the task"),
    ("{base}", "is a directory"), ("{base}/missing/m.root", "does not exist")])
def test_merge_refuses_a_target_it_must_not_or_cannot_write_before_reading_any_output(finished, where, why):
    base, config, source, task, pristine = finished
    target = where.format(task=task.directory, source=source, base=base)
    before = {p: p.stat().st_mtime_ns for p in [source, *base.iterdir()] if p.is_file()}
    with pytest.raises(GridError, match=why) as refused:
        merge(task, target)
    assert "\n" not in str(refused.value) and target in str(refused.value)
    assert {p: p.stat().st_mtime_ns for p in [source, *base.iterdir()] if p.is_file()} == before


def test_which_paths_belong_to_a_task(finished, tmp_path):
    task = finished[3]
    assert owning_task(task.files(0).output) == task.directory
    assert owning_task(task.directory / "jobs" / "new.root") == task.directory
    assert owning_task(task.directory / "logs" / "x.root") == task.directory
    assert owning_task(task.directory / "task.json") == task.directory
    assert owning_task(task.directory) == task.directory and owning_task(task.directory / "jobs") == task.directory
    assert owning_task(task.directory / "merged.root") is None  # beside the jobs: allowed
    assert owning_task(tmp_path / "jobs" / "0000" / "output.root") is None  # no task.json above
    with pytest.raises(GridError, match="write it outside"):
        refuse_task_path(task.files(2).output, "output file")


def test_spec_mismatch_names_what_differs():
    spec = JobSpec(index=3, inputs=("/d/a.root", "/d/b.root"), first_entry=10, max_events=5)
    same = {"inputs": ["/d/a.root", "/d/b.root"], "first_entry": 10, "max_events": 5}
    assert spec_mismatch(spec, same) is None
    assert "entries 15-19 of a.root, b.root, but job 3 was asked for entries 10-14" in \
        spec_mismatch(spec, {**same, "first_entry": 15})
    assert "it holds entries 10-14 of b.root" in spec_mismatch(spec, {**same, "inputs": ["/d/b.root"]})
    assert spec_mismatch(spec, {**same, "inputs": ["/slot/a.root", "/slot/b.root"]}, sandboxed=True) is None
    assert spec_mismatch(spec, {**same, "inputs": ["/other/a.root", "/d/b.root"]}) is not None
    assert spec_mismatch(JobSpec(index=0, first_entry=0, max_events=4),
                         {"inputs": ["<empty>"], "first_entry": 0, "max_events": 4}) is None
