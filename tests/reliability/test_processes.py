"""No orphans, no litter, whatever kills the job — real processes.

A job (a python subprocess) starts a Triton server from a thread that then ends, as the
``sonic-recovery`` thread starts a fallback server; the job is then killed (SIGKILL, SIGTERM,
SIGINT) or crashes. The server and its python stubs must exit, nothing may listen on its ports, its
shared memory must go, and its work folder must be removed (or swept once its job is dead).
Shared-memory regions are private (0600); ``sonic server stop`` signals only what it started.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

from sonic_hep.data.demo.models import REPOSITORY as DEMO_REPOSITORY
from sonic_hep.framework.errors import InferenceError
from sonic_hep.framework.inference.owner import ProcessId, sweep_shared_memory
from sonic_hep.framework.inference.serving.private_memory import preload_library
from sonic_hep.framework.inference.serving.server import STUB_SHM_PATTERN, TritonServer
from sonic_hep.framework.inference.serving.workdir import KEEP_ENV, OWNER_FILE, sweep_stale_workdirs
from sonic_hep.framework.inference.shm import CLIENT_SHM_PATTERN, SharedMemoryPool
from sonic_hep.framework.inference.serving.sockets import listening_table
from tests.polling import processes_mentioning, read_line, wait_for

pytestmark = pytest.mark.triton

SHM = Path("/dev/shm")

JOB = textwrap.dedent("""
    import json, os, sys, threading
    from sonic_hep.data.demo.models import REPOSITORY
    from sonic_hep.framework.inference.serving.server import TritonServer

    started = {}

    def recover():  # like the sonic-recovery thread starting a fallback server, then ending
        started["server"] = TritonServer([REPOSITORY], models=["demo_sum"], backend="python").start()  # with stubs

    thread = threading.Thread(target=recover, name="sonic-recovery")
    thread.start()
    thread.join()
    server = started["server"]
    print(json.dumps({"pid": server.pid, "ports": server.ports, "workdir": str(server.workdir),
                      "http": server.http_url, "shm_prefix": server.shm_prefix}), flush=True)
    sys.stdin.readline()  # the test's go: crash, or wait here to be killed
    if sys.argv[1] == "crash":
        os.abort()
    sys.stdin.readline()
""")


@pytest.mark.parametrize("kill", ["SIGKILL", "SIGTERM", "SIGINT", "crash"])
def test_a_server_started_by_a_thread_dies_with_its_job(tmp_path, kill):
    temp = tmp_path / "tmp"
    temp.mkdir()
    (tmp_path / "job.py").write_text(JOB)
    job = subprocess.Popen([sys.executable, str(tmp_path / "job.py"), kill], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                           env={**os.environ, "TMPDIR": str(temp)})
    try:
        info = json.loads(read_line(job.stdout, 120))
        server = ProcessId.of(info["pid"])
        assert server is not None
        # the thread that started it has ended: the server must still serve (its death signal is not
        # tied to that thread)
        with urllib.request.urlopen(f"http://{info['http']}/v2/health/ready", timeout=10) as response:
            assert response.status == 200
        assert processes_mentioning(info["workdir"]), "no server process found"
        if kill == "crash":
            job.stdin.write("go\n")
            job.stdin.flush()
        else:
            job.send_signal(getattr(signal, kill))
        job.wait(60)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait(30)
    wait_for(lambda: not server.alive(), 60, f"tritonserver {server.pid} outlived its job ({kill})")
    wait_for(lambda: not processes_mentioning(info["workdir"]), 30, "a python stub outlived its server")
    listening = {port for _, port in listening_table().values()}
    assert not listening & set(info["ports"].values()), f"something still listens on {info['ports']}"
    wait_for(lambda: not list(SHM.glob(info["shm_prefix"] + "*")), 30, "the server's shared memory was left")
    # a clean exit removed the work folder; after a kill, the next server of anyone sweeps it
    sweep_stale_workdirs(temp)
    assert not Path(info["workdir"]).exists()


def test_stub_shared_memory_is_private_and_removed_after_a_kill(tmp_path):
    """Boost.Interprocess makes the python backend's regions 0644 whatever the umask."""
    # the python-based backend: the native one (the default) runs no python stub, so it makes no region
    server = TritonServer([DEMO_REPOSITORY], models=["demo_sum"], workdir=tmp_path / "work", backend="python").start()
    try:
        regions = list(SHM.glob(server.shm_prefix + "*"))
        assert regions, "the python stub has no shared memory region"
        modes = {p.name: oct(p.stat().st_mode & 0o777) for p in regions}
        assert set(modes.values()) == {"0o600"}, modes
        with open(f"/proc/{server.pid}/status") as status:
            assert "Umask:\t0077" in status.read()
        if shutil.which("cc") or shutil.which("gcc"):  # private from creation on, not made private afterwards
            assert preload_library() is not None
        server.kill()
        assert not list(SHM.glob(server.shm_prefix + "*"))
    finally:
        server.stop()


