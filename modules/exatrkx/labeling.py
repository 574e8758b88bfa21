"""Track labeling: connected components of the edges the GNN keeps become track candidates.

Exa.TrkX's simplest and fastest labeling: every edge with a GNN score above ``cut`` joins its two
hits; each connected component with at least ``min_hits`` hits is one track candidate
(``scipy.sparse.csgraph.connected_components``, no Python loop over hits or edges). Shared by the
per-stage producer and the ensemble's ``exatrkx_labeling`` python model.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components


def label_tracks(num_hits: int, edge_index: np.ndarray, score: np.ndarray, cut: float, min_hits: int) -> np.ndarray:
    """The track candidate of every hit: int64 [num_hits], ``-1`` for hits on no candidate.

    Candidates are numbered 0, 1, ... in the order of their lowest hit index (deterministic).

    Args:
        num_hits: hits in the event (hits without edges are single-hit components).
        edge_index: int64 [2, edges].
        score: float [edges], the GNN edge scores.
        cut: edges with ``score >= cut`` connect hits.
        min_hits: smallest component that is a candidate.
    """
    if num_hits == 0:
        return np.zeros(0, dtype=np.int64)
    keep = np.asarray(score) >= cut
    src, dst = edge_index[0, keep], edge_index[1, keep]
    adjacency = coo_matrix((np.ones(len(src), dtype=np.int8), (src, dst)), shape=(num_hits, num_hits))
    _, component = connected_components(adjacency, directed=False)
    big = np.bincount(component)[component] >= min_hits
    labels = np.full(num_hits, -1, dtype=np.int64)
    # connected_components numbers components by their lowest node, so unique() keeps that order
    labels[big] = np.unique(component[big], return_inverse=True)[1]
    return labels
