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
from sonic_hep.framework.inference.server_spec import ServerSpec
from sonic_hep.framework.inference.serving.fleet_directory import (Entry, deregister, discover, entry_path, live_entries,
                                                           read_entries, register, scan, servers_dir)
from sonic_hep.framework.inference.serving.server import TritonServer
from sonic_hep.framework.inference.sonic.servers import ServerPool
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


MISSING = "<left out>"


def _written(fleet, name: str, **changes) -> None:
    """A good entry ``name`` rewritten with ``changes`` (a field set to ``MISSING`` is left out)."""
    path = register(fleet, Entry(name=name, address="127.0.0.1:2", ttl_s=600.0))
    data = {**json.loads(path.read_text()), **changes}
    path.write_text(json.dumps({k: v for k, v in data.items() if v != MISSING}))


@pytest.mark.parametrize("changes, field, problem", [
    ({"heartbeat": "soon"}, "heartbeat", "must be a number"),
    ({"ttl_s": None}, "ttl_s", "must be a number, not null"),
    ({"heartbeat": MISSING}, "heartbeat", "is missing"),
    ({"address": 12345}, "address", "must be a string HOST:PORT"),
    ({"address": "gpu17"}, "address", "must be HOST:PORT"),
    ({"address": "gpu17:99999"}, "address", "port 1-65535"),
    ({"pid": True}, "pid", "must be an integer"),
    ({"ssl": "yes"}, "ssl", "must be true or false"),
    ({"models": ["demo_mlp"]}, "models", "must be an object"),
    ({"models": {"demo_mlp": 1}}, "models", "version strings"),
    ({"heartbeat": float("inf")}, "heartbeat", "must be a finite number"),
    ({"ttl_s": 0}, "ttl_s", "must be positive"),
])
def test_an_entry_of_the_wrong_shape_is_skipped_naming_the_file_and_field(tmp_path, caplog, changes, field, problem):
    register(tmp_path, Entry(name="0000", address="127.0.0.1:1", ttl_s=600.0))
    _written(tmp_path, "0001", **changes)
    bad_file = entry_path(tmp_path, "0001")
    with caplog.at_level(logging.WARNING, logger="sonic_hep.framework.inference.serving.fleet_directory"):
        assert discover(tmp_path)() == [ServerSpec("127.0.0.1:1")]  # the good entry beside it is used
        assert [e.name for e in live_entries(tmp_path)] == ["0000"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings  # once per file and problem: clients re-read every few seconds
    assert str(bad_file) in warnings[0] and f"field {field!r}" in warnings[0] and problem in warnings[0]
    entries, bad = scan(tmp_path)
    assert [e.name for e in entries] == ["0000"]
    assert [(b.path, f"field {field!r}" in b.problem) for b in bad] == [(bad_file, True)]


@pytest.mark.parametrize("text, problem", [
    ('{"name": "0009", "addr', "not JSON"),  # a foreign, truncated file
    ("[1, 2]", "not a JSON object: [1, 2]"),
    ('"0009"', "not a JSON object"),
    ('{"name": "0009", "address": "h:1", "host": "h", "pid": 7, "heartbeat": 1.0}', "field 'ttl_s' is missing"),
])
def test_a_file_that_is_not_an_entry_object_is_skipped(tmp_path, text, problem):
    register(tmp_path, Entry(name="0000", address="a:1"))
    entry_path(tmp_path, "0009").write_text(text)
    assert [e.name for e in read_entries(tmp_path)] == ["0000"]
    assert [b.problem.startswith(problem) for b in scan(tmp_path)[1]] == [True]


def test_fields_a_newer_writer_adds_are_ignored(tmp_path):
    _written(tmp_path, "0000", gpu_model="H100")
    assert [e.name for e in live_entries(tmp_path)] == ["0000"] and scan(tmp_path)[1] == []


# -- ServerPool.follow on real servers -------------------------------------------------------------------
@pytest.mark.triton
def test_pool_takes_in_joining_servers_and_retires_leaving_ones(demo_server, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="sonic_hep.framework.inference.sonic.servers")
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
def test_a_job_runs_on_the_good_entries_beside_bad_ones_and_status_lists_the_bad(demo_server, tmp_path, sonic_cli):
    from sonic_hep.workflows.grid.fleet import Fleet, FleetSpec

    fleet = Fleet.create(tmp_path / "fleet", FleetSpec([str(DEMO_REPOSITORY)]), 0)
    register(fleet.directory, Entry(name="0000", address=demo_server.grpc_url, ttl_s=600.0))
    _written(fleet.directory, "0001", heartbeat="soon")
    _written(fleet.directory, "0002", address=12345)
    run = sonic_cli("run", "demo_inference", "-n", "5", "-o", tmp_path / "out.root", "--fleet", fleet.directory,
                    "-p", "services.inference.fallback=false", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    for name, field in (("0001", "heartbeat"), ("0002", "address")):
        assert f"fleet entry {entry_path(fleet.directory, name)} skipped: field {field!r}" in run.stderr
    status = sonic_cli("fleet", "status", fleet.directory, check=True).stdout
    assert "bad entry 0001.json, skipped by clients: field 'heartbeat' must be a number" in status
    assert "bad entry 0002.json, skipped by clients: field 'address' must be a string HOST:PORT" in status
    shown = json.loads(sonic_cli("fleet", "status", fleet.directory, "--json", check=True).stdout)
    assert [b["file"] for b in shown["bad_entries"]] == [str(entry_path(fleet.directory, n)) for n in ("0001", "0002")]


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