class _FakeClient:
    """Registers nothing: enough for a pool that only creates and removes regions."""

    def register_system_shared_memory(self, *args, **kwargs) -> None:
        pass

    def unregister_system_shared_memory(self, *args, **kwargs) -> None:
        pass


def _dead_tag() -> str:
    """The tag of a process that does not exist: this PID with another start time."""
    me = ProcessId.current()
    return f"{me.pid}-{me.start + 1}"


def test_client_shared_memory_is_private_and_litter_of_dead_owners_is_swept():
    pool = SharedMemoryPool(_FakeClient(), "127.0.0.1:1")
    region = pool.acquire(1000)
    path = SHM / region.key.lstrip("/")
    try:
        assert oct(path.stat().st_mode & 0o777) == "0o600"
        assert region.name.startswith(f"sonic_{ProcessId.current().tag}_")
        litter = [SHM / f"sonic_{_dead_tag()}_x_0", SHM / f"sonic_triton_{_dead_tag()}_0_stub"]
        for dead in litter:
            dead.write_bytes(b"\0" * 16)
        sweep_shared_memory(CLIENT_SHM_PATTERN)
        sweep_shared_memory(STUB_SHM_PATTERN)
        assert not any(p.exists() for p in litter)
        assert path.exists(), "a living process's region was swept"
    finally:
        pool.close()
    assert not path.exists()


def _broken_repository(folder: Path) -> Path:
    bad = folder / "broken"
    (bad / "1").mkdir(parents=True)
    # an ONNX ModelProto (ir_version, empty graph) that passes the file checks made before a server starts and
    # that onnxruntime refuses (no opset): the server tries to load it, and it is its only model
    (bad / "1" / "model.onnx").write_bytes(b"\x08\x08\x3a\x00")
    (bad / "config.pbtxt").write_text('name: "broken"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 4\n'
                                      'input [{name: "x", data_type: TYPE_FP32, dims: [1]}]\n'
                                      'output [{name: "y", data_type: TYPE_FP32, dims: [1]}]\n')
    return folder


def test_work_folders_removed_on_a_clean_stop_kept_on_failure_or_request(tmp_path, monkeypatch):
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    monkeypatch.delenv(KEEP_ENV, raising=False)

    clean = TritonServer([DEMO_REPOSITORY], models=["demo_sum"]).start()
    assert clean.workdir.parent == temp
    assert clean.stop() == 0
    assert not clean.workdir.exists()

    kept = TritonServer([DEMO_REPOSITORY], models=["demo_sum"], keep_workdir=True).start()
    assert kept.stop() == 0
    assert kept.log_path.exists()

    failed = TritonServer([_broken_repository(tmp_path / "repo")])
    with pytest.raises(InferenceError):
        failed.start()
    assert "broken" in failed.log_path.read_text()
    assert json.loads((failed.workdir / OWNER_FILE).read_text())["keep"]

    # litter of a job that died: swept by the next server; kept folders stay
    dead = temp / "sonic-triton-dead"
    dead.mkdir()
    (dead / OWNER_FILE).write_text(json.dumps({"job": {"pid": os.getpid(), "start": int(_dead_tag().split("-")[1])},
                                               "server": None, "keep": None}))
    living = temp / "sonic-triton-living"
    living.mkdir()
    (living / OWNER_FILE).write_text(json.dumps({"job": ProcessId.current().to_dict(), "server": None, "keep": None}))
    unknown = temp / "sonic-triton-unknown"  # no owner record: not ours to judge
    unknown.mkdir()
    TritonServer([DEMO_REPOSITORY], models=["demo_sum"])  # constructing one sweeps
    assert not dead.exists()
    assert living.exists() and unknown.exists() and kept.workdir.exists() and failed.workdir.exists()


