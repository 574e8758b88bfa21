"""Shared memory only where it works, and a server frees what dead clients held — real servers, real kills.

* A shared server outlives its clients: regions that a client registered and could not unregister because it
  was killed stay registered, and mapped in the server, until the server's janitor (``shm_janitor.py``)
  unregisters them. Their names are gone from ``/dev/shm`` by then, so only the server shows them: its
  registered regions and its ``/proc/<pid>/maps``.
* An address on loopback proves nothing: a port forward may lead to a server that cannot open our regions
  (another host, or a ``/dev/shm`` of its own: here a real server in a private mount namespace). The client
  proves a server opens them before it sends one request through shared memory (``shm.py``).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from sonic_hep.data.demo.models import REPOSITORY as DEMO_REPOSITORY
from sonic_hep.framework.inference.owner import ProcessId, pid_namespace, sweep_shared_memory
from sonic_hep.framework.inference.serving.server import TritonServer
from sonic_hep.framework.inference.shm import CLIENT_REGION_PATTERN
from sonic_hep.framework.inference.serving.shm_janitor import abandoned
from tests.inference.conftest import sonic_client
from tests.polling import read_line, wait_for
from tests.reliability.relay import Relay

PROJECT = Path(__file__).resolve().parents[2]
SHM = Path("/dev/shm")
#: a client region in a server's memory map (the server's own python-stub memory is ``sonic_triton_...``)
CLIENT_MAPPING = re.compile(r"/dev/shm/sonic_\d+-\d+_")

#: a job's client holding several registered regions (three requests in flight at once), then waiting to be killed
CLIENT = textwrap.dedent("""
    import sys
    import numpy as np
    from sonic_hep.framework.inference.server_spec import ServerSpec
    from sonic_hep.framework.inference.sonic.servers import ServerPool
    from sonic_hep.framework.inference.sonic.client import SonicClient

    client = SonicClient(ServerPool([ServerSpec.parse(sys.argv[1])], fallback=False, shared_memory="on"))
    futures = [client.infer("demo_sum", {"x": np.ones((rows, 4), np.float32)}) for rows in (4096, 16384, 65536)]
    assert [float(f.result(60)["y"][0]) for f in futures] == [4096, 16384, 65536]
    print("ready", flush=True)
    sys.stdin.readline()
""")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A server of this module's own, its janitor checking every half second."""
    with TritonServer([DEMO_REPOSITORY], models=["demo_mlp", "demo_sum"], shm_janitor_s=0.5,
                      workdir=tmp_path_factory.mktemp("shm-server")) as started:
        yield started


def registered(server: TritonServer) -> set[str]:
    """The system shared memory regions the server has registered."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        return set(client.get_system_shared_memory_status(as_json=True).get("regions", {}))
    finally:
        client.close()


def mapped(server: TritonServer) -> int:
    """Client regions mapped in the server's process (a region stays mapped while it is registered)."""
    return sum(1 for line in Path(f"/proc/{server.pid}/maps").read_text().splitlines() if CLIENT_MAPPING.search(line))


def janitor_lines(caplog: pytest.LogCaptureFixture, pid: int) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name.endswith("shm_janitor") and f"client pid {pid} " in r.getMessage()]


