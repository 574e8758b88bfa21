"""The LArTPC simulation: geometry, particle physics, waveforms → ROIs → hits, and the generated file."""

from __future__ import annotations

import json

import numpy as np
import pytest
import uproot

from sonic_hep.data.protodune import particles as P
from sonic_hep.data.protodune.geometry import Geometry
from sonic_hep.data.protodune.readout import (TRUTH_NONE, TRUTH_SHOWER, TRUTH_TRACK, ReadoutConfig, _runs,
                                              find_hits, find_rois, read_plane)
from sonic_hep.data.protodune.simulate import Simulation


def test_full_geometry_is_protodune_sized():
    geo = Geometry.preset("full")
    assert geo.n_tpc == 6 and geo.n_planes == 3
    assert geo.wires(2) == 460                      # 230 cm / 5 mm collection wires per APA
    assert geo.wires(0) == geo.wires(1) == 1074     # ±35.7° induction wires across 2.3 m × 6 m, no wrapping
    assert 15000 < geo.n_tpc * sum(geo.wires(p) for p in range(3)) < 16000   # ProtoDUNE-SP: 15,360 channels
    assert geo.drift_ticks == pytest.approx(4500)    # 3.6 m at 1.6 mm/µs in 0.5 µs ticks


def test_wire_and_tick_projections():
    geo = Geometry.preset("full")
    z = np.array([0.1, 50.0, 229.9])
    y = np.full(3, 300.0)
    assert np.array_equal(geo.wire(2, y, z), np.floor(z / 0.5).astype(int))
    u = geo.wire(0, y, z)
    assert np.all(np.diff(u) > 0) and np.all((u >= 0) & (u < geo.wires(0)))
    # one pitch perpendicular to the U wires moves one wire
    angle = np.radians(35.7)
    step = 0.5 * np.array([np.cos(angle), -np.sin(angle)])  # (dz, dy)
    assert geo.wire(0, np.array([300.0 + step[1]]), np.array([100.0 + step[0]]))[0] - \
        geo.wire(0, np.array([300.0]), np.array([100.0]))[0] == 1
    assert geo.tpc(np.array([-10.0, 10.0, 10.0]), np.array([10.0, 10.0, 600.0])).tolist() == [0, 3, 5]
    # charge made at the anode arrives at the trigger tick; at the cathode one drift time later
    assert geo.tick(np.array([-360.0, 0.0]), np.zeros(2)).tolist() == pytest.approx([500, 5000])


