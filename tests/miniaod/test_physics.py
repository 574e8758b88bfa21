"""Physics sanity of the project's models on held-out generated events (seeds never used in training)."""

from __future__ import annotations

import numpy as np
import pytest

from sonic_hep.data.miniaod.fitting import auc

from tests.miniaod.conftest import branches

pytestmark = pytest.mark.slow


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
