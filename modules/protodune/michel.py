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
view), and per-hit sums from ``np.bincount``: no per-hit Python loop.
"""

from __future__ import annotations

import numpy as np
from scipy.spatial import cKDTree

from ...framework import InputTag, Output, Param, Producer
from ...framework.errors import ParamError
from .hit_patches import columns

#: the combination's inputs, in the order of ``weights[1:]``
FEATURES = ("logit_michel", "track", "em",
            "michel_near", "track_near", "em_near", "log_hits_near",
            "michel_far", "track_far", "em_far", "log_hits_far",
            "michel_other_planes")

#: fitted for the shipped EmTrkMichelId (model.onnx MD5 9a2a6ae0f19e54d6c4ccf1bf6c696553) on validation
#: events of random streams 1011 (fit) and 2011 (decision); see data/models/protodune/emtrkmichelid/michel_hits.json
WEIGHTS = [-3.138714, 0.45231, -1.485538, 1.281547, -0.680905, -2.600014, -0.761216, 0.21493, 3.927023, -0.383221, -1.068333, 0.100526, 4.512864]


def _both_ways(pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(i, j) for every unordered pair, each pair once in each direction."""
    return np.concatenate([pairs[:, 0], pairs[:, 1]]), np.concatenate([pairs[:, 1], pairs[:, 0]])


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
    track, em, michel = (np.asarray(scores[k], np.float64) for k in ("track", "em", "michel"))
    p = np.clip(michel, 1e-6, 1 - 1e-6)
    out = [np.log(p / (1 - p)), track, em]
    plane = np.asarray(plane, np.int64)
    view = np.asarray(tpc, np.int64) * planes + plane
    # views far apart in the third coordinate, so a pair never joins two views
    points = np.stack([np.asarray(wire, np.float64), np.asarray(peak_tick, np.float64) / drift_window,
                       view * (4.0 * max(radius_near, radius_far) + 1e6)], axis=1)
    tree = cKDTree(points)
    for radius in (radius_near, radius_far):
        i, j = _both_ways(tree.query_pairs(radius, output_type="ndarray"))
        count = np.bincount(i, minlength=n)
        for values in (michel, track, em):
            out.append(np.bincount(i, weights=values[j], minlength=n) / np.maximum(count, 1))
        out.append(np.log1p(count))
    # partners: same TPC, another plane, drift time within time_window ticks
    when = np.stack([np.asarray(peak_tick, np.float64), np.asarray(tpc, np.float64) * (4.0 * time_window + 1e7)],
                    axis=1)
    i, j = _both_ways(cKDTree(when).query_pairs(time_window, output_type="ndarray"))
    other = plane[i] != plane[j]
    partner = np.zeros(n)
    np.maximum.at(partner, i[other], michel[j[other]])
    out.append(partner)
    return np.stack(out, axis=1) if n else np.zeros((0, len(FEATURES)))


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
