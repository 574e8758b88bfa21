"""PUPPI-like per-candidate weights (pile-up per particle identification, simplified).

Charged candidates get 1 when associated with the primary vertex (``fromPV`` ≥ 1) and 0 otherwise.
A neutral candidate is judged by its neighbourhood: α = log Σ (pT_j / ΔR_ij)² over neighbours j
with 0.01 < ΔR < 0.4 — charged PV candidates in the tracker (|η| < 2.5), all candidates beyond it.
The same α computed for pile-up charged candidates (all candidates, in the forward region) gives the
event's pile-up reference: its median and the RMS below the median. The weight is the χ²(1) CDF of
((α − median)/RMS)² for α above the median, else 0; weights with w·pT < 0.2 GeV are set to 0.
"""

from __future__ import annotations

import numpy as np
from scipy.spatial import cKDTree
from scipy.stats import chi2

from .detector import PFCandidates

CONE, MIN_DR, MIN_WEIGHTED_PT = 0.4, 0.01, 0.2
EVENT_STRIDE = 20.0  # η offset that separates events in one search tree


def _coordinates(eta: np.ndarray, phi: np.ndarray, event: np.ndarray) -> np.ndarray:
    return np.stack([eta + EVENT_STRIDE * event + EVENT_STRIDE / 2, (phi + np.pi) % (2 * np.pi)], axis=1)


def alpha(cands: PFCandidates, targets: np.ndarray, neighbours: np.ndarray, n_events: int) -> np.ndarray:
    """α of each target candidate (−inf without neighbours), summed over ``neighbours``."""
    box = (EVENT_STRIDE * (n_events + 2), 2 * np.pi)
    coords = _coordinates(cands.eta, cands.phi, cands.event)
    out = np.full(targets.size, -np.inf)
    if targets.size == 0 or neighbours.size == 0:
        return out
    pairs = cKDTree(coords[targets], boxsize=box).sparse_distance_matrix(
        cKDTree(coords[neighbours], boxsize=box), CONE, output_type="ndarray")
    dr = pairs["v"]
    use = dr > MIN_DR
    total = np.bincount(pairs["i"][use], (cands.pt[neighbours[pairs["j"][use]]] / dr[use]) ** 2, minlength=targets.size)
    with np.errstate(divide="ignore"):
        out = np.log(total)
    return out


def grouped_reference(values: np.ndarray, groups: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Per group: the median of finite ``values`` and the RMS of those below it (NaN if none)."""
    ok = np.isfinite(values)
    values, groups = values[ok], groups[ok]
    order = np.lexsort((values, groups))
    values, groups = values[order], groups[order]
    counts = np.bincount(groups, minlength=n_groups)
    start = np.cumsum(counts) - counts
    median = np.full(n_groups, np.nan)
    has = counts > 0
    median[has] = values[start[has] + (counts[has] - 1) // 2]
    below = values < median[groups]
    dev2 = np.bincount(groups[below], (values[below] - median[groups[below]]) ** 2, minlength=n_groups)
    nbelow = np.bincount(groups[below], minlength=n_groups)
    with np.errstate(invalid="ignore", divide="ignore"):
        rms = np.sqrt(dev2 / nbelow)
    return median, rms


def puppi_weights(cands: PFCandidates, n_events: int) -> np.ndarray:
    """The weight of every candidate of the batch."""
    charged = cands.charge != 0
    central = np.abs(cands.eta) < 2.5
    weights = np.where(charged, (cands.fromPV >= 1).astype(float), 0.0)
    lv = np.flatnonzero(charged & (cands.fromPV >= 1))
    everyone = np.arange(cands.pt.size)
    for region, neighbours, reference in (
            (central, lv, charged & (cands.fromPV == 0) & central),
            (~central, everyone, ~central)):
        targets = np.flatnonzero(region & (~charged | reference))
        a = alpha(cands, targets, neighbours, n_events)
        ref = reference[targets]
        median, rms = grouped_reference(a[ref], cands.event[targets[ref]], n_events)
        neutral = ~charged[targets]
        ev = cands.event[targets[neutral]]
        an, med, sd = a[neutral], median[ev], rms[ev]
        with np.errstate(invalid="ignore", divide="ignore"):
            w = np.where(np.isfinite(an) & (an > med) & (sd > 0), chi2.cdf(((an - med) / sd) ** 2, 1), 0.0)
        # no pile-up reference in the event (no pile-up): every neutral is kept
        w = np.where(np.isnan(med), 1.0, w)
        weights[targets[neutral]] = w
    weights[~charged & (weights * cands.pt < MIN_WEIGHTED_PT)] = 0.0
    return weights
