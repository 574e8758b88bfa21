"""The module test bench (``framework/testing.py``): a model-running module under a fake client, under the real
direct client built from settings, and under a SONIC client on a real server, giving the same answers."""

from __future__ import annotations

import awkward as ak
import numpy as np
import pytest

from sonic_hep.data.demo.models import REPOSITORY as DEMO_REPOSITORY
from sonic_hep.framework.errors import ModuleError
from sonic_hep.framework.inference import ModelRepository
from sonic_hep.framework.inference.fake import FakeClient
from sonic_hep.framework.testing import run_module
from sonic_hep.modules.demo.toy_tagger import ToyTagger

rng = np.random.default_rng(3)
JETS = ak.Array([rng.normal(size=(n, 16)).astype(np.float32) for n in (3, 0, 5, 1)])


def test_a_fake_client_answers_without_model_files():
    client = FakeClient()
    info = ModelRepository([DEMO_REPOSITORY]).get("demo_mlp")
    client.add(info, lambda x: {"probs": np.tile(np.float32([0.1, 0.2, 0.3, 0.4]), (len(x["x"]), 1))})
    run = run_module(ToyTagger, {"toyJets:jets": JETS}, label="tagger", inference=client, events_per_call=2)
    assert client.calls["demo_mlp"] == 2  # one request per call with jets: events 0-1 and 2-3
    assert ak.to_list(run.products["scores"][2].b) == pytest.approx([0.1] * 5)
    assert len(run.products["scores"][1]) == 0


def test_settings_build_the_real_client_and_equal_a_sonic_run(demo_server):
    direct = run_module(ToyTagger, {"toyJets:jets": JETS}, label="tagger",
                        inference={"mode": "direct", "repository": [str(DEMO_REPOSITORY)]})
    served = run_module(ToyTagger, {"toyJets:jets": JETS}, label="tagger",
                        inference={"mode": "sonic", "servers": [demo_server.grpc_url], "fallback": False,
                                   "repository": [str(DEMO_REPOSITORY)]})
    a, b = direct.stacked("scores"), served.stacked("scores")
    assert ak.num(a, axis=1).tolist() == [3, 0, 5, 1]
    np.testing.assert_allclose(ak.to_numpy(ak.flatten(a.uds)), ak.to_numpy(ak.flatten(b.uds)), rtol=1e-5, atol=1e-6)


def test_a_missing_service_names_the_module():
    with pytest.raises(ModuleError, match="tagger"):
        run_module(ToyTagger, {"toyJets:jets": JETS}, label="tagger")
