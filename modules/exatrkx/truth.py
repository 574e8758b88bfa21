"""Truth of the graph: which hit pairs belong together, for training and for per-stage efficiencies.

``true_edges`` are the consecutive hits of each particle along its trajectory (the simulation's hit
sequence): the edges a perfect graph would have. ``edge_truth`` says whether a candidate edge joins
two hits of the same particle, the label the filter and the GNN learn (any same-particle edge is
harmless to the connected-components labeling).
"""

from __future__ import annotations

import numpy as np


def true_edges(particle: np.ndarray, sequence: np.ndarray) -> np.ndarray:
    """int64 [2, T]: each hit to the next hit of the same particle (hits of particle 0, noise, excluded)."""
    hits = np.flatnonzero(np.asarray(particle) > 0)
    order = hits[np.lexsort((np.asarray(sequence)[hits], np.asarray(particle)[hits]))]
    same = particle[order[1:]] == particle[order[:-1]]
    return np.stack([order[:-1][same], order[1:][same]]).astype(np.int64)


def edge_truth(edge_index: np.ndarray, particle: np.ndarray) -> np.ndarray:
    """bool [edges]: both ends on the same (non-noise) particle."""
    a, b = np.asarray(particle)[edge_index[0]], np.asarray(particle)[edge_index[1]]
    return (a == b) & (a > 0)


def edge_efficiency(edge_index: np.ndarray, truth_edges: np.ndarray, num_hits: int) -> float:
    """Fraction of ``truth_edges`` (either direction) present in ``edge_index``."""
    if truth_edges.shape[1] == 0:
        return 1.0
    def keys(e: np.ndarray) -> np.ndarray:
        return np.minimum(e[0], e[1]) * num_hits + np.maximum(e[0], e[1])
    return float(np.isin(keys(truth_edges), keys(edge_index)).mean())
