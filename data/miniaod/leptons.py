"""Reconstructed electrons and muons (``Electron_*``, ``Muon_*``), with the detector-level variables
that DeepTau's e/γ and μ blocks read (CMS's ``ele_*`` and ``muon_*`` inputs).

Why: a τ identification against electrons and muons needs what a reco lepton carries beyond its PF
candidate — the calorimeter energy against the track momentum (E/p), bremsstrahlung, the hadronic
leakage and shower width for an electron, the muon stations crossed for a muon. Without these
collections DeepTau's reco-lepton channels were zero.

Model (documented, simple, vectorised; units GeV, cm):

* **Electrons**: every PF electron (pT > 5 GeV), plus charged hadrons (pT > 10 GeV, |η| < 2.5) that
  the electron reconstruction also picks up, with probability 4 % + 20 % × (ECAL fraction of their
  energy): a τ's leading pion that showers early in the ECAL looks like an electron, but with
  E/p = ECAL fraction, hadronic energy behind it and a wider shower. For a true electron the
  bremsstrahlung fraction f ~ Beta(1.2, 2.5): momentum at the outer tracker = p(1 − f), the
  electron cluster carries E(1 − f), the brem photons' clusters E·f; E smeared by 3 %/√E ⊕ 1 %;
  σ_ηη 0.009 (barrel, |η| < 1.479) or 0.027 (endcap), ×1.7 for hadrons; H = E·(hcal fraction) for
  hadrons, 1 % of E for electrons; track–cluster Δη, Δφ ~ 0.002 / 0.01 (electrons), 0.01 / 0.03
  (hadrons); GSF track: 10–14 valid hits, χ²/ndf from the PF track.
* **Muons**: every PF muon (pT > 3 GeV, |η| < 2.4), plus hadrons punching through (charged, p > 5
  GeV, probability 0.3 %). Stations: DT for |η| < 1.2, CSC for 0.9 < |η| < 2.4, RPC for |η| < 1.6; a
  muon reaches station k (k = 1…4) if p > 2.5 + k GeV (a punch-through hadron reaches station 1 only),
  matched with 95 % efficiency; hits per matched station ~ Poisson(10) DT (6 in station 4), Poisson(6)
  CSC, 1 + Bernoulli(½) RPC; a muon has a global track (χ²/ndf, 25-44 hits) when ≥ 2 stations match.
  Segment compatibility ~ Beta(8, 1.5) for muons, Beta(1.5, 4) for hadrons; calorimeter compatibility
  (MIP-like deposits) ~ Beta(6, 2) for muons, Beta(2, 5) for hadrons; PF ECAL energy ~ Gamma(2, 0.15)
  GeV for muons, the ECAL part of a hadron's energy.

``genPartFlav`` follows NanoAOD: 1 prompt, 15 from a τ, 5 heavy-flavour decay (electrons and muons),
0 for hadrons and pile-up.
"""

from __future__ import annotations

import numpy as np

from .detector import PFCandidates, Particles

#: muon-station systems and their |η| coverage
STATIONS = {"DT": (0.0, 1.2), "CSC": (0.9, 2.4), "RPC": (0.0, 1.6)}


def _gen_flav(origin: np.ndarray, is_lepton: np.ndarray) -> np.ndarray:
    """NanoAOD ``genPartFlav`` from the generator origin (0 prompt, 1 heavy flavour, 2 τ, 3 pile-up)."""
    flav = np.select([origin == 0, origin == 2, origin == 1], [1, 15, 5], 0)
    return np.where(is_lepton, flav, 0).astype(np.int32)


def _common(c: PFCandidates, rows: np.ndarray) -> dict[str, np.ndarray]:
    return {"event": c.event[rows], "pt": c.pt[rows], "eta": c.eta[rows], "phi": c.phi[rows],
            "charge": c.charge[rows].astype(np.int32), "dxy": c.dxy[rows], "dxyErr": c.dxyError[rows],
            "dz": c.dz[rows], "dzErr": c.dzError[rows], "pfCandIdx": rows}


