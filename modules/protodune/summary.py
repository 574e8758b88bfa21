"""EmTrkMichelSummary: a per-event summary of the hit classification (counts, and agreement with truth)."""

from __future__ import annotations

import numpy as np

from ...framework import InputTag, Output, Param, Producer
from .metrics import classification_metrics


class EmTrkMichelSummary(Producer):
    """Counts hits by their largest score and, for simulated events, compares them with the truth.

    ``Hit_truth``/``Hit_michel`` are optional: on data without truth the accuracy fields are NaN.
    """

    scores = InputTag("emtrkmichel:scores", doc="EmTrkMichelId scores (track, em, none, michel) per hit")
    truth = InputTag("Hit_truth", optional=True, doc="per-hit truth: 0 track, 1 shower, 2 none")
    michel_truth = InputTag("Hit_michel", optional=True, doc="per-hit truth: Michel electron")
    michel_cut = Param(float, 0.5, doc="Michel score above which a hit counts as Michel")

    summary = Output("per event: n_hits, n_track, n_em, n_none, n_michel, track_vs_shower_accuracy, "
                     "michel_efficiency (NaN without truth)")

    def produce(self, event) -> None:
        s = event.get(self.scores)
        em_trk_none = np.stack([s["track"], s["em"], s["none"]], axis=1)
        best = np.argmax(em_trk_none, axis=1) if len(em_trk_none) else np.zeros(0, np.int64)
        counts = np.bincount(best, minlength=3)
        summary = {"n_hits": len(best), "n_track": int(counts[0]), "n_em": int(counts[1]), "n_none": int(counts[2]),
                   "n_michel": int(np.sum(s["michel"] > self.michel_cut))}
        truth, michel = event.get(self.truth), event.get(self.michel_truth)
        accuracy = efficiency = float("nan")
        if truth is not None and michel is not None and len(best):
            metrics = classification_metrics(em_trk_none, s["michel"], np.asarray(truth), np.asarray(michel),
                                             self.michel_cut)
            accuracy, efficiency = metrics["track_vs_shower_accuracy"], metrics["michel_efficiency"]
        summary.update(track_vs_shower_accuracy=accuracy, michel_efficiency=efficiency)
        event.put("summary", summary)
