"""Agreement of scores with truth, on hand-made cases."""

from __future__ import annotations

import awkward as ak
import numpy as np
import pytest

from sonic_hep.framework.testing import run_module
from sonic_hep.modules.protodune.metrics import MichelRates, classification_metrics, michel_counts
from sonic_hep.modules.protodune.summary import UNDEFINED, EmTrkMichelSummary


def test_metrics_count_what_they_say():
    # rows: P(track), P(em), P(none); truth 0 track, 1 shower, 2 none
    em_trk_none = np.array([[0.8, 0.1, 0.1], [0.6, 0.3, 0.1], [0.2, 0.7, 0.1], [0.3, 0.6, 0.1], [0.1, 0.2, 0.7]])
    truth = np.array([0, 1, 1, 0, 2])
    michel_score = np.array([0.1, 0.9, 0.2, 0.1, 0.6])
    michel = np.array([False, True, True, False, False])
    m = classification_metrics(em_trk_none, michel_score, truth, michel)
    assert m["hits"] == 5
    assert m["track_efficiency"] == 0.5 and m["shower_efficiency"] == 0.5   # one of two right in each class
    assert m["track_vs_shower_accuracy"] == 0.5 and m["track_vs_shower_balanced_accuracy"] == 0.5
    assert m["track_vs_shower_chance"] == 0.5
    assert m["three_class_accuracy"] == pytest.approx(3 / 5)
    assert m["michel_efficiency"] == 0.5 and m["michel_purity"] == 0.5


def test_undefined_rates_are_none_with_their_counts_never_nan():
    """One track hit, not tagged Michel: no shower and no true or tagged Michel hit to divide by."""
    m = classification_metrics(np.array([[0.9, 0.05, 0.05]]), np.array([0.1]), np.array([0]), np.array([False]))
    assert m["shower_efficiency"] is None and m["track_vs_shower_balanced_accuracy"] is None
    assert m["michel_efficiency"] is None and m["michel_purity"] is None
    assert (m["michel_true_hits"], m["michel_tagged_hits"], m["michel_true_tagged_hits"]) == (0, 0, 0)
    assert m["track_efficiency"] == 1.0 and m["track_vs_shower_chance"] == 1.0


def test_michel_rates_say_undefined_in_words_and_add_over_events():
    """A small-scale sample: hits tagged, none true. Its efficiency is undefined (not 0, not NaN); its purity
    is 0 of the tagged hits. Added to an event with true Michel hits, both are defined."""
    small = MichelRates.of(np.array([True, True, False]), np.array([False, False, False]))
    assert (small.efficiency, small.purity) == (None, 0.0)
    assert small.describe() == ("Michel hits: efficiency undefined (no true Michel hit: small-scale events rarely "
                                "hold one; Michel figures need --scale full), purity 0.000 (0 of 2 tagged hits true)")
    full = small + MichelRates(true_tagged=3, tagged=4, true=6)
    assert (full.efficiency, full.purity) == (0.5, 0.5)
    assert full.describe() == ("Michel hits: efficiency 0.500 (3 of 6 true hits tagged), "
                               "purity 0.500 (3 of 6 tagged hits true)")
    assert MichelRates(0, 0, 0).describe().endswith("purity undefined (no hit tagged)")


def test_the_summary_of_an_event_without_true_michel_hits_holds_counts_and_minus_one_never_nan():
    """EmTrkMichelSummary on an event with no true Michel hit (63 hits tagged, as in the small events whose
    efficiency was NaN), then on the same event without truth in the file."""
    scores = ak.Array([{"track": np.full(63, 0.2), "em": np.full(63, 0.7), "none": np.full(63, 0.1),
                        "michel": np.full(63, 0.9)}])
    truth = ak.Array([np.ones(63, np.int8)])
    run = run_module(EmTrkMichelSummary, {"emtrkmichel:scores": scores, "Hit_truth": truth,
                                          "Hit_michel": ak.Array([np.zeros(63, bool)])}, label="summary")
    summary = run.products["summary"][0]
    assert (summary["n_michel"], summary["n_michel_true"], summary["n_michel_true_tagged"]) == (63, 0, 0)
    assert summary["michel_efficiency"] == UNDEFINED and summary["michel_purity"] == 0.0
    assert summary["track_vs_shower_accuracy"] == 1.0
    without_truth = run_module(EmTrkMichelSummary, {"emtrkmichel:scores": scores}, label="summary")
    values = without_truth.products["summary"][0]
    assert all(values[k] == UNDEFINED for k in ("track_vs_shower_accuracy", "michel_efficiency", "michel_purity",
                                                 "n_michel_true", "n_michel_true_tagged"))


def test_michel_counts_are_what_rates_over_events_sum():
    tagged = np.array([True, True, False, True, False])
    truth = np.array([True, False, True, True, False])
    assert michel_counts(tagged, truth) == (2, 3, 3)  # true tagged, tagged, true
