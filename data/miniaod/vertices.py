"""Secondary vertices from displaced decays, in the spirit of CMS's inclusive vertex finder (IVF).

The tracks (PF charged candidates with pT > 0.8 GeV) coming from the same weakly decaying b or c
hadron, or from the same τ, form a vertex if there are at least two of them. The vertex position is
the true decay point smeared with σ_xy = 120 µm/√(n−1) and σ_z = 180 µm/√(n−1); χ²/ndf follows
χ²(2n − 3). IVF's quality cuts are applied: 3D flight-distance significance > 3 and mass < 6.5 GeV.
Kinematics are the sum of the track four-momenta (pion masses). Vertices are sorted per event by
decreasing transverse-flight significance, as CMS's b-tag inputs order them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .detector import Particles, PFCandidates
from .pythia_events import GenBatch


@dataclass
class SecondaryVertices:
    """Flat over a batch; NanoAOD ``SV_*`` names (``chi2`` is χ²/ndf, ``pAngle`` in radians)."""

    event: np.ndarray
    pt: np.ndarray
    eta: np.ndarray
    phi: np.ndarray
    mass: np.ndarray
    x: np.ndarray
    y: np.ndarray
    z: np.ndarray
    ntracks: np.ndarray
    ndof: np.ndarray
    chi2: np.ndarray
    dxy: np.ndarray
    dxySig: np.ndarray
    dlen: np.ndarray
    dlenSig: np.ndarray
    pAngle: np.ndarray
    genFlavour: np.ndarray  # 5, 4 (heavy-flavour hadron) or 15 (τ)
    key: np.ndarray  # the decaying generator particle (truth, not written)


def find_vertices(rng: np.random.Generator, batch: GenBatch, particles: Particles, cands: PFCandidates,
                  decay_of: np.ndarray, flavour_of: np.ndarray) -> SecondaryVertices:
    """Builds the vertices of a batch.

    Args:
        decay_of: per generator particle, the decaying hadron or τ it comes from (-1: none).
        flavour_of: per generator particle index of a decaying particle, its flavour (5, 4, 15).
    """
    gen = particles.gen[cands.source]
    usable = (cands.charge != 0) & (cands.pt > 0.8) & (gen >= 0)
    idx = np.flatnonzero(usable)
    mother = decay_of[gen[idx]]
    idx, mother = idx[mother >= 0], mother[mother >= 0]
    keys, inverse, ntrk = np.unique(mother, return_inverse=True, return_counts=True)
    mass_pi = 0.13957
    p = np.stack([cands.px[idx], cands.py[idx], cands.pz[idx]], axis=1)
    e = np.sqrt((p**2).sum(axis=1) + mass_pi**2)
    sums = np.stack([np.bincount(inverse, w, minlength=keys.size) for w in (*p.T, e)], axis=1)
    keep = ntrk >= 2
    keys, sums, ntrk = keys[keep], sums[keep], ntrk[keep]
    # decay point: where the decaying particle's daughters were produced
    d1 = batch.daughter1[keys]
    truth = np.stack([batch.x[d1], batch.y[d1], batch.z[d1]], axis=1)
    scale = 1.0 / np.sqrt(ntrk - 1)
    sigma = np.stack([0.012 * scale, 0.012 * scale, 0.018 * scale], axis=1)
    pos = truth + rng.standard_normal(truth.shape) * sigma
    dxy = np.hypot(pos[:, 0], pos[:, 1])
    dxy_err = 0.012 * scale
    dlen = np.linalg.norm(pos, axis=1)
    dlen_err = np.sqrt((pos**2 * sigma**2).sum(axis=1)) / np.maximum(dlen, 1e-9)
    px, py, pz, en = sums.T
    pt = np.hypot(px, py)
    pabs = np.sqrt(px**2 + py**2 + pz**2)
    mass = np.sqrt(np.maximum(en**2 - pabs**2, 0.0))
    cos_angle = (pos * sums[:, :3]).sum(axis=1) / np.maximum(dlen * pabs, 1e-12)
    ndof = 2 * ntrk - 3
    good = (dlen / dlen_err > 3.0) & (mass < 6.5)
    event = batch.event[keys]
    order = np.lexsort((-(dxy / dxy_err), event))
    order = order[good[order]]
    with np.errstate(divide="ignore", invalid="ignore"):
        eta = np.arcsinh(pz / pt)
    return SecondaryVertices(
        event=event[order], pt=pt[order], eta=eta[order], phi=np.arctan2(py, px)[order], mass=mass[order],
        x=pos[order, 0], y=pos[order, 1], z=pos[order, 2], ntracks=ntrk[order].astype(np.int32),
        ndof=ndof[order].astype(np.float64), chi2=(rng.chisquare(ndof) / ndof)[order], dxy=dxy[order],
        dxySig=(dxy / dxy_err)[order], dlen=dlen[order], dlenSig=(dlen / dlen_err)[order],
        pAngle=np.arccos(np.clip(cos_angle, -1, 1))[order], genFlavour=flavour_of[keys][order].astype(np.int32),
        key=keys[order])
