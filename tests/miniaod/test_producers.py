"""Producer configuration: mistakes are reported with the module, key and model to fix."""

from __future__ import annotations

import pytest
import uproot

from sonic_hep.framework.errors import SonicError

from .conftest import run_config


@pytest.mark.parametrize("override, message", [
    ("pnetAK4.discriminants={BvsAll: [bb]}", r"discriminant 'BvsAll' uses \['bb'\].*\['b', 'c', 'uds', 'g', 'pu'\]"),
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
    with pytest.raises(SonicError, match=r"module 'pnetAK4'.*'miniaod_particlenet_ak4' input 'pf_features'"):
        run_config("miniaod", small_file, tmp_path / "out.root", "pnetAK4.preprocess=ak8", "source.max_events=2")


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
