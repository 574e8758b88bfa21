"""Merging: a job that wrote nothing, and outputs that must not be accepted (swapped, truncated)."""

from __future__ import annotations

import shutil
import socket
import subprocess

import pytest

from sonic_hep.workflows.grid.errors import IncompleteTask
from sonic_hep.workflows.grid.merge import merge
from sonic_hep.workflows.grid.task import Task
from tests.grid.conftest import single_run, submit_and_wait
from tests.grid.samples import analysis_config, assert_same_events, write_nano


def test_empty_job_merges_and_tampered_outputs_are_refused(tmp_path, inputs):
    empty = write_nano(tmp_path / "empty.root", 0, seed=0)
    files = [inputs[0], empty, inputs[1]]
    config = analysis_config(tmp_path / "analysis.yaml")
    statuses = submit_and_wait(config, tmp_path / "task", files, max_running=3)
    assert [s.report.events for s in statuses] == [120, 0, 80]
    task = Task(tmp_path / "task")
    dead = subprocess.Popen(["true"])
    dead.wait()  # a pid no process has now: the writer of a merge that was killed
    stale = tmp_path / f"merged.root.tmp-{socket.gethostname()}-{dead.pid}-1"
    stale.write_bytes(b"half a merged file")
    assert merge(task, tmp_path / "merged.root") == sum(s.report.written for s in statuses)
    assert not stale.exists() and not list(tmp_path.glob("merged.root.tmp-*"))
    assert_same_events(tmp_path / "merged.root", single_run(config, files, tmp_path / "single.root"))

    shutil.copy(task.files(2).output, task.files(0).output)  # a valid ROOT file, but not job 0's
    with pytest.raises(IncompleteTask, match=r"job 0: .*holds all entries of in1.root, but job 0 was asked for "
                                              r"all entries of in0.root"):
        merge(task, tmp_path / "again.root")
    data = task.files(2).output.read_bytes()
    task.files(2).output.write_bytes(data[: len(data) // 2])  # truncated, as by a full disk
    with pytest.raises(IncompleteTask) as refused:
        merge(task, tmp_path / "again.root")
    assert "job 2: failed (output changed since done: output.root changed after the job was marked done: " \
        f"{len(data) // 2} bytes, {len(data)} recorded" in str(refused.value) and "2 of 3 jobs" in str(refused.value)
    assert "\n" not in str(refused.value)
    assert not (tmp_path / "again.root").exists()