@pytest.mark.triton
def test_a_server_frees_the_regions_of_clients_killed_with_sigkill(server, caplog):
    """Three jobs killed with SIGKILL, each holding regions: every time the server's registered regions and its
    mapped client memory come back to where they were; a living client's regions are never freed."""
    caplog.set_level(logging.INFO, logger="sonic_hep.framework.inference.serving.shm_janitor")
    regions, maps = registered(server), mapped(server)
    for kill in range(3):
        job = subprocess.Popen([sys.executable, "-c", CLIENT, server.grpc_url], cwd=PROJECT, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True, start_new_session=True)
        try:
            assert read_line(job.stdout, 120).strip() == "ready"
            held = registered(server) - regions
            assert len(held) >= 3 and mapped(server) >= maps + 3
            assert server.janitor.sweep() == {}, "the janitor freed a living client's regions"
            assert registered(server) - regions == held
            if kill % 2 == 0:  # the whole job: its resource tracker too, so its names stay in /dev/shm
                os.killpg(job.pid, signal.SIGKILL)
            else:  # the client alone: its resource tracker removes its names, the server still maps them
                os.kill(job.pid, signal.SIGKILL)
            job.wait(30)
            if kill % 2 == 0:
                assert all((SHM / name).exists() for name in held)  # judged by its owner's death, not by its name
            wait_for(lambda: registered(server) == regions, 60, "the killed client's regions to be unregistered")
            wait_for(lambda: mapped(server) == maps, 60, "the server to unmap the killed client's regions")
            assert len(janitor_lines(caplog, job.pid)) == 1  # one line per owner
            if kill % 2 == 0:
                assert "its process is gone" in janitor_lines(caplog, job.pid)[0]
        finally:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
                job.wait(30)
            sweep_shared_memory(CLIENT_REGION_PATTERN)  # the names a killed job left (a next client would)
    assert server.janitor.statistics()["freed_regions"] >= 9


@pytest.mark.triton
def test_a_clean_client_unregisters_its_own_regions_at_close(server, caplog):
    caplog.set_level(logging.INFO, logger="sonic_hep.framework.inference.serving.shm_janitor")
    before = registered(server)
    client = sonic_client([server.grpc_url], shared_memory="on")
    try:
        assert client.infer("demo_sum", {"x": np.ones((4096, 4), np.float32)}).result(60)["y"][0] == 4096
        assert len(registered(server) - before) == 1
    finally:
        client.close()
    assert registered(server) == before  # at once: the client did it, not the janitor
    assert not janitor_lines(caplog, os.getpid())


@pytest.mark.triton
def test_a_local_server_still_gets_shared_memory_after_the_probe(server):
    client = sonic_client([server.grpc_url], shared_memory="auto")
    try:
        connection = client.pool.states[0].connection
        assert connection.shm.proven is True  # proven by the pool's probe at start, before any request
        x = np.arange(4096 * 4, dtype=np.float32).reshape(4096, 4)  # 64 KiB: over SHM_MIN_BYTES
        for _ in range(5):
            np.testing.assert_allclose(client.infer("demo_sum", {"x": x}).result(60)["y"], x.sum(0), rtol=1e-5)
        counters = client.counters.as_dict()["demo_sum"]
        assert counters["shm_bytes"] == 5 * x.nbytes and counters["failovers"] == 0
        assert connection.shm.statistics()["regions"] == 1  # the probe's region is not kept
    finally:
        client.close()


# -- a server that cannot open our regions, behind a loopback forward -----------------------------------------
class PrivateShmServer(TritonServer):
    """The project's server, started with its own command line in a private mount namespace with a fresh
    ``/dev/shm`` (as in a container with a /dev/shm of its own, or on the far side of a port forward)."""

    def command(self, repo_dir: Path, backend_dir: Path) -> list[str]:
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                'mount -t tmpfs -o mode=1777 tmpfs /dev/shm && exec "$@"', "sh", *super().command(repo_dir, backend_dir)]


def _private_shm_problem() -> str:
    """Why a private /dev/shm cannot be made here ("" when it can)."""
    if os.geteuid() != 0:
        return "needs root to mount a private /dev/shm"
    if not shutil.which("unshare"):
        return "unshare is not installed"
    trial = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                            "mount -t tmpfs tmpfs /dev/shm"], capture_output=True, text=True, timeout=30)
    return f"cannot mount a private /dev/shm: {trial.stderr.strip()}" if trial.returncode else ""


@pytest.fixture(scope="module")
def private_shm_server(tmp_path_factory):
    problem = _private_shm_problem()
    if problem:
        pytest.skip(problem)
    with PrivateShmServer([DEMO_REPOSITORY], models=["demo_mlp", "demo_sum"],
                          workdir=tmp_path_factory.mktemp("private-shm-server")) as started:
        yield started


