"""ParticleNet inputs for all jets of an event at once: CMS's per-candidate and per-SV variables
(``DeepBoostedJetTagInfoProducer`` definitions), ordered, normalised, padded and truncated as
``ParticleNetSonicJetTagsProducer`` does.

Everything is vectorised over the (jet, constituent) rows of the event; there is no loop over jets.

Track variables are computed from what MiniAOD-like PF candidates carry: the reference point
(``vx, vy, vz`` relative to the primary vertex) and direction of the track. CMS's ``TrackInfoBuilder``
uses the full helix; here tracks are straight lines, so the 3D impact parameter is the distance of
the line to the PV, signed by the jet direction, and the jet distance is minus the distance between
the track and the jet axis (CMS's values are ≤ 0 by the same convention).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..common.kinematics import delta_phi, rank_within
from .particlenet_inputs import InputGroup, ParticleNetInputs


def normalise(group: InputGroup, columns: Mapping[str, np.ndarray]) -> np.ndarray:
    """``(rows, variables)`` float32: CMS's center/norm/clip, non-finite values → 0."""
    values = np.stack([np.asarray(columns[v.name], dtype=np.float64) for v in group.variables], axis=1)
    values = np.where(np.isfinite(values), values, 0.0)
    center = np.array([v.center for v in group.variables])
    norm = np.array([v.norm for v in group.variables])
    lower = np.array([v.lower for v in group.variables])
    upper = np.array([v.upper for v in group.variables])
    return np.clip((values - center) * norm, lower, upper).astype(np.float32)


def scatter(group: InputGroup, columns: Mapping[str, np.ndarray], jet: np.ndarray, rank: np.ndarray, n_jets: int,
            length: int) -> np.ndarray:
    """The ``[jets, variables, length]`` array of one input, zero-padded."""
    out = np.zeros((n_jets, length, len(group.variables)), dtype=np.float32)
    out[jet, rank] = normalise(group, columns)
    return np.ascontiguousarray(out.transpose(0, 2, 1))


def target_length(group: InputGroup, counts: np.ndarray) -> int:
    """The event's padded length: the largest multiplicity, clamped to the group's bounds."""
    longest = int(counts.max()) if counts.size else 0
    return int(np.clip(longest, group.min_length, group.max_length))


def candidate_variables(pf: Mapping[str, np.ndarray], cand: np.ndarray, jets: Mapping[str, np.ndarray],
                        jet: np.ndarray) -> dict[str, np.ndarray]:
    """CMS's PF-candidate variables for rows (jet, cand)."""
    pt, eta, phi = pf["pt"][cand], pf["eta"][cand], pf["phi"][cand]
    mass = pf["mass"][cand]
    p = pt * np.cosh(eta)
    energy = np.sqrt(p * p + mass * mass)
    j_eta, j_phi = jets["eta"][jet], jets["phi"][jet]
    etasign = np.where(j_eta > 0, 1.0, -1.0)
    apid = np.abs(pf["pdgId"][cand])
    charge = pf["charge"][cand]
    track = charge != 0
    with np.errstate(divide="ignore", invalid="ignore"):
        out = {
            "pfcand_pt_log_nopuppi": np.log(pt), "pfcand_e_log_nopuppi": np.log(energy),
            "pfcand_etarel": etasign * (eta - j_eta), "pfcand_phirel": delta_phi(phi, j_phi),
            "pfcand_abseta": np.abs(eta), "pfcand_charge": charge,
            "pfcand_isEl": apid == 11, "pfcand_isMu": apid == 13, "pfcand_isGamma": apid == 22,
            "pfcand_isChargedHad": apid == 211, "pfcand_isNeutralHad": apid == 130,
            "pfcand_VTX_ass": pf["pvAssocQuality"][cand], "pfcand_lostInnerHits": pf["lostInnerHits"][cand],
            "pfcand_normchi2": np.where(track, np.floor(pf["trkChi2"][cand]), 999.0),
            "pfcand_quality": pf["trkQuality"][cand],
            "pfcand_dz": pf["dz"][cand], "pfcand_dzsig": np.where(track, pf["dz"][cand] / pf["dzError"][cand], 0.0),
            "pfcand_dxy": pf["dxy"][cand],
            "pfcand_dxysig": np.where(track, pf["dxy"][cand] / pf["dxyError"][cand], 0.0),
            "pfcand_mask": np.ones(cand.size),
        }
    out.update(track_variables(pf, cand, jets, jet, track))
    return out


