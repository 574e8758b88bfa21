"""One batch of MiniAOD-like events: Pythia → truth → pile-up → detector → PUPPI → jets, vertices, τs,
MET → NanoAOD-style branches (flat collections with ``n<Name>`` counters; jet constituents as
``JetPFCands_jetIdx``/``JetPFCands_pFCandsIdx`` index pairs, as PF-candidate NanoAOD stores them).
"""

from __future__ import annotations

from dataclasses import dataclass

import awkward as ak
import numpy as np

from . import truth
from .detector import Particles, PFCandidates, simulate
from .jets import Jets, cluster
from .leptons import reconstruct_leptons
from .lost_tracks import find_lost_tracks
from .matching import nearest
from .pileup import generate_pileup
from .puppi import puppi_weights
from .pythia_events import GenBatch
from .taus import reconstruct_taus
from .vertices import find_vertices


@dataclass
class Settings:
    """What the generator makes, besides the physics process.

    Args:
        pileup: mean number of pile-up interactions per crossing (0: none).
        ak4_min_pt, ak8_min_pt: jets below are not stored (GeV).
    """

    pileup: float = 30.0
    ak4_min_pt: float = 15.0
    ak8_min_pt: float = 150.0


def _particles(batch: GenBatch, decay_of: np.ndarray, tau_of: np.ndarray, pileup) -> Particles:
    final = np.flatnonzero(batch.final)
    origin = np.where(decay_of[final] >= 0, np.where(np.abs(batch.pid[decay_of[final]]) == 15, 2, 1),
                      np.where(tau_of[final] >= 0, 2, 0))
    n_pu = pileup.pid.size
    zeros = np.zeros(n_pu)
    parts = Particles(
        event=np.concatenate([batch.event[final], pileup.event]), pid=np.concatenate([batch.pid[final], pileup.pid]),
        charge=np.concatenate([batch.charge[final], pileup.charge]), px=np.concatenate([batch.px[final], pileup.px]),
        py=np.concatenate([batch.py[final], pileup.py]), pz=np.concatenate([batch.pz[final], pileup.pz]),
        e=np.concatenate([batch.e[final], pileup.e]), x=np.concatenate([batch.x[final], zeros]),
        y=np.concatenate([batch.y[final], zeros]), z=np.concatenate([batch.z[final], pileup.z]),
        origin=np.concatenate([origin, np.full(n_pu, 3)]), gen=np.concatenate([final, np.full(n_pu, -1)]))
    return parts.take(np.argsort(parts.event, kind="stable"))


