"""Pile-up: extra minimum-bias pp interactions from a parametric model (cheap; Pythia's SoftQCD would
cost ~20× the hard event at ⟨μ⟩ = 30).

Per bunch crossing the number of extra interactions is Poisson(μ). Each interaction sits at its own
z (Gaussian luminous region, σ_z = 3.5 cm, like the hard vertex) and emits, flat in |η| < 5:

* charged pions: negative-binomial multiplicity (mean 50, k = 1.5 — about dN/dη ≈ 5 as measured at
  13 TeV), pT ~ Gamma(1.7, 0.3 GeV) (⟨pT⟩ ≈ 0.5 GeV);
* photons (from π0 decays): as many as charged pions on average, pT ~ Gamma(1.5, 0.2 GeV);
* neutral hadrons (K0L, n): 12 % of the charged multiplicity, pT ~ Gamma(1.7, 0.35 GeV).

What matters downstream is what CMS relies on to fight pile-up: charged pile-up tracks point to
another vertex in z (dz of centimetres), neutral pile-up does not, and its density scales with μ.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BEAMSPOT_SIGMA_Z_CM = 3.5
MASS = {211: 0.13957, 22: 0.0, 130: 0.497611}


@dataclass
class Pileup:
    """Pile-up particles of a batch (flat), positions relative to each event's hard vertex (cm)."""

    event: np.ndarray
    vertex: np.ndarray  # pile-up interaction number within the event
    pid: np.ndarray
    charge: np.ndarray
    px: np.ndarray
    py: np.ndarray
    pz: np.ndarray
    e: np.ndarray
    z: np.ndarray
    n_interactions: np.ndarray  # per event
    hard_z: np.ndarray  # per event: z of the hard-scatter vertex in the detector (cm)
    vertex_z: list[np.ndarray]  # per event: z of each interaction (relative to the hard vertex)


def _species(rng: np.random.Generator, n_charged: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Multiplicities of photons and neutral hadrons accompanying ``n_charged`` charged pions."""
    return rng.poisson(n_charged * 1.0), rng.poisson(n_charged * 0.12)


def generate_pileup(rng: np.random.Generator, mu: float, n_events: int) -> Pileup:
    """Pile-up for ``n_events`` bunch crossings at mean interaction count ``mu`` (0: none)."""
    n_int = rng.poisson(mu, n_events) if mu > 0 else np.zeros(n_events, dtype=np.int64)
    total = int(n_int.sum())
    hard_z = rng.normal(0.0, BEAMSPOT_SIGMA_Z_CM, n_events)
    int_event = np.repeat(np.arange(n_events), n_int)
    int_z = rng.normal(0.0, BEAMSPOT_SIGMA_Z_CM, total) - hard_z[int_event]
    k, mean = 1.5, 50.0
    n_ch = rng.negative_binomial(k, k / (k + mean), total)
    n_gamma, n_neutral = _species(rng, n_ch)
    parts = []
    for pid, counts, shape, scale in ((211, n_ch, 1.7, 0.30), (22, n_gamma, 1.5, 0.20), (130, n_neutral, 1.7, 0.35)):
        n = int(counts.sum())
        owner = np.repeat(np.arange(total), counts)
        pt = rng.gamma(shape, scale, n)
        eta = rng.uniform(-5.0, 5.0, n)
        phi = rng.uniform(-np.pi, np.pi, n)
        charge = rng.choice((-1.0, 1.0), n) if pid == 211 else np.zeros(n)
        parts.append((owner, np.where(charge != 0, pid * charge, pid).astype(np.int64), charge, pt, eta, phi,
                      np.full(n, MASS[pid])))
    owner, pid, charge, pt, eta, phi, mass = (np.concatenate(c) for c in zip(*parts))
    order = np.argsort(int_event[owner] if owner.size else owner, kind="stable")
    owner, pid, charge, pt, eta, phi, mass = (a[order] for a in (owner, pid, charge, pt, eta, phi, mass))
    px, py, pz = pt * np.cos(phi), pt * np.sin(phi), pt * np.sinh(eta)
    e = np.sqrt(px**2 + py**2 + pz**2 + mass**2)
    first = np.cumsum(n_int) - n_int
    return Pileup(event=int_event[owner], vertex=owner - first[int_event[owner]] if owner.size else owner,
                  pid=pid, charge=charge, px=px, py=py, pz=pz, e=e, z=int_z[owner], n_interactions=n_int, hard_z=hard_z,
                  vertex_z=np.split(int_z, np.cumsum(n_int)[:-1]))
