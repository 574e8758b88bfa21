"""Hadronic τ candidates: a simplified hadrons-plus-strips (HPS) reconstruction, vectorised.

Seeds are AK4 jets with pT > 18 GeV and |η| < 2.3. In each seed jet:

* the leading charged constituent (pT > 5 GeV) defines the axis; the signal cone is
  R_sig = min(max(3 GeV / pT_jet, 0.05), 0.10) around it;
* signal charged hadrons: the (at most three) leading charged constituents with pT > 0.5 GeV inside
  R_sig; one or three of them with total charge ±1 make a candidate (two-prong modes are not kept);
* the strip: photon constituents with pT > 0.5 GeV within |Δη| < 0.10, |Δφ| < 0.25 of the axis; it
  counts as a π0 when it carries more than 2.5 GeV (so decay modes are 0, 1, 10 and 11 — like CMS
  since 2017, where mode 2 is merged into 1);
* the τ is the sum of the signal charged hadrons and the strip; kept if pT > 20 GeV, |η| < 2.3.

Isolation sums and the other quantities CMS's DeepTau takes from ``pat::Tau`` (impact parameters,
flight length of three-prong decays, strip and cone shapes, electromagnetic fractions) are computed
from the PF candidates around the τ and written as ``Tau_*`` branches; their names follow DeepTau's
tau-block inputs. ``Tau_genPartFlav`` is the truth (CMS codes: 5 hadronic τ, 1/2 prompt e/μ, 3/4
e/μ from τ, 0 jet).
"""

from __future__ import annotations

import numpy as np

from .detector import PFCandidates
from .jets import Jets
from ...modules.common.kinematics import delta_phi, rank_within
from .matching import nearest, same_event_pairs

TAU_MASS = 1.77686


