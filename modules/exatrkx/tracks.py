"""Track candidates as a collection: hits per candidate and their estimated pT, η, φ."""

from __future__ import annotations

import numpy as np

from ...framework import InputTag, Output, Producer
from .track_parameters import track_parameters


class ExaTrkXTrackCandidates(Producer):
    """The candidates of the labeling (per stage or ensemble) as a Track collection, with the per-hit labels."""

    hits = InputTag("Hit", fields=("x", "y", "z"), doc="the hits the labels refer to")
    labels = InputTag("labeling:labels", doc="track label per hit: labeling:labels (per stage) or ensemble:labels")
    candidates = Output("Track collection: nhits, pt [GeV] (circle fit), eta (line fit), phi (innermost hit)")
    hit_track = Output("int64 [hits]: candidate of each hit, -1 for none")

    def produce(self, event):
        hits = event.get(self.hits)
        labels = np.asarray(event.get(self.labels), dtype=np.int64)
        event.put("candidates", track_parameters(np.asarray(hits.x), np.asarray(hits.y), np.asarray(hits.z), labels))
        event.put("hit_track", labels.copy())
