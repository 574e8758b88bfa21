"""Vectorised helpers shared by the physics code: azimuthal differences and ranking within groups.

Defined once so the producers' inputs (ParticleNet, DeepTau) and the generator's objects
(``data/miniaod``) wrap angles and order constituents the same way.
"""

from __future__ import annotations

import numpy as np


def delta_phi(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a - b`` wrapped into [-π, π) (radians), elementwise."""
    return (a - b + np.pi) % (2 * np.pi) - np.pi


def rank_within(groups: np.ndarray, key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Orders rows by group, then by decreasing ``key`` inside a group.

    Args:
        groups (np.ndarray): the group of each row (a jet, a tau...), integers.
        key (np.ndarray): what to rank by within a group (largest first).

    Returns:
        tuple[np.ndarray, np.ndarray]: ``order`` (row indices, sorted) and ``rank`` of ``order``'s rows within
        their group (0 = largest ``key``). The rank of row ``i`` itself is ``rank[argsort(order)][i]``.

    Example::

        >>> order, rank = rank_within(np.array([1, 0, 1]), np.array([5.0, 2.0, 7.0]))
        >>> order.tolist(), rank.tolist()
        ([1, 2, 0], [0, 0, 1])
    """
    order = np.lexsort((-key, groups))
    g = groups[order]
    start = np.ones(g.size, dtype=bool)
    start[1:] = g[1:] != g[:-1]
    first = np.maximum.accumulate(np.where(start, np.arange(g.size), 0)) if g.size else np.zeros(0, np.int64)
    return order, np.arange(g.size) - first
