"""CMS production models (../shared/real/cms-models) served unmodified: SONIC equals direct."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from sonic_hep.framework.inference.direct import DirectClient
from sonic_hep.framework.inference.repository import ModelRepository

from tests.inference.conftest import CMS_MODEL, sonic_client

pytestmark = [pytest.mark.triton, pytest.mark.shared]


def particlenet_inputs(rng: np.random.Generator, jets: int, particles: int, vertices: int) -> dict[str, np.ndarray]:
    """ParticleNet AK4-shaped inputs: points, features and masks of particles and secondary vertices."""
    def block(channels: int, n: int) -> np.ndarray:
        return rng.standard_normal((jets, channels, n)).astype(np.float32)

    pf_mask = (rng.random((jets, 1, particles)) < 0.8).astype(np.float32)
    sv_mask = (rng.random((jets, 1, vertices)) < 0.5).astype(np.float32)
    return {"pf_points": block(2, particles) * pf_mask, "pf_features": block(20, particles) * pf_mask, "pf_mask": pf_mask,
            "sv_points": block(2, vertices) * sv_mask, "sv_features": block(11, vertices) * sv_mask, "sv_mask": sv_mask}


def test_cms_config_is_served_as_written(cms_server, cms_repository):
    served = grpcclient.InferenceServerClient(cms_server.grpc_url).get_model_config(CMS_MODEL).config
    local = ModelRepository([cms_repository]).get(CMS_MODEL).config
    assert local.HasField("model_repository_agents")  # the file as CMS ships it, agent and all
    assert served.platform == local.platform == "onnxruntime_onnx"
    assert served.max_batch_size == local.max_batch_size == 500
    assert list(served.dynamic_batching.preferred_batch_size) == list(local.dynamic_batching.preferred_batch_size)
    assert served.optimization.graph.level == local.optimization.graph.level
    assert served.output[0].label_filename == local.output[0].label_filename


@pytest.mark.parametrize("particles, vertices", [(50, 5), (33, 2)])
def test_particlenet_ak4_sonic_equals_direct(cms_server, cms_repository, rng, particles, vertices):
    repository = ModelRepository([cms_repository])
    inputs = particlenet_inputs(rng, jets=37, particles=particles, vertices=vertices)
    direct = DirectClient(repository).run(CMS_MODEL, inputs)
    client = sonic_client([cms_server.grpc_url], repository)  # also compares the MD5 sums with the server's
    try:
        sonic = client.infer(CMS_MODEL, inputs).result(60)
    finally:
        client.close()
    assert sonic["softmax"].shape == (37, 8)
    np.testing.assert_allclose(sonic["softmax"], direct["softmax"], rtol=0, atol=1e-5)
    np.testing.assert_allclose(direct["softmax"].sum(axis=1), 1, rtol=1e-5)
