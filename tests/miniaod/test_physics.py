"""Physics sanity of the project's models on held-out generated events (seeds never used in training)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sonic_hep.data.miniaod import datasets
from sonic_hep.data.miniaod.fitting import auc
from sonic_hep.data.miniaod.generate import generate
from sonic_hep.modules.miniaod.deeptau_inputs import EGAMMA_BLOCK, MUON_BLOCK

from tests.miniaod.conftest import PHYSICS_SEED, branches, run_config

pytestmark = pytest.mark.slow

#: held-out boosted samples (the AK8 model was trained on seeds 201-203, see data/models/miniaod/training.json)
BOOSTED_SEED = PHYSICS_SEED + 10


@pytest.fixture(scope="module")
def boosted(tmp_path_factory) -> tuple[list[Path], Path]:
    """Boosted tops (ttbar, pTHat > 450 GeV) and QCD jets (pTHat > 400 GeV), and configs/miniaod.yaml's
    output on them (AK8 only: the other taggers are tested on the physics files)."""
    folder = tmp_path_factory.mktemp("miniaod-boosted")
    files = [generate(folder / "ttbar.root", 160, seed=BOOSTED_SEED, process="ttbar", pthat_min=450.0),
             generate(folder / "qcd.root", 100, seed=BOOSTED_SEED + 1, process="qcd", pthat_min=400.0)]
    out = folder / "out.root"
    run_config("miniaod", files, out, "modules.pnetAK4.min_jet_pt=100000.0", "options.streams=1")
    return files, out


def test_particlenet_ak4_tags_b_jets(physics_files, physics_output):
    truth = branches(physics_files, ["Jet_hadronFlavour", "Jet_partonFlavour", "Jet_puFraction"])
    score = branches(physics_output, ["JetPNet_BvsAll"])["JetPNet_BvsAll"]
    assert score.size == truth["Jet_hadronFlavour"].size  # one score per jet, in the jets' order
    b = truth["Jet_hadronFlavour"] == 5
    parton = np.abs(truth["Jet_partonFlavour"])
    light = (truth["Jet_hadronFlavour"] == 0) & (truth["Jet_puFraction"] < 0.5) & ((parton == 21) | (parton <= 3)) \
        & (parton > 0)
    assert b.sum() > 150 and light.sum() > 300  # enough jets for a stable AUC
    use = b | light
    value = auc(score[use], b[use])
    print(f"ParticleNet AK4 BvsAll AUC {value:.3f} ({b.sum()} b, {light.sum()} light jets)")
    assert value > 0.8


def test_deepmet_resolution_beats_raw_pf_met(physics_files, physics_output):
    truth = branches(physics_files, ["GenMET_pt", "GenMET_phi", "MET_pt", "MET_phi"])
    out = branches(physics_output, ["DeepMET_px", "DeepMET_py"])
    gen = np.stack([truth["GenMET_pt"] * np.cos(truth["GenMET_phi"]), truth["GenMET_pt"] * np.sin(truth["GenMET_phi"])])
    pf = np.stack([truth["MET_pt"] * np.cos(truth["MET_phi"]), truth["MET_pt"] * np.sin(truth["MET_phi"])])
    deep = np.stack([out["DeepMET_px"], out["DeepMET_py"]])
    rms_pf = np.sqrt(np.mean((pf - gen) ** 2))
    rms_deep = np.sqrt(np.mean((deep - gen) ** 2))
    print(f"MET resolution: DeepMET {rms_deep:.1f} GeV, PF {rms_pf:.1f} GeV ({gen.shape[1]} events)")
    assert rms_deep < 0.95 * rms_pf


def test_deeptau_separates_taus_from_jets(physics_files, physics_output):
    flav = branches(physics_files, ["Tau_genPartFlav"])["Tau_genPartFlav"]
    vs_jet = branches(physics_output, ["TauDeepTau_VSjet"])["TauDeepTau_VSjet"]
    assert vs_jet.size == flav.size
    tau, jet = flav == 5, flav == 0
    assert tau.sum() > 40 and jet.sum() > 100
    use = tau | jet
    value = auc(vs_jet[use], tau[use])
    print(f"DeepTau VSjet AUC {value:.3f} ({tau.sum()} taus, {jet.sum()} jets)")
    assert value > 0.8


def test_particlenet_ak8_tags_top_jets(boosted):
    files, out = boosted
    label = branches(files, ["FatJet_label"])["FatJet_label"]
    score = branches(out, ["FatJetPNet_TvsQCD"])["FatJetPNet_TvsQCD"]  # CMS's Top/(Top+QCD), configs/miniaod.yaml
    assert score.size == label.size
    top, qcd = label == 1, label == 0
    assert top.sum() > 80 and qcd.sum() > 80
    use = top | qcd
    value = auc(score[use], top[use])
    print(f"ParticleNet AK8 TvsQCD AUC {value:.3f} ({top.sum()} top, {qcd.sum()} QCD jets)")
    assert value >= 0.90


def test_deeptau_reco_lepton_channels_are_filled(physics_files):
    """τ candidates made by electrons and muons see their reco lepton in the inner grid's central cells:
    CMS's detector-level e/μ channels (E/p, muon-station matches) are not zero."""
    sample = datasets.tau_sample([str(p) for p in physics_files], jet_keep=0.0)
    central = {}
    for block, names in (("egamma", EGAMMA_BLOCK), ("muon", MUON_BLOCK)):
        t, ie, ip, values = sample.cells[f"input_inner_{block}"]
        near = (np.abs(ie - 5) <= 1) & (np.abs(ip - 5) <= 1)
        channel = names.index("ele_eSuperClusterOverP" if block == "egamma" else "muon_n_matches_DT_1")
        channel2 = names.index("ele_valid" if block == "egamma" else "muon_segmentCompatibility")
        filled = np.zeros(len(sample), dtype=bool)
        filled[t[near & (values[:, channel2] != 0)]] = True
        central[block] = filled
        assert np.any(values[:, channel] != 0), f"{names[channel]} is never filled"
    electron, muon = np.isin(sample.labels, [0]), np.isin(sample.labels, [1])
    assert electron.sum() > 15 and muon.sum() > 15
    assert central["egamma"][electron].mean() > 0.8 and central["muon"][muon].mean() > 0.8


@pytest.mark.parametrize("other, flavours", [("e", (1, 3)), ("mu", (2, 4))])
def test_deeptau_separates_taus_from_electrons_and_muons(physics_files, physics_output, other, flavours):
    flav = branches(physics_files, ["Tau_genPartFlav"])["Tau_genPartFlav"]
    vs = branches(physics_output, [f"TauDeepTau_VS{other}"])[f"TauDeepTau_VS{other}"]
    assert vs.size == flav.size
    tau, lepton = flav == 5, np.isin(flav, flavours)
    assert tau.sum() > 40 and lepton.sum() > 15
    use = tau | lepton
    value = auc(vs[use], tau[use])
    print(f"DeepTau VS{other} AUC {value:.3f} ({tau.sum()} taus, {lepton.sum()} {other})")
    assert value > 0.9
