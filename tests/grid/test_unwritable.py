"""A task folder that fills up (or turns read-only): the job wrapper says so in one line naming the file and
exits 4, its driver goes on, and ``status`` names the full file system instead of blaming a dead driver.

A full disk is injected at the write (``OSError(ENOSPC)``); where the tests run as root, a real full tmpfs too.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sonic_hep.workflows.grid import records
from sonic_hep.workflows.grid.errors import UnwritableRecord
from sonic_hep.workflows.grid.executors.driver import record_lost
from sonic_hep.workflows.grid.job import EXIT_UNWRITABLE
from sonic_hep.workflows.grid.status import collect
from sonic_hep.workflows.grid.task import Task
from tests.grid.conftest import submit_and_wait
from tests.grid.samples import analysis_config, write_nano

SONIC = [sys.executable, "-m", "sonic_hep.workflows.cli"]

#: runs the job wrapper with every replacement of a ``state.json`` refused as a full disk would refuse it
WRAPPER_ON_A_FULL_DISK = """
import errno, os, runpy, sys
real = os.replace
def full(src, dst, *args, **kwargs):
    if str(dst).endswith("state.json"):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return real(src, dst, *args, **kwargs)
os.replace = full
sys.argv = ["job", *sys.argv[1:]]
runpy.run_module("sonic_hep.workflows.grid.job", run_name="__main__")
"""


def _enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def done_task(folder: Path) -> Task:
    """A finished task of one job (10 events) in ``folder``."""
    source = write_nano(folder / "in.root", 10, seed=3)
    submit_and_wait(analysis_config(folder / "analysis.yaml"), folder / "task", [source], max_running=1)
    return Task(folder / "task")


def as_if_lost(task: Task, index: int) -> None:
    """Job ``index`` as a job that started, wrote ``running`` and ended without a final report: its
    driver (a process that has exited) is gone."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    files = task.files(index)
    submission = json.loads(files.submission.read_text())
    submission["batch_id"] = f"local:{int(dead.stdout)}@{os.uname().nodename}"
    files.submission.write_text(json.dumps(submission))
    report = json.loads(files.report.read_text())
    report.update(state="running", ended=None, exit_code=None, batch_id=submission["batch_id"])
    files.report.write_text(json.dumps(report))


def test_a_record_that_cannot_be_written_names_the_file_and_leaves_the_old_one(tmp_path, monkeypatch):
    path = tmp_path / "state.json"
    records.write_json(path, {"state": "running"})
    monkeypatch.setattr(os, "replace", _enospc)
    with pytest.raises(UnwritableRecord) as refused:
        records.write_json(path, {"state": "done"})
    assert str(refused.value) == f"cannot write {path}: No space left on device"
    assert json.loads(path.read_text()) == {"state": "running"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]  # no temporary left


def test_the_temporary_of_a_writer_killed_mid_record_is_removed_by_the_next_write(tmp_path):
    """A job killed between writing a record's temporary and renaming it leaves the temporary behind; it is
    named after its writer as every temporary of the project is, so the next write of the record sweeps it."""
    from sonic_hep.framework import atomic

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    path = tmp_path / "state.json"
    left = Path(atomic.temporary_name(str(path)).replace(f"-{os.getpid()}-", f"-{int(dead.stdout)}-"))
    left.write_text('{"state": "runn')
    records.write_json(path, {"state": "done"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]
    assert json.loads(path.read_text()) == {"state": "done"}


def test_the_job_wrapper_says_in_one_line_which_file_it_cannot_write(tmp_path):
    task = done_task(tmp_path)
    before = task.files(0).report.read_text()
    wrapper = subprocess.run([sys.executable, "-c", WRAPPER_ON_A_FULL_DISK, str(task.directory), "0"],
                             capture_output=True, text=True, timeout=120)
    assert wrapper.returncode == EXIT_UNWRITABLE, wrapper.stderr
    log = task.files(0).log.read_text()
    attempt = log.rsplit("=====", 1)[1]  # what this attempt wrote, after its header
    assert "Traceback" not in attempt, attempt
    errors = [line for line in attempt.splitlines() if line.startswith("sonic")]
    assert errors == [f"sonic job 0: error: cannot write {task.files(0).report}: No space left on device"], attempt
    assert task.files(0).report.read_text() == before
    assert not list(task.files(0).directory.glob(".state.json.*"))


def test_a_driver_that_cannot_record_a_lost_job_goes_on(tmp_path, monkeypatch, capsys):
    task = done_task(tmp_path)
    as_if_lost(task, 0)
    monkeypatch.setattr(os, "replace", _enospc)
    record_lost(task, 0, EXIT_UNWRITABLE, "exited with status 4 before reporting")  # no exception
    assert f"cannot write {task.files(0).report}: No space left on device" in capsys.readouterr().out


def test_status_names_the_full_file_system_not_the_driver(tmp_path, monkeypatch):
    task = done_task(tmp_path)
    as_if_lost(task, 0)
    [status], _ = collect(task)
    assert status.state == "failed" and "driver" in status.reason  # nothing is full: the batch side is all we know
    real = os.statvfs

    def full(path):
        found = real(path)
        if not str(path).startswith(str(task.directory)):
            return found
        return os.statvfs_result((found.f_bsize, found.f_frsize, found.f_blocks, 0, 0, found.f_files,
                                  found.f_ffree, found.f_favail, found.f_flag, found.f_namemax))

    monkeypatch.setattr(os, "statvfs", full)
    [status], _ = collect(task)
    assert status.state == "failed"
    assert status.reason == f"could not write its report: the file system of {task.files(0).directory} is full " \
                            f"(0 bytes free)"


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("mount") is None, reason="mounting a tmpfs needs root")
def test_a_real_full_task_folder(tmp_path):
    """On a real full tmpfs: the wrapper cannot write its log or report and ``sonic status`` says why."""
    small = tmp_path / "small"
    small.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(small)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        task = done_task(small)
        as_if_lost(task, 0)
        with open(small / "filler", "wb", buffering=0) as filler:  # fill every byte that is left
            for chunk in (65536, 4096, 1):
                try:
                    while True:
                        filler.write(b"\0" * chunk)
                except OSError as err:
                    assert err.errno == errno.ENOSPC
        wrapper = subprocess.run([sys.executable, "-m", "sonic_hep.workflows.grid.job", str(task.directory), "0"],
                                 capture_output=True, text=True, timeout=120)
        log = task.files(0).log.read_text()
        status = subprocess.run([*SONIC, "status", str(task.directory)], capture_output=True, text=True, timeout=120)
    finally:
        subprocess.run(["umount", "-l", str(small)], capture_output=True, timeout=30)
    assert wrapper.returncode == EXIT_UNWRITABLE, wrapper.stderr
    # the line goes where stderr goes: the job log once its header was written there, else the batch system's
    said = [line for line in (wrapper.stderr + log.rsplit("=====", 1)[-1]).splitlines() if line.startswith("sonic")]
    assert len(said) == 1 and "cannot write" in said[0] and "No space left on device" in said[0], (wrapper.stderr, log)
    assert "Traceback" not in wrapper.stderr
    assert status.returncode == 1, status.stderr
    line = next(line for line in status.stdout.splitlines() if line.strip().startswith("0 "))
    assert "could not write its report" in line and "is full" in line and "driver" not in line, status.stdout
