"""Inputs built as CMS builds them: ParticleNet (order, normalisation, padding), DeepMET, DeepTau grids."""

from __future__ import annotations

import numpy as np
import pytest

from sonic_hep.modules.miniaod.deepmet import deepmet_inputs
from sonic_hep.modules.miniaod.deeptau_inputs import BLOCKS, EGAMMA_BLOCK, HADRON_BLOCK, TAU_BLOCK, deeptau_inputs
from sonic_hep.modules.miniaod.particlenet_inputs import AK4, AK8, particlenet_inputs


def pf_candidates(pt, eta, phi, pdg=211, charge=1.0, puppi=1.0) -> dict[str, np.ndarray]:
    n = len(pt)
    full = lambda v: np.broadcast_to(np.asarray(v, dtype=float), (n,)).copy()  # noqa: E731
    charge = full(charge)
    track = charge != 0
    return {"pt": np.asarray(pt, float), "eta": np.asarray(eta, float), "phi": np.asarray(phi, float),
            "mass": np.where(track, 0.1396, 0.0), "charge": charge, "pdgId": full(pdg).astype(int),
            "dxy": np.where(track, 0.001, 0.0), "dz": np.where(track, -0.002, 0.0), "dxyError": np.where(track, 0.002, 0),
            "dzError": np.where(track, 0.003, 0), "vx": np.zeros(n), "vy": np.where(track, 0.001, 0.0),
            "vz": np.where(track, -0.002, 0.0), "puppiWeight": full(puppi), "pvAssocQuality": np.where(track, 7, 0),
            "fromPV": np.where(track, 3, 1), "lostInnerHits": np.where(track, -1, 0),
            "numberOfPixelHits": np.where(track, 4, 0), "trkChi2": np.where(track, 1.3, 0.0),
            "trkQuality": np.where(track, 4, 0), "hcalFraction": np.zeros(n)}


NO_SV = {k: np.zeros(0) for k in ("pt", "eta", "phi", "mass", "ntracks", "chi2", "dxy", "dxySig", "dlen", "dlenSig")}


def test_particlenet_orders_normalises_pads_and_truncates():
    rng = np.random.default_rng(3)
    n0, n1 = 60, 3
    pt = rng.uniform(1, 50, n0 + n1)
    pf = pf_candidates(pt, np.r_[rng.normal(-1.0, 0.1, n0), rng.normal(1.0, 0.1, n1)], rng.normal(0, 0.1, n0 + n1))
    jets = {"pt": np.array([300.0, 20.0]), "eta": np.array([-1.0, 1.0]), "phi": np.array([0.0, 0.0])}
    members = {"jetIdx": np.r_[np.zeros(n0, int), np.ones(n1, int)], "pFCandsIdx": np.arange(n0 + n1)}
    sv = {**NO_SV, "pt": np.array([10.0, 5.0]), "eta": np.array([-1.05, 2.5]), "phi": np.array([0.02, 0.0]),
          "mass": np.array([1.5, 1.0]), "ntracks": np.array([3, 2]), "chi2": np.array([0.8, 1.0]),
          "dxy": np.array([0.3, 0.1]), "dxySig": np.array([12.0, 4.0]), "dlen": np.array([0.4, 0.1]),
          "dlenSig": np.array([13.0, 4.0])}
    x = particlenet_inputs(AK4, jets, pf, members, sv)
    assert x["pf_features"].shape == (2, 20, 50) and x["pf_points"].shape == (2, 2, 50)  # clamped to max_length
    assert x["sv_features"].shape == (2, 11, 1)  # longest SV list is 1, min_length 1
    assert x["pf_mask"][0].sum() == 50 and x["pf_mask"][1].sum() == n1
    logpt = x["pf_features"][0, 0]
    assert np.all(np.diff(logpt) <= 0)  # highest pT first; the 10 softest are truncated
    expected = np.clip((np.log(np.sort(pt[:n0])[::-1][:50]) - 0.8) * 0.7, -5, 5)
    np.testing.assert_allclose(logpt, expected, rtol=1e-5)
    # etarel is signed by the jet's eta: a jet at eta<0 flips it; points equal the feature rows
    cands = np.argsort(-pt[:n0])[:50]
    np.testing.assert_allclose(x["pf_features"][0, 2], -(pf["eta"][cands] - -1.0), atol=1e-6)
    np.testing.assert_array_equal(x["pf_points"][0], x["pf_features"][0, 2:4])
    assert np.all(x["pf_features"][1, :, n1:] == 0)  # padding is zero
    assert x["sv_mask"][:, 0, 0].tolist() == [1.0, 0.0]  # the SV at eta 2.5 is in no jet
    np.testing.assert_allclose(x["sv_features"][0, 0, 0], (np.log(10.0) - 2.8) * 0.8, rtol=1e-6)


def test_particlenet_minimum_lengths_and_no_vertices():
    pf = pf_candidates([30.0, 20.0], [0.1, 0.12], [0.0, 0.05], pdg=[211, 22], charge=[1.0, 0.0])
    jets = {"pt": np.array([50.0]), "eta": np.array([0.1]), "phi": np.array([0.0])}
    x = particlenet_inputs(AK4, jets, pf, {"jetIdx": np.array([0, 0]), "pFCandsIdx": np.array([0, 1])}, NO_SV)
    assert x["pf_features"].shape == (1, 20, 8) and x["sv_features"].shape == (1, 11, 1)
    assert x["sv_mask"].sum() == 0
    names = list(AK4.preprocess.inputs[1].var_names)
    photon = x["pf_features"][0, :, 1]
    assert photon[names.index("pfcand_normchi2")] == 5.0  # CMS's 999 for no track, clipped
    assert photon[names.index("pfcand_btagSip3dVal")] == 0.0


