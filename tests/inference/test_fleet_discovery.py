"""A fleet's directory of servers (entries written whole, expired by heartbeat or a dead process, removed on
exit; many writers at once), ServerPool.follow (servers join and retire during a job, on real Triton servers),
and ``mode: auto``."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from sonic_hep.data.demo.models import REPOSITORY as DEMO_REPOSITORY
from sonic_hep.framework.inference import auto_mode
from sonic_hep.framework.inference.connection import ServerSpec
from sonic_hep.framework.inference.fleet_directory import (Entry, deregister, discover, entry_path, live_entries,
                                                           read_entries, register, servers_dir)
from sonic_hep.framework.inference.server import TritonServer
from sonic_hep.framework.inference.servers import ServerPool
from tests.inference.conftest import sonic_client


# -- the directory protocol ------------------------------------------------------------------------------
def test_entries_expire_by_heartbeat_and_health_and_are_removed(tmp_path):
    entry = register(tmp_path, Entry(name="0001", address="node7:8001", models={"m": "1"}, ttl_s=10.0))
    written = json.loads(entry.read_text())
    assert written["address"] == "node7:8001" and written["pid"] == os.getpid()
    beat = written["heartbeat"]
    assert [e.name for e in live_entries(tmp_path, now=beat + 9.9)] == ["0001"]
    assert live_entries(tmp_path, now=beat + 10.1) == []  # a killed server job cannot remove its entry
    assert "no heartbeat for 10 s" in read_entries(tmp_path)[0].expired(beat + 10.1)
    register(tmp_path, Entry(name="0001", address="node7:8001", health="not ready"))
    assert live_entries(tmp_path) == [] and read_entries(tmp_path)[0].expired() == "health not ready"
    deregister(tmp_path, "0001")
    assert read_entries(tmp_path) == [] and list(servers_dir(tmp_path).iterdir()) == []


def test_an_entry_of_a_dead_process_on_this_host_expires_at_once(tmp_path):
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(child.stdout)
    register(tmp_path, Entry(name="0002", address="127.0.0.1:1", pid=dead))
    register(tmp_path, Entry(name="0003", address="127.0.0.1:2"))
    assert [e.name for e in live_entries(tmp_path)] == ["0003"]
    assert f"process {dead}" in read_entries(tmp_path)[0].expired()


def test_discovery_gives_specs_with_the_entry_tls_and_the_client_certificate(tmp_path):
    register(tmp_path, Entry(name="0000", address="a:1"))
    register(tmp_path, Entry(name="0001", address="b:2", ssl=True, root_certificates="/ca.pem"))
    plain, tls = discover(tmp_path)()
    assert plain == ServerSpec("a:1") and tls == ServerSpec("b:2", ssl=True, root_certificates="/ca.pem")
    mutual = discover(tmp_path, {"private_key": "/k.pem", "certificate_chain": "/c.pem"})()[1]
    assert (mutual.ssl, mutual.root_certificates, mutual.private_key) == (True, "/ca.pem", "/k.pem")
    clock = [time.time() + 3600]
    assert discover(tmp_path, clock=lambda: clock[0])() == []  # an hour without heartbeat


def _rewrite(fleet: str, name: str, rounds: int) -> None:
    """A writer: rewrites its entry ``rounds`` times (~60 kB each, so a non-atomic write could be caught half done)."""
    models = {f"model_{i:05d}": name for i in range(2000)}
    for i in range(rounds):
        register(fleet, Entry(name=name, address=f"h:{i}", models=models))


def test_concurrent_writers_never_show_a_reader_a_partial_entry(tmp_path):
    writers = [multiprocessing.get_context("spawn").Process(target=_rewrite, args=(str(tmp_path), name, 30))
               for name in ("0000", "0000", "0001", "0002")]  # two writers of the same entry too
    for writer in writers:
        writer.start()
    reads = 0
    try:
        while any(w.is_alive() for w in writers):
            for path in servers_dir(tmp_path).glob("*.json") if servers_dir(tmp_path).exists() else []:
                try:
                    text = path.read_text()
                except FileNotFoundError:
                    continue
                data = json.loads(text)  # a partial write would not parse
                assert len(data["models"]) == 2000 and set(data["models"].values()) == {data["name"]}
                reads += 1
    finally:
        for writer in writers:
            writer.join(60)
    assert [w.exitcode for w in writers] == [0, 0, 0, 0]
    assert reads > 0
    assert sorted(p.name for p in servers_dir(tmp_path).iterdir()) == ["0000.json", "0001.json", "0002.json"]
    assert {e.address for e in read_entries(tmp_path)} == {"h:29"}


def test_a_partial_file_is_skipped_not_fatal(tmp_path):
    register(tmp_path, Entry(name="0000", address="a:1"))
    entry_path(tmp_path, "0009").write_text('{"name": "0009", "addr')  # a foreign, truncated file
    assert [e.name for e in read_entries(tmp_path)] == ["0000"]


# -- ServerPool.follow on real servers -------------------------------------------------------------------
@pytest.mark.triton
def test_pool_takes_in_joining_servers_and_retires_leaving_ones(demo_server, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="sonic_hep.framework.inference.servers")
    with TritonServer([DEMO_REPOSITORY], models=["demo_mlp"], workdir=tmp_path / "second") as second:
        named: list[str] = [demo_server.grpc_url]
        client = sonic_client([], shared_memory="off")
        pool: ServerPool = client.pool
        try:
            pool.follow(lambda: [ServerSpec(a) for a in named])
            assert [c.address for c in pool.candidates("demo_mlp")] == [demo_server.grpc_url]

            named.append(second.grpc_url)  # a server joins during the job
            pool.rediscover()
            assert {c.address for c in pool.candidates("demo_mlp")} == {demo_server.grpc_url, second.grpc_url}
            assert "joined (discovered)" in caplog.text

            named.remove(demo_server.grpc_url)  # its job ended: chosen for nothing new
            pool.rediscover()
            assert [c.address for c in pool.candidates("demo_mlp")] == [second.grpc_url]
            first = next(s.connection for s in pool.states if s.connection.address == demo_server.grpc_url)
            assert not pool.usable(first)
            x = {"x": np.zeros((3, 16), "float32")}
            assert client.infer("demo_mlp", x).result(30)["probs"].shape == (3, 4)

            named.remove(second.grpc_url)
            pool.rediscover()
            assert "left the fleet" in pool.describe_missing("demo_mlp")

            named.append(demo_server.grpc_url)  # back (a new job on the same address)
            pool.rediscover()
            assert [c.address for c in pool.candidates("demo_mlp")] == [demo_server.grpc_url]

            def broken() -> list[ServerSpec]:
                raise OSError("stale NFS handle")

            pool.discover = broken  # a filesystem hiccup keeps what is known
            pool.rediscover()
            assert [c.address for c in pool.candidates("demo_mlp")] == [demo_server.grpc_url]
            assert "server discovery failed" in caplog.text
        finally:
            client.close()


@pytest.mark.triton
def test_servers_given_by_address_never_retire(demo_server):
    client = sonic_client([demo_server.grpc_url], shared_memory="off")
    try:
        client.pool.follow(lambda: [])
        client.pool.rediscover()
        assert [c.address for c in client.pool.candidates("demo_mlp")] == [demo_server.grpc_url]
    finally:
        client.close()


# -- mode auto -------------------------------------------------------------------------------------------
def test_auto_runs_direct_only_on_a_gpu_onnxruntime_can_use():
    assert auto_mode.choose(gpu=lambda: "", ort_cuda=lambda: True).mode == "sonic"
    visible_only = auto_mode.choose(gpu=lambda: "torch.cuda sees 1 GPU(s)", ort_cuda=lambda: False)
    assert visible_only.mode == "sonic" and "no CUDA provider" in visible_only.reason
    both = auto_mode.choose(gpu=lambda: "torch.cuda sees 1 GPU(s)", ort_cuda=lambda: True)
    assert both.mode == "direct" and "torch.cuda sees 1 GPU(s)" in both.reason


def test_cuda_visible_devices_hiding_every_gpu_means_none(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert auto_mode.visible_gpu() == ""


@pytest.mark.triton
def test_auto_on_a_machine_without_gpu_goes_through_sonic_and_the_report_says_so(tmp_path, sonic_cli, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    result = sonic_cli("run", "demo_inference", "-n", "20", "-o", tmp_path / "out.root", "--inference", "auto",
                       "--timing-json", tmp_path / "t.json",
                       "-p", "services.inference.fallback_server={models: [demo_mlp]}",
                       check=True, env={"CUDA_VISIBLE_DEVICES": ""})
    inference = json.loads((tmp_path / "t.json").read_text())["inference"]
    assert inference["mode"] == "sonic" and inference["auto"] == "auto: no GPU visible to this job, so SONIC"
    assert "mode sonic (auto: no GPU visible to this job, so SONIC)" in result.stdout
