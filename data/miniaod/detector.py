"""A simple, documented CMS-like detector response: stable particles → particle-flow candidates.

Every particle is turned into at most one PF candidate (no splitting or merging of showers). Units:
GeV, cm. Resolutions are relative Gaussian smearings.

============  ==================  ==============================================================
 region        particle            PF candidate
============  ==================  ==============================================================
 |η| < 2.5     charged, pT > 0.5   tracked with efficiency 99 % (μ), 95 % (π, K, p), 93 % (e);
                                   σ(pT)/pT = 1 % ⊕ 0.015 %·pT; impact parameters smeared with
                                   σ(dxy) = 20 µm ⊕ 90 µm/pT, σ(dz) = 30 µm ⊕ 120 µm/pT.
                                   μ with pT > 3, |η| < 2.4 → pdgId ±13; e with pT > 2 → ±11;
                                   everything else → ±211 (mass of a pion).
 |η| < 3.0     γ, untracked e      ECAL photon (22): σ(E)/E = 3 %/√E ⊕ 0.5 %, E > 1 GeV.
 |η| < 3.0     neutral hadron,     HCAL neutral hadron (130): σ(E)/E = 100 %/√E ⊕ 5 %, E > 2 GeV,
               untracked hadron    direction smeared by 0.02 in η and φ.
 3 < |η| < 5   any visible         HF: EM (2) for e/γ, hadronic (1) otherwise; σ(E)/E = 150 %/√E
                                   ⊕ 10 % (had), 100 %/√E ⊕ 5 % (EM); E > 4 GeV; 0.05 in η, φ.
============  ==================  ==============================================================

Neutrinos escape; particles beyond |η| = 5 are lost; charged particles below 0.5 GeV curl up.

Track details, as MiniAOD packs them: the number of pixel hits counts the four barrel pixel layers
(r = 2.9, 6.8, 10.9, 16.0 cm) outside the production radius; ``lostInnerHits`` is -1 when the first
layer is hit, else the layers missed inside the production radius (max 2); χ²/ndf follows a
χ²(ndf)/ndf law; every track has the high-purity bit (``qualityMask`` 4).

Vertex association (``fromPV``, as ``pat::PackedCandidate``): 3 (used in the PV fit) for tracks
compatible in dz and dxy within 3σ, 2 (tight: |dz| < 0.1 cm), 1 (loose: |dz| < 0.3 cm, and every
neutral), 0 otherwise (another vertex). ``pvAssociationQuality`` follows: 7, 4, 1, 0 (neutrals 0).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

PIXEL_LAYERS_CM = np.array([2.9, 6.8, 10.9, 16.0])
MASS = {11: 0.000511, 13: 0.10566, 211: 0.13957}


@dataclass
class Particles:
    """Stable generated particles of a batch (hard scatter + pile-up), flat.

    ``x, y, z``: production point relative to the hard vertex (cm); ``origin``: 0 prompt hard
    scatter, 1 heavy-flavour decay, 2 τ decay, 3 pile-up; ``gen``: index in the batch's Pythia record
    (-1 for pile-up); ``pu_vertex_dz``: for pile-up, z of its interaction relative to the hard vertex.
    """

    event: np.ndarray
    pid: np.ndarray
    charge: np.ndarray
    px: np.ndarray
    py: np.ndarray
    pz: np.ndarray
    e: np.ndarray
    x: np.ndarray
    y: np.ndarray
    z: np.ndarray
    origin: np.ndarray
    gen: np.ndarray

    def take(self, index: np.ndarray) -> Particles:
        return Particles(**{f.name: getattr(self, f.name)[index] for f in fields(self)})


@dataclass
class PFCandidates:
    """Particle-flow candidates of a batch, flat, sorted by event then decreasing pT.

    Field names follow NanoAOD's PF-candidate tables (``PFCands_*``); ``source`` is the index of the
    particle in the :class:`Particles` it came from (truth, not written).
    """

    event: np.ndarray
    pt: np.ndarray
    eta: np.ndarray
    phi: np.ndarray
    mass: np.ndarray
    charge: np.ndarray
    pdgId: np.ndarray
    dxy: np.ndarray
    dz: np.ndarray
    dxyError: np.ndarray
    dzError: np.ndarray
    vx: np.ndarray
    vy: np.ndarray
    vz: np.ndarray
    fromPV: np.ndarray
    pvAssocQuality: np.ndarray
    lostInnerHits: np.ndarray
    numberOfPixelHits: np.ndarray
    trkChi2: np.ndarray
    trkQuality: np.ndarray
    hcalFraction: np.ndarray
    genOrigin: np.ndarray
    source: np.ndarray
    puppiWeight: np.ndarray | None = None

    @property
    def px(self) -> np.ndarray:
        return self.pt * np.cos(self.phi)

    @property
    def py(self) -> np.ndarray:
        return self.pt * np.sin(self.phi)

    @property
    def pz(self) -> np.ndarray:
        return self.pt * np.sinh(self.eta)

    @property
    def energy(self) -> np.ndarray:
        p = self.pt * np.cosh(self.eta)
        return np.sqrt(p * p + self.mass * self.mass)


def _smear(rng: np.random.Generator, value: np.ndarray, rel_sigma: np.ndarray) -> np.ndarray:
    return value * np.maximum(1.0 + rng.standard_normal(value.shape) * rel_sigma, 0.05)


def _wrap(phi: np.ndarray) -> np.ndarray:
    return (phi + np.pi) % (2 * np.pi) - np.pi


#: calorimeter kinds: (pdgId, cell size in η and φ, stochastic term, constant term, energy threshold GeV)
CALO = {
    "ecal": (22, 0.0174, 0.03, 0.005, 1.0),
    "hcal": (130, 0.087, 1.00, 0.05, 2.0),
    "hf_em": (2, 0.175, 1.00, 0.05, 4.0),
    "hf_had": (1, 0.175, 1.50, 0.10, 4.0),
}


@dataclass
class _Deposits:
    """Calorimeter cells after merging the particles that hit the same cell."""

    event: np.ndarray
    energy: np.ndarray
    eta: np.ndarray
    phi: np.ndarray
    kind: np.ndarray  # row of CALO
    leader: np.ndarray  # the particle with the largest energy in the cell (truth)


def _merge_cells(p: Particles, hit: np.ndarray, kind: np.ndarray, eta: np.ndarray, phi: np.ndarray) -> _Deposits:
    """Sums the energy of the particles ``hit`` per (event, calorimeter kind, cell); the position is
    the energy-weighted barycentre."""
    idx = np.flatnonzero(hit)
    k = kind[idx]
    size = np.array([v[1] for v in CALO.values()])[k]
    ieta = np.floor(eta[idx] / size).astype(np.int64)
    iphi = np.floor((phi[idx] + np.pi) / size).astype(np.int64)
    key = ((p.event[idx] * 8 + k) * 1024 + (ieta + 512)) * 1024 + iphi
    cells, inverse = np.unique(key, return_inverse=True)
    energy = p.e[idx]
    total = np.bincount(inverse, energy, minlength=cells.size)
    w_eta = np.bincount(inverse, energy * eta[idx], minlength=cells.size) / total
    cx = np.bincount(inverse, energy * np.cos(phi[idx]), minlength=cells.size)
    cy = np.bincount(inverse, energy * np.sin(phi[idx]), minlength=cells.size)
    order = np.lexsort((-energy, inverse))
    first = np.ones(order.size, dtype=bool)
    first[1:] = inverse[order][1:] != inverse[order][:-1]
    leader = idx[order[first]]
    return _Deposits(event=p.event[leader], energy=total, eta=w_eta, phi=np.arctan2(cy, cx), kind=kind[leader],
                     leader=leader)


def simulate(rng: np.random.Generator, p: Particles) -> PFCandidates:
    """Applies the detector response table of this module to the particles of a batch."""
    apid = np.abs(p.pid)
    pt = np.hypot(p.px, p.py)
    with np.errstate(divide="ignore", invalid="ignore"):
        eta = np.arcsinh(np.where(pt > 0, p.pz / pt, np.sign(p.pz) * 1e9))
    phi = np.arctan2(p.py, p.px)
    aeta = np.abs(eta)
    visible = ~np.isin(apid, (12, 14, 16)) & (aeta < 5.0) & (pt > 0)
    charged = visible & (p.charge != 0)

    # --- tracker ---------------------------------------------------------------------------------
    efficiency = np.where(apid == 13, 0.99, np.where(apid == 11, 0.93, 0.95))
    rprod = np.hypot(p.x, p.y)
    tracked = charged & (aeta < 2.5) & (pt > 0.5) & (rprod < 20.0) & (rng.random(pt.shape) < efficiency)
    t = np.flatnonzero(tracked)
    t_pt = _smear(rng, pt[t], np.hypot(0.01, 1.5e-4 * pt[t]))
    t_apid, t_charge = apid[t], p.charge[t]
    is_mu = (t_apid == 13) & (t_pt > 3.0) & (aeta[t] < 2.4)
    is_e = (t_apid == 11) & (t_pt > 2.0)
    # PDG signs: e-/μ- are +11/+13, π+ is +211
    t_pid = np.where(is_mu, 13, np.where(is_e, 11, 211)) * np.where(is_mu | is_e, -1, 1) * np.where(t_charge < 0, -1, 1)
    t_phi, t_eta = phi[t], eta[t] + rng.normal(0.0, 0.001, t.size)
    # impact parameters of straight tracks, relative to the hard vertex at the origin
    cphi, sphi = np.cos(t_phi), np.sin(t_phi)
    dxy_true = -p.x[t] * sphi + p.y[t] * cphi
    dz_true = p.z[t] - (p.x[t] * cphi + p.y[t] * sphi) * (p.pz[t] / pt[t])
    dxy_err = np.hypot(0.0020, 0.0090 / t_pt)
    dz_err = np.hypot(0.0030, 0.0120 / t_pt) * np.sqrt(np.cosh(aeta[t]))
    dxy = dxy_true + rng.standard_normal(t.size) * dxy_err
    dz = dz_true + rng.standard_normal(t.size) * dz_err
    inside = np.searchsorted(PIXEL_LAYERS_CM, rprod[t])
    pixel_hits = np.maximum(4 - inside - (rng.random(t.size) < 0.03), 0)
    lost_inner = np.where(inside == 0, np.where(rng.random(t.size) < 0.01, 1, -1), np.minimum(inside, 2))
    ndf = 2 * (pixel_hits + 10) - 5
    chi2 = rng.chisquare(ndf) / ndf
    compatible = (np.abs(dz) < 3 * dz_err) & (np.abs(dxy) < 3 * dxy_err)
    from_pv = np.select([compatible, np.abs(dz) < 0.1, np.abs(dz) < 0.3], [3, 2, 1], 0)
    t_mass = np.select([np.abs(t_pid) == 11, np.abs(t_pid) == 13], [MASS[11], MASS[13]], MASS[211])

    # --- calorimeters ----------------------------------------------------------------------------
    em = visible & ~tracked & ((apid == 22) | (apid == 11))
    looping = charged & (aeta < 2.5) & (pt < 0.5)  # curls up in the 3.8 T field before the calorimeters
    had = visible & ~tracked & ~em & (apid != 13) & ~looping
    central = aeta < 3.0
    kind = np.select([em & central, had & central, em], [0, 1, 2], 3)
    cells = _merge_cells(p, em | had, kind, eta, phi)
    ck = cells.kind
    table = np.array(list(CALO.values()))
    c_pid, stochastic, constant, threshold = table[ck, 0].astype(np.int32), table[ck, 2], table[ck, 3], table[ck, 4]
    energy = _smear(rng, cells.energy, np.hypot(stochastic / np.sqrt(cells.energy), constant))
    ang = np.select([ck == 1, ck >= 2], [0.02, 0.05], 0.002)
    c_eta = cells.eta + rng.standard_normal(energy.size) * ang
    c_phi = _wrap(cells.phi + rng.standard_normal(energy.size) * ang)
    c = np.flatnonzero(energy > threshold)
    c_pt = energy[c] / np.cosh(c_eta[c])

    nt, nc = t.size, c.size
    zeros_c = np.zeros(nc)
    izeros_c = np.zeros(nc, dtype=np.int32)
    hcal_fraction = np.concatenate([rng.uniform(0.5, 1.0, nt) * (np.abs(t_pid) == 211),
                                    (c_pid[c] == 130) | (c_pid[c] == 1)])
    out = PFCandidates(
        event=np.concatenate([p.event[t], cells.event[c]]), pt=np.concatenate([t_pt, c_pt]),
        eta=np.concatenate([t_eta, c_eta[c]]), phi=np.concatenate([t_phi, c_phi[c]]),
        mass=np.concatenate([t_mass, zeros_c]), charge=np.concatenate([t_charge, zeros_c]),
        pdgId=np.concatenate([t_pid, c_pid[c]]).astype(np.int32),
        dxy=np.concatenate([dxy, zeros_c]), dz=np.concatenate([dz, zeros_c]),
        dxyError=np.concatenate([dxy_err, zeros_c]), dzError=np.concatenate([dz_err, zeros_c]),
        vx=np.concatenate([-dxy * sphi, zeros_c]), vy=np.concatenate([dxy * cphi, zeros_c]),
        vz=np.concatenate([dz, zeros_c]),
        fromPV=np.concatenate([from_pv, izeros_c + 1]).astype(np.int32),
        pvAssocQuality=np.concatenate([np.select([from_pv == 3, from_pv == 2, from_pv == 1], [7, 4, 1], 0),
                                       izeros_c]).astype(np.int32),
        lostInnerHits=np.concatenate([lost_inner, izeros_c]).astype(np.int32),
        numberOfPixelHits=np.concatenate([pixel_hits, izeros_c]).astype(np.int32),
        trkChi2=np.concatenate([chi2, zeros_c]), trkQuality=np.concatenate([np.full(nt, 4), izeros_c]).astype(np.int32),
        hcalFraction=hcal_fraction.astype(np.float64), genOrigin=np.concatenate([p.origin[t], p.origin[cells.leader[c]]]),
        source=np.concatenate([t, cells.leader[c]]))
    order = np.lexsort((-out.pt, out.event))
    return PFCandidates(**{f.name: (getattr(out, f.name)[order] if getattr(out, f.name) is not None else None)
                           for f in fields(out)})
