"""ΔR matching between two flat collections of a batch, vectorised over all same-event pairs."""

from __future__ import annotations

import numpy as np

from ...modules.common.kinematics import delta_phi


def same_event_pairs(event_a: np.ndarray, event_b: np.ndarray, n_events: int) -> tuple[np.ndarray, np.ndarray]:
    """All (i, j) with ``event_a[i] == event_b[j]``; ``event_b`` must be sorted."""
    counts_b = np.bincount(event_b, minlength=n_events)
    start_b = np.cumsum(counts_b) - counts_b
    per_a = counts_b[event_a]
    i = np.repeat(np.arange(event_a.size), per_a)
    offsets = np.arange(i.size) - np.repeat(np.cumsum(per_a) - per_a, per_a)
    j = start_b[event_a[i]] + offsets
    return i, j


def nearest(event_a: np.ndarray, eta_a: np.ndarray, phi_a: np.ndarray, event_b: np.ndarray, eta_b: np.ndarray,
            phi_b: np.ndarray, max_dr: float, n_events: int) -> tuple[np.ndarray, np.ndarray]:
    """For each object of A, the index of the nearest object of B in the same event within ``max_dr``
    (-1 if none) and that ΔR (inf if none). ``event_b`` must be sorted."""
    i, j = same_event_pairs(event_a, event_b, n_events)
    dr = np.hypot(eta_a[i] - eta_b[j], delta_phi(phi_a[i], phi_b[j]))
    ok = dr < max_dr
    i, j, dr = i[ok], j[ok], dr[ok]
    order = np.lexsort((dr, i))
    i, j, dr = i[order], j[order], dr[order]
    first = np.ones(i.size, dtype=bool)
    first[1:] = i[1:] != i[:-1]
    best = np.full(event_a.size, -1, dtype=np.int64)
    best_dr = np.full(event_a.size, np.inf)
    best[i[first]] = j[first]
    best_dr[i[first]] = dr[first]
    return best, best_dr
