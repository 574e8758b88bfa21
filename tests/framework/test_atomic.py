"""Files that appear complete or not at all: target checks, writer-named temporaries, stale ones removed,
write failures (a full disk) that leave nothing behind."""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest

import tests.framework.modules_for_tests  # noqa: F401
from sonic_hep.framework import OutputError, Process
from sonic_hep.framework import atomic
from sonic_hep.framework import config as cfgmod


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped): no process has it now."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=30)
    return child.pid


def test_temporary_names_say_which_writer(tmp_path):
    name = atomic.temporary_name(str(tmp_path / "out.root"))
    host, pid = atomic.writer_of(name)
    assert pid == os.getpid() and host == atomic._host()
    assert atomic.writer_of(str(tmp_path / "out.root.tmp-1234")) is None  # not one of ours


def test_only_temporaries_of_dead_writers_on_this_host_are_removed(tmp_path):
    target = str(tmp_path / "out.root")
    host = atomic._host()
    dead = f"{target}.tmp-{host}-{dead_pid()}-1"
    alive = f"{target}.tmp-{host}-{os.getppid()}-2"  # the test runner's parent: alive
    other_host = f"{target}.tmp-elsewhere.example-{dead_pid()}-3"  # may be a live writer on a shared disk
    foreign = f"{target}.tmp-by-hand"
    other_target = str(tmp_path / "other.root") + f".tmp-{host}-{dead_pid()}-4"
    for path in (dead, alive, other_host, foreign, other_target):
        open(path, "w").close()
    assert atomic.remove_stale_temporaries(target) == [dead]
    assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(p) for p in (alive, other_host, foreign, other_target))


@pytest.mark.parametrize("name, message", [
    ("folder", "is an existing directory"),
    ("missing/out.root", "does not exist"),
    ("ends/", "names a directory"),
    ("in.root", "is also the input"),
    ("link.root", "is also the input"),
])
def test_targets_refused(tmp_path, name, message):
    (tmp_path / "folder").mkdir()
    (tmp_path / "in.root").write_bytes(b"input")
    (tmp_path / "link.root").symlink_to(tmp_path / "in.root")
    with pytest.raises(OutputError, match=message):
        atomic.check_target(f"{tmp_path}/{name}", "output file", [(str(tmp_path / "in.root"), "the input")])
    assert (tmp_path / "in.root").read_bytes() == b"input"


def test_non_regular_file_refused(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OutputError, match="not a regular file"):
        atomic.check_target(str(fifo), "output file")


def test_pending_text_appears_whole_or_not_at_all(tmp_path):
    pending = atomic.PendingText(str(tmp_path / "t.json"), "timing JSON")
    assert os.listdir(tmp_path) == [os.path.basename(pending.tmp_path)]  # the folder is proven writable now
    pending.write("{}")
    assert not (tmp_path / "t.json").exists()
    pending.commit()
    assert os.listdir(tmp_path) == ["t.json"] and (tmp_path / "t.json").read_text() == "{}"
    failed = atomic.PendingText(str(tmp_path / "u.json"), "timing JSON")
    failed.abort()
    assert os.listdir(tmp_path) == ["t.json"]


def _job(tmp_path, nano, **output):
    return Process(cfgmod.parse({"source": {"files": [str(nano)], "chunk_size": 10},
                                 "modules": {"ht": {"type": "CollectionSum"}},
                                 "output": {"file": str(tmp_path / "out.root"), "chunk_size": 10, **output}},
                                file=str(tmp_path / "job.yaml")))


def test_full_disk_while_writing_is_one_error_and_leaves_nothing(tmp_path, nano_files, monkeypatch):
    """ENOSPC from the file system in the middle of the job (uproot's sink raises OSError)."""
    import uproot.sink.file

    calls = {"n": 0}
    original = uproot.sink.file.FileSink.write

    def write(self, location, serialization):
        calls["n"] += 1
        if calls["n"] > 40:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return original(self, location, serialization)

    monkeypatch.setattr(uproot.sink.file.FileSink, "write", write)
    with pytest.raises(OutputError, match="No space left on device") as err:
        _job(tmp_path, nano_files[0]).run(progress=False)
    assert "out.root" in str(err.value)
    assert calls["n"] > 40  # the failure came from the disk, not from a check
    assert sorted(os.listdir(tmp_path)) == []


def test_timing_json_is_checked_before_the_job(tmp_path, nano_files):
    with pytest.raises(OutputError, match="does not exist"):
        _job(tmp_path, nano_files[0]).run(progress=False, timing_json=str(tmp_path / "nodir" / "t.json"))
    assert os.listdir(tmp_path) == []  # no output: the job did not run
    with pytest.raises(OutputError, match="also the timing JSON"):
        _job(tmp_path, nano_files[0]).run(progress=False, timing_json=str(tmp_path / "out.root"))
    assert os.listdir(tmp_path) == []
    result = _job(tmp_path, nano_files[0]).run(progress=False, timing_json=str(tmp_path / "t.json"))
    assert result.output and sorted(os.listdir(tmp_path)) == ["out.root", "t.json"]


def test_output_equal_to_an_input_is_refused_and_the_input_kept(tmp_path, nano_files):
    copy = tmp_path / "in.root"
    copy.write_bytes(nano_files[0].read_bytes())
    process = Process(cfgmod.parse({"source": {"files": [str(copy)]}, "modules": {"ht": {"type": "CollectionSum"}},
                                    "output": {"file": str(copy)}}, file="job.yaml"))
    with pytest.raises(OutputError, match="is also an input file"):
        process.run(progress=False)
    assert copy.read_bytes() == nano_files[0].read_bytes() and os.listdir(tmp_path) == ["in.root"]


def test_write_with_renames_a_filled_temporary_and_leaves_nothing_when_the_writer_fails(tmp_path):
    from sonic_hep.framework.atomic import write_text, write_with

    target = tmp_path / "picture.png"
    assert write_with(str(target), "picture", lambda tmp: open(tmp, "wb").write(b"\x89PNG")) == str(target)
    assert target.read_bytes() == b"\x89PNG"

    def broken(tmp: str) -> None:
        open(tmp, "wb").write(b"half")
        raise RuntimeError("plot failed")

    with pytest.raises(RuntimeError, match="plot failed"):
        write_with(str(tmp_path / "other.png"), "picture", broken)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["picture.png"]
    write_text(str(tmp_path / "table.md"), "table", "| a |\n")
    assert (tmp_path / "table.md").read_text() == "| a |\n"
