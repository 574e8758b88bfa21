"""Ionisation deposits of the particles a ProtoDUNE-SP readout window sees.

Every particle becomes a list of point deposits (position, time, ionisation electrons) along its
path, stepped every ``STEP`` cm, with a truth category (track-like or EM-shower-like) and a Michel
flag, which is what the hit classifier learns. The physics is parametrised, not transported
(no Geant4 here), but each ingredient is the standard one a LArTPC physicist would recognise:

* **Tracks** (muons, pions, protons): residual-range energy loss (Bragg peak: ``dE/dx`` rises as
  the particle stops), Landau fluctuations (Moyal-distributed), multiple Coulomb scattering with the
  Highland width ``13.6 MeV / (β p) √(step / X0)`` at the local momentum, Birks recombination.
* **Delta rays** along muon and pion tracks: ``dN/dT ∝ 1/T²`` above 5 MeV (about one per 50 cm).
* **EM showers** (beam electrons, π⁰ photons, bremsstrahlung): a longitudinal Gamma profile with
  its maximum at ``ln(E/Ec) ∓ 0.5`` radiation lengths (X0 = 14 cm, Ec = 32.8 MeV), a transverse
  spread of a fraction of the Molière radius growing with depth, made of short electron stubs whose
  total length carries the energy; photons first travel an exponential conversion distance (9/7 X0).
* **Michel electrons** from stopping μ⁺ (and the 25 % of μ⁻ that decay rather than being
  captured): Michel energy spectrum up to 52.8 MeV, a scattered electron track carrying ~70 % of the
  energy and bremsstrahlung photons carrying the rest; decay time exponential (2.2 µs).
* **Cosmic muons**: cos³θ zenith angles on the top face, momentum ∝ (p + 2 GeV)^-2.7, uniform in
  time over the readout window plus one drift time (so some arrive early or late and are cut).
* **Beam particles** (ProtoDUNE's H4-VLE beam line: π⁺, e⁺, p, μ⁺ at 1–7 GeV/c) entering the
  upstream face of the x < 0 volume; pions interact after an exponential distance (λ ≈ 110 cm)
  producing protons, pions and π⁰ photons, or stop and decay (π → μ → e).

All quantities are in cm, µs and MeV. Each generator loops over particles (tens per event) and is
vectorised along each particle.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .geometry import Geometry

TRACK, SHOWER = 0, 1

STEP = 0.2                 #: cm between deposits along a path
X0 = 14.0                  #: radiation length of LAr (cm)
MOLIERE = 9.04             #: Molière radius of LAr (cm)
CRITICAL_ENERGY = 32.8     #: electron critical energy in LAr (MeV)
ELECTRONS_PER_MEV = 1e6 / 23.6   #: ionisation electrons per MeV (W = 23.6 eV)
MIP_DEDX = 2.1             #: minimum-ionising dE/dx (MeV/cm)
MUON_MASS, PION_MASS, PROTON_MASS, ELECTRON_MASS = 105.66, 139.57, 938.27, 0.511
MICHEL_MAX = 52.8          #: MeV


@dataclass
class Deposits:
    """Point deposits of ionisation.

    Attributes:
        xyz: positions (n, 3) in cm.
        t: creation time (µs after the trigger).
        electrons: ionisation electrons surviving recombination.
        category: ``TRACK`` or ``SHOWER`` (the hit classifier's truth).
        michel: whether the deposit belongs to a Michel electron (or its photons).
    """

    xyz: np.ndarray
    t: np.ndarray
    electrons: np.ndarray
    category: np.ndarray
    michel: np.ndarray

    def __len__(self) -> int:
        return len(self.t)

    @classmethod
    def empty(cls) -> Deposits:
        return cls(np.zeros((0, 3)), np.zeros(0), np.zeros(0), np.zeros(0, np.int8), np.zeros(0, bool))

    @classmethod
    def concat(cls, parts: list[Deposits]) -> Deposits:
        parts = [p for p in parts if len(p)]
        if not parts:
            return cls.empty()
        return cls(*(np.concatenate([getattr(p, name) for p in parts])
                     for name in ("xyz", "t", "electrons", "category", "michel")))


# -- material response ----------------------------------------------------------------------------
def recombination(dedx: np.ndarray, field_kv_cm: float = 0.5) -> np.ndarray:
    """Fraction of ionisation electrons escaping recombination (Birks' law, ICARUS parameters)."""
    return 0.8 / (1.0 + 0.0486 / (field_kv_cm * 1.396) * dedx)


def landau_factor(rng: np.random.Generator, n: int, width: float = 0.12) -> np.ndarray:
    """Energy-loss fluctuation per step: ``1 + width·Moyal`` (Moyal = −ln Z², Z normal), kept ≥ 0.3."""
    z = rng.standard_normal(n)
    moyal = -np.log(np.maximum(z * z, 1e-12)) - 1.27  # centred on the most probable value
    return np.clip(1.0 + width * moyal, 0.3, 6.0)


def _range_from_kinetic(kinetic: float, mass: float) -> float:
    """CSDA range (cm) of a charged particle (inverse of :func:`_kinetic_from_range`)."""
    if mass >= PROTON_MASS:
        return float((kinetic / 29.3) ** (1 / 0.58))
    if mass <= ELECTRON_MASS:
        return kinetic / MIP_DEDX
    root = (-6.0 + np.sqrt(36.0 + 8.0 * kinetic)) / 4.0
    return float(root * root)


def _kinetic_from_range(residual: np.ndarray, mass: float) -> np.ndarray:
    """Kinetic energy (MeV) left at residual range (cm): ``17 R^-0.42`` Bragg curve for protons,
    ``2 + 3/√R`` MeV/cm integrated for muons and pions (≈ the CSDA ranges: 300 MeV → 1.2 m), a flat MIP loss for electrons."""
    residual = np.maximum(residual, 0.05)
    if mass >= PROTON_MASS:
        return 29.3 * residual ** 0.58
    if mass <= ELECTRON_MASS:
        return MIP_DEDX * residual
    return 2.0 * residual + 6.0 * np.sqrt(residual)


def _dedx(residual: np.ndarray, mass: float) -> np.ndarray:
    residual = np.maximum(residual, 0.05)
    if mass >= PROTON_MASS:
        return np.minimum(17.0 * residual ** -0.42, 40.0)
    if mass <= ELECTRON_MASS:
        return np.full_like(residual, MIP_DEDX)
    return np.minimum(2.0 + 3.0 / np.sqrt(residual), 25.0)


# -- geometry helpers -----------------------------------------------------------------------------
def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def perpendicular_basis(direction: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two unit vectors perpendicular to ``direction`` and to each other."""
    helper = np.array([1.0, 0.0, 0.0]) if abs(direction[0]) < 0.9 else np.array([0.0, 1.0, 0.0])
    e1 = unit(np.cross(direction, helper))
    return e1, np.cross(direction, e1)


def tilt(rng: np.random.Generator, axis: np.ndarray, angles: np.ndarray) -> np.ndarray:
    """Unit vectors at polar ``angles`` (rad) around ``axis``, random azimuths; shape (n, 3)."""
    e1, e2 = perpendicular_basis(axis)
    phi = rng.uniform(0, 2 * np.pi, len(angles))
    return (np.cos(angles)[:, None] * axis + np.sin(angles)[:, None]
            * (np.cos(phi)[:, None] * e1 + np.sin(phi)[:, None] * e2))


def isotropic(rng: np.random.Generator, n: int) -> np.ndarray:
    return unit(rng.standard_normal((n, 3)))


def box_crossing(start: np.ndarray, direction: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[float, float]:
    """Path lengths where the ray enters and leaves the box (slab method); enter > leave: no crossing."""
    with np.errstate(divide="ignore", invalid="ignore"):
        t1 = (lo - start) / direction
        t2 = (hi - start) / direction
    t1 = np.where(direction == 0, np.where((start >= lo) & (start <= hi), -np.inf, np.inf), t1)
    t2 = np.where(direction == 0, np.where((start >= lo) & (start <= hi), np.inf, -np.inf), t2)
    return float(np.max(np.minimum(t1, t2))), float(np.min(np.maximum(t1, t2)))


def active_box(geo: Geometry) -> tuple[np.ndarray, np.ndarray]:
    return (np.array([geo.x_range[0], 0.0, 0.0]), np.array([geo.x_range[1], geo.height, geo.length]))


# -- particles ------------------------------------------------------------------------------------
def scattered_path(rng: np.random.Generator, start: np.ndarray, direction: np.ndarray, theta0: np.ndarray,
                   step: float = STEP) -> tuple[np.ndarray, np.ndarray]:
    """Mid-step points and directions of a path whose direction random-walks by ``theta0[k]`` (rad)
    per step in both transverse planes (multiple scattering)."""
    e1, e2 = perpendicular_basis(direction)
    kicks = rng.standard_normal((len(theta0), 2)) * theta0[:, None]
    walk = np.cumsum(kicks, axis=0)
    directions = unit(direction + walk[:, :1] * e1 + walk[:, 1:] * e2)
    ends = start + np.cumsum(directions * step, axis=0)
    return ends - 0.5 * step * directions, directions


def charged_track(rng: np.random.Generator, start: np.ndarray, direction: np.ndarray, kinetic: float, mass: float,
                  t0: float, max_length: float = np.inf, category: int = TRACK,
                  michel: bool = False) -> tuple[Deposits, np.ndarray, np.ndarray, bool]:
    """A charged particle from ``start`` until it stops or has gone ``max_length``.

    Returns (deposits, end point, end direction, stopped).
    """
    full_range = _range_from_kinetic(kinetic, mass)
    length = min(full_range, max_length)
    n = max(1, int(np.ceil(length / STEP)))
    s = (np.arange(n) + 0.5) * STEP
    residual = full_range - s
    kin = _kinetic_from_range(residual, mass)
    momentum = np.sqrt(kin * (kin + 2 * mass))
    beta = momentum / (kin + mass)
    theta0 = np.minimum(13.6 / (beta * momentum) * np.sqrt(STEP / X0), 0.5)
    points, directions = scattered_path(rng, start, direction, theta0)
    dedx = _dedx(residual, mass) * landau_factor(rng, n)
    electrons = dedx * STEP * ELECTRONS_PER_MEV * recombination(dedx)
    deposits = Deposits(points, np.full(n, t0), electrons, np.full(n, category, np.int8), np.full(n, michel))
    return deposits, points[-1] + 0.5 * STEP * directions[-1], directions[-1], full_range <= max_length


def delta_rays(rng: np.random.Generator, track: Deposits, t0: float, per_cm: float = 0.02,
               t_min: float = 5.0, t_max: float = 60.0) -> Deposits:
    """Knock-on electrons along a track: Poisson count, ``1/T²`` energies, forward-ish directions."""
    n = rng.poisson(per_cm * len(track) * STEP)
    if n == 0:
        return Deposits.empty()
    where = rng.integers(0, len(track), n)
    kinetic = t_min / (1 - rng.uniform(0, 1 - t_min / t_max, n))
    parent = unit(np.diff(track.xyz, axis=0).mean(axis=0)) if len(track) > 1 else np.array([0.0, -1.0, 0.0])
    directions = tilt(rng, parent, np.arccos(rng.uniform(0.3, 1.0, n)))
    return Deposits.concat([charged_track(rng, track.xyz[w], d, k, ELECTRON_MASS, t0, category=SHOWER)[0]
                            for w, d, k in zip(where, directions, kinetic)])


def em_shower(rng: np.random.Generator, vertex: np.ndarray, axis: np.ndarray, energy: float, t0: float,
              photon: bool = False, michel: bool = False) -> Deposits:
    """An electromagnetic shower of ``energy`` MeV started by an electron or a photon at ``vertex``."""
    axis = unit(axis)
    start = vertex + axis * rng.exponential(9.0 / 7.0 * X0) if photon else vertex
    if energy < 12.0:  # below a few critical energies: one Compton/photo-electron track
        return charged_track(rng, start, unit(isotropic(rng, 1)[0] * 0.3 + axis), energy, ELECTRON_MASS, t0,
                             category=SHOWER, michel=michel)[0]
    total_length = 0.9 * energy / MIP_DEDX
    n = max(2, int(total_length / 1.5))
    lengths = rng.exponential(1.5, n)
    lengths *= total_length / lengths.sum()
    t_max = max(np.log(energy / CRITICAL_ENERGY) + (0.5 if photon else -0.5), 0.3)
    b = 0.5
    depth = rng.gamma(1 + b * t_max, 1 / b, n) * X0
    depth[0] = 0.0  # the primary electron (or the e+e- pair) starts the shower: a short trunk
    lengths[0] = min(max(lengths[0], rng.exponential(0.6 * X0)), total_length)
    radius = MOLIERE * 0.12 * rng.exponential(1.0, n) * (0.3 + depth / (X0 * (t_max + 1)))
    radius[0] = 0.0
    e1, e2 = perpendicular_basis(axis)
    phi = rng.uniform(0, 2 * np.pi, n)
    origins = (start + depth[:, None] * axis + radius[:, None] * (np.cos(phi)[:, None] * e1
                                                                     + np.sin(phi)[:, None] * e2))
    spread = np.abs(rng.normal(0, 0.35, n)) * (0.5 + depth / (X0 * (t_max + 1)))
    spread[0] = 0.05
    directions = tilt(rng, axis, spread)
    steps = np.maximum(1, np.ceil(lengths / STEP).astype(np.int64))
    stub = np.repeat(np.arange(n), steps)
    along = (np.arange(len(stub)) - np.repeat(np.cumsum(steps) - steps, steps) + 0.5) * STEP
    xyz = origins[stub] + directions[stub] * along[:, None]
    dedx = MIP_DEDX * (1 + (stub == 0) * photon) * landau_factor(rng, len(stub))
    electrons = dedx * STEP * ELECTRONS_PER_MEV * recombination(dedx)
    m = len(stub)
    return Deposits(xyz, np.full(m, t0), electrons, np.full(m, SHOWER, np.int8), np.full(m, michel))


def michel_energy(rng: np.random.Generator) -> float:
    """A Michel electron energy: ``x²(3 − 2x)`` spectrum, x = E / 52.8 MeV (rejection sampling)."""
    while True:
        x, u = rng.uniform(0, 1, 2)
        if u < x * x * (3 - 2 * x):
            return float(x * MICHEL_MAX)


def michel_electron(rng: np.random.Generator, vertex: np.ndarray, t0: float) -> Deposits:
    """The decay electron of a stopped muon: a scattered track plus bremsstrahlung photons."""
    energy = michel_energy(rng)
    direction = isotropic(rng, 1)[0]
    parts = []
    track, _, _, _ = charged_track(rng, vertex, direction, 0.7 * energy, ELECTRON_MASS, t0, category=SHOWER,
                                   michel=True)
    # electrons scatter much more than the MIP formula's momentum suggests at these energies
    track.xyz = track.xyz + np.cumsum(rng.normal(0, 0.02, track.xyz.shape), axis=0)
    parts.append(track)
    n_brem = rng.poisson(1.2)
    for fraction in rng.dirichlet(np.ones(n_brem)) if n_brem else []:
        origin = track.xyz[rng.integers(0, len(track))]
        parts.append(em_shower(rng, origin, direction + 0.3 * isotropic(rng, 1)[0], 0.3 * energy * fraction, t0,
                               photon=True, michel=True))
    return Deposits.concat(parts)


def stopped_muon_decay(rng: np.random.Generator, end: np.ndarray, t0: float) -> Deposits:
    """μ⁺ (55 % at sea level) always decay; μ⁻ decay 25 % of the time, otherwise they are captured."""
    positive = rng.uniform() < 0.55
    if not positive and rng.uniform() > 0.25:
        return Deposits.empty()
    lifetime = 2.197 if positive else 0.6
    return michel_electron(rng, end, t0 + rng.exponential(lifetime))


def muon(rng: np.random.Generator, geo: Geometry, start: np.ndarray, direction: np.ndarray, kinetic: float,
         t0: float) -> Deposits:
    """A muon crossing or stopping in the active volume, with its delta rays and decay."""
    lo, hi = active_box(geo)
    enter, leave = box_crossing(start, direction, lo, hi)
    if leave <= max(enter, 0.0):
        return Deposits.empty()
    entry = start + direction * max(enter, 0.0)
    track, end, _, stopped = charged_track(rng, entry, direction, kinetic, MUON_MASS, t0,
                                           max_length=leave - max(enter, 0.0))
    parts = [track, delta_rays(rng, track, t0)]
    if stopped and np.all(end >= lo) and np.all(end <= hi):
        parts.append(stopped_muon_decay(rng, end, t0))
    return Deposits.concat(parts)


def cosmic_muons(rng: np.random.Generator, geo: Geometry, n: int, margin: float = 50.0) -> Deposits:
    """``n`` cosmic muons through the top of the detector, at random times in the readout window."""
    parts = []
    drift_us = geo.drift_length / geo.drift_velocity
    t_early = -geo.trigger_tick * geo.tick_us - drift_us
    t_late = (geo.ticks - geo.trigger_tick) * geo.tick_us
    for _ in range(n):
        cos_zenith = rng.uniform() ** 0.25
        sin_zenith = np.sqrt(1 - cos_zenith ** 2)
        phi = rng.uniform(0, 2 * np.pi)
        direction = np.array([sin_zenith * np.cos(phi), -cos_zenith, sin_zenith * np.sin(phi)])
        start = np.array([rng.uniform(geo.x_range[0] - margin, geo.x_range[1] + margin), geo.height,
                          rng.uniform(-margin, geo.length + margin)])
        start = start - direction * margin / max(cos_zenith, 0.2)  # start above, so inclined muons enter the sides
        a, b = 2.2e3, 202.0e3  # momentum ∝ (p + 2 GeV)^-2.7, p in [0.2, 200] GeV, inverse CDF
        p = (a ** -1.7 - rng.uniform() * (a ** -1.7 - b ** -1.7)) ** (-1 / 1.7) - 2.0e3
        kinetic = np.sqrt(p * p + MUON_MASS ** 2) - MUON_MASS
        parts.append(muon(rng, geo, start, direction, kinetic, rng.uniform(t_early, t_late)))
    return Deposits.concat(parts)


def beam_halo(rng: np.random.Generator, geo: Geometry, n: int) -> Deposits:
    """Muons of the beam halo: nearly parallel to z, anywhere on the upstream face, in time with the beam."""
    parts = []
    for _ in range(n):
        start = np.array([rng.uniform(*geo.x_range), rng.uniform(0, geo.height), 0.0])
        direction = unit(np.array([rng.normal(0, 0.03), rng.normal(0, 0.03), 1.0]))
        parts.append(muon(rng, geo, start, direction, rng.uniform(2e3, 8e3), rng.normal(0, 20.0)))
    return Deposits.concat(parts)


def hadronic_interaction(rng: np.random.Generator, vertex: np.ndarray, direction: np.ndarray, kinetic: float,
                         t0: float, geo: Geometry) -> Deposits:
    """A pion-argon inelastic interaction: protons, charged pions and a π⁰ sharing the energy."""
    parts = []
    lo, hi = active_box(geo)
    n_protons, n_pions = rng.poisson(1.5), rng.poisson(0.8)
    for _ in range(n_protons):
        d = tilt(rng, direction, np.arccos(rng.uniform(-0.2, 1.0, 1)))[0]
        _, leave = box_crossing(vertex, d, lo, hi)
        parts.append(charged_track(rng, vertex, d, min(rng.exponential(80.0), 0.4 * kinetic) + 20.0,
                                   PROTON_MASS, t0, max_length=max(leave, 0.0))[0])
    for _ in range(n_pions):
        d = tilt(rng, direction, np.arccos(rng.uniform(0.0, 1.0, 1)))[0]
        _, leave = box_crossing(vertex, d, lo, hi)
        track = charged_track(rng, vertex, d, rng.uniform(0.1, 0.5) * kinetic, PION_MASS, t0,
                              max_length=max(leave, 0.0))[0]
        parts += [track, delta_rays(rng, track, t0)]
    if rng.uniform() < 0.4:
        energy = rng.uniform(0.1, 0.5) * kinetic + 135.0
        share = rng.uniform(0.2, 0.8)
        d = tilt(rng, direction, np.arccos(rng.uniform(0.3, 1.0, 1)))[0]
        opening = max(2 * 135.0 / energy, 0.05)
        for fraction, angle in ((share, opening * (1 - share)), (1 - share, opening * share)):
            parts.append(em_shower(rng, vertex, tilt(rng, d, np.array([angle]))[0], energy * fraction, t0,
                                   photon=True))
    return Deposits.concat(parts)


BEAM_PARTICLES = {"pion": (PION_MASS, 0.5), "electron": (ELECTRON_MASS, 0.3), "proton": (PROTON_MASS, 0.15),
                  "muon": (MUON_MASS, 0.05)}


def beam_particle(rng: np.random.Generator, geo: Geometry, momenta: tuple[float, ...]) -> Deposits:
    """One beam particle entering the upstream face of the x < 0 volume at t = 0.

    ProtoDUNE's beam window is about 30 cm from the cathode, 4 m up, with the beam pointing down and
    toward the anode by about 10°; the same relative position is used at any detector size.
    """
    names = list(BEAM_PARTICLES)
    kind = names[rng.choice(len(names), p=[BEAM_PARTICLES[k][1] for k in names])]
    mass = BEAM_PARTICLES[kind][0]
    p = float(rng.choice(momenta)) * 1e3 * rng.normal(1.0, 0.03)
    kinetic = np.sqrt(p * p + mass * mass) - mass
    start = np.array([-0.1 * geo.drift_length, 0.7 * geo.height, 0.0])
    direction = unit(np.array([-0.18, -0.20, 0.96]) + rng.normal(0, 0.01, 3))
    lo, hi = active_box(geo)
    _, leave = box_crossing(start, direction, lo, hi)
    if kind == "electron":
        return em_shower(rng, start, direction, kinetic, 0.0)
    if kind != "pion":
        return muon(rng, geo, start, direction, kinetic, 0.0) if kind == "muon" else \
            charged_track(rng, start, direction, kinetic, mass, 0.0, max_length=leave)[0]
    interaction = rng.exponential(110.0)
    track, end, end_direction, stopped = charged_track(rng, start, direction, kinetic, mass, 0.0,
                                                       max_length=min(leave, interaction))
    parts = [track, delta_rays(rng, track, 0.0)]
    inside = bool(np.all(end >= lo) and np.all(end <= hi))
    if stopped and inside:  # π+ → μ+ ν (4.1 MeV muon) → e+ (Michel)
        d = isotropic(rng, 1)[0]
        mu, mu_end, _, _ = charged_track(rng, end, d, 4.1, MUON_MASS, 0.026)
        parts += [mu, michel_electron(rng, mu_end, rng.exponential(2.197))]
    elif inside and interaction < leave:
        remaining = float(_kinetic_from_range(np.array([_range_from_kinetic(kinetic, mass) - interaction]), mass)[0])
        parts.append(hadronic_interaction(rng, end, end_direction, remaining, 0.0, geo))
    return Deposits.concat(parts)
