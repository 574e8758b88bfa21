"""MichelHits: the Michel decision of a hit from its own EmTrkMichelId score *and its neighbourhood's*.

EmTrkMichelId judges one hit from its 48×48 patch. A Michel electron, though, is a compact cluster of
hits at the end of a stopping muon track, seen at the same drift time in all three wire planes; LArSoft
therefore combines the per-hit CNN outputs over clusters before deciding. This producer does the same
with the hits alone (no clustering step to tune), vectorised over the event:

* **same plane**: the mean track, EM and Michel scores of the hits within ``radius_near`` and
  ``radius_far`` (in wire pitches; drift time in units of ``drift_window`` ticks, ≈ one pitch, as in
  the patches) and how many hits there are (a Michel cluster is small, a shower is not);
* **other planes**: the largest Michel score among the hits of the *other* planes of the same TPC
  within ``time_window`` ticks (an electron's charge reaches every plane at the same drift time, a
  false positive in one plane rarely has a partner in another);
* a logistic combination of these :data:`FEATURES` (``weights``, bias first), fitted on validation
  events by ``python -m sonic_hep.data.protodune.michel_fit`` with the decision folded into the bias,
  so that ``michel > 0.5`` is the working point, as for the CNN's own score.

Pairs of hits come from a k-d tree (``scipy.spatial.cKDTree.query_pairs``) over (wire, drift pixel,
view) and per-hit sums from ``np.bincount``; partners in other planes from binary searches in the hits
sorted by (TPC, plane, tick) and a sparse-table range maximum: no per-hit Python loop.
"""

from __future__ import annotations

import numpy as np
from scipy.spatial import cKDTree

from ...framework import InputTag, Output, Param, ParamError, Producer
from .hit_patches import columns

#: the combination's inputs, in the order of ``weights[1:]``
FEATURES = ("logit_michel", "track", "em",
            "michel_near", "track_near", "em_near", "log_hits_near",
            "michel_far", "track_far", "em_far", "log_hits_far",
            "michel_other_planes")

#: fitted for the shipped EmTrkMichelId (model.onnx MD5 9a2a6ae0f19e54d6c4ccf1bf6c696553) on validation
#: events of random streams 1011 (fit) and 2011 (decision); see data/models/protodune/emtrkmichelid/michel_hits.json
WEIGHTS = [-3.138714, 0.45231, -1.485538, 1.281547, -0.680905, -2.600014, -0.761216, 0.21493, 3.927023, -0.383221, -1.068333, 0.100526, 4.512864]


