"""The domain algorithms of the pipeline against independent references (brute force, networkx, known helices)."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from sonic_hep.framework.errors import InferenceError
from sonic_hep.modules.exatrkx import working_point
from sonic_hep.modules.exatrkx.edge_selection import select_edges
from sonic_hep.modules.exatrkx.features import FEATURES, hit_features
from sonic_hep.modules.exatrkx.graph_building import radius_graph
from sonic_hep.modules.exatrkx.labeling import label_tracks
from sonic_hep.modules.exatrkx.matching import MatchCounts, match_tracks
from sonic_hep.modules.exatrkx.track_parameters import track_parameters
from sonic_hep.modules.exatrkx.truth import edge_efficiency, edge_truth, true_edges


def brute_force_graph(points: np.ndarray, radius: float, k_max: int) -> set[tuple[int, int]]:
    distance = np.linalg.norm(points[:, None] - points[None], axis=-1)
    pairs = set()
    for i in range(len(points)):
        order = [j for j in np.argsort(distance[i], kind="stable") if j != i][:k_max]
        pairs |= {(min(i, j), max(i, j)) for j in order if distance[i, j] <= radius}
    return pairs


@pytest.mark.parametrize("k_max", [3, 50])
def test_radius_graph_matches_brute_force(k_max):
    rng = np.random.default_rng(1)
    points = rng.normal(size=(300, 8)).astype(np.float32)
    edges = radius_graph(points, 2.5, k_max)
    assert edges.dtype == np.int64 and edges.shape[0] == 2
    assert np.all(edges[0] < edges[1])
    found = set(map(tuple, edges.T.tolist()))
    assert len(found) == edges.shape[1], "each pair once"
    assert found == brute_force_graph(points, 2.5, k_max)


def test_radius_graph_edge_cases():
    assert radius_graph(np.zeros((0, 8), np.float32), 1.0, 10).shape == (2, 0)
    assert radius_graph(np.zeros((1, 8), np.float32), 1.0, 10).shape == (2, 0)
    two = np.array([[0, 0], [0.5, 0]], np.float32)
    assert radius_graph(two, 1.0, 10).tolist() == [[0], [1]]
    assert radius_graph(two, 0.4, 10).shape == (2, 0)


def test_labeling_matches_networkx_components():
    rng = np.random.default_rng(2)
    n = 400
    edges = rng.integers(0, n, size=(2, 300))
    score = rng.random(300).astype(np.float32)
    labels = label_tracks(n, edges, score, cut=0.5, min_hits=3)
    graph = nx.Graph()
    graph.add_nodes_from(range(n))
    graph.add_edges_from(edges[:, score >= 0.5].T.tolist())
    expected = [c for c in nx.connected_components(graph) if len(c) >= 3]
    assert labels.max() + 1 == len(expected)
    for component in expected:
        assert len({labels[i] for i in component}) == 1
    assert np.count_nonzero(labels >= 0) == sum(len(c) for c in expected)
    # numbered by their lowest hit: the first hit of candidate k comes before that of k + 1
    firsts = [np.flatnonzero(labels == k)[0] for k in range(labels.max() + 1)]
    assert firsts == sorted(firsts)


def test_labeling_without_hits_or_edges():
    assert label_tracks(0, np.zeros((2, 0), np.int64), np.zeros(0, np.float32), 0.5, 3).shape == (0,)
    assert label_tracks(5, np.zeros((2, 0), np.int64), np.zeros(0, np.float32), 0.5, 3).tolist() == [-1] * 5
    assert label_tracks(3, np.array([[0, 1], [1, 2]]), np.array([0.9, 0.9]), 0.5, 3).tolist() == [0, 0, 0]


def test_select_edges():
    edges = np.array([[0, 1, 2], [3, 4, 5]])
    kept, score = select_edges(edges, np.array([0.1, 0.5, 0.9], np.float32), 0.5)
    assert kept.tolist() == [[1, 2], [4, 5]] and score.tolist() == [0.5, pytest.approx(0.9)]


def helix(pt: float, eta: float, phi0: float, charge: int, radii: np.ndarray, b_field: float = 2.0) -> np.ndarray:
    """Points of a helix from the origin at the given transverse radii (mm)."""
    radius = pt / (0.3 * b_field) * 1000.0
    alpha = 2 * np.arcsin(radii / (2 * radius))  # turning angle at transverse distance r
    centre = radius * np.array([np.cos(phi0 + charge * np.pi / 2), np.sin(phi0 + charge * np.pi / 2)])
    angle = phi0 - charge * np.pi / 2 + charge * alpha
    x, y = centre[0] + radius * np.cos(angle), centre[1] + radius * np.sin(angle)
    s = radius * alpha
    return np.stack([x, y, s * np.sinh(eta)], 1)


def test_track_parameters_recover_helices():
    radii = np.array([32.0, 72.0, 116.0, 172.0])
    truth = [(0.8, 0.3, 0.5, 1), (1.5, -1.2, -2.9, -1), (5.0, 2.0, 3.0, 1), (20.0, 0.0, 1.0, -1)]
    points = np.concatenate([helix(*t, radii) for t in truth])
    labels = np.repeat(np.arange(len(truth)), len(radii))
    params = track_parameters(points[:, 0], points[:, 1], points[:, 2], labels)
    assert params["nhits"].tolist() == [4] * 4
    np.testing.assert_allclose(params["pt"], [t[0] for t in truth], rtol=1e-3)
    np.testing.assert_allclose(params["eta"], [t[1] for t in truth], atol=0.02)
    innermost = points[::4]
    np.testing.assert_allclose(params["phi"], np.arctan2(innermost[:, 1], innermost[:, 0]), atol=1e-5)
    empty = track_parameters(points[:, 0], points[:, 1], points[:, 2], np.full(len(points), -1))
    assert all(len(v) == 0 for v in empty.values())


def test_matching_counts_by_hand():
    # particles 1..4 (pt, primary); hits of particle 4 are all unlabeled
    pt = np.array([2.0, 3.0, 0.5, 4.0])
    primary = np.array([1, 1, 1, 1])
    hit_particle = np.array([1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 4, 4, 4, 0, 0])
    labels = np.array([0, 0, 0, 1, 2, 2, 3, 3, 4, 4, 4, -1, -1, -1, 5, 5])
    # track 0: 3/3 of particle 1 (double majority); track 1: one hit of particle 1 (majority match, duplicate)
    # tracks 2, 3: half of particle 2 each (majority match, but no double majority: particle 2 not reconstructed)
    # track 4: particle 3 (pt 0.5: not reconstructable); track 5: noise only (fake)
    track_pt = np.array([2.0, 2.0, 3.0, 3.0, 0.5, 1.5])
    counts, reconstructed = match_tracks(labels, hit_particle, pt, primary, track_pt, min_pt=1.0, min_hits=3)
    assert counts == MatchCounts(reconstructable=3, reconstructed=1, candidates=5, fakes=1, matched=4, duplicates=2)
    assert reconstructed.tolist() == [True, False, False, False]
    assert counts.efficiency == pytest.approx(1 / 3) and counts.fake_rate == pytest.approx(0.2)
    assert counts.duplicate_rate == pytest.approx(0.5)
    total = counts + counts
    assert total.reconstructable == 6 and total.efficiency == counts.efficiency


def test_truth_edges_follow_the_sequence():
    particle = np.array([2, 1, 2, 0, 1, 2])
    sequence = np.array([5, 1, 3, -1, 0, 9])
    edges = true_edges(particle, sequence)
    assert edges.T.tolist() == [[4, 1], [2, 0], [0, 5]]  # particle by particle, along the trajectory
    assert edge_truth(np.array([[0, 3, 1], [2, 3, 4]]), particle).tolist() == [True, False, True]
    assert edge_efficiency(np.array([[5], [0]]), edges, 6) == pytest.approx(1 / 3)


def test_features_shape_and_wrap():
    hits = {"x": np.array([-100.0, -100.0]), "y": np.array([1e-3, -1e-3]), "z": np.array([0.0, 10.0]),
            "cell_count": np.array([1, 4]), "cell_value": np.array([0.15, 0.6]), "size0": np.array([1, 2]),
            "size1": np.array([1, 3])}
    f = hit_features(hits)
    assert f.shape == (2, len(FEATURES)) and f.dtype == np.float32
    # the two hits straddle phi = ±pi: phi/pi jumps, but cos/sin agree
    assert abs(f[0, 1] - f[1, 1]) > 1.9
    np.testing.assert_allclose(f[0, 3:5], f[1, 3:5], atol=1e-4)


def test_working_point_reads_protobuf_and_json_and_names_missing_keys():
    from tritonclient.grpc import model_config_pb2 as mc

    config = mc.ModelConfig(name="g")
    config.parameters["radius"].string_value = "0.8"
    config.parameters["k_max"].string_value = "32"
    assert working_point.read("graph_building", "g", config) == {"radius": 0.8, "k_max": 32}
    as_json = {"parameters": {"radius": {"string_value": "0.8"}, "k_max": {"string_value": "32"}}}
    assert working_point.read("graph_building", "g", as_json, {"radius": 1.1}) == {"radius": 1.1, "k_max": 32}
    with pytest.raises(InferenceError, match=r"model 'g'.*no parameter 'cut'"):
        working_point.read("edge_selection", "g", config)
    config.parameters["k_max"].string_value = "many"
    with pytest.raises(InferenceError, match="'k_max' = 'many' is not a int"):
        working_point.read("graph_building", "g", config)
