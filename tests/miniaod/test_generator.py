"""The MiniAOD-like generator: Pythia events through the documented detector, written NanoAOD-style."""

from __future__ import annotations

import awkward as ak
import numpy as np
import pytest
import uproot

from sonic_hep.data.miniaod.detector import Particles, simulate
from sonic_hep.data.miniaod.events import Settings
from sonic_hep.data.miniaod.generate import generate
from sonic_hep.data.miniaod.lost_tracks import find_lost_tracks


@pytest.fixture(scope="module")
def events(small_file) -> ak.Array:
    return uproot.open(small_file)["Events"].arrays()


def test_collections_are_consistent(events):
    n_pf, n_jet = ak.num(events.PFCands_pt), ak.num(events.Jet_pt)
    assert ak.all(n_pf > 300)  # pile-up <μ> = 30 by default
    for jets, members in (("Jet", "JetPFCands"), ("FatJet", "FatJetPFCands")):
        jet_idx, cand_idx = events[f"{members}_jetIdx"], events[f"{members}_pFCandsIdx"]
        assert ak.all((jet_idx >= 0) & (jet_idx < ak.num(events[f"{jets}_pt"])))
        assert ak.all((cand_idx >= 0) & (cand_idx < n_pf))
        # constituents listed jet by jet, as many as each jet says it has
        per_jet = ak.run_lengths(jet_idx)
        assert ak.all(ak.sum(per_jet, axis=1) == ak.sum(events[f"{jets}_nConstituents"], axis=1))
    assert ak.all(events.Jet_pt >= 15) and ak.all(events.FatJet_pt >= 150)
    assert ak.all(events.Jet_pt[:, :-1] >= events.Jet_pt[:, 1:])  # pT-ordered
    assert ak.sum(n_jet) > 100 and ak.sum(ak.num(events.FatJet_pt)) > 0 and ak.sum(ak.num(events.Tau_pt)) > 10
    assert ak.all(np.isfinite(events.PFCands_pt)) and ak.all(events.PFCands_pt > 0)
    assert set(np.unique(ak.flatten(events.PFCands_pdgId)).tolist()) <= {1, 2, 22, 130, -11, 11, -13, 13, -211, 211}
    assert ak.all(events.SV_dlenSig > 3) and ak.all(events.SV_ntracks >= 2)
    assert set(np.unique(ak.flatten(events.Tau_decayMode)).tolist()) <= {0, 1, 10, 11}
    assert ak.all(events.GenMET_pt >= 0)


def test_jets_are_the_sum_of_their_constituents(events):
    e = events[0]
    idx, cand = e.JetPFCands_jetIdx.to_numpy(), e.JetPFCands_pFCandsIdx.to_numpy()
    pt, phi = e.PFCands_pt.to_numpy(), e.PFCands_phi.to_numpy()
    px = np.bincount(idx, pt[cand] * np.cos(phi[cand]), minlength=len(e.Jet_pt))
    py = np.bincount(idx, pt[cand] * np.sin(phi[cand]), minlength=len(e.Jet_pt))
    np.testing.assert_allclose(np.hypot(px, py), e.Jet_pt.to_numpy(), rtol=1e-4)  # AK4 CHS: plain four-vector sum
    eta = e.PFCands_eta.to_numpy()[cand]
    dr = np.hypot(eta - e.Jet_eta.to_numpy()[idx], (phi[cand] - e.Jet_phi.to_numpy()[idx] + np.pi) % (2 * np.pi) - np.pi)
    assert np.quantile(dr, 0.95) < 0.4


def test_truth_labels(events):
    flav = np.unique(ak.flatten(events.Jet_hadronFlavour)).tolist()
    assert 5 in flav and 0 in flav  # ttbar makes b jets
    assert ak.sum(events.Tau_genPartFlav == 5) > 0  # Z→ττ makes genuine τs
    assert ak.sum(ak.num(events.GenVisTau_pt)) > 0
    assert set(np.unique(ak.flatten(events.PFCands_genOrigin)).tolist()) == {0, 1, 2, 3}


def test_same_seed_same_events_other_seed_other_events(tmp_path):
    a = generate(tmp_path / "a.root", 4, seed=3, settings=Settings(pileup=5))
    b = generate(tmp_path / "b.root", 4, seed=3, settings=Settings(pileup=5))
    c = generate(tmp_path / "c.root", 4, seed=4, settings=Settings(pileup=5))
    ta, tb, tc = (uproot.open(p)["Events"].arrays(["PFCands_pt", "Jet_pt"]) for p in (a, b, c))
    assert ak.all(ta.PFCands_pt == tb.PFCands_pt) and ak.all(ta.Jet_pt == tb.Jet_pt)
    assert not ak.all(ak.num(ta.PFCands_pt) == ak.num(tc.PFCands_pt))


def test_no_pileup_means_no_pileup_candidates(tmp_path):
    path = generate(tmp_path / "nopu.root", 3, seed=5, process="wjets", settings=Settings(pileup=0))
    e = uproot.open(path)["Events"].arrays(["PFCands_genOrigin", "Pileup_nPU"])
    assert ak.all(e.Pileup_nPU == 0) and not ak.any(e.PFCands_genOrigin == 3)


def test_puppi_weights_suppress_pileup(events):
    w, charged = ak.flatten(events.PFCands_puppiWeight), ak.flatten(events.PFCands_charge) != 0
    from_pv, pileup = ak.flatten(events.PFCands_fromPV), ak.flatten(events.PFCands_genOrigin) == 3
    central = abs(ak.flatten(events.PFCands_eta)) < 2.5
    assert ak.all(w[charged] == (from_pv[charged] >= 1))  # charged: 1 from the PV, 0 from another vertex
    assert ak.mean(w[charged & pileup]) < 0.2
    neutral = ~charged & central
    assert ak.mean(w[neutral & ~pileup]) > 2 * ak.mean(w[neutral & pileup])


