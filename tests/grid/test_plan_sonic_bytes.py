"""The SONIC client counts the tensor bytes it puts on the wire or in shared memory: what
``sonic plan`` sizes a network link with. A real Triton server on the demo models."""

from __future__ import annotations

import numpy as np
import pytest

from sonic_hep.data.demo.models import REPOSITORY as DEMO_REPOSITORY
from sonic_hep.framework.inference.serving.server import TritonServer
from tests.inference.conftest import sonic_client

pytestmark = pytest.mark.triton


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with TritonServer([DEMO_REPOSITORY], workdir=tmp_path_factory.mktemp("bytes-server")) as running:
        yield running


@pytest.mark.parametrize("shared_memory", ["off", "on"])
def test_sonic_client_counts_bytes_sent_and_received(server, shared_memory):
    client = sonic_client([server.grpc_url], shared_memory=shared_memory)
    try:
        x = np.random.default_rng(3).normal(size=(200, 16)).astype(np.float32)  # 2 requests (max batch 128)
        for _ in range(3):
            probs = client.infer("demo_mlp", {"x": x}, outputs=["probs"]).result(60)["probs"]
        counters = client.statistics()["models"]["demo_mlp"]
    finally:
        client.close()
    assert counters["requests"] == 6
    assert counters["bytes_sent"] == 3 * x.nbytes and counters["bytes_received"] == 3 * probs.nbytes
    expected_shm = 3 * (x.nbytes + probs.nbytes) if shared_memory == "on" else 0
    assert counters["shm_bytes"] == expected_shm


def test_auto_stages_large_inputs_and_reads_small_outputs_from_the_message(server):
    """``shared_memory: auto``: 8 point clouds (57.6 kB) go through shared memory, their 8 scores (32 bytes)
    come back in the gRPC message, where a few numbers are cheaper to read; the bytes in shared memory are
    counted as such, and the scores equal direct inference's."""
    from sonic_hep.framework.inference.direct import DirectClient
    from sonic_hep.framework.inference.repository import ModelRepository

    points = np.random.default_rng(5).normal(size=(8, 3, 600)).astype(np.float32)
    client = sonic_client([server.grpc_url], shared_memory="auto")
    direct = DirectClient(ModelRepository([DEMO_REPOSITORY]))
    try:
        score = client.infer("demo_points", {"points": points}).result(60)["score"]
        np.testing.assert_allclose(score, direct.run("demo_points", {"points": points})["score"], rtol=0, atol=1e-5)
        counters = client.statistics()["models"]["demo_points"]
    finally:
        client.close()
        direct.close()
    assert counters["bytes_sent"] == points.nbytes and counters["bytes_received"] == score.nbytes
    assert counters["shm_bytes"] == points.nbytes


def test_an_output_of_unknown_size_is_counted_as_coming_back_in_the_message(tmp_path):
    """Room in a request's region is reserved only for outputs whose size is known beforehand: Exa.TrkX's
    embedding (one row per hit, ``dims: [-1, 8]``) comes back in the gRPC message even when it is larger than
    the threshold, and is not counted as shared memory (only the staged input is)."""
    from sonic_hep.framework.inference.service import resolve_repository

    features = np.random.default_rng(7).normal(size=(1000, 9)).astype(np.float32)  # 36 kB: staged
    with TritonServer([resolve_repository("data/models/exatrkx")], models=["exatrkx_embedding"],
                      workdir=tmp_path / "server") as exatrkx:
        client = sonic_client([exatrkx.grpc_url], shared_memory="auto")
        try:
            embedding = client.infer("exatrkx_embedding", {"features": features}).result(60)["embedding"]
            counters = client.statistics()["models"]["exatrkx_embedding"]
        finally:
            client.close()
    assert embedding.shape == (1000, 8) and embedding.nbytes >= 16 * 1024
    assert counters["bytes_sent"] == features.nbytes and counters["bytes_received"] == embedding.nbytes
    assert counters["shm_bytes"] == features.nbytes
