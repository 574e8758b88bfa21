"""ACTS simulation of pile-up-like events: particle gun → Fatras (generic detector, 2 T) → digitization.

Each event is ``vertices`` primary vertices (Gaussian beam spot, long in z like the LHC's luminous
region) with ``particles_per_vertex`` charged pions each, pT log-uniform, η uniform: a particle gun
with enough particles to emulate pile-up, as the issue asks. Fatras propagates them through the
generic detector (the TrackML-like ACTS example detector) with multiple scattering, energy loss and
photon conversions; the geometric digitization (:mod:`.digitization`) makes clusters of cells.

ACTS writes TrackML-style CSV (hits, cells, measurements, measurement→sim-hit map, particles) to a
scratch directory; :mod:`.trackml` turns them into per-event arrays. Everything runs offline from
the ``pyacts`` wheel.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ...framework.errors import SonicError
from ...framework.extras import require
from .digitization import DETECTORS, write_digitization_config


class SimulationError(SonicError):
    """ACTS is missing or a simulation setting cannot be used."""


@dataclass(frozen=True)
class GunConfig:
    """The particle gun (GeV, mm).

    Attributes:
        vertices: primary vertices per event (pile-up interactions).
        particles_per_vertex: charged pions per vertex.
        pt_min, pt_max: transverse-momentum range, sampled log-uniform.
        eta_max: |η| range, sampled uniform.
        sigma_z, sigma_xy: beam-spot widths of the vertex distribution.
    """

    vertices: int = 50
    particles_per_vertex: int = 20
    pt_min: float = 0.4
    pt_max: float = 20.0
    eta_max: float = 3.0
    sigma_z: float = 50.0
    sigma_xy: float = 0.0125

    def __post_init__(self) -> None:
        if self.vertices < 1 or self.particles_per_vertex < 1:
            raise SimulationError("--vertices and --particles-per-vertex must be at least 1")
        if not 0 < self.pt_min < self.pt_max:
            raise SimulationError(f"pT range ({self.pt_min}, {self.pt_max}) GeV must satisfy 0 < min < max")
        if self.eta_max <= 0:
            raise SimulationError("--eta-max must be positive")


def _import_acts():
    acts = require("acts", "the Exa.TrkX simulation", SimulationError)
    require("acts.examples.json", "the Exa.TrkX simulation", SimulationError)  # registers readDigiConfigFromJson
    return acts, require("acts.examples.simulation", "the Exa.TrkX simulation", SimulationError)


def simulate(events: int, directory: str | os.PathLike, gun: GunConfig = GunConfig(), seed: int = 1,
             detector: str = "pixel", threads: int = 1) -> Path:
    """Runs the ACTS chain for ``events`` events; writes TrackML-style CSV files into ``directory``.

    Args:
        events: number of events.
        directory: an existing scratch folder (files ``event<N>-{hits,cells,measurements,...}.csv``).
        gun: particle-gun settings.
        seed: random seed of generation, simulation and digitization (same seed, same events).
        detector: ``"pixel"`` (the Exa.TrkX pixel-only setting) or ``"full"`` (pixels and strips).
        threads: ACTS worker threads.

    Returns:
        ``directory`` as a Path.
    """
    if detector not in DETECTORS:
        raise SimulationError(f"unknown detector {detector!r}; choose one of {sorted(DETECTORS)}")
    acts, sim = _import_acts()
    u = acts.UnitConstants
    directory = Path(directory)
    level = acts.logging.WARNING

    config = acts.examples.GenericDetector.Config()
    config.logLevel = config.layerLogLevel = config.surfaceLogLevel = config.volumeLogLevel = level
    tracking_geometry = acts.examples.GenericDetector(config).trackingGeometry()
    field = acts.ConstantBField(acts.Vector3(0.0, 0.0, 2.0 * u.T))
    digi_file = write_digitization_config(tracking_geometry, directory / "digitization.json", detector)

    sequencer = acts.examples.Sequencer(events=events, numThreads=threads, logLevel=level,
                                        outputDir=str(directory), trackFpes=False)
    rnd = acts.examples.RandomNumbers(seed=seed)
    beam = acts.examples.GaussianVertexGenerator(
        mean=acts.Vector4(0, 0, 0, 0),
        stddev=acts.Vector4(gun.sigma_xy * u.mm, gun.sigma_xy * u.mm, gun.sigma_z * u.mm, 0))
    sim.addParticleGun(
        sequencer,
        sim.MomentumConfig(gun.pt_min * u.GeV, gun.pt_max * u.GeV, transverse=True, logUniform=True),
        sim.EtaConfig(-gun.eta_max, gun.eta_max, uniform=True),
        sim.ParticleConfig(gun.particles_per_vertex, acts.PdgParticle.ePionPlus, randomizeCharge=True),
        multiplicity=gun.vertices, vtxGen=beam, rnd=rnd, logLevel=level)
    sim.addFatras(sequencer, tracking_geometry, field, rnd=rnd, outputDirCsv=str(directory), logLevel=level)
    sim.addDigitization(sequencer, tracking_geometry, field, digiConfigFile=digi_file, outputDirCsv=str(directory),
                        rnd=rnd, logLevel=level)
    sequencer.run()
    return directory
