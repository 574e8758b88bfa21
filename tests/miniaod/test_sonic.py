"""End to end over a small generated file: SONIC (a real local Triton) gives the direct outputs to 1e-5,
with the project's models and — where ../shared exists — CMS's production models."""

from __future__ import annotations

import numpy as np
import pytest

from sonic_hep.data.miniaod.fitting import auc
from sonic_hep.modules.miniaod.deepmet import DeepMETProducer

from tests.conftest import shared_path
from tests.miniaod.conftest import branches

pytestmark = pytest.mark.triton

DEEPMET_NORM = DeepMETProducer.norm_factor.default
PRODUCTS = ("JetPNet_BvsAll", "FatJetPNet_TvsQCD", "DeepMET_pt", "DeepMET_phi", "TauDeepTau_VSjet")


def run_both(sonic_cli, config: str, small_file, tmp_path) -> tuple[dict, dict]:
    outputs = {}
    for mode in ("direct", "sonic"):
        path = tmp_path / f"{mode}.root"
        result = sonic_cli("run", config, "--input", small_file, "-o", path, "--inference", mode, "--no-progress",
                           check=True)
        assert f"mode {mode}" in result.stdout
        outputs[mode] = branches(path)
    return outputs["direct"], outputs["sonic"]


def assert_same(direct: dict, sonic: dict) -> None:
    """Every output within 1e-5 in the model's own units: probabilities as they are, DeepMET's momenta
    divided by the 50 GeV the producer multiplies the model's output with (Triton's dynamic batching may
    run several events' DeepMET in one batch, which changes float32 rounding in the sums by ~1e-7).
    DeepMET's φ is compared through px and py: for a MET of 1 GeV, 1e-5 in px is 1e-5 rad."""
    assert direct.keys() == sonic.keys()
    for name in direct:
        if name == "DeepMET_phi":
            continue
        scale = DEEPMET_NORM if name in ("DeepMET_pt", "DeepMET_px", "DeepMET_py") else 1.0
        np.testing.assert_allclose(sonic[name] / scale, direct[name] / scale, rtol=0, atol=1e-5, err_msg=name)


def test_project_models_sonic_equals_direct(sonic_cli, small_file, tmp_path):
    direct, sonic = run_both(sonic_cli, "miniaod", small_file, tmp_path)
    assert all(name in direct for name in PRODUCTS)
    assert direct["JetPNet_BvsAll"].size > 100 and direct["TauDeepTau_VSjet"].size > 10
    assert direct["FatJetPNet_TvsQCD"].size > 0 and direct["DeepMET_pt"].size == 24
    probs = np.stack([direct[f"JetPNet_{c}"] for c in ("b", "c", "uds", "g", "pu")])
    np.testing.assert_allclose(probs.sum(axis=0), 1, atol=1e-5)
    assert_same(direct, sonic)


@pytest.mark.shared
def test_cms_models_plug_in_by_config_sonic_equals_direct(sonic_cli, small_file, tmp_path, monkeypatch):
    shared_path("real", "cms-models", "particlenet_AK4")
    monkeypatch.setenv("SONIC_HEP_CMS_MODELS", str(shared_path("real", "cms-models")))  # miniaod_cms reads it
    direct, sonic = run_both(sonic_cli, "miniaod_cms", small_file, tmp_path)
    cms_ak4 = ("b", "bb", "c", "cc", "uds", "g", "undef", "pu")
    probs = np.stack([direct[f"JetPNet_{c}"] for c in cms_ak4])
    np.testing.assert_allclose(probs.sum(axis=0), 1, atol=1e-4)  # CMS's 8 classes, softmax
    assert "FatJetPNet_probQCDothers" in direct and "FatJetPNet_TvsQCD" in direct
    # CMS's tagger, trained on CMS's simulation, finds the b jets of these events: the inputs follow its layout
    truth = branches(small_file, ["Jet_hadronFlavour", "Jet_partonFlavour"])
    b, light = truth["Jet_hadronFlavour"] == 5, (truth["Jet_hadronFlavour"] == 0) & (truth["Jet_partonFlavour"] != 0)
    assert b.sum() >= 10 and auc(direct["JetPNet_BvsAll"][b | light], b[b | light]) > 0.75
    met = branches(small_file, ["MET_pt"])["MET_pt"]
    assert np.isfinite(direct["DeepMET_pt"]).all() and np.corrcoef(direct["DeepMET_pt"], met)[0, 1] > 0.5
    assert_same(direct, sonic)