def test_particlenet_ak8_uses_puppi_weights():
    pf = pf_candidates([100.0, 60.0, 50.0], [0.0, 0.1, 0.2], [0.0, 0.1, 0.2], puppi=[0.3, 1.0, 0.005])
    jets = {"pt": np.array([200.0]), "eta": np.array([0.1]), "phi": np.array([0.1])}
    x = particlenet_inputs(AK8, jets, pf, {"jetIdx": np.zeros(3, int), "pFCandsIdx": np.arange(3)}, NO_SV)
    assert x["pf_features"].shape == (1, 25, 16) and x["pf_mask"].sum() == 2  # weight < 0.01 dropped
    first = x["pf_features"][0, 0, :2]  # log(pT) without PUPPI, ordered by PUPPI-weighted pT: 60 before 30
    np.testing.assert_allclose(first, (np.log([60.0, 100.0]) - 1.0) * 0.5, rtol=1e-6)


def test_deepmet_inputs_follow_cms():
    n = 5000
    pf = pf_candidates(np.full(n, 2.0), np.zeros(n), np.zeros(n))
    pf["pdgId"][:3], pf["charge"][:3] = [-211, 130, 1], [-1, 0, 0]
    x = deepmet_inputs(pf)
    assert x["input"].shape == (1, 4500, 8) and all(x[f"input_cat{i}"].shape == (1, 4500, 1) for i in range(3))
    assert x["input_cat1"][0, :3, 0].tolist() == [0, 9, 4]  # CMS embedding of -211, 130, 1
    assert x["input_cat0"][0, :3, 0].tolist() == [0, 1, 1]  # charge -1, 0, 0
    np.testing.assert_allclose(x["input"][0, 0], [0.001, -0.002, 0, 0.1396, 2 / 50, 1, 2 / 50, 0], rtol=1e-6)
    pf["pdgId"][5] = 321
    with pytest.raises(ValueError, match="321"):
        deepmet_inputs(pf)


def tau(**values) -> dict[str, np.ndarray]:
    base = dict.fromkeys(("charge", "leadTkDeltaEta", "leadTkDeltaPhi", "chargedIsoPtSum", "chargedIsoPtSumdR03",
                          "footprintCorrection", "neutralIsoPtSum", "neutralIsoPtSumWeight", "neutralIsoPtSumWeightdR03",
                          "neutralIsoPtSumdR03", "photonPtSumOutsideSignalCone", "puCorrPtSum", "dxy", "dxyErr", "ip3d",
                          "ip3dErr", "dz", "dzErr", "hasSecondaryVertex", "flightLengthX", "flightLengthY",
                          "flightLengthZ", "flightLengthSig", "ptWeightedDetaStrip", "ptWeightedDphiStrip",
                          "ptWeightedDrSignal", "ptWeightedDrIsolation", "leadingTrackNormChi2", "eRatio", "gjAngleDiff",
                          "nPhotons", "emFraction", "insideEcalCrack", "etaAtEcalEntranceLeadChargedCand", "mass"), 0.0)
    base.update(pt=40.0, eta=0.5, phi=1.0, decayMode=10)
    base.update(values)
    return {k: np.atleast_1d(np.asarray(v, dtype=float)) for k, v in base.items()}


def test_deeptau_grids_keep_the_leading_object_per_cell():
    t = tau()
    # two charged hadrons in the central cell (the harder wins), one photon 0.02 up in eta, one hadron at 0.3
    pf = pf_candidates([5.0, 9.0, 3.0, 4.0], [0.5, 0.501, 0.52, 0.8], [1.0, 1.001, 1.0, 1.0], pdg=[211, 211, 22, 211],
                       charge=[1.0, 1.0, 0.0, 1.0])
    x = deeptau_inputs(pf, t, rho=20.0)
    assert x["input_tau"].shape == (1, 43) and len(TAU_BLOCK) == 43
    sizes = {name: len(block) for name, block in BLOCKS.items()}
    assert sizes == {"egamma": 86, "muon": 64, "hadrons": 38}
    assert x["input_inner_hadrons"].shape == (1, 11, 11, 38) and x["input_outer_egamma"].shape == (1, 21, 21, 86)
    rel_pt = HADRON_BLOCK.index("pfCand_chHad_rel_pt")
    assert x["input_inner_hadrons"][0, 5, 5, rel_pt] == pytest.approx(9.0 / 40.0)
    gamma = EGAMMA_BLOCK.index("pfCand_gamma_rel_pt")
    assert x["input_inner_egamma"][0, 6, 5, gamma] == pytest.approx(3.0 / 40.0)  # deta 0.02 → one cell up
    assert x["input_inner_egamma"][0, 6, 5, EGAMMA_BLOCK.index("rho")] == 20.0  # common variables where occupied
    assert x["input_inner_egamma"][0, 5, 5, EGAMMA_BLOCK.index("rho")] == 0.0
    assert x["input_inner_hadrons"][0, :, :, rel_pt].astype(bool).sum() == 1  # the hadron at 0.3 is outside
    assert x["input_outer_hadrons"][0, 16, 10, rel_pt] == pytest.approx(4.0 / 40.0)  # 0.3 / 0.05 = 6 cells up
    assert x["input_tau"][0, TAU_BLOCK.index("tau_n_charged_prongs")] == 3
