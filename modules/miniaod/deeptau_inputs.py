"""DeepTau (v2) inputs for all τs of an event: 43 τ-level variables, and inner (11 × 11 cells of
0.02 × 0.02) and outer (21 × 21 cells of 0.05 × 0.05) η–φ grids around each τ, with e/γ (86), μ (64)
and hadron (38) variables per cell — the names, order and sizes of CMS's ``DeepTauId``
(``dnn_inputs_v2``), channels-last as CMS feeds TensorFlow.

Each cell holds, per object type, the highest-pT object in it (CMS's ``fillGrids``); the four common
variables (ρ, τ pT, τ η, ECAL-crack flag) are set in cells where the block has an object. Types:
PF electrons, photons, muons, charged and neutral hadrons, and CMS's reconstructed electrons
(``ele_*``: cluster energies, E/p, brem, shower shape, GSF track) and muons (``muon_*``: global-track
quality, segment and calo compatibility, matches and hits per muon station) from the ``Electron`` and
``Muon`` collections (:data:`ELECTRON_FIELDS`, :data:`MUON_FIELDS`); without them those channels are
0, as for a τ with no reco lepton near it. Values are raw (CMS scales them in the producer; the
project's model standardises them in its first layer).

The build is columnar: :func:`batch_deeptau_inputs` takes the τs and objects of many events flattened
(:class:`~.columns.Flat`) and pairs each τ only with its own event's objects, so a batch of events costs a
few numpy calls instead of a few per event; :func:`deeptau_inputs` is the same build for one event. Every
value is computed elementwise, so a τ's inputs are bit-identical whatever batch it comes in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ..common.kinematics import delta_phi
from .columns import Flat, event_pairs

COMMON = ("rho", "tau_pt", "tau_eta", "tau_inside_ecal_crack")
_TRACK = ("lostInnerHits", "numberOfPixelHits", "vertex_dx", "vertex_dy", "vertex_dz", "vertex_dx_tauFL",
          "vertex_dy_tauFL", "vertex_dz_tauFL", "hasTrackDetails", "dxy", "dxy_sig", "dz", "dz_sig",
          "track_chi2_ndof", "track_ndof")

TAU_BLOCK = (
    "rho", "tau_pt", "tau_eta", "tau_mass", "tau_E_over_pt", "tau_charge", "tau_n_charged_prongs",
    "tau_n_neutral_prongs", "chargedIsoPtSum", "chargedIsoPtSumdR03_over_dR05", "footprintCorrection",
    "neutralIsoPtSum", "neutralIsoPtSumWeight_over_neutralIsoPtSum", "neutralIsoPtSumWeightdR03_over_neutralIsoPtSum",
    "neutralIsoPtSumdR03_over_dR05", "photonPtSumOutsideSignalCone", "puCorrPtSum", "tau_dxy_valid", "tau_dxy",
    "tau_dxy_sig", "tau_ip3d_valid", "tau_ip3d", "tau_ip3d_sig", "tau_dz", "tau_dz_sig_valid", "tau_dz_sig",
    "tau_flightLength_x", "tau_flightLength_y", "tau_flightLength_z", "tau_flightLength_sig",
    "tau_pt_weighted_deta_strip", "tau_pt_weighted_dphi_strip", "tau_pt_weighted_dr_signal",
    "tau_pt_weighted_dr_iso", "tau_leadingTrackNormChi2", "tau_e_ratio_valid", "tau_e_ratio",
    "tau_gj_angle_diff_valid", "tau_gj_angle_diff", "tau_n_photons", "tau_emFraction", "tau_inside_ecal_crack",
    "leadChargedCand_etaAtEcalEntrance_minus_tau_eta")

EGAMMA_BLOCK = COMMON + tuple(f"pfCand_ele_{v}" for v in (
    "valid", "rel_pt", "deta", "dphi", "pvAssociationQuality", "puppiWeight", "charge") + _TRACK) + tuple(
    f"ele_{v}" for v in (
        "valid", "rel_pt", "deta", "dphi", "cc_valid", "cc_ele_rel_energy", "cc_gamma_rel_energy", "cc_n_gamma",
        "rel_trackMomentumAtVtx", "rel_trackMomentumAtCalo", "rel_trackMomentumOut", "rel_trackMomentumAtEleClus",
        "rel_trackMomentumAtVtxWithConstraint", "rel_ecalEnergy", "ecalEnergy_sig", "eSuperClusterOverP",
        "eSeedClusterOverP", "eSeedClusterOverPout", "eEleClusterOverPout", "deltaEtaSuperClusterTrackAtVtx",
        "deltaEtaSeedClusterTrackAtCalo", "deltaEtaEleClusterTrackAtCalo", "deltaPhiEleClusterTrackAtCalo",
        "deltaPhiSuperClusterTrackAtVtx", "deltaPhiSeedClusterTrackAtCalo", "mvaInput_earlyBrem",
        "mvaInput_lateBrem", "mvaInput_sigmaEtaEta", "mvaInput_hadEnergy", "mvaInput_deltaEta",
        "gsfTrack_normalizedChi2", "gsfTrack_numberOfValidHits", "rel_gsfTrack_pt", "gsfTrack_pt_sig",
        "has_closestCtfTrack", "closestCtfTrack_normalizedChi2", "closestCtfTrack_numberOfValidHits")) + tuple(
    f"pfCand_gamma_{v}" for v in (
        "valid", "rel_pt", "deta", "dphi", "pvAssociationQuality", "fromPV", "puppiWeight", "puppiWeightNoLep")
    + _TRACK)

MUON_BLOCK = COMMON + tuple(f"pfCand_muon_{v}" for v in (
    "valid", "rel_pt", "deta", "dphi", "pvAssociationQuality", "fromPV", "puppiWeight", "charge") + _TRACK) + tuple(
    f"muon_{v}" for v in (
        "valid", "rel_pt", "deta", "dphi", "dxy", "dxy_sig", "normalizedChi2_valid", "normalizedChi2",
        "numberOfValidHits", "segmentCompatibility", "caloCompatibility", "pfEcalEnergy_valid", "rel_pfEcalEnergy",
        *(f"n_{what}_{det}_{i}" for what in ("matches", "hits") for det in ("DT", "CSC", "RPC") for i in range(1, 5))))

HADRON_BLOCK = COMMON + tuple(f"pfCand_chHad_{v}" for v in (
    "valid", "rel_pt", "deta", "dphi", "leadChargedHadrCand", "pvAssociationQuality", "fromPV", "puppiWeight",
    "puppiWeightNoLep", "charge") + _TRACK + ("hcalFraction", "rawCaloFraction")) + tuple(
    f"pfCand_nHad_{v}" for v in ("valid", "rel_pt", "deta", "dphi", "puppiWeight", "puppiWeightNoLep",
                                  "hcalFraction"))

BLOCKS = {"egamma": EGAMMA_BLOCK, "muon": MUON_BLOCK, "hadrons": HADRON_BLOCK}
GRIDS = {"inner": (11, 0.02), "outer": (21, 0.05)}

#: object types of the cells: PF candidates by |pdgId|; the reco leptons ("ele", "muon") by collection
TYPES = {"pfCand_ele": 11, "pfCand_gamma": 22, "pfCand_muon": 13, "pfCand_chHad": 211, "pfCand_nHad": 130,
         "ele": 0, "muon": 0}
#: reco-lepton collections read for the ``ele_*`` and ``muon_*`` channels
LEPTON_PREFIX = {"Electron": "ele", "Muon": "muon"}

_STATIONS = tuple(f"{system}{k}" for system in ("DT", "CSC", "RPC") for k in range(1, 5))
ELECTRON_FIELDS = (
    "pt", "eta", "phi", "ecalEnergy", "ecalEnergyError", "trackMomentumAtVtx", "trackMomentumAtCalo",
    "trackMomentumOut", "trackMomentumAtEleClus", "trackMomentumAtVtxWithConstraint", "eSuperClusterOverP",
    "eSeedClusterOverP", "eSeedClusterOverPout", "eEleClusterOverPout", "deltaEtaSuperClusterTrackAtVtx",
    "deltaEtaSeedClusterTrackAtCalo", "deltaEtaEleClusterTrackAtCalo", "deltaPhiEleClusterTrackAtCalo",
    "deltaPhiSuperClusterTrackAtVtx", "deltaPhiSeedClusterTrackAtCalo", "earlyBrem", "lateBrem", "sigmaEtaEta",
    "hadEnergy", "mvaDeltaEta", "gsfTrackNormChi2", "gsfTrackValidHits", "gsfTrackPt", "gsfTrackPtError",
    "hasClosestCtfTrack", "closestCtfTrackNormChi2", "closestCtfTrackValidHits", "ccEleEnergy", "ccGammaEnergy",
    "ccNGamma")
MUON_FIELDS = ("pt", "eta", "phi", "dxy", "dxyErr", "normalizedChi2", "numberOfValidHits", "segmentCompatibility",
               "caloCompatibility", "pfEcalEnergy", *(f"nMatches{s}" for s in _STATIONS),
               *(f"nHits{s}" for s in _STATIONS))

PF_FIELDS = ("pt", "eta", "phi", "charge", "pdgId", "dxy", "dz", "dxyError", "dzError", "vx", "vy", "vz",
             "puppiWeight", "fromPV", "pvAssocQuality", "lostInnerHits", "numberOfPixelHits", "trkChi2",
             "hcalFraction")
TAU_FIELDS = ("pt", "eta", "phi", "mass", "charge", "decayMode", "leadTkDeltaEta", "leadTkDeltaPhi",
              "chargedIsoPtSum", "chargedIsoPtSumdR03", "footprintCorrection", "neutralIsoPtSum",
              "neutralIsoPtSumWeight", "neutralIsoPtSumWeightdR03", "neutralIsoPtSumdR03",
              "photonPtSumOutsideSignalCone", "puCorrPtSum", "dxy", "dxyErr", "ip3d", "ip3dErr", "dz", "dzErr",
              "hasSecondaryVertex", "flightLengthX", "flightLengthY", "flightLengthZ", "flightLengthSig",
              "ptWeightedDetaStrip", "ptWeightedDphiStrip", "ptWeightedDrSignal", "ptWeightedDrIsolation",
              "leadingTrackNormChi2", "eRatio", "gjAngleDiff", "nPhotons", "emFraction", "insideEcalCrack",
              "etaAtEcalEntranceLeadChargedCand")


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / den, 0.0)


def tau_block(tau: Mapping[str, np.ndarray], rho: float | np.ndarray) -> np.ndarray:
    """``[taus, 43]`` float32: CMS's τ-level inputs, raw; ``rho``: the event's ρ, or each τ's event's ρ."""
    pt, eta, mass = tau["pt"].astype(np.float64), tau["eta"], tau["mass"]
    energy = np.sqrt((pt * np.cosh(eta)) ** 2 + mass**2)
    dm = tau["decayMode"]
    sv = tau["hasSecondaryVertex"] > 0
    v = {
        "rho": np.broadcast_to(np.asarray(rho, dtype=np.float64), pt.shape), "tau_pt": pt, "tau_eta": eta,
        "tau_mass": mass, "tau_E_over_pt": energy / pt,
        "tau_charge": tau["charge"], "tau_n_charged_prongs": dm // 5 + 1, "tau_n_neutral_prongs": dm % 5,
        "chargedIsoPtSum": tau["chargedIsoPtSum"],
        "chargedIsoPtSumdR03_over_dR05": _ratio(tau["chargedIsoPtSumdR03"], tau["chargedIsoPtSum"]),
        "footprintCorrection": tau["footprintCorrection"], "neutralIsoPtSum": tau["neutralIsoPtSum"],
        "neutralIsoPtSumWeight_over_neutralIsoPtSum": _ratio(tau["neutralIsoPtSumWeight"], tau["neutralIsoPtSum"]),
        "neutralIsoPtSumWeightdR03_over_neutralIsoPtSum": _ratio(tau["neutralIsoPtSumWeightdR03"],
                                                                 tau["neutralIsoPtSum"]),
        "neutralIsoPtSumdR03_over_dR05": _ratio(tau["neutralIsoPtSumdR03"], tau["neutralIsoPtSum"]),
        "photonPtSumOutsideSignalCone": tau["photonPtSumOutsideSignalCone"], "puCorrPtSum": tau["puCorrPtSum"],
        "tau_dxy_valid": np.ones(pt.size), "tau_dxy": tau["dxy"], "tau_dxy_sig": _ratio(np.abs(tau["dxy"]), tau["dxyErr"]),
        "tau_ip3d_valid": np.ones(pt.size), "tau_ip3d": tau["ip3d"],
        "tau_ip3d_sig": _ratio(np.abs(tau["ip3d"]), tau["ip3dErr"]), "tau_dz": tau["dz"],
        "tau_dz_sig_valid": (tau["dzErr"] > 0).astype(np.float64), "tau_dz_sig": _ratio(np.abs(tau["dz"]), tau["dzErr"]),
        "tau_flightLength_x": tau["flightLengthX"], "tau_flightLength_y": tau["flightLengthY"],
        "tau_flightLength_z": tau["flightLengthZ"], "tau_flightLength_sig": tau["flightLengthSig"],
        "tau_pt_weighted_deta_strip": tau["ptWeightedDetaStrip"], "tau_pt_weighted_dphi_strip": tau["ptWeightedDphiStrip"],
        "tau_pt_weighted_dr_signal": tau["ptWeightedDrSignal"], "tau_pt_weighted_dr_iso": tau["ptWeightedDrIsolation"],
        "tau_leadingTrackNormChi2": tau["leadingTrackNormChi2"], "tau_e_ratio_valid": (tau["eRatio"] > 0) * 1.0,
        "tau_e_ratio": tau["eRatio"], "tau_gj_angle_diff_valid": sv * 1.0, "tau_gj_angle_diff": tau["gjAngleDiff"],
        "tau_n_photons": tau["nPhotons"], "tau_emFraction": tau["emFraction"],
        "tau_inside_ecal_crack": tau["insideEcalCrack"],
        "leadChargedCand_etaAtEcalEntrance_minus_tau_eta": tau["etaAtEcalEntranceLeadChargedCand"] - eta,
    }
    out = np.stack([np.asarray(v[name], dtype=np.float64) for name in TAU_BLOCK], axis=1)
    return np.where(np.isfinite(out), out, 0.0).astype(np.float32)


def _object_variables(pf: Mapping[str, np.ndarray], cand: np.ndarray, tau: Mapping[str, np.ndarray],
                      t: np.ndarray) -> dict[str, np.ndarray]:
    """Per-object variables (CMS names without the type prefix) for rows (τ t, candidate cand)."""
    track = pf["charge"][cand] != 0
    flight = {axis: np.where(tau["hasSecondaryVertex"][t] > 0, tau[f"flightLength{axis.upper()}"][t], 0.0)
              for axis in "xyz"}
    pixel = pf["numberOfPixelHits"][cand]
    lead_eta = tau["eta"][t] + tau["leadTkDeltaEta"][t]
    lead_phi = tau["phi"][t] + tau["leadTkDeltaPhi"][t]
    puppi = pf["puppiWeight"][cand]
    out = {
        "valid": np.ones(cand.size), "rel_pt": pf["pt"][cand] / tau["pt"][t],
        "deta": pf["eta"][cand] - tau["eta"][t], "dphi": delta_phi(pf["phi"][cand], tau["phi"][t]),
        "leadChargedHadrCand": ((np.abs(pf["eta"][cand] - lead_eta) < 1e-3)
                                & (np.abs(delta_phi(pf["phi"][cand], lead_phi)) < 1e-3)),
        "pvAssociationQuality": pf["pvAssocQuality"][cand], "fromPV": pf["fromPV"][cand], "puppiWeight": puppi,
        "puppiWeightNoLep": puppi, "charge": pf["charge"][cand], "lostInnerHits": pf["lostInnerHits"][cand],
        "numberOfPixelHits": pixel, "vertex_dx": pf["vx"][cand], "vertex_dy": pf["vy"][cand],
        "vertex_dz": pf["vz"][cand], "vertex_dx_tauFL": pf["vx"][cand] - flight["x"],
        "vertex_dy_tauFL": pf["vy"][cand] - flight["y"], "vertex_dz_tauFL": pf["vz"][cand] - flight["z"],
        "hasTrackDetails": track, "dxy": pf["dxy"][cand], "dxy_sig": _ratio(np.abs(pf["dxy"][cand]), pf["dxyError"][cand]),
        "dz": pf["dz"][cand], "dz_sig": _ratio(np.abs(pf["dz"][cand]), pf["dzError"][cand]),
        "track_chi2_ndof": pf["trkChi2"][cand], "track_ndof": np.where(track, 2 * (pixel + 10) - 5, 0),
        "hcalFraction": pf["hcalFraction"][cand], "rawCaloFraction": np.where(track, 1.0, 0.0),
    }
    return out


def _lepton_variables(prefix: str, lep: Mapping[str, np.ndarray], i: np.ndarray, tau: Mapping[str, np.ndarray],
                      t: np.ndarray) -> dict[str, np.ndarray]:
    """Per reco electron (``prefix="ele"``) or muon (``"muon"``) ``i`` near τ ``t``: CMS's variables
    without the prefix (``rel_*`` divided by the lepton's pT, ``*_sig`` by the error)."""
    pt = lep["pt"][i]
    out = {"valid": np.ones(i.size), "rel_pt": pt / tau["pt"][t], "deta": lep["eta"][i] - tau["eta"][t],
           "dphi": delta_phi(lep["phi"][i], tau["phi"][t])}
    if prefix == "ele":
        cc = lep["ccEleEnergy"][i]
        out.update({
            "cc_valid": (cc >= 0) * 1.0, "cc_ele_rel_energy": cc / pt,
            "cc_gamma_rel_energy": _ratio(lep["ccGammaEnergy"][i], cc),
            "cc_n_gamma": lep["ccNGamma"][i], "rel_ecalEnergy": lep["ecalEnergy"][i] / pt,
            "ecalEnergy_sig": _ratio(lep["ecalEnergy"][i], lep["ecalEnergyError"][i]),
            "mvaInput_earlyBrem": lep["earlyBrem"][i], "mvaInput_lateBrem": lep["lateBrem"][i],
            "mvaInput_sigmaEtaEta": lep["sigmaEtaEta"][i], "mvaInput_hadEnergy": lep["hadEnergy"][i],
            "mvaInput_deltaEta": lep["mvaDeltaEta"][i], "gsfTrack_normalizedChi2": lep["gsfTrackNormChi2"][i],
            "gsfTrack_numberOfValidHits": lep["gsfTrackValidHits"][i], "rel_gsfTrack_pt": lep["gsfTrackPt"][i] / pt,
            "gsfTrack_pt_sig": _ratio(lep["gsfTrackPt"][i], lep["gsfTrackPtError"][i]),
            "has_closestCtfTrack": lep["hasClosestCtfTrack"][i],
            "closestCtfTrack_normalizedChi2": lep["closestCtfTrackNormChi2"][i],
            "closestCtfTrack_numberOfValidHits": lep["closestCtfTrackValidHits"][i]})
        for name in ("trackMomentumAtVtx", "trackMomentumAtCalo", "trackMomentumOut", "trackMomentumAtEleClus",
                     "trackMomentumAtVtxWithConstraint"):
            out[f"rel_{name}"] = lep[name][i] / pt
        for name in ("eSuperClusterOverP", "eSeedClusterOverP", "eSeedClusterOverPout", "eEleClusterOverPout",
                     "deltaEtaSuperClusterTrackAtVtx", "deltaEtaSeedClusterTrackAtCalo",
                     "deltaEtaEleClusterTrackAtCalo", "deltaPhiEleClusterTrackAtCalo",
                     "deltaPhiSuperClusterTrackAtVtx", "deltaPhiSeedClusterTrackAtCalo"):
            out[name] = lep[name][i]
    else:
        chi2 = lep["normalizedChi2"][i]
        out.update({
            "dxy": lep["dxy"][i], "dxy_sig": _ratio(np.abs(lep["dxy"][i]), lep["dxyErr"][i]),
            "normalizedChi2_valid": (chi2 >= 0) * 1.0, "normalizedChi2": np.maximum(chi2, 0.0),
            "numberOfValidHits": lep["numberOfValidHits"][i], "segmentCompatibility": lep["segmentCompatibility"][i],
            "caloCompatibility": lep["caloCompatibility"][i],
            "pfEcalEnergy_valid": (lep["pfEcalEnergy"][i] >= 0) * 1.0,
            "rel_pfEcalEnergy": lep["pfEcalEnergy"][i] / pt})
        for station in _STATIONS:
            system, k = station[:-1], station[-1]
            out[f"n_matches_{system}_{k}"] = lep[f"nMatches{station}"][i]
            out[f"n_hits_{system}_{k}"] = lep[f"nHits{station}"][i]
    return out


def _channel_plan(block: tuple[str, ...]) -> dict[str, tuple[np.ndarray, list[str]]]:
    """Per object type: the block's channels it fills and the variable of each."""
    plan: dict[str, tuple[list[int], list[str]]] = {}
    for channel, name in enumerate(block):
        if name in COMMON:
            continue
        prefix = next(p for p in sorted(TYPES, key=len, reverse=True) if name.startswith(p + "_"))
        variable = name[len(prefix) + 1:]
        channels, variables = plan.setdefault(prefix, ([], []))
        channels.append(channel)
        variables.append(variable)
    return {k: (np.array(c), v) for k, (c, v) in plan.items()}


PLANS = {name: _channel_plan(block) for name, block in BLOCKS.items()}


@dataclass(frozen=True)
class _Pairs:
    """(τ, object) pairs of the same event close enough to the τ to fall in its outer grid: the τ's and the
    object's row in the flattened batch, and the object's Δη, Δφ to the τ."""

    t: np.ndarray
    obj: np.ndarray
    deta: np.ndarray
    dphi: np.ndarray


#: the widest grid's half-width in η and φ: objects beyond it are in no cell of the τ
_REACH = max(size * n_cells / 2 for n_cells, size in GRIDS.values())


def _nearby(objects: Flat, tau: Flat) -> _Pairs:
    """The (τ, object) pairs of each event that can land in a grid cell (computed once for both grids)."""
    # τ by τ, each τ's objects in collection order: the order of the one-event build, so that equal pTs in a
    # cell resolve to the same object
    t, obj = event_pairs(tau.event, objects.offsets)
    deta = objects.columns["eta"][obj] - tau.columns["eta"][t]
    dphi = delta_phi(objects.columns["phi"][obj], tau.columns["phi"][t])
    inside = (np.abs(deta) <= _REACH) & (np.abs(dphi) <= _REACH)
    return _Pairs(t[inside], obj[inside], deta[inside], dphi[inside])


def _leading_in_cells(pairs: _Pairs, pt: np.ndarray, kind: np.ndarray, inner_outer: str) -> tuple[np.ndarray, ...]:
    """``(τ, object, η cell, φ cell)`` of the highest-pT object of each kind in each cell of each τ's grid."""
    n_cells, size = GRIDS[inner_outer]
    half = n_cells // 2
    reach = size * n_cells / 2
    inside = (np.abs(pairs.deta) <= reach) & (np.abs(pairs.dphi) <= reach)
    t, obj, deta, dphi = pairs.t[inside], pairs.obj[inside], pairs.deta[inside], pairs.dphi[inside]
    ieta = np.clip(np.copysign(np.floor(np.abs(deta) / size + 0.5), deta), -half, half).astype(np.int64) + half
    iphi = np.clip(np.copysign(np.floor(np.abs(dphi) / size + 0.5), dphi), -half, half).astype(np.int64) + half
    key = ((t * n_cells + ieta) * n_cells + iphi) * 1000 + kind[obj]
    order = np.lexsort((-pt[obj], key))
    first = np.ones(order.size, dtype=bool)
    first[1:] = key[order][1:] != key[order][:-1]
    best = order[first]
    return t[best], obj[best], ieta[best], iphi[best]


def _fill(out: dict[str, np.ndarray], inner_outer: str, prefix: str, cells: tuple[np.ndarray, ...],
          variables: Mapping[str, np.ndarray], tau: Mapping[str, np.ndarray], rho_tau: np.ndarray) -> None:
    """Writes one object type's variables, and the common variables, into the cells ``(τ, η, φ)`` it occupies."""
    t, ieta, iphi = cells
    common = np.stack([rho_tau[t], tau["pt"][t], tau["eta"][t], tau["insideEcalCrack"][t]], axis=1)
    cell = (t[:, None], ieta[:, None], iphi[:, None])
    for block_name, plan in PLANS.items():
        if prefix not in plan:
            continue
        channels, names = plan[prefix]
        values = np.stack([np.asarray(variables[v], dtype=np.float64) for v in names], axis=1)
        grid = out[f"input_{inner_outer}_{block_name}"]
        grid[cell + (channels[None, :],)] = np.where(np.isfinite(values), values, 0.0)
        grid[cell + (np.arange(len(COMMON))[None, :],)] = common


def _fill_pf_candidates(out: dict[str, np.ndarray], pf: Flat, tau: Flat, rho_tau: np.ndarray) -> None:
    """The PF-candidate channels: per cell and type (by |pdgId|), the leading candidate of the τ's event."""
    cols = pf.columns
    apid = np.abs(cols["pdgId"]).astype(np.int64)
    known = np.isin(apid, (11, 13, 22, 130, 211))
    kind = np.where(known, apid, 0)
    rank_pt = np.where(known, cols["pt"], -1.0)
    pairs = _nearby(pf, tau)
    for which in GRIDS:
        t, cand, ieta, iphi = _leading_in_cells(pairs, rank_pt, kind, which)
        use = known[cand]
        t, cand, ieta, iphi = t[use], cand[use], ieta[use], iphi[use]
        variables = _object_variables(cols, cand, tau.columns, t)
        for prefix, code in TYPES.items():
            rows = apid[cand] == code if code else np.zeros(cand.size, dtype=bool)
            if rows.any():
                values = {k: np.asarray(v)[rows] for k, v in variables.items()}
                _fill(out, which, prefix, (t[rows], ieta[rows], iphi[rows]), values, tau.columns, rho_tau)


def _fill_reco_leptons(out: dict[str, np.ndarray], prefix: str, lep: Flat, tau: Flat, rho_tau: np.ndarray) -> None:
    """The ``ele_*`` or ``muon_*`` channels: per cell, the leading reco lepton of the τ's event."""
    pairs = _nearby(lep, tau)
    no_kind = np.zeros(len(lep.columns["pt"]), np.int64)
    for which in GRIDS:
        t, i, ieta, iphi = _leading_in_cells(pairs, lep.columns["pt"], no_kind, which)
        if t.size:
            _fill(out, which, prefix, (t, ieta, iphi), _lepton_variables(prefix, lep.columns, i, tau.columns, t),
                  tau.columns, rho_tau)


def batch_grids(pf: Flat, tau: Flat, rho_tau: np.ndarray,
                leptons: Mapping[str, Flat | None] | None = None) -> dict[str, np.ndarray]:
    """The six ``[taus, n, n, channels]`` grids (``input_<inner|outer>_<egamma|muon|hadrons>``) of all τs of
    a batch, each τ's cells filled from its own event's objects; ``rho_tau``: each τ's event's ρ;
    ``leptons``: the ``Electron`` and ``Muon`` collections (absent or None: their channels stay 0)."""
    n_tau = len(tau.columns["pt"])
    out = {f"input_{which}_{name}": np.zeros((n_tau, n_cells, n_cells, len(block)), dtype=np.float32)
           for which, (n_cells, _) in GRIDS.items() for name, block in BLOCKS.items()}
    if n_tau == 0:
        return out
    if len(pf.columns["pt"]):
        _fill_pf_candidates(out, pf, tau, rho_tau)
    for collection, prefix in LEPTON_PREFIX.items():
        lep = (leptons or {}).get(collection)
        if lep is not None and len(lep.columns.get("pt", ())):
            _fill_reco_leptons(out, prefix, lep, tau, rho_tau)
    return out


def batch_deeptau_inputs(pf: Flat, tau: Flat, rho: np.ndarray,
                         leptons: Mapping[str, Flat | None] | None = None) -> dict[str, np.ndarray]:
    """All seven DeepTau inputs (CMS names) of every τ of a batch, one row per τ in event order.

    ``pf``, ``tau`` and ``leptons`` (``{"Electron": ..., "Muon": ...}``, :data:`ELECTRON_FIELDS`,
    :data:`MUON_FIELDS`) are the batch's collections flattened; ``rho``: one value per event.
    """
    rho_tau = np.asarray(rho, dtype=np.float64)[tau.event]
    inputs = {"input_tau": tau_block(tau.columns, rho_tau)}
    inputs.update(batch_grids(pf, tau, rho_tau, leptons))
    return inputs


def _one_event(cols: Mapping[str, np.ndarray] | None) -> Flat | None:
    """One event's columns as a batch of one."""
    if cols is None:
        return None
    return Flat(dict(cols), np.array([len(cols["pt"]) if "pt" in cols else 0], dtype=np.int64))


def deeptau_inputs(pf: Mapping[str, np.ndarray], tau: Mapping[str, np.ndarray], rho: float,
                   leptons: Mapping[str, Mapping[str, np.ndarray] | None] | None = None) -> dict[str, np.ndarray]:
    """All seven DeepTau inputs of one event's τs (CMS names); ``leptons``: ``{"Electron": ..., "Muon": ...}``
    columns (:data:`ELECTRON_FIELDS`, :data:`MUON_FIELDS`) for the reco-lepton channels. The batch build on
    a batch of one event (for training-set builders and tests that work event by event)."""
    return batch_deeptau_inputs(_one_event(pf), _one_event(tau), np.array([rho], dtype=np.float64),
                                {name: _one_event(cols) for name, cols in (leptons or {}).items()})
