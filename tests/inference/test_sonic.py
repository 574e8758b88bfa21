"""The SONIC client against real servers: same numbers as direct, splitting, options and clear errors."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from sonic_hep.framework.errors import InferenceError
from sonic_hep.framework.inference.sonic.connection import ServerConnection
from sonic_hep.framework.inference.server_spec import ServerSpec
from sonic_hep.framework.inference.direct import DirectClient
from sonic_hep.framework.inference.serving.server import free_port
from sonic_hep.framework.inference.triton_errors import NoServerError, RequestError

from tests.inference.conftest import sonic_client

pytestmark = pytest.mark.triton


@pytest.fixture(scope="module")
def direct(demo_repository):
    client = DirectClient(demo_repository)
    yield client
    client.close()


@pytest.fixture(scope="module")
def sonic(demo_server, demo_repository):
    client = sonic_client([demo_server.grpc_url], demo_repository)
    yield client
    client.close()


def assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=0, atol=1e-5, err_msg=name)


def test_model_config_comes_from_the_server(sonic, demo_repository):
    info = sonic.model_info("demo_mlp")
    assert info.path is None  # known from the server, not from a local file
    assert info.max_batch_size == 128
    assert [(s.name, s.datatype, s.dims) for s in info.inputs] == [("x", "FP32", (16,))]
    assert [s.name for s in info.outputs] == [s.name for s in demo_repository.get("demo_mlp").outputs]


@pytest.mark.parametrize("shared_memory", ["on", "off"])
@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_sonic_equals_direct_for_every_transport(demo_server, demo_repository, direct, rng, shared_memory, compression):
    client = sonic_client([demo_server.grpc_url], demo_repository, shared_memory=shared_memory, compression=compression)
    try:
        x = rng.standard_normal((50, 16)).astype(np.float32)
        assert_same(client.infer("demo_mlp", {"x": x}).result(30), direct.run("demo_mlp", {"x": x}))
        strided = rng.standard_normal((50, 32)).astype(np.float32)[:, ::2]  # a view, not C-contiguous
        assert_same(client.infer("demo_mlp", {"x": strided}).result(30),
                    direct.run("demo_mlp", {"x": np.ascontiguousarray(strided)}))
        if shared_memory == "on":
            assert client.pool.states[0].connection.shm.statistics()["regions"] >= 1
    finally:
        client.close()


def test_only_numbers_go_through_shared_memory():
    """A region holds raw values; a string tensor needs gRPC's length-prefixed form, so it goes in the message
    (staged, it once failed the request)."""
    connection = ServerConnection(ServerSpec("127.0.0.1:1"), shared_memory="on", transport="grpcio")
    connection.shm.proven = True  # as once a local server has opened our probe region (no server here)
    try:
        numbers = {"x": np.zeros((4, 16), np.float32), "n": np.ones(4, np.int64), "ok": np.ones(4, bool)}
        assert connection.stages(numbers)
        assert not connection.stages({"x": np.array([b"a", b"bc"], dtype=object)})
        assert not connection.stages({**numbers, "name": np.array([b"a"] * 4, dtype=np.bytes_)})
    finally:
        connection.close()


def test_a_batch_over_max_batch_size_is_split_and_reassembled_in_order(sonic, direct, rng):
    x = rng.standard_normal((300, 16)).astype(np.float32)  # max_batch_size 128 → 3 requests
    before = sonic.counters.as_dict().get("demo_mlp", {}).get("requests", 0)
    out = sonic.infer("demo_mlp", {"x": x}).result(30)
    assert sonic.counters.as_dict()["demo_mlp"]["requests"] - before == 3
    assert_same(out, direct.run("demo_mlp", {"x": x}))
    # row i of the answer belongs to row i of the input
    single = sonic.infer("demo_mlp", {"x": x[[250]]}).result(30)
    np.testing.assert_array_equal(out["probs"][250], single["probs"][0])


def test_ragged_inputs_model_without_batch_dim_and_output_subset(sonic, direct, rng):
    points = [rng.standard_normal((3, n)).astype(np.float32) for n in (4, 4, 9, 2, 9)]
    assert_same(sonic.infer("demo_points", {"points": points}).result(30), direct.run("demo_points", {"points": points}))
    x = rng.standard_normal((7, 4)).astype(np.float32)
    out = sonic.infer("demo_sum", {"x": x}).result(30)
    np.testing.assert_allclose(out["y"], x.sum(axis=0), rtol=1e-5)
    subset = sonic.infer("demo_mlp", {"x": rng.standard_normal((3, 16)).astype(np.float32)}, outputs=["logits"]).result(30)
    assert list(subset) == ["logits"] and subset["logits"].shape == (3, 4)


def test_many_requests_in_flight_keep_their_order(sonic, direct, rng):
    xs = [rng.standard_normal((int(n), 16)).astype(np.float32) for n in rng.integers(1, 40, 200)]
    futures = [sonic.infer("demo_mlp", {"x": x}) for x in xs]  # all sent before any is read
    for x, future in zip(xs, futures):
        assert_same(future.result(30), direct.run("demo_mlp", {"x": x}))


def test_wrong_inputs_fail_at_once_naming_model_and_input(sonic):
    with pytest.raises(InferenceError, match=r"model 'demo_mlp' input 'x': shape \[2, 3\] does not match \[batch, 16\]"):
        sonic.infer("demo_mlp", {"x": np.zeros((2, 3), np.float32)})
    with pytest.raises(InferenceError, match=r"model 'demo_mlp' input 'x': dtype int64"):
        sonic.infer("demo_mlp", {"x": np.zeros((2, 16), np.int64)})


def test_unknown_model_names_the_model_and_every_server(sonic, demo_server):
    with pytest.raises(NoServerError, match=rf"no server can run model 'demo_mpl': {demo_server.grpc_url}: does not have "
                                            r"it \(did you mean 'demo_mlp'.*; fallback: off"):
        sonic.infer("demo_mpl", {"x": np.zeros((1, 16), np.float32)})


def test_unreachable_server_is_skipped_with_a_warning_or_named_in_the_error(demo_server, caplog):
    dead = f"127.0.0.1:{free_port()}"
    with caplog.at_level(logging.WARNING):
        client = sonic_client([dead, demo_server.grpc_url])
    try:
        assert f"Triton server {dead} is not reachable; skipped" in caplog.text
        assert client.infer("demo_sum", {"x": np.ones((2, 4), np.float32)}).result(30)["y"].tolist() == [2] * 4
    finally:
        client.close()
    alone = sonic_client([dead])
    try:
        with pytest.raises(NoServerError, match=rf"model 'demo_sum': {dead}: down \(.*UNAVAILABLE.*\); fallback: no local"):
            alone.model_info("demo_sum")
    finally:
        alone.close()


def test_timeouts_are_retried_then_reported(other_server, other_repository):
    client = sonic_client([other_server.grpc_url], timeout_s=0.3, allowed_tries=2)
    try:
        fast = client.infer("slow", {"delay_ms": np.array([[1.0]], np.float32)}).result(30)
        assert fast["echo"].tolist() == [[1.0]]  # a python-backend model served like any other
        with pytest.raises(RequestError, match=rf"model 'slow' on server {other_server.grpc_url}: DEADLINE_EXCEEDED") as err:
            client.infer("slow", {"delay_ms": np.array([[1500.0]], np.float32)}).result(30)
        assert err.value.action == "retry"
        counters = client.counters.as_dict()["slow"]
        assert counters["retries"] == 1 and counters["failovers"] == 1 and counters["failures"] == 1
    finally:
        client.close()


def test_a_server_with_another_model_version_is_refused(other_server, demo_repository):
    client = sonic_client([other_server.grpc_url], demo_repository)  # other_server's demo_mlp has other weights
    try:
        with pytest.raises(InferenceError, match=rf"model 'demo_mlp' on server {other_server.grpc_url} is not the local "
                                                 r".*server digest md5:[0-9a-f]+, local md5:[0-9a-f]+ \(1/model.onnx: "
                                                 r"server [0-9a-f]+, local [0-9a-f]+\)"):
            client.infer("demo_mlp", {"x": np.zeros((1, 16), np.float32)})
    finally:
        client.close()


def test_only_servers_with_the_local_version_are_used(other_server, demo_server, demo_repository, direct, rng):
    client = sonic_client([other_server.grpc_url, demo_server.grpc_url], demo_repository)
    try:
        x = rng.standard_normal((4, 16)).astype(np.float32)
        for _ in range(6):
            assert_same(client.infer("demo_mlp", {"x": x}).result(30), direct.run("demo_mlp", {"x": x}))
        assert client.counters.as_dict()["demo_mlp"]["servers"] == {demo_server.grpc_url: 6}
        assert client.infer("slow", {"delay_ms": np.ones((1, 1), np.float32)}).result(30)["echo"].tolist() == [[1.0]]
    finally:
        client.close()


def test_server_statistics_reach_the_timing_report(sonic, rng):
    for _ in range(3):
        sonic.infer("demo_mlp", {"x": rng.standard_normal((4, 16)).astype(np.float32)}).result(30)
    stats = sonic.statistics()
    (address, models), = stats["servers"].items()
    assert models["demo_mlp"]["requests"] >= 3 and models["demo_mlp"]["executions"] >= 1
    assert models["demo_mlp"]["compute_infer_ns"] > 0
    assert any(line.startswith(address) and "demo_mlp" in line for line in stats["extra_lines"])
    assert stats["transports"] == {address: "native"}  # which transport carried the requests, in the report
    assert f"transport: {address} native" in stats["extra_lines"]
