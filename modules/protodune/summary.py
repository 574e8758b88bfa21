"""EmTrkMichelSummary: a per-event summary of the hit classification (counts, and agreement with truth)."""

from __future__ import annotations

import numpy as np

from ...framework import InputTag, Output, Param, Producer
from .metrics import classification_metrics, michel_counts


class EmTrkMichelSummary(Producer):
    """Counts hits by their largest score and, for simulated events, compares them with the truth.

    The Michel decision is MichelHits' (the hit and its neighbourhood, ``michel:michel``) when the job
    runs it, else the CNN's own per-hit score. ``Hit_truth``/``Hit_michel`` are optional: on data
    without truth the agreement fields are NaN and the true-Michel counts -1.
    """

    scores = InputTag("emtrkmichel:scores", doc="EmTrkMichelId scores (track, em, none, michel) per hit")
    michel = InputTag("michel:michel", optional=True,
                      doc="per-hit Michel score of MichelHits (used for the Michel fields when present)")
    truth = InputTag("Hit_truth", optional=True, doc="per-hit truth: 0 track, 1 shower, 2 none")
    michel_truth = InputTag("Hit_michel", optional=True, doc="per-hit truth: Michel electron")
    michel_cut = Param(float, 0.5, doc="Michel score above which a hit counts as Michel")

    summary = Output("per event: n_hits, n_track, n_em, n_none, n_michel (hits tagged Michel), "
                     "track_vs_shower_accuracy, michel_efficiency, michel_purity (NaN without truth), "
                     "n_michel_true, n_michel_true_tagged (-1 without truth: efficiency and purity over "
                     "many events are ratios of their sums)")

    def produce(self, event) -> None:
        s = event.get(self.scores)
        em_trk_none = np.stack([s["track"], s["em"], s["none"]], axis=1)
        best = np.argmax(em_trk_none, axis=1) if len(em_trk_none) else np.zeros(0, np.int64)
        counts = np.bincount(best, minlength=3)
        combined = event.get(self.michel)
        michel_score = np.asarray(combined if combined is not None else s["michel"])
        tagged = michel_score > self.michel_cut
        summary = {"n_hits": len(best), "n_track": int(counts[0]), "n_em": int(counts[1]), "n_none": int(counts[2]),
                   "n_michel": int(np.sum(tagged))}
        truth, michel = event.get(self.truth), event.get(self.michel_truth)
        accuracy = efficiency = purity = float("nan")
        true_tagged = n_true = -1
        if truth is not None and michel is not None and len(best):
            metrics = classification_metrics(em_trk_none, michel_score, np.asarray(truth), np.asarray(michel),
                                             self.michel_cut)
            accuracy, efficiency, purity = (metrics[k] for k in ("track_vs_shower_accuracy", "michel_efficiency",
                                                                 "michel_purity"))
            true_tagged, _, n_true = michel_counts(tagged, np.asarray(michel))
        summary.update(track_vs_shower_accuracy=accuracy, michel_efficiency=efficiency, michel_purity=purity,
                       n_michel_true=n_true, n_michel_true_tagged=true_tagged)
        event.put("summary", summary)