def track_variables(pf: Mapping[str, np.ndarray], cand: np.ndarray, jets: Mapping[str, np.ndarray], jet: np.ndarray,
                    track: np.ndarray) -> dict[str, np.ndarray]:
    """b-tagging track variables relative to the jet axis (0 for candidates without a track)."""
    pt, eta, phi = pf["pt"][cand], pf["eta"][cand], pf["phi"][cand]
    mom = np.stack([pt * np.cos(phi), pt * np.sin(phi), pt * np.sinh(eta)], axis=1)
    j_eta, j_phi = jets["eta"][jet], jets["phi"][jet]
    axis = np.stack([np.cos(j_phi), np.sin(j_phi), np.sinh(j_eta)], axis=1) / np.cosh(j_eta)[:, None]
    p = np.linalg.norm(mom, axis=1)
    p_par = (mom * axis).sum(axis=1)
    p_perp = np.linalg.norm(np.cross(mom, axis), axis=1)
    ref = np.stack([pf["vx"][cand], pf["vy"][cand], pf["vz"][cand]], axis=1)
    direction = mom / p[:, None]
    ip = ref - (ref * direction).sum(axis=1)[:, None] * direction
    sign = np.where((ip * axis).sum(axis=1) >= 0, 1.0, -1.0)
    ip3d = sign * np.linalg.norm(ip, axis=1)
    sin_theta = 1.0 / np.cosh(eta)
    ip3d_err = np.hypot(pf["dxyError"][cand], pf["dzError"][cand] * sin_theta)
    normal = np.cross(direction, axis)
    with np.errstate(divide="ignore", invalid="ignore"):
        jet_dist = -np.abs((ref * normal).sum(axis=1)) / np.linalg.norm(normal, axis=1)
        values = {
            "pfcand_btagEtaRel": 0.5 * np.log((p + p_par) / (p - p_par)),
            "pfcand_btagPtRatio": p_perp / p, "pfcand_btagPParRatio": p_par / p,
            "pfcand_btagSip3dVal": ip3d, "pfcand_btagSip3dSig": ip3d / ip3d_err, "pfcand_btagJetDistVal": jet_dist,
        }
    return {name: np.where(track, v, 0.0) for name, v in values.items()}


def sv_variables(svs: Mapping[str, np.ndarray], sv: np.ndarray, jets: Mapping[str, np.ndarray],
                 jet: np.ndarray) -> dict[str, np.ndarray]:
    """CMS's SV variables for rows (jet, sv)."""
    j_eta = jets["eta"][jet]
    with np.errstate(divide="ignore"):
        return {
            "sv_pt_log": np.log(svs["pt"][sv]), "sv_mass": svs["mass"][sv],
            "sv_etarel": np.where(j_eta > 0, 1.0, -1.0) * (svs["eta"][sv] - j_eta),
            "sv_phirel": delta_phi(svs["phi"][sv], jets["phi"][jet]), "sv_abseta": np.abs(svs["eta"][sv]),
            "sv_ntracks": svs["ntracks"][sv], "sv_normchi2": svs["chi2"][sv], "sv_dxy": svs["dxy"][sv],
            "sv_dxysig": svs["dxySig"][sv], "sv_d3d": svs["dlen"][sv], "sv_d3dsig": svs["dlenSig"][sv],
            "sv_mask": np.ones(sv.size),
        }


def particlenet_inputs(spec: ParticleNetInputs, jets: Mapping[str, np.ndarray], pf: Mapping[str, np.ndarray],
                       members: Mapping[str, np.ndarray], svs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The six ParticleNet inputs (``pf_points`` ... ``sv_mask``) for every jet of one event.

    Args:
        spec: the AK4 or AK8 input definition.
        jets: jet columns ``pt, eta, phi`` (numpy, one entry per jet).
        pf: PF-candidate columns (see :func:`candidate_variables`).
        members: ``jetIdx``, ``pFCandsIdx`` — one row per constituent (NanoAOD-style).
        svs: secondary-vertex columns (NanoAOD ``SV_*`` names).
    """
    n_jets = len(jets["pt"])
    jet, cand = np.asarray(members["jetIdx"], np.int64), np.asarray(members["pFCandsIdx"], np.int64)
    key = pf["pt"][cand]
    if spec.puppi_weighted:
        weight = pf["puppiWeight"][cand]
        keep = weight >= 0.01
        jet, cand, key = jet[keep], cand[keep], key[keep] * weight[keep]
    order, rank = rank_within(jet, key)
    jet, cand = jet[order], cand[order]
    length = target_length(spec.pf_points, np.bincount(jet, minlength=n_jets))
    use = rank < length
    jet, cand, rank = jet[use], cand[use], rank[use]
    columns = candidate_variables(pf, cand, jets, jet)
    inputs = {g.name: scatter(g, columns, jet, rank, n_jets, length)
              for g in (spec.pf_points, spec.pf_features, spec.pf_mask)}

    n_sv = len(svs["pt"])
    sv_jet = np.repeat(np.arange(n_jets), n_sv)
    sv = np.tile(np.arange(n_sv), n_jets)
    dr2 = (svs["eta"][sv] - jets["eta"][sv_jet]) ** 2 + delta_phi(svs["phi"][sv], jets["phi"][sv_jet]) ** 2
    inside = dr2 < spec.radius**2
    sv_jet, sv = sv_jet[inside], sv[inside]
    order, rank = rank_within(sv_jet, np.nan_to_num(svs["dxySig"][sv]))
    sv_jet, sv = sv_jet[order], sv[order]
    length = target_length(spec.sv_points, np.bincount(sv_jet, minlength=n_jets))
    use = rank < length
    sv_jet, sv, rank = sv_jet[use], sv[use], rank[use]
    columns = sv_variables(svs, sv, jets, sv_jet)
    inputs.update({g.name: scatter(g, columns, sv_jet, rank, n_jets, length)
                   for g in (spec.sv_points, spec.sv_features, spec.sv_mask)})
    return inputs
