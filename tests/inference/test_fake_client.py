"""The fake inference client and fake servers: producers through the real scheduler, and the SONIC
client's retries and failovers, without any server or onnxruntime session."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import uproot

from sonic_hep.framework import config as cfgmod
from sonic_hep.framework.errors import InferenceError, ModuleError
from sonic_hep.framework.inference.fake import FakeClient, FakeServer, constant, fake_pool, model_info, use_client
from sonic_hep.framework.inference.repository import ModelRepository, TensorSpec
from sonic_hep.framework.inference.sonic.client import SonicClient
from sonic_hep.framework.inference.triton_errors import RequestError
from sonic_hep.framework.process import Process

from .conftest import DEMO_REPOSITORY

#: a made-up batched model: y = 2 x, at most 4 rows per request
DOUBLE = model_info("double", [TensorSpec("x", "FP32", (3,))], [TensorSpec("y", "FP32", (3,))], max_batch_size=4)


def double(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {"y": inputs["x"] * 2}


def rows(n: int) -> np.ndarray:
    return np.arange(3 * n, dtype=np.float32).reshape(n, 3)


# -- the client on its own ------------------------------------------------------------------------------
def test_batches_are_split_at_max_batch_size_and_reassembled_in_order():
    client = FakeClient().add(DOUBLE, double)
    out = client.infer("double", {"x": rows(10)}).result()
    np.testing.assert_array_equal(out["y"], rows(10) * 2)
    assert [len(request["x"]) for _, request in client.requests] == [4, 4, 2]
    assert client.calls == {"double": 1}
    assert client.statistics()["models"]["double"]["requests"] == 3


def test_inputs_are_checked_as_the_real_clients_check_them():
    client = FakeClient().add(DOUBLE, double)
    with pytest.raises(InferenceError, match=r"model 'double' input 'x': dtype float64"):
        client.infer("double", {"x": rows(2).astype(np.float64)})
    with pytest.raises(InferenceError, match=r"model 'other' is not served by this fake client; it has \['double'\]"):
        client.infer("other", {"x": rows(2)})
    assert client.calls == {} and client.requests == []  # refused before any request


def test_scripted_failures_reach_the_future_then_the_model_answers_again():
    client = FakeClient().add(DOUBLE, double).fail("double", InferenceError("boom"), times=2)
    for _ in range(2):
        with pytest.raises(InferenceError, match="boom"):
            client.infer("double", {"x": rows(1)}).result()
    np.testing.assert_array_equal(client.infer("double", {"x": rows(1)}).result()["y"], rows(1) * 2)
    assert client.statistics()["models"]["double"]["failures"] == 2


def test_constant_answers_one_row_per_requested_row_and_parameters_are_strings():
    info = model_info("tagger", [TensorSpec("x", "FP32", (3,))], [TensorSpec("p", "FP32", (2,))], max_batch_size=8,
                      parameters={"cut": 0.5})
    client = FakeClient().add(info, constant({"p": [0.25, 0.75]}))
    out = client.infer("tagger", {"x": rows(3)}).result()
    np.testing.assert_array_equal(out["p"], [[0.25, 0.75]] * 3)
    assert client.model_info("tagger").parameters == {"cut": "0.5"}


# -- a producer through the scheduler ---------------------------------------------------------------------
def demo_process(tmp_path, client: FakeClient, events: int = 12) -> Process:
    config = cfgmod.load("demo_inference", [f"source.events={events}", f"output.file='{tmp_path / 'out.root'}'",
                                            "options.progress=false"])
    process = Process(config)
    use_client(process, client)
    return process


def test_a_producer_runs_through_the_scheduler_on_the_fake_client(tmp_path):
    demo = ModelRepository([DEMO_REPOSITORY]).get("demo_mlp")
    client = FakeClient().add(demo, lambda x: {"probs": x["x"][:, :4], "logits": x["x"][:, 4:8]})
    result = demo_process(tmp_path, client).run(progress=False)
    assert 0 < client.calls["demo_mlp"] <= 12  # at most one call per event (an event without jets asks nothing)
    with uproot.open(result.output) as file:
        tree = file["Events"]
        scored = {label: np.concatenate(tree[f"ToyJet_{label}"].array(library="np")) for label in ("b", "c", "uds", "g")}
    sent = np.concatenate([request["x"] for _, request in client.requests])
    assert len(sent) == len(scored["b"]) > 0  # every jet sent once
    for column, label in enumerate(("b", "c", "uds", "g")):  # every jet's score is the fake's answer to its features
        np.testing.assert_array_equal(np.sort(scored[label]), np.sort(sent[:, column]))
    assert client.closed  # the process ended the service's job


def test_a_failed_request_stops_the_job_naming_the_module(tmp_path):
    demo = ModelRepository([DEMO_REPOSITORY]).get("demo_mlp")
    client = FakeClient().add(demo, constant({"probs": [0.25] * 4, "logits": [0.0] * 4}))
    client.fail("demo_mlp", RequestError("demo_mlp", "fake:1", "INTERNAL", "model raised", "fatal"))
    with pytest.raises(ModuleError, match=r"module 'tagger' failed in external work .*INTERNAL: model raised"):
        demo_process(tmp_path, client).run(progress=False)
    assert client.calls["demo_mlp"] >= 1 and client.closed


# -- the SONIC client on fake servers -------------------------------------------------------------------
def sonic(*servers: FakeServer, **options) -> SonicClient:
    return SonicClient(fake_pool(*servers, **options), allowed_tries=3)


def test_a_busy_server_is_retried_on_the_same_server():
    server = FakeServer("a:1", {"double": (DOUBLE, double)}).fail("RESOURCE_EXHAUSTED", times=2)
    client = sonic(server)
    try:
        np.testing.assert_array_equal(client.infer("double", {"x": rows(2)}).result(5)["y"], rows(2) * 2)
        counters = client.counters.as_dict()["double"]
        assert server.received == 3 and counters["retries"] == 2 and counters["failovers"] == 0
    finally:
        client.close()


def test_an_unreachable_server_fails_over_and_split_requests_keep_their_order():
    a = FakeServer("a:1", {"double": (DOUBLE, double)}).fail("UNAVAILABLE", "connection refused")
    b = FakeServer("b:1", {"double": (DOUBLE, double)})
    client = sonic(a, b)
    try:
        out = client.infer("double", {"x": rows(10)}).result(5)  # 3 requests; the first fails over to b
        np.testing.assert_array_equal(out["y"], rows(10) * 2)
        counters = client.counters.as_dict()["double"]
        assert counters["failovers"] == 1 and counters["retries"] == 0 and b.received >= 1
    finally:
        client.close()


def test_a_wrong_request_fails_at_once_without_retry_or_failover():
    a = FakeServer("a:1", {"double": (DOUBLE, double)}).fail("INVALID_ARGUMENT", "unexpected shape")
    b = FakeServer("b:1", {"double": (DOUBLE, double)})
    client = sonic(a, b)
    try:
        with pytest.raises(RequestError, match="INVALID_ARGUMENT: unexpected shape"):
            client.infer("double", {"x": rows(2)}).result(5)
        assert a.received == 1 and b.received == 0
        assert client.counters.as_dict()["double"]["failures"] == 1
    finally:
        client.close()


def test_labels_of_a_server_model_come_from_the_local_repository_entry():
    """Triton sends label file names, not the files: the client gives the local entry's labels."""
    repository = ModelRepository([DEMO_REPOSITORY])
    local = repository.get("demo_mlp")
    for pool_repository, expected in ((repository, local.labels), (None, {})):
        served = dataclasses.replace(local, path=None)  # what a server's config gives: no files
        assert served.labels == {}
        client = sonic(FakeServer("a:1", {"demo_mlp": (served, constant({}))}), repository=pool_repository)
        try:
            assert client.model_info("demo_mlp").labels == expected
        finally:
            client.close()
    assert local.labels["probs"] == ["b", "c", "uds", "g"]