def _eta_phi(px: np.ndarray, py: np.ndarray, pz: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    pt = np.hypot(px, py)
    with np.errstate(divide="ignore", invalid="ignore"):
        eta = np.arcsinh(np.where(pt > 0, pz / pt, np.sign(pz) * 1e9))
    return pt, eta, np.arctan2(py, px)


def jet_flavours(batch: GenBatch, jets: Jets, hadrons: truth.HeavyFlavour, radius: float,
                 n: int) -> tuple[np.ndarray, np.ndarray]:
    """Hadron flavour (b/c hadrons within ``radius``, b first) and parton flavour (b, then c, else
    the hardest shower parton within ``radius``) of each jet."""
    _, h_eta, h_phi = _eta_phi(batch.px[hadrons.index], batch.py[hadrons.index], batch.pz[hadrons.index])
    best, _ = nearest(batch.event[hadrons.index], h_eta, h_phi, jets.event, jets.eta, jets.phi, radius, n)
    hadron = np.zeros(jets.pt.size, dtype=np.int32)
    np.maximum.at(hadron, best[best >= 0], hadrons.flavour[best >= 0])
    partons = truth.shower_partons(batch)
    p_pt, p_eta, p_phi = _eta_phi(batch.px[partons], batch.py[partons], batch.pz[partons])
    best, _ = nearest(batch.event[partons], p_eta, p_phi, jets.event, jets.eta, jets.phi, radius, n)
    m = best >= 0
    jet, pid, pt = best[m], batch.pid[partons][m], p_pt[m]
    apid = np.abs(pid)
    priority = np.select([apid == 5, apid == 4], [2, 1], 0)
    order = np.lexsort((-pt, -priority, jet))
    jet, pid = jet[order], pid[order]
    first = np.ones(jet.size, dtype=bool)
    first[1:] = jet[1:] != jet[:-1]
    parton = np.zeros(jets.pt.size, dtype=np.int32)
    parton[jet[first]] = pid[first]
    return hadron, parton


def fat_jet_labels(batch: GenBatch, jets: Jets, n: int) -> np.ndarray:
    """1 for a hadronic top (b, q, q' within ΔR < 0.8), 2 for a hadronic W (q, q'), 0 otherwise."""
    decays = truth.hadronic_decays(batch)
    label = np.zeros(jets.pt.size, dtype=np.int32)

    def contained(event: np.ndarray, quarks: np.ndarray) -> np.ndarray:
        """Jets (nearest to the first quark) that hold every quark of each row of ``quarks`` within 0.8."""
        _, eta, phi = _eta_phi(batch.px[quarks], batch.py[quarks], batch.pz[quarks])
        jet, _ = nearest(event, eta[:, 0], phi[:, 0], jets.event, jets.eta, jets.phi, 0.8, n)
        found = jet >= 0
        jet, eta, phi = jet[found], eta[found], phi[found]
        dr = np.hypot(eta - jets.eta[jet][:, None], (phi - jets.phi[jet][:, None] + np.pi) % (2 * np.pi) - np.pi)
        return jet[np.all(dr < 0.8, axis=1)]

    if decays.ws.size:
        label[contained(decays.ws[:, 0], decays.ws[:, 1:])] = 2
    if decays.tops.size:
        label[contained(decays.tops[:, 0], decays.tops[:, 1:])] = 1
    return label


def rho(cands: PFCandidates, n: int) -> np.ndarray:
    """``fixedGridRhoFastjetAll``: median over a 0.55 × 2π/12 grid in |η| < 5 of pT per unit area."""
    eta_bins, phi_bins = 18, 12
    ieta = np.clip(((cands.eta + 4.95) / 0.55).astype(np.int64), 0, eta_bins - 1)
    iphi = np.clip(((cands.phi + np.pi) / (2 * np.pi / phi_bins)).astype(np.int64), 0, phi_bins - 1)
    cell = (cands.event * eta_bins + ieta) * phi_bins + iphi
    sums = np.bincount(cell, cands.pt, minlength=n * eta_bins * phi_bins).reshape(n, -1)
    return np.median(sums, axis=1) / (0.55 * 2 * np.pi / phi_bins)


def _jagged(event: np.ndarray, n: int, columns: dict[str, np.ndarray]) -> ak.Array:
    counts = np.bincount(event, minlength=n)
    return ak.zip({name: ak.unflatten(values, counts) for name, values in columns.items()})


def _constituents(jets: Jets, cands_first: np.ndarray, cands_event: np.ndarray, n: int) -> ak.Array:
    jet_first = np.searchsorted(jets.event, np.arange(n))
    event = jets.event[jets.constituents_jet]
    return _jagged(event, n, {"jetIdx": (jets.constituents_jet - jet_first[event]).astype(np.int32),
                              "pFCandsIdx": (jets.constituents_cand - cands_first[event]).astype(np.int32)})


def make_branches(rng: np.random.Generator, batch: GenBatch, settings: Settings) -> dict[str, object]:
    """The output branches of one batch (``run``/``luminosityBlock``/``event`` excluded)."""
    n = len(batch.counts)
    hadrons = truth.heavy_flavour_hadrons(batch)
    gen_taus, tau_of = truth.gen_taus(batch)
    decaying = np.zeros(batch.pid.size, dtype=bool)
    decaying[hadrons.index] = True
    decaying[gen_taus.index] = True
    decay_of = truth.nearest_ancestor(batch, decaying, batch.final)
    flavour_of = np.zeros(batch.pid.size, dtype=np.int32)
    flavour_of[hadrons.index] = hadrons.flavour
    flavour_of[gen_taus.index] = 15
    pileup = generate_pileup(rng, settings.pileup, n)
    particles = _particles(batch, decay_of, tau_of, pileup)
    cands = simulate(rng, particles)
    cands.puppiWeight = puppi_weights(cands, n)
    # lost tracks draw from a generator of their own: every other branch stays what the seed gave before
    lost = find_lost_tracks(np.random.default_rng(rng.bit_generator.seed_seq.spawn(1)[0]), particles, cands)
    # so do the reconstructed electrons and muons (added after the lost tracks: a second child stream)
    electrons, muons = reconstruct_leptons(np.random.default_rng(rng.bit_generator.seed_seq.spawn(1)[0]), particles,
                                           cands)
    charged = cands.charge != 0
    ak4 = cluster(cands, n, ~(charged & (cands.fromPV == 0)), None, 0.4, settings.ak4_min_pt)
    ak8 = cluster(cands, n, cands.puppiWeight > 0.01, cands.puppiWeight, 0.8, settings.ak8_min_pt)
    svs = find_vertices(rng, batch, particles, cands, decay_of, flavour_of)

    lepton_code = truth.prompt_leptons(batch, tau_of)
    lep = np.flatnonzero(lepton_code > 0)
    l_pt, l_eta, l_phi = _eta_phi(batch.px[lep], batch.py[lep], batch.pz[lep])
    had = gen_taus.hadronic
    v_pt, v_eta, v_phi = _eta_phi(*gen_taus.vis[had, :3].T)
    taus = reconstruct_taus(cands, ak4, n, {"event": gen_taus.event[had], "pt": v_pt, "eta": v_eta, "phi": v_phi},
                            {"event": batch.event[lep], "pt": l_pt, "eta": l_eta, "phi": l_phi,
                             "flav": lepton_code[lep]})

    cands_first = np.searchsorted(cands.event, np.arange(n))
    ak4_hadron, ak4_parton = jet_flavours(batch, ak4, hadrons, 0.4, n)
    pu_pt = np.bincount(ak4.constituents_jet, (cands.pt * (cands.genOrigin == 3))[ak4.constituents_cand],
                        minlength=ak4.pt.size)
    all_pt = np.bincount(ak4.constituents_jet, cands.pt[ak4.constituents_cand], minlength=ak4.pt.size)
    ak8_hadron, _ = jet_flavours(batch, ak8, hadrons, 0.8, n)
    met = {"": np.ones_like(cands.pt), "Puppi": cands.puppiWeight}
    gen_x, gen_y = truth.invisible_momentum(batch)
    f32 = np.float32
    branches: dict[str, object] = {
        "genProcess": batch.process.astype(np.int32),
        "Pileup_nPU": pileup.n_interactions.astype(np.int32),
        "PV_z": pileup.hard_z.astype(f32),
        "fixedGridRhoFastjetAll": rho(cands, n).astype(f32),
        "GenMET_pt": np.hypot(gen_x, gen_y).astype(f32), "GenMET_phi": np.arctan2(gen_y, gen_x).astype(f32),
    }
    for prefix, weight in met.items():
        mx = -np.bincount(cands.event, cands.px * weight, minlength=n)
        my = -np.bincount(cands.event, cands.py * weight, minlength=n)
        branches[f"{prefix}MET_pt"] = np.hypot(mx, my).astype(f32)
        branches[f"{prefix}MET_phi"] = np.arctan2(my, mx).astype(f32)
    pf_fields = ("pt", "eta", "phi", "mass", "charge", "pdgId", "dxy", "dz", "dxyError", "dzError", "vx", "vy", "vz",
                 "puppiWeight", "fromPV", "pvAssocQuality", "lostInnerHits", "numberOfPixelHits", "trkChi2",
                 "trkQuality", "hcalFraction", "genOrigin")
    branches["PFCands"] = _jagged(cands.event, n, {f: _narrow(getattr(cands, f)) for f in pf_fields})
    branches["LostTracks"] = _jagged(lost.event, n, {f: _narrow(v) for f, v in vars(lost).items() if f != "event"})
    for name, leptons in (("Electron", electrons), ("Muon", muons)):
        event = leptons.pop("event")
        leptons["pfCandIdx"] = leptons["pfCandIdx"] - cands_first[event]
        branches[name] = _jagged(event, n, {k: _narrow(v) for k, v in leptons.items()})
    branches["Jet"] = _jagged(ak4.event, n, {
        "pt": ak4.pt.astype(f32), "eta": ak4.eta.astype(f32), "phi": ak4.phi.astype(f32), "mass": ak4.mass.astype(f32),
        "nConstituents": ak4.n_constituents.astype(np.int32), "hadronFlavour": ak4_hadron, "partonFlavour": ak4_parton,
        "puFraction": (pu_pt / np.maximum(all_pt, 1e-9)).astype(f32)})
    branches["JetPFCands"] = _constituents(ak4, cands_first, cands.event, n)
    branches["FatJet"] = _jagged(ak8.event, n, {
        "pt": ak8.pt.astype(f32), "eta": ak8.eta.astype(f32), "phi": ak8.phi.astype(f32), "mass": ak8.mass.astype(f32),
        "nConstituents": ak8.n_constituents.astype(np.int32), "hadronFlavour": ak8_hadron,
        "label": fat_jet_labels(batch, ak8, n)})
    branches["FatJetPFCands"] = _constituents(ak8, cands_first, cands.event, n)
    branches["SV"] = _jagged(svs.event, n, {f: _narrow(getattr(svs, f)) for f in (
        "pt", "eta", "phi", "mass", "x", "y", "z", "ntracks", "ndof", "chi2", "dxy", "dxySig", "dlen", "dlenSig", "pAngle",
        "genFlavour")})
    tau_event = taus.pop("event")
    branches["Tau"] = _jagged(tau_event, n, {k: _narrow(v) for k, v in taus.items()})
    branches["GenVisTau"] = _jagged(gen_taus.event[had], n, {
        "pt": v_pt.astype(f32), "eta": v_eta.astype(f32), "phi": v_phi.astype(f32),
        "mass": np.sqrt(np.maximum(gen_taus.vis[had, 3] ** 2 - (gen_taus.vis[had, :3] ** 2).sum(axis=1), 0)).astype(f32),
        "charge": gen_taus.charge[had].astype(np.int32), "status": gen_taus.decay_mode[had].astype(np.int32)})
    return branches


def _narrow(values: np.ndarray) -> np.ndarray:
    """float64 → float32 and int64 → int32, as NanoAOD stores them."""
    if values.dtype.kind == "f":
        return values.astype(np.float32)
    if values.dtype.kind in "iub":
        return values.astype(np.int32)
    return values
