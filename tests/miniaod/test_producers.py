"""Producer configuration: mistakes are reported with the module, key and model to fix."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import uproot

from sonic_hep.framework import config as cfgmod
from sonic_hep.framework.errors import SonicError
from sonic_hep.framework.inference.fake import FakeClient, constant, use_client
from sonic_hep.framework.inference.repository import ModelRepository
from sonic_hep.framework.process import Process

from tests.miniaod.conftest import run_config

PROJECT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("override, message", [
    ("pnetAK4.discriminators={BvsAll: {numerator: [bb]}}",
     r"discriminator 'BvsAll' uses \['bb'\].*\['b', 'c', 'uds', 'g', 'pu'\]"),
    ("pnetAK8.discriminators={TvsQCD: {num: [Top]}}", r"discriminator 'TvsQCD' needs 'numerator'"),
    ("pnetAK4.classes=[b, c]", r"has 5 classes but 2 names"),
    ("deepMET.model=miniaod_particlenet_ak4", r"DeepMET needs \['input', 'input_cat0'"),
    ("deepTau.model=miniaod_deepmet", r"one output of 4 probabilities"),
])
def test_configuration_mistakes_name_module_and_key(small_file, tmp_path, override, message):
    with pytest.raises(SonicError, match=message) as info:
        run_config("miniaod", small_file, tmp_path / "out.root", override, "source.max_events=2")
    assert override.split("=")[0].split(".")[0] in str(info.value)
    assert not (tmp_path / "out.root").exists()


def test_inputs_for_another_model_are_refused_naming_the_input(small_file, tmp_path):
    ak8 = PROJECT / "data" / "models" / "miniaod" / "miniaod_particlenet_ak8" / "preprocess.json"
    with pytest.raises(SonicError, match=r"modules.pnetAK4.preprocess_json: .* does not fit model "
                                         r"'miniaod_particlenet_ak4' .*input 'pf_features'"):
        run_config("miniaod", small_file, tmp_path / "out.root", f"pnetAK4.preprocess_json='{ak8}'",
                   "source.max_events=2")


def test_events_without_jets_or_taus_give_empty_products(small_file, tmp_path):
    path = tmp_path / "out.root"
    run_config("miniaod", small_file, path)
    fat_jets = uproot.open(small_file)["Events"]["nFatJet"].array(library="np")
    taus = uproot.open(small_file)["Events"]["nTau"].array(library="np")
    out = uproot.open(path)["Events"]
    assert (fat_jets == 0).any() and (fat_jets > 0).any()  # both kinds of events are in the sample
    assert out["nFatJetPNet"].array(library="np").tolist() == fat_jets.tolist()  # one score per jet, none if none
    assert out["nTauDeepTau"].array(library="np").tolist() == taus.tolist()


def test_describe_lists_parameters(sonic_cli):
    result = sonic_cli("describe", "ParticleNetTagger", check=True)
    for word in ("preprocess", "discriminants", "classes", "JetPFCands", "scores"):
        assert word in result.stdout


#: what the fake client answers for each model, one row (the same for every jet, τ or event)
CANNED = {"miniaod_particlenet_ak4": {"softmax": [0.5, 0.125, 0.125, 0.125, 0.125]},
          "miniaod_particlenet_ak8": {"softmax": [0.25, 0.25, 0.5]},
          "miniaod_deepmet": {"output": [0.0, 0.0]},
          "miniaod_deeptau": {"main_output": [0.25, 0.25, 0.25, 0.25]}}


def test_producers_name_scores_by_the_labels_the_client_gives_without_any_server(small_file, tmp_path):
    """The four producers through the scheduler on the fake client: the scores are its answers, named
    by the labels of the model information the client returns (as in direct and SONIC mode)."""
    repository = ModelRepository([str(PROJECT / "data" / "models" / "miniaod")])
    client = FakeClient()
    for model, row in CANNED.items():
        client.add(repository.get(model), constant({name: np.float32(value) for name, value in row.items()}))
    config = cfgmod.load("miniaod", [f"source.files=['{small_file}']", f"output.file='{tmp_path / 'out.root'}'",
                                     "options.progress=false", "source.max_events=6"])
    process = Process(config)
    use_client(process, client)
    result = process.run(progress=False)
    assert set(client.calls) == set(CANNED)
    with uproot.open(result.output) as file:
        tree = file["Events"]
        for label, value in zip(("b", "c", "uds", "g", "pu"), CANNED["miniaod_particlenet_ak4"]["softmax"]):
            jets = np.concatenate(tree[f"JetPNet_{label}"].array(library="np"))
            assert len(jets) > 0 and np.all(jets == np.float32(value)), label
        for label, value in zip(("Top", "W", "QCD"), CANNED["miniaod_particlenet_ak8"]["softmax"]):
            assert np.all(np.concatenate(tree[f"FatJetPNet_{label}"].array(library="np")) == np.float32(value)), label
        # CMS's BvsAll: b / (b + c + uds + g), pile-up left out
        assert np.all(np.concatenate(tree["JetPNet_BvsAll"].array(library="np")) == np.float32(0.5 / 0.875))
        assert np.all(np.concatenate(tree["FatJetPNet_TvsQCD"].array(library="np")) == np.float32(0.25 / 0.75))
