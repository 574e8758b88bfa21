"""The managed Triton server: real ``tritonserver`` processes on our repositories."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from sonic_hep.data.demo.models import REPOSITORY as DEMO_REPOSITORY
from sonic_hep.data.demo.models import write_mlp
from sonic_hep.framework.errors import InferenceError
from sonic_hep.framework.inference.serving.server import TritonServer

pytestmark = pytest.mark.triton


def _infer(url: str, model: str, x: np.ndarray, **output_options) -> grpcclient.InferResult:
    client = grpcclient.InferenceServerClient(url)
    tensor = grpcclient.InferInput("x", x.shape, "FP32")
    tensor.set_data_from_numpy(x)
    outputs = [grpcclient.InferRequestedOutput("probs", **output_options)]
    return client.infer(model, [tensor], outputs=outputs)


def test_server_serves_the_repository_unmodified_on_loopback(demo_server, demo_repository, rng):
    assert demo_server.host == "127.0.0.1" and demo_server.grpc_url.startswith("127.0.0.1:")
    assert set(demo_server.served) == {"demo_mlp", "demo_points", "demo_sum"}
    client = grpcclient.InferenceServerClient(demo_server.grpc_url)
    config = client.get_model_config("demo_mlp").config
    local = demo_repository.get("demo_mlp").config
    assert config.platform == "onnxruntime_onnx" and config.max_batch_size == local.max_batch_size
    # labels from label_filename: Triton's classification extension works through our backend
    x = rng.standard_normal((3, 16)).astype(np.float32)
    top = _infer(demo_server.grpc_url, "demo_mlp", x, class_count=1).as_numpy("probs")
    probs = _infer(demo_server.grpc_url, "demo_mlp", x).as_numpy("probs")
    labels = ["b", "c", "uds", "g"]
    assert [row[0].decode().split(":")[2] for row in top] == [labels[i] for i in probs.argmax(axis=1)]


def test_dynamic_batching_runs_concurrent_requests_in_fewer_executions(tmp_path, rng):
    write_mlp(tmp_path, name="batched", preferred_batch_sizes=(16,), max_queue_delay_us=20000)
    with TritonServer([tmp_path], workdir=tmp_path / "work") as server:
        x = rng.standard_normal((64, 16)).astype(np.float32)
        with ThreadPoolExecutor(16) as pool:
            results = list(pool.map(lambda i: _infer(server.grpc_url, "batched", x[i:i + 1]).as_numpy("probs"), range(64)))
        stats = grpcclient.InferenceServerClient(server.grpc_url).get_inference_statistics("batched").model_stats[0]
    assert stats.inference_stats.success.count == 64
    assert stats.execution_count < 64 / 2, f"{stats.execution_count} executions for 64 requests"
    reference = _infer_direct("batched", tmp_path, x)
    np.testing.assert_array_equal(np.concatenate(results), reference)


def _infer_direct(model, repository, x):
    from sonic_hep.framework.inference.direct import DirectClient
    from sonic_hep.framework.inference.repository import ModelRepository

    return DirectClient(ModelRepository([repository])).run(model, {"x": x})["probs"]


def test_instance_group_count_starts_that_many_model_instances(tmp_path):
    write_mlp(tmp_path, name="twice", instance_count=2)
    with TritonServer([tmp_path], workdir=tmp_path / "work") as server:
        log = server.log_path.read_text()
    assert "twice_0_0" in log and "twice_0_1" in log


def test_two_servers_side_by_side_and_a_clean_stop(demo_server, tmp_path, rng):
    second = TritonServer([DEMO_REPOSITORY], models=["demo_mlp"], workdir=tmp_path / "second").start()
    try:
        assert set(second.ports.values()).isdisjoint(demo_server.ports.values())
        x = rng.standard_normal((2, 16)).astype(np.float32)
        np.testing.assert_array_equal(_infer(second.grpc_url, "demo_mlp", x).as_numpy("probs"),
                                      _infer(demo_server.grpc_url, "demo_mlp", x).as_numpy("probs"))
        pid = second.pid
    finally:
        code = second.stop()
    assert code == 0
    assert not _process_exists(pid)
    assert "successfully loaded 'demo_mlp'" in second.log_path.read_text()  # the log is kept
    assert demo_server.ready()


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def test_a_model_that_cannot_load_fails_the_start_with_the_log(tmp_path):
    bad = tmp_path / "repo" / "broken"
    (bad / "1").mkdir(parents=True)
    # an ONNX ModelProto (ir_version, empty graph) that passes the file checks made before a server starts and
    # that onnxruntime refuses (no opset): the server tries to load it, and it is its only model
    (bad / "1" / "model.onnx").write_bytes(b"\x08\x08\x3a\x00")
    (bad / "config.pbtxt").write_text('name: "broken"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 4\n'
                                      'input [{name: "x", data_type: TYPE_FP32, dims: [1]}]\n'
                                      'output [{name: "y", data_type: TYPE_FP32, dims: [1]}]\n')
    with pytest.raises(InferenceError, match=r"(?s)exited .* while starting; log .*broken"):
        TritonServer([tmp_path / "repo"], workdir=tmp_path / "work").start()


def test_cli_start_status_stop(tmp_path):
    env = {**os.environ, "SONIC_HEP_STATE": str(tmp_path / "state")}
    cmd = [sys.executable, "-m", "sonic_hep.workflows.cli"]
    server = subprocess.Popen([*cmd, "server", "start", "--repository", str(DEMO_REPOSITORY), "--model", "demo_sum",
                               "--workdir", str(tmp_path / "work")], env=env, stdout=subprocess.PIPE, text=True)
    try:
        first = server.stdout.readline()
        assert first.startswith("Triton server ready: grpc 127.0.0.1:"), first
        url = first.split()[4]
        record = json.loads(next((tmp_path / "state").glob("*.json")).read_text())
        assert record["grpc"] == url and record["models"] == ["demo_sum"]
        status = subprocess.run([*cmd, "server", "status"], env=env, capture_output=True, text=True, timeout=60)
        assert status.returncode == 0 and f"{url}: live" in status.stdout
        assert "demo_sum" in status.stdout and "READY" in status.stdout
        stop = subprocess.run([*cmd, "server", "stop", url], env=env, capture_output=True, text=True, timeout=60)
        assert f"{url}: stopped" in stop.stdout, stop.stdout + stop.stderr
        assert server.wait(30) == 0
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
            server.wait(30)
    assert not list((tmp_path / "state").glob("*.json"))
    unreachable = subprocess.run([*cmd, "server", "status", url], env=env, capture_output=True, text=True, timeout=60)
    assert unreachable.returncode == 1 and "unreachable" in unreachable.stdout


def test_sigterm_on_the_foreground_command_stops_tritonserver(tmp_path):
    env = {**os.environ, "SONIC_HEP_STATE": str(tmp_path / "state")}
    server = subprocess.Popen([sys.executable, "-m", "sonic_hep.workflows.cli", "server", "start", "-r",
                               str(DEMO_REPOSITORY), "-m", "demo_sum", "--workdir", str(tmp_path / "work")],
                              env=env, stdout=subprocess.PIPE, text=True)
    server.stdout.readline()
    record = json.loads(next((tmp_path / "state").glob("*.json")).read_text())
    server.send_signal(signal.SIGINT)
    assert server.wait(30) == 0
    deadline = time.monotonic() + 10
    while _process_exists(record["pid"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _process_exists(record["pid"]), "tritonserver outlived `sonic server start`"


def _certificates(folder) -> dict[str, str]:
    """A throw-away CA and a server certificate for 127.0.0.1, made with openssl."""
    import shutil

    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed")
    folder.mkdir(parents=True, exist_ok=True)
    names = {k: str(folder / f"{k}.pem") for k in ("ca", "ca_key", "cert", "key", "csr")}
    (folder / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for cmd in (["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", names["ca_key"], "-out", names["ca"],
                 "-days", "1", "-subj", "/CN=sonic-test-ca"],
                ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", names["key"], "-out", names["csr"],
                 "-subj", "/CN=localhost"],
                ["x509", "-req", "-in", names["csr"], "-CA", names["ca"], "-CAkey", names["ca_key"], "-CAcreateserial",
                 "-out", names["cert"], "-days", "1", "-extfile", str(folder / "san.cnf")]):
        subprocess.run(["openssl", *cmd], check=True, capture_output=True, cwd=folder)
    return names


def test_grpc_over_tls(tmp_path, demo_repository, rng):
    from sonic_hep.framework.inference.tls_probe import server_tls

    from tests.inference.conftest import sonic_client

    pem = _certificates(tmp_path / "pki")
    with TritonServer([DEMO_REPOSITORY], models=["demo_sum"], workdir=tmp_path / "work", tls_cert=pem["cert"],
                      tls_key=pem["key"]) as server:
        secure = sonic_client([{"address": "127.0.0.1", "port": server.ports["grpc"], "ssl": True,
                                "root_certificates": pem["ca"]}])
        try:
            x = rng.standard_normal((3, 4)).astype(np.float32)
            np.testing.assert_allclose(secure.infer("demo_sum", {"x": x}).result(30)["y"], x.sum(axis=0), rtol=1e-5)
        finally:
            secure.close()
        assert server_tls(server.grpc_url) == "tls"  # TLS, no client certificate asked for
        plain = sonic_client([server.grpc_url], probe_timeout=3)
        try:
            with pytest.raises(InferenceError, match=rf"{server.grpc_url}: down .*speaks TLS.*set ssl: true"):
                plain.model_info("demo_sum")
        finally:
            plain.close()


def test_an_ensemble_of_served_models(tmp_path, demo_repository, rng):
    import shutil

    from tests.inference.conftest import sonic_client

    repo = tmp_path / "repo"
    shutil.copytree(DEMO_REPOSITORY / "demo_mlp", repo / "demo_mlp")
    (repo / "tagger" / "1").mkdir(parents=True)
    (repo / "tagger" / "config.pbtxt").write_text(
        'name: "tagger"\nplatform: "ensemble"\nmax_batch_size: 128\n'
        'input [{name: "features", data_type: TYPE_FP32, dims: [16]}]\n'
        'output [{name: "class_probs", data_type: TYPE_FP32, dims: [4]}]\n'
        'ensemble_scheduling { step [{ model_name: "demo_mlp", model_version: -1,\n'
        '  input_map { key: "x", value: "features" }, output_map { key: "probs", value: "class_probs" } }] }\n')
    with TritonServer([repo], workdir=tmp_path / "work") as server:
        client = sonic_client([server.grpc_url])
        try:
            x = rng.standard_normal((5, 16)).astype(np.float32)
            out = client.infer("tagger", {"features": x}).result(30)
        finally:
            client.close()
    np.testing.assert_allclose(out["class_probs"], _infer_direct("demo_mlp", DEMO_REPOSITORY, x), rtol=0, atol=1e-6)


NUMPY2_PYTHON = Path(__file__).resolve().parents[2] / ".venv-numpy2" / "bin" / "python"


@pytest.mark.skipif(not NUMPY2_PYTHON.exists(), reason="no .venv-numpy2 (made by `make install-test`)")
def test_a_server_whose_python_has_numpy_2_serves_the_same_numbers(tmp_path, rng):
    """Many machines' python now has numpy 2, under which the python stub's own numpy bridge reads
    inputs wrong and returns empty outputs; the onnxruntime backend then crosses through DLPack."""
    version = subprocess.run([str(NUMPY2_PYTHON), "-c", "import numpy; print(numpy.__version__)"],
                             capture_output=True, text=True, check=True).stdout
    assert int(version.split(".")[0]) >= 2
    x = rng.standard_normal((37, 16)).astype(np.float32)  # 37 different rows: a wrong read shows
    with TritonServer([DEMO_REPOSITORY], models=["demo_mlp"], python=str(NUMPY2_PYTHON), workdir=tmp_path / "srv",
                      backend="python") as server:  # the python-based backend's DLPack path (native has no stub)
        served = _infer(server.grpc_url, "demo_mlp", x).as_numpy("probs")
    assert served.shape == (37, 4)
    np.testing.assert_allclose(served, _infer_direct("demo_mlp", DEMO_REPOSITORY, x), rtol=0, atol=1e-5)


def test_a_port_taken_between_choice_and_bind_is_retried_until_every_endpoint_listens(tmp_path, monkeypatch):
    # six jobs starting fallbacks at once: a metrics port we chose was taken before Triton bound it. Triton
    # had answered health checks over HTTP already and then exited, so the job's server was gone (chaos test)
    import socket

    from sonic_hep.framework.inference.serving import server as server_module

    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    taken = holder.getsockname()[1]
    chosen = server_module.free_port
    calls = []

    def metrics_port_taken_on_the_first_try(host: str = "127.0.0.1") -> int:
        calls.append(host)
        return taken if len(calls) == 3 else chosen(host)  # grpc, http, metrics: the first metrics port

    monkeypatch.setattr(server_module, "free_port", metrics_port_taken_on_the_first_try)
    try:
        with TritonServer([DEMO_REPOSITORY], models=["demo_sum"], workdir=tmp_path / "work") as server:
            assert len(calls) == 6, "the start was not retried with new ports"
            bound = server.bound()
            assert all(bound.values()), bound
            assert server.ports["metrics"] != taken and server.alive()
            client = grpcclient.InferenceServerClient(server.grpc_url)
            try:
                assert client.is_server_live()
            finally:
                client.close()
    finally:
        holder.close()


def test_python_shm_mb_sizes_each_python_stub_pool_up_front(tmp_path, rng):
    """Triton's default pool is 1 MiB, grown step by step; ``python_shm_mb`` makes each stub's pool that
    size at start (the ProtoDUNE GPU entry's executions carry ~36 MB). The pools are read in /dev/shm."""
    with TritonServer([DEMO_REPOSITORY], backend="python", python_shm_mb=8, workdir=tmp_path / "work") as server:
        pools = [p.stat().st_size for p in Path("/dev/shm").iterdir() if p.name.startswith(server.shm_prefix)]
        x = rng.normal(size=(3, 16)).astype(np.float32)
        assert _infer(server.grpc_url, "demo_mlp", x).as_numpy("probs").shape == (3, 4)
    assert pools and min(pools) >= 8 * 2**20
    with pytest.raises(InferenceError, match="python_shm_mb"):
        TritonServer([DEMO_REPOSITORY], python_shm_mb=0)