def _group_sum(groups: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    return np.bincount(groups, values, minlength=n)


def _row_rank(groups: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Rank (0 = largest ``key``) of each row within its group, in the rows' own order."""
    order, rank_sorted = rank_within(groups, key)
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = rank_sorted
    return rank


def _vertex_fit(points: np.ndarray, directions: np.ndarray, owner: np.ndarray, n: int) -> np.ndarray:
    """Per owner, the point closest (least squares) to its straight lines ``points + t·directions``."""
    u = directions / np.linalg.norm(directions, axis=1, keepdims=True)
    proj = np.eye(3)[None] - u[:, :, None] * u[:, None, :]
    a = np.zeros((n, 3, 3))
    b = np.zeros((n, 3))
    np.add.at(a, owner, proj)
    np.add.at(b, owner, np.einsum("kij,kj->ki", proj, points))
    a += np.eye(3)[None] * 1e-12
    return np.linalg.solve(a, b[:, :, None])[:, :, 0]


def reconstruct_taus(cands: PFCandidates, jets: Jets, n_events: int, gen_vis: dict[str, np.ndarray],
                     gen_leptons: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """τ candidates of a batch: a dict of flat ``Tau_*`` arrays (without prefix) plus ``event``.

    Args:
        gen_vis: hadronic generator τs (``event, pt, eta, phi``), visible part.
        gen_leptons: final-state prompt e/μ (``event, pt, eta, phi, flav``) with CMS genPartFlav codes.
    """
    seed = (jets.pt > 18.0) & (np.abs(jets.eta) < 2.3)
    rows = np.flatnonzero(seed[jets.constituents_jet])
    jet, cand = jets.constituents_jet[rows], jets.constituents_cand[rows]
    charged = (cands.charge[cand] != 0) & (cands.pt[cand] > 0.5)
    # leading charged constituent per seed jet
    ch_rows = np.flatnonzero(charged)
    lead_rank = _row_rank(jet[ch_rows], cands.pt[cand[ch_rows]])
    lead_of = np.full(jets.pt.size, -1, dtype=np.int64)
    lead_of[jet[ch_rows[lead_rank == 0]]] = cand[ch_rows[lead_rank == 0]]
    has_lead = (lead_of >= 0) & (cands.pt[np.maximum(lead_of, 0)] > 5.0)
    r_sig = np.clip(3.0 / np.maximum(jets.pt, 1e-3), 0.05, 0.10)
    ok = has_lead[jet]
    jet, cand, charged = jet[ok], cand[ok], charged[ok]
    lead = lead_of[jet]
    deta = cands.eta[cand] - cands.eta[lead]
    dphi = delta_phi(cands.phi[cand], cands.phi[lead])
    in_cone = np.hypot(deta, dphi) < r_sig[jet]
    sig_ch = charged & in_cone
    sig_ch[sig_ch] = _row_rank(jet[sig_ch], cands.pt[cand[sig_ch]]) < 3
    photon = (cands.pdgId[cand] == 22) & (cands.pt[cand] > 0.5) & (np.abs(deta) < 0.10) & (np.abs(dphi) < 0.25)
    n_jets = jets.pt.size
    n_ch = np.bincount(jet[sig_ch], minlength=n_jets)
    q = _group_sum(jet[sig_ch], cands.charge[cand[sig_ch]], n_jets)
    strip_pt = _group_sum(jet[photon], cands.pt[cand[photon]], n_jets)
    n_pi0 = (strip_pt > 2.5).astype(np.int64)
    signal = sig_ch | (photon & (n_pi0[jet] > 0))
    comp = {}
    for name, values in (("px", cands.px), ("py", cands.py), ("pz", cands.pz), ("e", cands.energy)):
        comp[name] = _group_sum(jet[signal], values[cand[signal]], n_jets)
    pt = np.hypot(comp["px"], comp["py"])
    with np.errstate(divide="ignore", invalid="ignore"):
        eta = np.arcsinh(comp["pz"] / pt)
    good = has_lead & ((n_ch == 1) | (n_ch == 3)) & (np.abs(q) == 1) & (pt > 20.0) & (np.abs(eta) < 2.3)
    taus = np.flatnonzero(good)  # global jet index of each τ
    slot = np.full(n_jets, -1, dtype=np.int64)
    slot[taus] = np.arange(taus.size)
    n = taus.size
    t_pt, t_eta = pt[taus], eta[taus]
    t_phi = np.arctan2(comp["py"][taus], comp["px"][taus])
    p2 = comp["px"][taus] ** 2 + comp["py"][taus] ** 2 + comp["pz"][taus] ** 2
    t_mass = np.sqrt(np.maximum(comp["e"][taus] ** 2 - p2, 0.0))
    dm = 5 * (n_ch[taus] - 1) + n_pi0[taus]
    lead_c = lead_of[taus]
    event = jets.event[taus]
    first_jet = np.searchsorted(jets.event, np.arange(n_events))
    out: dict[str, np.ndarray] = {
        "event": event, "pt": t_pt, "eta": t_eta, "phi": t_phi, "mass": t_mass, "charge": q[taus].astype(np.int32),
        "decayMode": dm.astype(np.int32), "jetIdx": (taus - first_jet[event]).astype(np.int32),
        "leadTkPtOverTauPt": cands.pt[lead_c] / t_pt,
        "leadTkDeltaEta": cands.eta[lead_c] - t_eta, "leadTkDeltaPhi": delta_phi(cands.phi[lead_c], t_phi),
    }

    # --- signal-candidate shapes ---------------------------------------------------------------
    srow = signal & (slot[jet] >= 0)
    s_tau, s_cand = slot[jet[srow]], cand[srow]
    s_pt = cands.pt[s_cand]
    s_deta = cands.eta[s_cand] - t_eta[s_tau]
    s_dphi = delta_phi(cands.phi[s_cand], t_phi[s_tau])
    s_dr = np.hypot(s_deta, s_dphi)
    s_photon = cands.pdgId[s_cand] == 22
    sum_sig = _group_sum(s_tau, s_pt, n)
    strip_sum = _group_sum(s_tau[s_photon], s_pt[s_photon], n)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["ptWeightedDetaStrip"] = np.nan_to_num(_group_sum(s_tau[s_photon], (s_pt * np.abs(s_deta))[s_photon], n)
                                                   / strip_sum)
        out["ptWeightedDphiStrip"] = np.nan_to_num(_group_sum(s_tau[s_photon], (s_pt * np.abs(s_dphi))[s_photon], n)
                                                   / strip_sum)
        out["ptWeightedDrSignal"] = np.nan_to_num(_group_sum(s_tau, s_pt * s_dr, n) / sum_sig)
    out["nPhotons"] = np.bincount(s_tau[s_photon], minlength=n).astype(np.int32)
    out["photonPtSumOutsideSignalCone"] = _group_sum(s_tau[s_photon], (s_pt * (s_dr > r_sig[taus][s_tau]))[s_photon], n)
    s_e = cands.energy[s_cand]
    hcal = np.where(s_photon, 0.0, cands.hcalFraction[s_cand])
    e_sum = _group_sum(s_tau, s_e, n)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["emFraction"] = np.nan_to_num(_group_sum(s_tau[s_photon], s_e[s_photon], n) / e_sum)
        out["eRatio"] = np.nan_to_num(_group_sum(s_tau, s_e * (1.0 - hcal), n) / e_sum)

    # --- isolation: every candidate of the event within ΔR < 0.8 ----------------------------------
    i, j = same_event_pairs(event, cands.event, n_events)
    deta = cands.eta[j] - t_eta[i]
    dphi = delta_phi(cands.phi[j], t_phi[i])
    dr = np.hypot(deta, dphi)
    near = dr < 0.8
    i, j, dr = i[near], j[near], dr[near]
    in_signal = np.isin(i * cands.pt.size + j, s_tau * cands.pt.size + s_cand)
    iso = ~in_signal & (cands.pt[j] > 0.5)
    ch_pv = iso & (cands.charge[j] != 0) & (cands.fromPV[j] >= 2)
    ch_pu = (cands.charge[j] != 0) & (cands.fromPV[j] == 0) & (cands.pt[j] > 0.5)
    gamma = iso & (cands.pdgId[j] == 22)
    w = cands.puppiWeight[j]
    for suffix, cone in (("", 0.5), ("dR03", 0.3)):
        c = dr < cone
        out[f"chargedIsoPtSum{suffix}"] = _group_sum(i[ch_pv & c], cands.pt[j[ch_pv & c]], n)
        out[f"neutralIsoPtSum{suffix}"] = _group_sum(i[gamma & c], cands.pt[j[gamma & c]], n)
        out[f"neutralIsoPtSumWeight{suffix}"] = _group_sum(i[gamma & c], (cands.pt[j] * w)[gamma & c], n)
    out["footprintCorrection"] = np.zeros(n)
    out["puCorrPtSum"] = _group_sum(i[ch_pu], cands.pt[j[ch_pu]], n)
    iso05 = iso & (dr < 0.5) & ((cands.charge[j] != 0) | (cands.pdgId[j] == 22) | (cands.pdgId[j] == 130))
    iso_sum = _group_sum(i[iso05], cands.pt[j[iso05]], n)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["ptWeightedDrIsolation"] = np.nan_to_num(_group_sum(i[iso05], (cands.pt[j] * dr)[iso05], n) / iso_sum)

    # --- impact parameters (leading track) and flight length (three-prong vertex) ------------------
    out["dxy"], out["dxyErr"] = cands.dxy[lead_c], cands.dxyError[lead_c]
    out["dz"], out["dzErr"] = cands.dz[lead_c], cands.dzError[lead_c]
    out["dxyPcaX"], out["dxyPcaY"], out["dxyPcaZ"] = cands.vx[lead_c], cands.vy[lead_c], cands.vz[lead_c]
    out["ip3d"] = np.hypot(cands.dxy[lead_c], cands.dz[lead_c]) * np.sign(cands.dxy[lead_c])
    out["ip3dErr"] = np.hypot(cands.dxyError[lead_c], cands.dzError[lead_c])
    out["leadingTrackNormChi2"] = cands.trkChi2[lead_c]
    three = np.flatnonzero(sig_ch & (slot[jet] >= 0) & (n_ch[jet] == 3))
    flight = np.zeros((n, 3))
    flight_sig = np.zeros(n)
    has_sv = dm >= 10
    if three.size:
        owner = slot[jet[three]]
        tc = cand[three]
        points = np.stack([cands.vx[tc], cands.vy[tc], cands.vz[tc]], axis=1)
        dirs = np.stack([cands.px[tc], cands.py[tc], cands.pz[tc]], axis=1)
        fitted = _vertex_fit(points, dirs, owner, n)
        flight[has_sv] = fitted[has_sv]
        err = np.sqrt(_group_sum(owner, cands.dxyError[tc] ** 2 + cands.dzError[tc] ** 2, n) / 3.0)
        flight_sig[has_sv] = np.linalg.norm(flight[has_sv], axis=1) / err[has_sv]
    out["hasSecondaryVertex"] = has_sv.astype(np.int32)
    out["flightLengthX"], out["flightLengthY"], out["flightLengthZ"] = flight.T
    out["flightLengthSig"] = flight_sig
    # Gottfried–Jackson angle minus its kinematic maximum (three-prong decays only)
    p_vis = np.sqrt(p2)
    with np.errstate(divide="ignore", invalid="ignore"):
        mom = np.stack([comp["px"][taus], comp["py"][taus], comp["pz"][taus]], axis=1)
        cos_gj = (flight * mom).sum(axis=1) / (np.linalg.norm(flight, axis=1) * p_vis)
        gj = np.arccos(np.clip(cos_gj, -1, 1))
        arg = (TAU_MASS**2 - t_mass**2) / (2 * TAU_MASS * p_vis)
        gj_max = np.arcsin(np.clip(arg, -1, 1))
    out["gjAngleDiff"] = np.where(has_sv & np.isfinite(gj), gj - gj_max, 0.0)
    out["insideEcalCrack"] = ((np.abs(t_eta) > 1.46) & (np.abs(t_eta) < 1.558)).astype(np.int32)
    out["etaAtEcalEntranceLeadChargedCand"] = cands.eta[lead_c]

    # --- truth ---------------------------------------------------------------------------------
    flav = np.zeros(n, dtype=np.int32)
    vis_pt = np.zeros(n)
    if gen_leptons["pt"].size:
        order = np.argsort(gen_leptons["event"], kind="stable")
        lep = {k: v[order] for k, v in gen_leptons.items()}
        best, _ = nearest(event, t_eta, t_phi, lep["event"], lep["eta"], lep["phi"], 0.2, n_events)
        hit = (best >= 0)
        hit[hit] = lep["pt"][best[hit]] > 8.0
        flav[hit] = lep["flav"][best[hit]]
    if gen_vis["pt"].size:
        order = np.argsort(gen_vis["event"], kind="stable")
        vis = {k: v[order] for k, v in gen_vis.items()}
        best, _ = nearest(event, t_eta, t_phi, vis["event"], vis["eta"], vis["phi"], 0.2, n_events)
        hit = best >= 0
        hit[hit] = vis["pt"][best[hit]] > 15.0
        flav[hit] = 5
        vis_pt[hit] = vis["pt"][best[hit]]
    out["genPartFlav"] = flav
    out["genVisPt"] = vis_pt
    return out