def _range_max(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``max(values[lo:hi])`` for every pair of bounds (0 where ``lo >= hi``), from a sparse table:
    level k holds the maxima of the runs of 2**k values, so any run is two overlapping lookups."""
    table = [values]
    while 2 ** len(table) <= len(values):
        prev, half = table[-1], 2 ** (len(table) - 1)
        table.append(np.maximum(prev[:-half], prev[half:]))
    length = hi - lo
    out = np.zeros(len(lo), values.dtype)
    for k in np.unique(np.floor(np.log2(length[length > 0])).astype(np.int64)):
        rows = np.flatnonzero((length > 0) & (np.floor(np.log2(np.maximum(length, 1))) == k))
        out[rows] = np.maximum(table[k][lo[rows]], table[k][hi[rows] - 2 ** k])
    return out


def hit_features(tpc: np.ndarray, plane: np.ndarray, wire: np.ndarray, peak_tick: np.ndarray,
                 scores: dict[str, np.ndarray], radius_near: float = 3.0, radius_far: float = 9.0,
                 drift_window: float = 6.0, time_window: float = 8.0, planes: int = 3) -> np.ndarray:
    """The ``[hits, len(FEATURES)]`` inputs of the combination for one event (see the module docstring).

    Args:
        tpc, plane, wire, peak_tick: the hits (``Hit_*`` columns).
        scores: EmTrkMichelId's per-hit ``track``, ``em``, ``michel`` (float).
        radius_near, radius_far: neighbourhood radii in wire pitches.
        drift_window: ticks per unit of drift distance (a wire pitch).
        time_window: largest drift-time difference, in ticks, of a partner hit in another plane.
        planes: wire planes per TPC.
    """
    n = len(wire)
    if n == 0:
        return np.zeros((0, len(FEATURES)))
    track, em, michel = (np.asarray(scores[k], np.float64) for k in ("track", "em", "michel"))
    tpc, plane = np.asarray(tpc, np.int64), np.asarray(plane, np.int64)
    tick = np.asarray(peak_tick, np.float64)
    p = np.clip(michel, 1e-6, 1 - 1e-6)
    out = [np.log(p / (1 - p)), track, em]
    # same plane: views far apart in the third coordinate, so a pair never joins two views; one query
    # at the larger radius, split by distance
    outer = max(radius_near, radius_far)
    points = np.stack([np.asarray(wire, np.float64), tick / drift_window, (tpc * planes + plane) * (4 * outer + 1e6)],
                      axis=1)
    pairs = cKDTree(points).query_pairs(outer, output_type="ndarray")
    distance = np.linalg.norm(points[pairs[:, 0]] - points[pairs[:, 1]], axis=1)
    for radius in (radius_near, radius_far):
        a, b = pairs[distance <= radius].T
        count = np.bincount(a, minlength=n) + np.bincount(b, minlength=n)
        for values in (michel, track, em):
            total = np.bincount(a, weights=values[b], minlength=n) + np.bincount(b, weights=values[a], minlength=n)
            out.append(total / np.maximum(count, 1))
        out.append(np.log1p(count))
    # other planes: hits sorted by (TPC, plane, tick), so the partners of a hit in plane q are one
    # contiguous run, found by two binary searches; its largest Michel score by a range maximum
    spacing = tick.max() - tick.min() + 4 * time_window + 1
    key = (tpc * planes + plane) * spacing + (tick - tick.min())
    order = np.argsort(key, kind="stable")
    sorted_key, sorted_michel = key[order], michel[order]
    partner = np.zeros(n)
    for other in range(planes):
        at = (tpc * planes + other) * spacing + (tick - tick.min())
        lo = np.searchsorted(sorted_key, at - time_window, side="left")
        hi = np.searchsorted(sorted_key, at + time_window, side="right")
        best = _range_max(sorted_michel, lo, hi)
        partner = np.where(plane != other, np.maximum(partner, best), partner)
    out.append(partner)
    return np.stack(out, axis=1)


def combine(features: np.ndarray, weights: list[float] | np.ndarray) -> np.ndarray:
    """The Michel probability of each hit: ``sigmoid(weights[0] + features @ weights[1:])``, float32."""
    w = np.asarray(weights, np.float64)
    z = w[0] + features @ w[1:]
    return (0.5 * (1.0 + np.tanh(0.5 * z))).astype(np.float32)  # the logistic function without overflow


class MichelHits(Producer):
    """Per-hit Michel score from the hit's EmTrkMichelId scores and those of its neighbours in the same
    plane and at the same drift time in the other planes (see the module docstring); ``> 0.5`` tags."""

    hits = InputTag("Hit", fields=("tpc", "plane", "wire", "peak_tick"), doc="hits (peak tick in ticks)")
    scores = InputTag("emtrkmichel:scores", doc="EmTrkMichelId scores (track, em, none, michel) per hit")
    radius_near = Param(float, 3.0, doc="inner neighbourhood radius in wire pitches", above=0)
    radius_far = Param(float, 9.0, doc="outer neighbourhood radius in wire pitches", above=0)
    drift_window = Param(float, 6.0, doc="ticks per wire pitch of drift distance (the patches' drift pixel)",
                         above=0)
    time_window = Param(float, 8.0, doc="ticks within which a hit of another plane counts as a partner", min=0)
    planes = Param(int, 3, doc="wire planes per TPC", min=1)
    weights = Param(list[float], WEIGHTS, doc=f"bias, then one weight per feature: {', '.join(FEATURES)}")

    michel = Output("per hit: P(Michel) from the hit and its neighbourhood, float32; > 0.5 is the working point")

    @classmethod
    def validate_params(cls, given):
        """Also checks that ``weights`` has a bias and one number per feature (at configuration time)."""
        values = super().validate_params(given)
        if len(values["weights"]) != len(FEATURES) + 1:
            raise ParamError("weights", "value", f"needs {len(FEATURES) + 1} numbers (a bias, then one per "
                             f"feature: {', '.join(FEATURES)}), got {len(values['weights'])}")
        return values

    def produce(self, event) -> None:
        tpc, plane, wire, tick = columns(event.get(self.hits), ("tpc", "plane", "wire", "peak_tick"))
        features = hit_features(tpc, plane, wire, tick, event.get(self.scores), self.radius_near,
                                self.radius_far, self.drift_window, self.time_window, self.planes)
        event.put("michel", combine(features, self.weights))
