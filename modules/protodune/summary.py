"""EmTrkMichelSummary: a per-event summary of the hit classification (counts, and agreement with truth)."""

from __future__ import annotations

import numpy as np

from ...framework import InputTag, Output, Param, Producer
from .metrics import MichelRates, classification_metrics

#: a per-event rate or count that is undefined: no truth in the file, or nothing to divide by (an event with no
#: true Michel hit has no Michel efficiency); a float branch of the output cannot hold None, and NaN would
#: poison every sum over events
UNDEFINED = -1


class EmTrkMichelSummary(Producer):
    """Counts hits by their largest score and, for simulated events, compares them with the truth.

    The Michel decision is MichelHits' (the hit and its neighbourhood, ``michel:michel``) when the job
    runs it, else the CNN's own per-hit score. ``Hit_truth``/``Hit_michel`` are optional: on data
    without truth the agreement fields and the true-Michel counts are -1 (:data:`UNDEFINED`); with truth, a
    rate with nothing to divide by (no true Michel hit in the event, no hit tagged) is -1 too, while the
    counts are what they are. Rates over several events are ratios of the counts' sums
    (:meth:`~.metrics.MichelRates.from_summary`), defined as soon as one event has a true Michel hit.
    """

    scores = InputTag("emtrkmichel:scores", doc="EmTrkMichelId scores (track, em, none, michel) per hit")
    michel = InputTag("michel:michel", optional=True,
                      doc="per-hit Michel score of MichelHits (used for the Michel fields when present)")
    truth = InputTag("Hit_truth", optional=True, doc="per-hit truth: 0 track, 1 shower, 2 none")
    michel_truth = InputTag("Hit_michel", optional=True, doc="per-hit truth: Michel electron")
    michel_cut = Param(float, 0.5, doc="Michel score above which a hit counts as Michel")

    summary = Output("per event: n_hits, n_track, n_em, n_none, n_michel (hits tagged Michel), "
                     "track_vs_shower_accuracy, michel_efficiency, michel_purity, n_michel_true, "
                     "n_michel_true_tagged (-1 without truth, and a rate -1 where it is undefined: no true "
                     "Michel hit, no tagged hit; efficiency and purity over many events are ratios of the "
                     "counts' sums)")

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
        accuracy = efficiency = purity = float(UNDEFINED)
        true_tagged = n_true = UNDEFINED
        if truth is not None and michel is not None:
            metrics = classification_metrics(em_trk_none, michel_score, np.asarray(truth), np.asarray(michel),
                                             self.michel_cut)
            accuracy, efficiency, purity = (float(UNDEFINED) if metrics[k] is None else metrics[k]
                                            for k in ("track_vs_shower_accuracy", "michel_efficiency", "michel_purity"))
            rates = MichelRates.of(tagged, np.asarray(michel))
            true_tagged, n_true = rates.true_tagged, rates.true
        summary.update(track_vs_shower_accuracy=accuracy, michel_efficiency=efficiency, michel_purity=purity,
                       n_michel_true=n_true, n_michel_true_tagged=true_tagged)
        event.put("summary", summary)
