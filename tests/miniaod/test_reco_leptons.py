"""Reconstructed electrons and muons: the generator's collections and DeepTau's ele_*/muon_* channels filled
from them with CMS's definitions (rel_* over the lepton's pT, *_sig over the error, station counts as stored)."""

from __future__ import annotations

import numpy as np
import pytest
import uproot

from sonic_hep.modules.miniaod.deeptau_inputs import EGAMMA_BLOCK, ELECTRON_FIELDS, MUON_BLOCK, MUON_FIELDS, \
    deeptau_inputs

from tests.miniaod.test_preprocessing import pf_candidates, tau


def lepton(fields: tuple[str, ...], **values) -> dict[str, np.ndarray]:
    out = dict.fromkeys(fields, 0.0)
    out.update(values)
    return {k: np.atleast_1d(np.asarray(v, dtype=float)) for k, v in out.items()}


def test_reco_electron_and_muon_fill_their_channels():
    t = tau(pt=40.0, eta=0.5, phi=1.0)
    pf = pf_candidates([30.0], [0.5], [1.0])
    ele = lepton(ELECTRON_FIELDS, pt=20.0, eta=0.52, phi=1.0, ecalEnergy=8.0, ecalEnergyError=0.5,
                 eSuperClusterOverP=0.4, ccEleEnergy=6.0, ccGammaEnergy=1.5, gsfTrackPt=18.0, gsfTrackPtError=2.0,
                 trackMomentumAtVtx=22.0)
    mu = lepton(MUON_FIELDS, pt=10.0, eta=0.5, phi=1.06, dxy=-0.004, dxyErr=0.002, normalizedChi2=-1.0,
                nMatchesDT1=1, nHitsDT1=9, segmentCompatibility=0.3)
    x = deeptau_inputs(pf, t, rho=20.0, leptons={"Electron": ele, "Muon": mu})
    e = x["input_inner_egamma"][0, 6, 5]  # deta 0.02: one cell up in eta
    assert e[EGAMMA_BLOCK.index("ele_valid")] == 1.0
    assert e[EGAMMA_BLOCK.index("ele_rel_pt")] == pytest.approx(0.5)
    assert e[EGAMMA_BLOCK.index("ele_rel_ecalEnergy")] == pytest.approx(8.0 / 20.0)
    assert e[EGAMMA_BLOCK.index("ele_ecalEnergy_sig")] == pytest.approx(16.0)
    assert e[EGAMMA_BLOCK.index("ele_eSuperClusterOverP")] == pytest.approx(0.4)
    assert e[EGAMMA_BLOCK.index("ele_cc_ele_rel_energy")] == pytest.approx(6.0 / 20.0)
    assert e[EGAMMA_BLOCK.index("ele_cc_gamma_rel_energy")] == pytest.approx(1.5 / 6.0)
    assert e[EGAMMA_BLOCK.index("ele_rel_gsfTrack_pt")] == pytest.approx(18.0 / 20.0)
    assert e[EGAMMA_BLOCK.index("ele_gsfTrack_pt_sig")] == pytest.approx(9.0)
    assert e[EGAMMA_BLOCK.index("ele_rel_trackMomentumAtVtx")] == pytest.approx(22.0 / 20.0)
    assert e[EGAMMA_BLOCK.index("tau_pt")] == 40.0  # the common variables where the block has an object
    m = x["input_inner_muon"][0, 5, 8]  # dphi 0.06: three cells over in phi
    assert m[MUON_BLOCK.index("muon_rel_pt")] == pytest.approx(0.25)
    assert m[MUON_BLOCK.index("muon_dxy_sig")] == pytest.approx(2.0)
    assert m[MUON_BLOCK.index("muon_normalizedChi2_valid")] == 0.0  # no global track
    assert m[MUON_BLOCK.index("muon_n_matches_DT_1")] == 1 and m[MUON_BLOCK.index("muon_n_hits_DT_1")] == 9
    assert m[MUON_BLOCK.index("muon_segmentCompatibility")] == pytest.approx(0.3)
    # the PF muon channels are the PF candidates' (none here), not the reco muon's
    assert np.all(x["input_inner_muon"][..., MUON_BLOCK.index("pfCand_muon_valid")] == 0)
    # without the collections, the reco-lepton channels stay 0 and the rest is unchanged
    bare = deeptau_inputs(pf, t, rho=20.0)
    reco = [i for i, name in enumerate(EGAMMA_BLOCK) if name.startswith("ele_")]
    assert np.all(bare["input_inner_egamma"][..., reco] == 0)
    assert np.array_equal(bare["input_inner_hadrons"], x["input_inner_hadrons"])


def test_generator_leptons_point_at_their_pf_candidates(small_file):
    events = uproot.open(small_file)["Events"]
    arrays = events.arrays(["PFCands_pdgId", "PFCands_pt", "Electron_pfCandIdx", "Electron_pt",
                            "Electron_genPartFlav", "Muon_pfCandIdx", "Muon_pt", "Muon_genPartFlav"])
    n_e = n_mu = 0
    for event in arrays:
        pdg, pt = np.abs(np.asarray(event["PFCands_pdgId"])), np.asarray(event["PFCands_pt"])
        for name, own in (("Electron", 11), ("Muon", 13)):
            idx = np.asarray(event[f"{name}_pfCandIdx"])
            flav = np.asarray(event[f"{name}_genPartFlav"])
            assert np.allclose(pt[idx], np.asarray(event[f"{name}_pt"]))
            assert set(pdg[idx]) <= {own, 211}  # the lepton's PF candidate, or a hadron faking it
            assert np.all(flav[pdg[idx] == 211] == 0)
        n_e += len(event["Electron_pt"])
        n_mu += len(event["Muon_pt"])
    assert n_e > 0 and n_mu > 0
