"""Merging: a job that wrote nothing, and outputs that must not be accepted (swapped, truncated)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys

import pytest
import uproot

from sonic_hep.workflows.grid.errors import GridError, IncompleteTask
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


def test_two_merges_into_one_name_never_both_succeed(tmp_path, inputs, sonic_cli):
    """Two tasks merged into one file at once: one merge writes it, the other fails with one line (the file
    appeared after its check, or before); never both "merged", and the file holds exactly one task's events.
    Only --force replaces."""
    config = analysis_config(tmp_path / "analysis.yaml")
    submit_and_wait(config, tmp_path / "m1", [inputs[0]])
    submit_and_wait(config, tmp_path / "m2", [inputs[1]])
    out = tmp_path / "c.root"
    # the race's second commit, made certain: the name appears between a merge's check and its commit
    written = [merge(Task(tmp_path / "m1"), out)]
    first = out.read_bytes()
    with pytest.raises(GridError, match=r"was written by another merge meanwhile; it is kept \(give --force"):
        merge(Task(tmp_path / "m2"), out)
    assert out.read_bytes() == first and not list(tmp_path.glob("c.root.tmp-*"))
    written.append(merge(Task(tmp_path / "m2"), out, replace=True))  # --force: replaced
    assert out.read_bytes() != first and written[0] != written[1]
    out.unlink()
    # and two real merges started together
    procs = [subprocess.Popen([sys.executable, "-m", "sonic_hep.workflows.cli", "merge", str(tmp_path / task),
                               "--output", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for task in ("m1", "m2")]
    results = [(p.wait(120), p.stderr.read()) for p in procs]
    winners = [i for i, (code, _) in enumerate(results) if code == 0]
    assert len(winners) == 1, results
    loser = results[1 - winners[0]][1].strip().splitlines()
    assert len(loser) == 1 and "c.root" in loser[0], loser  # one line naming the file
    with uproot.open(out) as merged:
        assert merged["Events"].num_entries == written[winners[0]]