def test_cli_generates_and_rejects_unknown_processes(sonic_cli, tmp_path):
    sonic_cli("data", "generate", "miniaod", "--events", "3", "--output", tmp_path / "x.root", "--seed", "5",
              "--process", "qcd", "--pileup", "0", check=True)
    assert uproot.open(tmp_path / "x.root")["Events"].num_entries == 3
    bad = sonic_cli("data", "generate", "miniaod", "--events", "3", "--output", tmp_path / "y.root", "--process", "higgs")
    assert bad.returncode != 0 and "unknown ['higgs']" in bad.stderr
    assert not (tmp_path / "y.root").exists()


def _particles(pid, charge, pt, eta, phi=0.0, x=0.0):
    n = len(pid)
    pt, eta = np.asarray(pt, float), np.asarray(eta, float)
    px, py, pz = pt * np.cos(phi), pt * np.sin(phi), pt * np.sinh(eta)
    mass = np.where(np.abs(pid) == 13, 0.1057, 0.0)
    return Particles(event=np.zeros(n, int), pid=np.asarray(pid), charge=np.asarray(charge, float), px=px, py=py, pz=pz,
                     e=np.sqrt(px**2 + py**2 + pz**2 + mass**2), x=np.full(n, x), y=np.zeros(n), z=np.zeros(n),
                     origin=np.zeros(n, int), gen=np.arange(n))


def test_detector_response_per_particle_kind():
    rng = np.random.default_rng(1)
    # ν, μ-, soft π+ looping in the tracker, photon, forward neutron, μ+ outside the tracker
    p = _particles([14, 13, 211, 22, 2112, -13], [0, -1, 1, 0, 0, 1], [20, 20, 0.3, 20, 30, 20], [0, 0.5, 1, -1, 4, 2.8],
                   phi=np.array([0, 1, 2, 3, -2, -1]))
    cands = simulate(rng, p)
    made = dict(zip(cands.source.tolist(), cands.pdgId.tolist()))
    assert 0 not in made and 2 not in made and 5 not in made  # ν escapes, soft π curls up, forward μ unseen
    assert made[1] == 13 and made[3] == 22 and made[4] == 1  # μ- is +13 (PDG); HF hadronic candidate
    muon = cands.source == 1
    assert cands.charge[muon] == -1 and abs(cands.pt[muon][0] - 20) < 2 and cands.fromPV[muon] >= 2


def test_displaced_tracks_have_impact_parameters_and_lost_hits():
    rng = np.random.default_rng(2)
    prompt = _particles([211] * 200, [1] * 200, [10] * 200, [0.3] * 200, phi=0.5)
    # produced 4 cm from the beam: beyond the first pixel layer (2.9 cm)
    displaced = _particles([211] * 200, [1] * 200, [10] * 200, [0.3] * 200, phi=0.5, x=4.0)
    cp, cd = simulate(rng, prompt), simulate(rng, displaced)
    tp, td = cp.charge != 0, cd.charge != 0  # the few untracked pions end up in the HCAL
    assert tp.sum() > 150 and td.sum() > 150
    assert np.median(np.abs(cd.dxy[td] / cd.dxyError[td])) > 20 > np.median(np.abs(cp.dxy[tp] / cp.dxyError[tp]))
    assert np.all(cd.lostInnerHits[td] >= 1) and np.mean(cp.lostInnerHits[tp] == -1) > 0.9


def test_lost_tracks_are_the_tracks_no_pf_candidate_carries():
    """Pions the tracker finds but PF leaves out (the tracking-efficiency misses here) become lost tracks above
    0.95 GeV; displaced ones (30 cm, beyond the pixels) with loose quality and no pixel hits; none is a PF track."""
    rng = np.random.default_rng(3)
    prompt = _particles([211] * 400, [1] * 400, [5] * 400, [0.3] * 400, phi=0.5)
    soft = _particles([211] * 100, [1] * 100, [0.8] * 100, [0.3] * 100, phi=0.5)
    displaced = _particles([211] * 400, [1] * 400, [5] * 400, [0.3] * 400, phi=0.5, x=30.0)
    for p, expect in ((prompt, "prompt"), (soft, None), (displaced, "displaced")):
        cands = simulate(rng, p)
        lost = find_lost_tracks(rng, p, cands)
        n_pf_tracks = int((cands.charge != 0).sum())
        if expect is None:
            assert lost.pt.size == 0  # below 0.95 GeV
        elif expect == "prompt":
            assert 0 < lost.pt.size <= 400 - n_pf_tracks and np.all(lost.trkQuality == 4)
            assert np.all(lost.numberOfPixelHits == 4) and np.all(lost.pt > 0.95)
        else:
            assert n_pf_tracks == 0 and 100 < lost.pt.size < 300  # efficiency 0.7 * (1 - 30/60) = 0.35
            assert np.all(lost.trkQuality == 1) and np.all(lost.numberOfPixelHits == 0)
            assert np.all(lost.stripLayers == 9)  # 10 strip layers, one (25.5 cm) inside 30 cm
            assert np.median(np.abs(lost.dxy / lost.dxyError)) > 20


def test_generated_files_hold_lost_tracks(events):
    n = ak.num(events.LostTracks_pt)
    assert ak.sum(n) > 0 and ak.all(events.LostTracks_pt > 0.95) and ak.all(abs(events.LostTracks_eta) < 2.5)
    assert ak.all(events.LostTracks_pt[:, :-1] >= events.LostTracks_pt[:, 1:])  # pT-ordered