def electrons(rng: np.random.Generator, c: PFCandidates) -> dict[str, np.ndarray]:
    """Flat ``Electron_*`` arrays of a batch (``event`` and ``pfCandIdx``: global PF-candidate index)."""
    apid = np.abs(c.pdgId)
    ecal = 1.0 - c.hcalFraction
    hadron = (apid == 211) & (c.pt > 10.0) & (np.abs(c.eta) < 2.5)
    picked = hadron & (rng.random(c.pt.size) < 0.04 + 0.20 * ecal)
    rows = np.flatnonzero(((apid == 11) & (c.pt > 5.0)) | picked)
    out = _common(c, rows)
    n = rows.size
    is_e = apid[rows] == 11
    p = c.pt[rows] * np.cosh(c.eta[rows])
    brem = np.where(is_e, rng.beta(1.2, 2.5, n), rng.beta(1.0, 8.0, n))
    energy = np.where(is_e, p, p * ecal[rows]) * (1 + rng.normal(0, 1, n) * np.hypot(0.03 / np.sqrt(p), 0.01))
    energy = np.maximum(energy, 0.05)
    barrel = np.abs(c.eta[rows]) < 1.479
    p_out = p * (1.0 - brem)
    seed = energy * (1.0 - 0.7 * brem)
    ele_cluster = energy * (1.0 - brem)
    wide = np.where(is_e, 1.0, 1.7)
    d_eta, d_phi = np.where(is_e, 0.002, 0.01), np.where(is_e, 0.01, 0.03)
    out.update({
        "ecalEnergy": energy, "ecalEnergyError": energy * np.hypot(0.03 / np.sqrt(energy), 0.01),
        "trackMomentumAtVtx": p, "trackMomentumAtCalo": p_out, "trackMomentumOut": p_out,
        "trackMomentumAtEleClus": p_out, "trackMomentumAtVtxWithConstraint": p * (1 + rng.normal(0, 0.01, n)),
        "eSuperClusterOverP": energy / p, "eSeedClusterOverP": seed / p, "eSeedClusterOverPout": seed / p_out,
        "eEleClusterOverPout": ele_cluster / p_out,
        "deltaEtaSuperClusterTrackAtVtx": rng.normal(0, 1, n) * d_eta,
        "deltaEtaSeedClusterTrackAtCalo": rng.normal(0, 1, n) * d_eta,
        "deltaEtaEleClusterTrackAtCalo": rng.normal(0, 1, n) * d_eta,
        "deltaPhiEleClusterTrackAtCalo": rng.normal(0, 1, n) * d_phi,
        "deltaPhiSuperClusterTrackAtVtx": rng.normal(0, 1, n) * d_phi,
        "deltaPhiSeedClusterTrackAtCalo": rng.normal(0, 1, n) * d_phi,
        "earlyBrem": brem * rng.random(n), "lateBrem": brem * rng.random(n),
        "sigmaEtaEta": np.where(barrel, 0.009, 0.027) * wide * np.exp(rng.normal(0, 0.15, n)),
        "hadEnergy": np.where(is_e, 0.01, c.hcalFraction[rows]) * p,
        "mvaDeltaEta": np.abs(rng.normal(0, 1, n)) * d_eta,
        "gsfTrackNormChi2": np.where(is_e, 1.0 + 2.0 * brem, 1.0) * c.trkChi2[rows],
        "gsfTrackValidHits": rng.integers(10, 15, n).astype(np.int32),
        "gsfTrackPt": c.pt[rows] * (1.0 - 0.5 * brem), "gsfTrackPtError": c.pt[rows] * (0.02 + 0.2 * brem),
        "hasClosestCtfTrack": (rng.random(n) < np.where(is_e, 0.8, 1.0)).astype(np.int32),
        "closestCtfTrackNormChi2": c.trkChi2[rows], "closestCtfTrackValidHits": rng.integers(8, 15, n).astype(np.int32),
        "ccEleEnergy": ele_cluster, "ccGammaEnergy": energy * brem,
        "ccNGamma": rng.poisson(3.0 * brem).astype(np.int32),
    })
    return out


def muons(rng: np.random.Generator, c: PFCandidates) -> dict[str, np.ndarray]:
    """Flat ``Muon_*`` arrays of a batch (``event`` and ``pfCandIdx``: global PF-candidate index)."""
    apid = np.abs(c.pdgId)
    p_all = c.pt * np.cosh(c.eta)
    punch = (apid == 211) & (p_all > 5.0) & (np.abs(c.eta) < 2.4) & (rng.random(c.pt.size) < 0.003)
    rows = np.flatnonzero(((apid == 13) & (c.pt > 3.0) & (np.abs(c.eta) < 2.4)) | punch)
    out = _common(c, rows)
    n = rows.size
    is_mu = apid[rows] == 13
    p, abs_eta = p_all[rows], np.abs(c.eta[rows])
    matched_any = np.zeros(n, dtype=np.int64)
    for system, (low, high) in STATIONS.items():
        inside = (abs_eta >= low) & (abs_eta < high)
        for k in range(1, 5):
            reach = np.where(is_mu, p > 2.5 + k, k == 1)
            match = inside & reach & (rng.random(n) < 0.95)
            matched_any += match
            if system == "DT":
                hits = rng.poisson(10 if k < 4 else 6, n)
            elif system == "CSC":
                hits = rng.poisson(6, n)
            else:
                hits = 1 + rng.integers(0, 2, n)
            out[f"nMatches{system}{k}"] = match.astype(np.int32)
            out[f"nHits{system}{k}"] = np.where(match, hits, 0).astype(np.int32)
    global_track = is_mu & (matched_any >= 2)
    out.update({
        "normalizedChi2": np.where(global_track, c.trkChi2[rows] * (1 + 0.2 * rng.random(n)), -1.0),
        "numberOfValidHits": np.where(global_track, rng.integers(25, 45, n), 0).astype(np.int32),
        "segmentCompatibility": np.where(is_mu, rng.beta(8.0, 1.5, n), rng.beta(1.5, 4.0, n)),
        "caloCompatibility": np.where(is_mu, rng.beta(6.0, 2.0, n), rng.beta(2.0, 5.0, n)),
        "pfEcalEnergy": np.where(is_mu, rng.gamma(2.0, 0.15, n), p * (1.0 - c.hcalFraction[rows])),
        "isGlobal": global_track.astype(np.int32),
    })
    return out


def reconstruct_leptons(rng: np.random.Generator, p: Particles,
                        c: PFCandidates) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """``(electrons, muons)`` of a batch, each with ``genPartFlav`` from the particle behind it."""
    e, m = electrons(rng, c), muons(rng, c)
    for out, pid in ((e, 11), (m, 13)):
        source = c.source[out["pfCandIdx"]]
        out["genPartFlav"] = _gen_flav(p.origin[source], np.abs(p.pid[source]) == pid)
    return e, m