def test_server_stop_signals_only_a_process_it_provably_started(tmp_path, sonic_cli):
    """A record whose PID now belongs to another process (here: a sleep) must not get it killed."""
    state = tmp_path / "state"
    state.mkdir()
    stranger = subprocess.Popen(["sleep", "120"])
    try:
        me = ProcessId.of(stranger.pid)
        reused = {"pid": stranger.pid, "start": me.start + 1, "cmdline": ["sonic", "server", "start"]}
        (state / "127.0.0.1_1.json").write_text(json.dumps({"grpc": "127.0.0.1:1", "supervisor_pid": stranger.pid,
                                                            "supervisor": reused}))
        (state / "127.0.0.1_2.json").write_text(json.dumps({"grpc": "127.0.0.1:2", "supervisor_pid": stranger.pid}))
        env = {"SONIC_HEP_STATE": str(state)}
        named = sonic_cli("server", "stop", "127.0.0.1:1", env=env, timeout=60)
        assert named.returncode == 1
        lines = named.stderr.strip().splitlines()
        assert len(lines) == 1 and "stale record" in lines[0] and "signalled nothing" in lines[0], named.stderr
        every = sonic_cli("server", "stop", "--all", env=env, timeout=60)
        assert "127.0.0.1:2" in every.stderr and "Traceback" not in every.stderr
        time.sleep(0.5)  # a SIGTERM, had one been sent, is delivered at once
        assert stranger.poll() is None, "sonic server stop killed a process it did not start"
        assert not list(state.glob("*.json"))
    finally:
        stranger.kill()
        stranger.wait()


def test_a_current_record_whose_supervisor_pid_was_reused_is_stale_and_never_signalled(tmp_path, sonic_cli):
    """A record in the registry's own format, heartbeat fresh, whose supervisor PID now belongs to another
    process (a later start time): ``status`` shows it as stale, ``stop --all`` signals nothing."""
    from dataclasses import asdict

    from sonic_hep.framework.inference.serving.fleet_directory import Entry

    state = tmp_path / "state"
    state.mkdir()
    stranger = subprocess.Popen(["sleep", "120"])
    try:
        reused = ProcessId.of(stranger.pid)
        entry = Entry(name="127.0.0.1_3", address="127.0.0.1:3", pid=stranger.pid, start=reused.start + 1)
        supervisor = {"pid": stranger.pid, "start": reused.start + 1, "cmdline": list(reused.cmdline)}
        (state / "127.0.0.1_3.json").write_text(json.dumps({"grpc": "127.0.0.1:3", "models": [],
                                                            "supervisor": supervisor, "entry": asdict(entry)}))
        env = {"SONIC_HEP_STATE": str(state)}
        status = sonic_cli("server", "status", env=env, timeout=60)
        assert "stale record" in status.stderr and "127.0.0.1:3" in status.stderr, status.stderr
        assert "127.0.0.1:3: " not in status.stdout  # not asked over gRPC as if it ran
        (state / "127.0.0.1_3.json").write_text(json.dumps({"grpc": "127.0.0.1:3", "models": [],
                                                            "supervisor": supervisor, "entry": asdict(entry)}))
        every = sonic_cli("server", "stop", "--all", env=env, timeout=60)
        assert "stale record" in every.stderr and "Traceback" not in every.stderr, every.stderr
        time.sleep(0.5)  # a SIGTERM, had one been sent, is delivered at once
        assert stranger.poll() is None, "sonic server stop killed a process it did not start"
    finally:
        stranger.kill()
        stranger.wait()


def test_spawned_child_exits_when_its_parent_is_already_gone(tmp_path):
    """The death signal is armed after fork; a parent that died before that must not leave an orphan."""
    script = textwrap.dedent("""
        import os, sys
        from sonic_hep.framework.inference.serving import spawner
        real_getppid = os.getppid
        os.getppid = lambda: -1   # in the child: "my parent is no longer the job"
        process = spawner.spawn(["sleep", "60"])
        os.getppid = real_getppid
        print(process.wait(30))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "1", result.stdout + result.stderr
