"""How well EmTrkMichelId scores agree with the simulation truth (per event or over a sample).

Truth codes follow the generator: 0 track, 1 EM shower, 2 none (noise); ``michel`` flags hits of
Michel electrons. The headline number is the **track-vs-shower accuracy**: among hits whose truth is
track or shower, the fraction where the larger of P(track) and P(em) names the truth, the
quantity LArSoft's EM/track separation is judged by. Its chance level is the larger class fraction
(reported as ``track_vs_shower_chance``); cosmic-ray events are ~85 % track hits, so the
**balanced accuracy** (mean of the track and shower efficiencies, chance 0.5) says more there.

A rate with nothing to divide by is ``None``, never NaN and never a made-up 0: small-scale events often hold
no true Michel hit, and an efficiency there is undefined, not 0. The counts come with the rates, so a sample
can be judged by them (:class:`MichelRates` says it in words).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

TRUTH_TRACK, TRUTH_SHOWER, TRUTH_NONE = 0, 1, 2


def rate(numerator: float, denominator: float) -> float | None:
    """``numerator / denominator``, or None where it is undefined (nothing to divide by)."""
    return float(numerator / denominator) if denominator else None


def classification_metrics(em_trk_none: np.ndarray, michel_score: np.ndarray, truth: np.ndarray,
                           michel_truth: np.ndarray, michel_cut: float = 0.5) -> dict[str, float | None]:
    """Agreement of scores with truth.

    Args:
        em_trk_none: ``[hits, 3]`` probabilities (track, em, none).
        michel_score: ``[hits]`` P(Michel).
        truth: ``[hits]`` truth codes; ``michel_truth``: ``[hits]`` bool.
        michel_cut: score above which a hit counts as Michel-tagged.

    Returns:
        ``hits``, ``track_vs_shower_accuracy``, ``track_vs_shower_chance``,
        ``track_vs_shower_balanced_accuracy``, ``track_efficiency``,
        ``shower_efficiency`` (per-class recall of that decision), ``three_class_accuracy``,
        ``michel_efficiency``, ``michel_purity`` (None where undefined), and the Michel counts
        ``michel_true_hits``, ``michel_tagged_hits``, ``michel_true_tagged_hits``.
    """
    truth = np.asarray(truth)
    michel_truth = np.asarray(michel_truth, bool)
    em_trk_none = np.asarray(em_trk_none)
    labelled = truth != TRUTH_NONE
    says_shower = em_trk_none[:, 1] > em_trk_none[:, 0]
    correct = says_shower == (truth == TRUTH_SHOWER)
    tagged = np.asarray(michel_score).reshape(-1) > michel_cut

    def mean(values: np.ndarray) -> float | None:
        return rate(np.sum(values), len(values))

    n_track, n_shower = int(np.sum(truth == TRUTH_TRACK)), int(np.sum(truth == TRUTH_SHOWER))
    track_efficiency, shower_efficiency = mean(correct[truth == TRUTH_TRACK]), mean(correct[truth == TRUTH_SHOWER])
    both = None if track_efficiency is None or shower_efficiency is None else 0.5 * (track_efficiency + shower_efficiency)
    michel = MichelRates.of(tagged, michel_truth)
    return {
        "hits": float(len(truth)),
        "track_vs_shower_accuracy": mean(correct[labelled]),
        "track_vs_shower_chance": rate(max(n_track, n_shower), n_track + n_shower),
        "track_vs_shower_balanced_accuracy": both,
        "track_efficiency": track_efficiency,
        "shower_efficiency": shower_efficiency,
        "three_class_accuracy": mean(np.argmax(em_trk_none, axis=1) == truth),
        "michel_efficiency": michel.efficiency,
        "michel_purity": michel.purity,
        "michel_true_hits": michel.true,
        "michel_tagged_hits": michel.tagged,
        "michel_true_tagged_hits": michel.true_tagged,
    }


def michel_counts(tagged: np.ndarray, michel_truth: np.ndarray) -> tuple[int, int, int]:
    """(true Michel hits tagged, hits tagged, true Michel hits): what efficiency and purity over
    several events are sums of (a mean of per-event ratios would weight small events up)."""
    tagged, michel_truth = np.asarray(tagged, bool), np.asarray(michel_truth, bool)
    return int(np.sum(tagged & michel_truth)), int(np.sum(tagged)), int(np.sum(michel_truth))


@dataclass(frozen=True)
class MichelRates:
    """Michel efficiency and purity of a sample, from its counts (which add over events).

    Attributes:
        true_tagged: true Michel hits tagged; ``tagged``: hits tagged; ``true``: true Michel hits.
    """

    true_tagged: int
    tagged: int
    true: int

    @classmethod
    def of(cls, tagged: np.ndarray, michel_truth: np.ndarray) -> MichelRates:
        """The rates of per-hit decisions against per-hit truth."""
        return cls(*michel_counts(tagged, michel_truth))

    @classmethod
    def from_summary(cls, out: dict[str, Any]) -> MichelRates:
        """The rates over the events of a job's output (the ``Summary_*`` branches of ``configs/protodune.yaml``),
        events without truth (counts -1) left out."""
        with_truth = np.asarray(out["Summary_n_michel_true"]) >= 0
        return cls(*(int(np.sum(np.asarray(out[f"Summary_{name}"])[with_truth]))
                     for name in ("n_michel_true_tagged", "n_michel", "n_michel_true")))

    def __add__(self, other: MichelRates) -> MichelRates:
        return MichelRates(self.true_tagged + other.true_tagged, self.tagged + other.tagged, self.true + other.true)

    @property
    def efficiency(self) -> float | None:
        """Fraction of true Michel hits that are tagged; None without a true Michel hit."""
        return rate(self.true_tagged, self.true)

    @property
    def purity(self) -> float | None:
        """Fraction of tagged hits that are true Michel hits; None without a tagged hit."""
        return rate(self.true_tagged, self.tagged)

    def describe(self) -> str:
        """One line for a report, with the counts, saying "undefined" where a rate has nothing to divide by."""
        if self.efficiency is None:
            efficiency = ("efficiency undefined (no true Michel hit: small-scale events rarely hold one; "
                          "Michel figures need --scale full)")
        else:
            efficiency = f"efficiency {self.efficiency:.3f} ({self.true_tagged} of {self.true} true hits tagged)"
        purity = ("purity undefined (no hit tagged)" if self.purity is None else
                  f"purity {self.purity:.3f} ({self.true_tagged} of {self.tagged} tagged hits true)")
        return f"Michel hits: {efficiency}, {purity}"
