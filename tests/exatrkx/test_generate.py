"""The ACTS sample: TrackML-like hits with consistent truth, written NanoAOD-style."""

from __future__ import annotations

import awkward as ak
import numpy as np
import pytest
import uproot

from sonic_hep.data.exatrkx.simulation import GunConfig, SimulationError

from tests.exatrkx.conftest import EVENTS


def test_branches_and_truth(events_file):
    with uproot.open(events_file) as file:
        tree = file["Events"]
        assert tree.num_entries == EVENTS
        names = set(tree.keys())
        for field in ("x", "y", "z", "volume", "layer", "module", "cell_count", "cell_value", "size0", "size1",
                      "particle", "sequence"):
            assert f"Hit_{field}" in names
        for field in ("id", "pdg", "q", "vx", "vy", "vz", "px", "py", "pz", "pt", "eta", "phi", "nhits", "primary"):
            assert f"Particle_{field}" in names
        events = tree.arrays(library="ak")
    gun = GunConfig()
    assert np.all(events.nParticle <= gun.vertices * gun.particles_per_vertex * 1.2)
    assert np.all(events.nHit > 3 * events.nParticle)  # a few pixel layers per particle
    hits, particles = events[0], events[0]
    hit_particle = ak.to_numpy(hits.Hit_particle)
    n_particles = int(particles.nParticle)
    assert hit_particle.min() >= 0 and hit_particle.max() <= n_particles
    # the particles' hit counts are the hits that point at them
    np.testing.assert_array_equal(np.bincount(hit_particle, minlength=n_particles + 1)[1:],
                                  ak.to_numpy(particles.Particle_nhits))
    # pixel-only read-out: generic-detector pixel volumes, clusters of at least one cell
    assert set(np.unique(ak.to_numpy(hits.Hit_volume))) <= {7, 8, 9}
    assert ak.all(events.Hit_cell_count >= 1) and ak.all(events.Hit_size0 >= 1)
    r = np.hypot(ak.to_numpy(hits.Hit_x), ak.to_numpy(hits.Hit_y))
    assert 25 < r.min() and r.max() < 200  # mm: the pixel detector
    pt = ak.to_numpy(particles.Particle_pt)
    assert pt.min() >= gun.pt_min * 0.99 and pt.max() <= gun.pt_max * 1.01
    # the hit sequence follows the particle outwards: for barrel hits r grows with the sequence
    barrel = (ak.to_numpy(hits.Hit_volume) == 8) & (hit_particle > 0)
    seq = ak.to_numpy(hits.Hit_sequence)
    order = np.lexsort((seq[barrel], hit_particle[barrel]))
    same = np.diff(hit_particle[barrel][order]) == 0
    assert np.mean(np.diff(r[barrel][order])[same] > 0) > 0.95


def test_bad_settings_are_named():
    with pytest.raises(SimulationError, match="pT range"):
        GunConfig(pt_min=2.0, pt_max=1.0)
    with pytest.raises(SimulationError, match="--vertices"):
        GunConfig(vertices=0)