@pytest.mark.triton
@pytest.mark.parametrize("shared_memory", ["auto", "on"])
def test_a_forwarded_server_with_its_own_dev_shm_gets_every_request_over_the_wire(private_shm_server, shared_memory,
                                                                                  caplog):
    """Before the probe every request of 16 KiB or more failed ("Unable to open shared memory region") and
    failed over; now the client finds out at connection time and sends them in the message."""
    caplog.set_level(logging.INFO, logger="sonic_hep.framework.inference.shm")
    rng = np.random.default_rng(5)
    with Relay(private_shm_server.grpc_url) as forward:
        client = sonic_client([forward.address], shared_memory=shared_memory)
        try:
            for _ in range(20):  # events
                x = rng.standard_normal((2048, 4)).astype(np.float32)  # 32 KiB: shared memory if it worked
                np.testing.assert_allclose(client.infer("demo_sum", {"x": x}).result(60)["y"], x.sum(0),
                                           rtol=1e-4, atol=1e-4)
            counters = client.counters.as_dict()["demo_sum"]
            assert (counters["requests"], counters["failovers"], counters["retries"], counters["failures"]) == (20, 0, 0, 0)
            assert counters["shm_bytes"] == 0
            assert client.pool.states[0].connection.shm.proven is False
        finally:
            client.close()
    said = [r for r in caplog.records if "go over the wire" in r.getMessage()]
    assert len(said) == 1 and forward.address in said[0].getMessage()
    assert said[0].levelno == (logging.WARNING if shared_memory == "on" else logging.INFO)
    assert not registered(private_shm_server)


# -- the janitor's judgement, without a server ------------------------------------------------------------------
def _dead_tag() -> str:
    """A tag of no process: PID 1 with another start time."""
    first = ProcessId.of(1)
    return f"1-{(first.start if first else 0) + 1}"


def test_the_janitor_judges_only_regions_it_can_judge():
    here, me, dead = pid_namespace(), ProcessId.current().tag, _dead_tag()
    assert here, "this machine shows no PID namespace: the owner rule is never used"
    assert abandoned(f"sonic_{dead}_p{here}_127_0_0_1_8001_0", True, here) == "its process is gone"
    assert abandoned(f"sonic_{me}_p{here}_127_0_0_1_8001_0", True, here) == ""  # a living client
    assert abandoned(f"sonic_{me}_p{here}_127_0_0_1_8001_0", False, here) == "its shared memory was removed"
    # another PID namespace (a container sharing /dev/shm, not PIDs): its PID means nothing here
    assert abandoned(f"sonic_{dead}_p{here + 1}_127_0_0_1_8001_0", True, here) == ""
    assert abandoned(f"sonic_{dead}_p{here + 1}_127_0_0_1_8001_0", False, here) == "its shared memory was removed"
    assert abandoned(f"sonic_{dead}_127_0_0_1_8001_0", True, here) == ""  # a name without its namespace
    assert abandoned(f"sonic_{dead}_p{here}_x_0", None, here) == "its process is gone"
    assert abandoned(f"sonic_{me}_p{here}_x_0", None, here) == ""  # key not visible: only the owner rule
    for foreign in ("perf_analyzer_input0", "sonic_triton_1-2_0_stub", "input_data"):  # not ours to judge
        assert abandoned(foreign, False, here) == ""


def test_the_sweep_leaves_names_of_another_pid_namespace():
    here, dead = pid_namespace(), _dead_tag()
    ours, theirs = SHM / f"sonic_{dead}_p{here}_x_0", SHM / f"sonic_{dead}_p{here + 1}_x_0"
    try:
        for path in (ours, theirs):
            path.write_bytes(b"\0" * 16)
        sweep_shared_memory(CLIENT_REGION_PATTERN)
        assert not ours.exists()
        assert theirs.exists(), "a region of a process in another PID namespace was swept by its PID"
    finally:
        for path in (ours, theirs):
            path.unlink(missing_ok=True)
