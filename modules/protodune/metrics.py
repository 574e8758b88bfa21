"""How well EmTrkMichelId scores agree with the simulation truth (per event or over a sample).

Truth codes follow the generator: 0 track, 1 EM shower, 2 none (noise); ``michel`` flags hits of
Michel electrons. The headline number is the **track-vs-shower accuracy**: among hits whose truth is
track or shower, the fraction where the larger of P(track) and P(em) names the truth, the
quantity LArSoft's EM/track separation is judged by. Its chance level is the larger class fraction
(reported as ``track_vs_shower_chance``); cosmic-ray events are ~85 % track hits, so the
**balanced accuracy** (mean of the track and shower efficiencies, chance 0.5) says more there.
"""

from __future__ import annotations

import numpy as np

TRUTH_TRACK, TRUTH_SHOWER, TRUTH_NONE = 0, 1, 2


def classification_metrics(em_trk_none: np.ndarray, michel_score: np.ndarray, truth: np.ndarray,
                           michel_truth: np.ndarray, michel_cut: float = 0.5) -> dict[str, float]:
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
        ``michel_efficiency``, ``michel_purity`` (NaN where undefined).
    """
    truth = np.asarray(truth)
    michel_truth = np.asarray(michel_truth, bool)
    em_trk_none = np.asarray(em_trk_none)
    labelled = truth != TRUTH_NONE
    says_shower = em_trk_none[:, 1] > em_trk_none[:, 0]
    correct = says_shower == (truth == TRUTH_SHOWER)
    tagged = np.asarray(michel_score).reshape(-1) > michel_cut

    def mean(values: np.ndarray) -> float:
        return float(np.mean(values)) if len(values) else float("nan")

    n_track, n_shower = int(np.sum(truth == TRUTH_TRACK)), int(np.sum(truth == TRUTH_SHOWER))
    track_efficiency, shower_efficiency = mean(correct[truth == TRUTH_TRACK]), mean(correct[truth == TRUTH_SHOWER])
    return {
        "hits": float(len(truth)),
        "track_vs_shower_accuracy": mean(correct[labelled]),
        "track_vs_shower_chance": max(n_track, n_shower) / max(1, n_track + n_shower),
        "track_vs_shower_balanced_accuracy": 0.5 * (track_efficiency + shower_efficiency),
        "track_efficiency": track_efficiency,
        "shower_efficiency": shower_efficiency,
        "three_class_accuracy": mean(np.argmax(em_trk_none, axis=1) == truth),
        "michel_efficiency": mean(tagged[michel_truth]),
        "michel_purity": mean(michel_truth[tagged]),
    }


def michel_counts(tagged: np.ndarray, michel_truth: np.ndarray) -> tuple[int, int, int]:
    """(true Michel hits tagged, hits tagged, true Michel hits): what efficiency and purity over
    several events are sums of (a mean of per-event ratios would weight small events up)."""
    tagged, michel_truth = np.asarray(tagged, bool), np.asarray(michel_truth, bool)
    return int(np.sum(tagged & michel_truth)), int(np.sum(tagged)), int(np.sum(michel_truth))
