"""Lost tracks: reconstructed tracks that no PF candidate carries (MiniAOD's ``lostTracks``), which the
from-MiniAOD ParticleNet models read (``jet_losttrack_*``).

CMS keeps as lost tracks the tracks above 0.95 GeV that particle flow did not turn into a charged candidate:
tracks PF rejected (e.g. a pT uncertainty too large for PF) and displaced tracks from V0 decays and
photon conversions that only the detached tracking iterations find. Here, vectorised over a batch:

* prompt tracks (produced at r < 20 cm) for which the detector made no PF track: kept with probability 0.5
  (the other half is not reconstructed at all), high-purity quality (``trkQuality`` 4), the PF tracks'
  resolutions;
* displaced tracks (20 ≤ r < 60 cm): found by the detached iterations with efficiency 0.7·(1 − r/60 cm),
  loose quality (1), no pixel hits, impact-parameter resolutions × 3.

Both need |η| < 2.5 and pT > 0.95 GeV. Pythia leaves K⁰s and Λ undecayed here (cτ > 10 mm), so in generated
events lost tracks are mostly the prompt kind (~3 per ttbar event at ⟨μ⟩ = 30, pile-up included).

The fields are the PF candidates' (``dxy``, ``dz`` and the reference point ``vx, vy, vz`` of the straight
track relative to the hard vertex, ``fromPV``, pixel hits, χ²/ndf, quality) plus ``stripLayers``, the
strip-tracker layers (radii below) outside the production radius. Random numbers come from a generator of
their own, so adding lost tracks changed no other branch of an event generated with the same seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .detector import PIXEL_LAYERS_CM, Particles, PFCandidates

#: barrel strip layers (cm): TIB 4, TOB 6
STRIP_LAYERS_CM = np.array([25.5, 33.9, 41.8, 49.8, 60.8, 69.2, 78.0, 86.8, 96.5, 108.0])
MIN_PT = 0.95


@dataclass
class LostTracks:
    """Flat over a batch, sorted by event then decreasing pT (``LostTracks_*`` fields)."""

    event: np.ndarray
    pt: np.ndarray
    eta: np.ndarray
    phi: np.ndarray
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
    lostInnerHits: np.ndarray
    numberOfPixelHits: np.ndarray
    stripLayers: np.ndarray
    trkChi2: np.ndarray
    trkQuality: np.ndarray


def find_lost_tracks(rng: np.random.Generator, p: Particles, cands: PFCandidates) -> LostTracks:
    """The lost tracks of a batch's particles, given the PF candidates the detector made of them."""
    pt = np.hypot(p.px, p.py)
    with np.errstate(divide="ignore", invalid="ignore"):
        eta = np.arcsinh(np.where(pt > 0, p.pz / pt, np.sign(p.pz) * 1e9))
    phi = np.arctan2(p.py, p.px)
    r = np.hypot(p.x, p.y)
    in_pf = np.zeros(pt.size, dtype=bool)
    in_pf[cands.source[cands.charge != 0]] = True
    usable = (p.charge != 0) & ~in_pf & (np.abs(eta) < 2.5) & (pt > MIN_PT) & ~np.isin(np.abs(p.pid), (12, 14, 16))
    prompt = usable & (r < 20.0) & (rng.random(pt.size) < 0.5)
    displaced = usable & (r >= 20.0) & (r < 60.0) & (rng.random(pt.size) < 0.7 * (1 - r / 60.0))
    t = np.flatnonzero(prompt | displaced)
    far = displaced[t]
    t_pt = pt[t] * np.maximum(1.0 + rng.standard_normal(t.size) * np.hypot(0.01, 1.5e-4 * pt[t]) * np.where(far, 2, 1),
                              0.05)
    t_eta = eta[t] + rng.normal(0.0, 0.001, t.size)
    t_phi = phi[t]
    cphi, sphi = np.cos(t_phi), np.sin(t_phi)
    dxy_err = np.hypot(0.0020, 0.0090 / t_pt) * np.where(far, 3.0, 1.0)
    dz_err = np.hypot(0.0030, 0.0120 / t_pt) * np.sqrt(np.cosh(t_eta)) * np.where(far, 3.0, 1.0)
    dxy = -p.x[t] * sphi + p.y[t] * cphi + rng.standard_normal(t.size) * dxy_err
    dz = p.z[t] - (p.x[t] * cphi + p.y[t] * sphi) * (p.pz[t] / pt[t]) + rng.standard_normal(t.size) * dz_err
    inside = np.searchsorted(PIXEL_LAYERS_CM, r[t])
    pixel_hits = np.maximum(4 - inside, 0)
    strip_layers = STRIP_LAYERS_CM.size - np.searchsorted(STRIP_LAYERS_CM, r[t])
    ndf = 2 * (pixel_hits + strip_layers) - 5
    chi2 = rng.chisquare(np.maximum(ndf, 1)) / np.maximum(ndf, 1)
    compatible = (np.abs(dz) < 3 * dz_err) & (np.abs(dxy) < 3 * dxy_err)
    from_pv = np.select([compatible, np.abs(dz) < 0.1, np.abs(dz) < 0.3], [3, 2, 1], 0)
    out = LostTracks(
        event=p.event[t], pt=t_pt, eta=t_eta, phi=t_phi, charge=p.charge[t].astype(np.int32),
        pdgId=(211 * np.where(p.charge[t] < 0, -1, 1)).astype(np.int32), dxy=dxy, dz=dz, dxyError=dxy_err,
        dzError=dz_err, vx=-dxy * sphi, vy=dxy * cphi, vz=dz, fromPV=from_pv.astype(np.int32),
        lostInnerHits=np.minimum(inside, 2).astype(np.int32) - (inside == 0),
        numberOfPixelHits=pixel_hits.astype(np.int32), stripLayers=strip_layers.astype(np.int32), trkChi2=chi2,
        trkQuality=np.where(far, 1, 4).astype(np.int32))
    order = np.lexsort((-out.pt, out.event))
    return LostTracks(**{name: value[order] for name, value in vars(out).items()})
