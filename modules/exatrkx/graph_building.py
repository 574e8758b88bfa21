"""Graph building: hits close in the learned embedding space become candidate edges.

The embedding MLP maps hits of the same track close together; a fixed-radius search in that space
(Exa.TrkX's "radius graph") connects each hit to at most ``k_max`` neighbours within ``radius``.
``scipy.spatial.cKDTree`` does the search for all hits at once; the neighbour table is turned into
an edge list with array operations only. Used in-process by the per-stage producer and inside the
Triton python model ``exatrkx_graph_building`` of the ensemble, so both give the same edges.
"""

from __future__ import annotations

import numpy as np
from scipy.spatial import cKDTree


def radius_graph(embedding: np.ndarray, radius: float, k_max: int) -> np.ndarray:
    """Undirected edges between hits within ``radius`` of each other in the embedding space.

    Each hit keeps its ``k_max`` nearest neighbours inside the radius; the union over hits is
    returned once per pair, ``i < j``, sorted, so the result does not depend on thread timing.

    Args:
        embedding: [hits, dim] float array.
        radius: search radius (Euclidean, in embedding units).
        k_max: neighbours kept per hit.

    Returns:
        int64 [2, edges] edge index.
    """
    n = len(embedding)
    if n < 2 or k_max < 1:
        return np.zeros((2, 0), dtype=np.int64)
    k = min(k_max + 1, n)  # +1: every hit finds itself first
    _, neighbours = cKDTree(embedding).query(embedding, k=k, distance_upper_bound=radius)
    src = np.repeat(np.arange(n, dtype=np.int64), k)
    dst = neighbours.reshape(-1).astype(np.int64)
    found = (dst < n) & (dst != src)  # missing neighbours are reported as index n
    lo, hi = np.minimum(src[found], dst[found]), np.maximum(src[found], dst[found])
    pairs = np.unique(lo * n + hi)
    return np.stack([pairs // n, pairs % n]).astype(np.int64)
