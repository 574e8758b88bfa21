"""A ``sonic run`` job either writes a complete output or leaves nothing that looks like one, whatever ends
it: SIGTERM (with a managed Triton server), SIGKILL, a full disk, a read-only folder, a closed stdout; and
the paths it writes are checked before the first event. Real processes, real ROOT files, a real tmpfs
where the test runs as root (a full or read-only file system cannot be faked from the outside)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import uproot
import yaml

from tests.framework.conftest import write_nano
from tests.polling import gone, wait_for

SONIC = [sys.executable, "-m", "sonic_hep.workflows.cli"]


def slow_config(tmp_path: Path, output: Path, events: int = 100000) -> Path:
    """A job of ``events`` events that would take ~events × 10 ms: any test that finishes quickly proves the
    job stopped (or was refused) long before its end."""
    path = tmp_path / "slow.yaml"
    path.write_text(yaml.safe_dump({"source": {"type": "empty", "events": events, "chunk_size": 10},
                                    "modules": {"w": {"type": "SleepExternal", "ms": 20.0}},
                                    "output": {"file": str(output)}, "options": {"streams": 2, "threads": 1}}))
    return path


def temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".tmp-" in p.name)


def error_line(stderr: str) -> str:
    """The one line a failure prints (log lines aside); no traceback."""
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.startswith("sonic")]
    assert len(lines) == 1, stderr
    return lines[0]


@contextlib.contextmanager
def sonic_job(args: list[str], cwd: Path, stdout: int = subprocess.PIPE) -> Iterator[tuple[subprocess.Popen, list[str]]]:
    """A ``sonic`` process whose stderr lines collect as they come (to wait for a log line); killed if the test
    leaves it running, and its stderr read to the end before the block returns."""
    proc = subprocess.Popen([*SONIC, *args], cwd=cwd, stdout=stdout, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    try:
        yield proc, lines
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(timeout=10)


@pytest.mark.triton
def test_sigterm_stops_like_sigint_and_stops_the_managed_server(tmp_path):
    out = tmp_path / "out.root"
    with sonic_job(["run", "demo_inference", "--inference", "sonic", "-o", str(out), "--no-progress",
                    "-p", "source.events=10000000", "-p", "options.streams=2"], tmp_path) as (proc, lines):
        wait_for(lambda: any("Triton server ready" in line for line in lines) or proc.poll() is not None, 120,
                 "the managed server")
        ready = next((re.search(r"Triton server ready\b.*?\bpid (\d+)", line) for line in lines
                      if "Triton server ready" in line), None)
        assert ready, "".join(lines)
        server = int(ready.group(1))
        assert not gone(server)
        time.sleep(1.0)  # events in flight on the server
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    stderr = "".join(lines)
    assert proc.returncode == 143, stderr
    assert re.search(r"stopped by SIGTERM after \d+ events; no output was written", stderr)
    assert "Traceback" not in stderr
    wait_for(lambda: gone(server), 30, f"the managed server (pid {server}) to stop")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.triton
def test_sigterm_while_the_managed_server_starts_leaves_no_process(tmp_path):
    """The signal lands while the job waits for its server (and the server starts its Python stubs): the
    half-started server goes with its stubs, not only the server process (its stubs were orphaned)."""
    family: set[int] = set()
    with sonic_job(["run", "demo_inference", "--inference", "sonic", "-o", str(tmp_path / "out.root"),
                    "--no-progress", "-p", "source.events=100000"], tmp_path, stdout=subprocess.DEVNULL) as (proc, lines):
        wait_for(lambda: any("starting a local fallback" in line for line in lines) or proc.poll() is not None, 120,
                 "the server start")
        def started() -> bool:  # every process the job has started, as they appear
            with contextlib.suppress(psutil.NoSuchProcess):
                family.update(child.pid for child in psutil.Process(proc.pid).children(recursive=True))
            return bool(family) or proc.poll() is not None

        # the server process appears only after the runtime repository is written (slower on a loaded machine):
        # waiting for it, not a fixed time, lands the signal while the server starts
        wait_for(started, 120, "the server process")
        proc.send_signal(signal.SIGTERM)
        while proc.poll() is None:
            with contextlib.suppress(psutil.NoSuchProcess):
                family |= {child.pid for child in psutil.Process(proc.pid).children(recursive=True)}
            time.sleep(0.02)
        proc.wait(timeout=60)
    assert proc.returncode == 143, "".join(lines)
    assert family, "the job started no process"
    wait_for(lambda: all(gone(pid) for pid in family), 30,
             f"every process of the job to end: {[pid for pid in family if not gone(pid)]}")
    assert temporaries(tmp_path) == [] and not (tmp_path / "out.root").exists()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_or_sighup_during_a_job_leaves_nothing(tmp_path, sig):
    out = tmp_path / "out.root"
    cfg = slow_config(tmp_path, out)
    proc = subprocess.Popen([*SONIC, "run", str(cfg), "--no-progress"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: temporaries(tmp_path), 60, "the job to start writing")
    time.sleep(0.5)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, stderr
    assert f"stopped by {sig.name} after" in error_line(stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["slow.yaml"]


def test_a_signal_ignored_at_start_stays_ignored(tmp_path):
    """``nohup sonic run ...`` or a script's background job: the ignored signal must not stop the job."""
    out = tmp_path / "out.root"
    cfg = slow_config(tmp_path, out)
    proc = subprocess.Popen([*SONIC, "run", str(cfg), "--no-progress"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    wait_for(lambda: temporaries(tmp_path), 60, "the job to start writing")
    proc.send_signal(signal.SIGHUP)
    time.sleep(1.0)
    assert proc.poll() is None  # still running
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143 and "stopped by SIGTERM" in error_line(stderr)


def test_a_killed_jobs_temporary_is_removed_by_the_next_job(tmp_path):
    out = tmp_path / "out.root"
    cfg = slow_config(tmp_path, out)
    proc = subprocess.Popen([*SONIC, "run", str(cfg), "--no-progress"], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: temporaries(tmp_path), 60, "the job to start writing")
    time.sleep(0.5)
    proc.kill()
    proc.wait(timeout=30)
    left = temporaries(tmp_path)
    assert len(left) == 1 and not out.exists()  # killed: a temporary, never a file that looks complete
    assert f"-{proc.pid}-" in left[0]  # its writer is named
    rerun = subprocess.run([*SONIC, "run", str(slow_config(tmp_path, out, events=30)), "--no-progress", "-q"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    assert temporaries(tmp_path) == []
    assert uproot.open(out)["Events"].num_entries == 30


@pytest.mark.parametrize("option, value, message", [
    ("-o", "folder", "output file 'folder' is an existing directory"),
    ("--timing-json", "nodir/t.json", "timing JSON 'nodir/t.json': folder"),
    ("--timing-json", "folder", "timing JSON 'folder' is an existing directory"),
])
def test_output_paths_are_checked_before_the_first_event(tmp_path, option, value, message):
    """The job would take ~1000 s: finishing within the timeout proves the check came first."""
    (tmp_path / "folder").mkdir()
    cfg = slow_config(tmp_path, tmp_path / "out.root")
    result = subprocess.run([*SONIC, "run", str(cfg), "--no-progress", option, value], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert message in error_line(result.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder", "slow.yaml"]
    assert list((tmp_path / "folder").iterdir()) == []


def test_output_equal_to_the_input_is_refused_and_the_input_kept(tmp_path):
    data = write_nano(tmp_path / "x.root", 20, seed=1)
    before = data.read_bytes()
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump({"modules": {"ht": {"type": "CollectionSum"}}}))
    result = subprocess.run([*SONIC, "run", str(cfg), "-i", "x.root", "-o", "x.root", "-q"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "output file 'x.root' is also an input file" in error_line(result.stderr)
    assert data.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cfg.yaml", "x.root"]


@contextlib.contextmanager
def tmpfs(where: Path, options: str) -> Iterator[Path]:
    """A small tmpfs mounted at ``where`` (root only): a real full or read-only file system."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True,
                             timeout=30)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=30)


def big_job(tmp_path: Path) -> Path:
    """Copies 3000 events' jets (~300 kB compressed) to the output."""
    write_nano(tmp_path / "big.root", 3000, seed=2)
    cfg = tmp_path / "copy.yaml"
    cfg.write_text(yaml.safe_dump({"source": {"files": [str(tmp_path / "big.root")], "chunk_size": 500},
                                   "modules": {"ht": {"type": "CollectionSum"}},
                                   "output": {"products": ["ht:*", "Jet", "MET_pt"], "chunk_size": 500,
                                              "compression": "none"}}))
    return cfg


def test_full_disk_is_one_line_and_leaves_nothing(tmp_path):
    cfg = big_job(tmp_path)
    with tmpfs(tmp_path / "small", "size=64k") as small:
        result = subprocess.run([*SONIC, "run", str(cfg), "-o", str(small / "out.root"), "-q", "--no-progress"],
                                cwd=tmp_path, capture_output=True, text=True, timeout=120)
        left = sorted(p.name for p in small.iterdir())
    assert result.returncode == 1, result.stderr
    line = error_line(result.stderr)
    assert "No space left on device" in line and "out.root" in line
    assert left == []


def test_read_only_output_folder_is_one_line_before_the_job(tmp_path):
    cfg = big_job(tmp_path)
    with tmpfs(tmp_path / "ro", "size=1m,ro") as readonly:
        result = subprocess.run([*SONIC, "run", str(cfg), "-o", str(readonly / "out.root"), "-q", "--no-progress",
                                 "--timing-json", str(tmp_path / "t.json")],
                                cwd=tmp_path, capture_output=True, text=True, timeout=120)
        left = sorted(p.name for p in readonly.iterdir())
    assert result.returncode == 1, result.stderr
    line = error_line(result.stderr)
    assert "Read-only file system" in line and "out.root" in line
    assert left == [] and not (tmp_path / "t.json").exists() and temporaries(tmp_path) == []


def test_closed_stdout_is_quiet(tmp_path):
    """``sonic describe | head -1``: the reader goes away before sonic writes; no BrokenPipeError traceback."""
    proc = subprocess.Popen([*SONIC, "describe"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before the first write
    _, stderr = proc.communicate(timeout=60)
    assert stderr.decode() == ""
    assert proc.returncode == 141