def test_muon_bragg_peak_and_range():
    rng = np.random.default_rng(3)
    kinetic = 300.0  # MeV: ~1.2 m in LAr
    track, end, _, stopped = P.charged_track(rng, np.zeros(3), np.array([0.0, -1.0, 0.0]), kinetic, P.MUON_MASS, 0.0)
    assert stopped
    length = len(track) * P.STEP
    assert 100 < length < 140
    per_step = track.electrons
    assert per_step[-10:].mean() > 2.0 * per_step[: len(per_step) // 2].mean()  # rising dE/dx near the stop
    assert np.linalg.norm(end) == pytest.approx(length, rel=0.05)               # little scattering at 300 MeV


def _width(deposits: P.Deposits) -> float:
    """RMS distance of deposits from their best straight line (the principal axis)."""
    xyz = deposits.xyz - deposits.xyz.mean(axis=0)
    singular = np.linalg.svd(xyz, compute_uv=False)
    return float(np.sqrt((singular[1] ** 2 + singular[2] ** 2) / len(xyz)))


def test_shower_is_wider_than_a_track_and_carries_its_energy():
    rng = np.random.default_rng(4)
    axis = np.array([0.0, 0.0, 1.0])
    shower = P.em_shower(rng, np.zeros(3), axis, 1000.0, 0.0)
    track = P.charged_track(rng, np.zeros(3), axis, 1000.0, P.MUON_MASS, 0.0, max_length=40.0)[0]
    assert np.all(shower.category == P.SHOWER) and np.all(track.category == P.TRACK)
    assert _width(track) < 0.2 < 1.0 < _width(shower)
    deposited = shower.electrons.sum() / (P.ELECTRONS_PER_MEV * 0.7)  # ~70 % escape recombination
    assert 800 < deposited < 1100


def test_michel_spectrum_endpoint():
    rng = np.random.default_rng(5)
    energies = np.array([P.michel_energy(rng) for _ in range(2000)])
    assert energies.max() <= P.MICHEL_MAX and energies.mean() == pytest.approx(0.7 * P.MICHEL_MAX, rel=0.05)


def test_runs_match_a_loop():
    rng = np.random.default_rng(6)
    mask = rng.uniform(size=(7, 40)) > 0.6
    starts, lengths = _runs(mask)
    expected = []
    for w in range(mask.shape[0]):
        t = 0
        while t < mask.shape[1]:
            if mask[w, t]:
                s = t
                while t < mask.shape[1] and mask[w, t]:
                    t += 1
                expected.append((w * mask.shape[1] + s, t - s))
            t += 1
    assert list(zip(starts.tolist(), lengths.tolist())) == expected


def test_hit_finder_splits_overlapping_pulses_and_measures_them():
    ticks = np.arange(200, dtype=np.float64)
    pulse = lambda centre, area, sigma: area * np.exp(-0.5 * ((ticks - centre) / sigma) ** 2) / (np.sqrt(2 * np.pi) * sigma)  # noqa: E731
    track = pulse(60, 400, 2.0) + pulse(72, 300, 2.0)
    shower = pulse(150, 500, 3.0)
    total = np.stack([track + shower, np.zeros(200)])
    shower_grid = np.stack([shower, np.zeros(200)])
    hits = find_hits(total.astype(np.float32), total, shower_grid, np.zeros_like(total), ReadoutConfig())
    assert hits["wire"].tolist() == [0, 0, 0]
    assert hits["peak_tick"] == pytest.approx([60, 72, 150], abs=0.6)
    assert hits["truth"].tolist() == [TRUTH_TRACK, TRUTH_TRACK, TRUTH_SHOWER]
    assert hits["integral"][2] == pytest.approx(500, rel=0.05)
    assert hits["rms"][2] == pytest.approx(3.0, rel=0.1)


def test_noise_alone_makes_only_none_hits():
    rng = np.random.default_rng(7)
    cfg = ReadoutConfig(hit_threshold=6.0, roi_threshold=6.0)  # low thresholds: noise crosses them
    geo = Geometry.preset("small")
    out = read_plane(rng, geo, cfg, P.Deposits.empty(), 2)
    assert len(out.hits["wire"]) > 10
    assert set(out.hits["truth"].tolist()) == {TRUTH_NONE}
    assert len(out.adc) == out.roi_length.astype(int).sum()


def test_rois_keep_every_sample_above_threshold():
    rng = np.random.default_rng(8)
    wf = rng.normal(0, 3, (5, 300)).astype(np.float32)
    cfg = ReadoutConfig()
    wire, start, length, adc = find_rois(wf, cfg)
    kept = np.zeros_like(wf, dtype=bool)
    for w, s, n in zip(wire, start, length):
        kept[w, s:s + n] = True
    assert np.all(kept[wf > cfg.roi_threshold])
    assert np.array_equal(adc, np.rint(wf[kept]).astype(np.int16))


def test_events_are_reproducible_and_labelled(small_simulation):
    a = small_simulation.event(np.random.default_rng([5, 1]))
    b = small_simulation.event(np.random.default_rng([5, 1]))
    assert np.array_equal(a["Adc"], b["Adc"]) and np.array_equal(a["Hit"]["peak_tick"], b["Hit"]["peak_tick"])
    hits = a["Hit"]
    assert len(hits["wire"]) > 200
    assert {TRUTH_TRACK, TRUTH_SHOWER} <= set(hits["truth"].tolist())
    assert not np.any(hits["michel"] & (hits["truth"] != TRUTH_SHOWER))  # Michel electrons are EM activity
    assert len(a["Adc"]) == a["Roi"]["length"].astype(int).sum()


def test_generated_file_layout(small_file, small_simulation):
    with uproot.open(small_file) as f:
        tree = f["Events"]
        assert tree.num_entries == 2
        arrays = tree.arrays(["nHit", "Hit_truth", "nRoi", "Roi_length", "nAdc", "event"], library="ak")
        settings = json.loads(f["protodune_simulation"])
    assert arrays["event"].tolist() == [0, 1]
    assert (np.asarray(arrays["nAdc"]) == [int(np.sum(x)) for x in arrays["Roi_length"]]).all()
    assert settings["geometry"]["ticks"] == small_simulation.geometry.ticks
    # the same event regenerated in memory from its random stream is identical
    event = small_simulation.event(np.random.default_rng([5, 1]))
    assert np.array_equal(np.asarray(arrays["Hit_truth"][1]), event["Hit"]["truth"])
