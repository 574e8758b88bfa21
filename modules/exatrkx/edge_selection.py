"""Edge selection: the filter's working point, keeping candidate edges whose score passes a cut.

Shared by the per-stage filter producer and the ensemble's ``exatrkx_edge_selection`` python model.
"""

from __future__ import annotations

import numpy as np


def select_edges(edge_index: np.ndarray, score: np.ndarray, cut: float) -> tuple[np.ndarray, np.ndarray]:
    """The edges (int64 [2, kept]) and their scores (float32 [kept]) with ``score >= cut``."""
    keep = np.asarray(score) >= cut
    return np.ascontiguousarray(edge_index[:, keep], dtype=np.int64), np.ascontiguousarray(score[keep],
                                                                                          dtype=np.float32)
