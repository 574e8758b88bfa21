"""Agreement of scores with truth, on hand-made cases."""

from __future__ import annotations

import numpy as np
import pytest

from sonic_hep.modules.protodune.metrics import classification_metrics, michel_counts


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


def test_undefined_rates_are_nan():
    m = classification_metrics(np.array([[0.9, 0.05, 0.05]]), np.array([0.1]), np.array([0]), np.array([False]))
    assert np.isnan(m["shower_efficiency"]) and np.isnan(m["michel_efficiency"]) and np.isnan(m["michel_purity"])


def test_michel_counts_are_what_rates_over_events_sum():
    tagged = np.array([True, True, False, True, False])
    truth = np.array([True, False, True, True, False])
    assert michel_counts(tagged, truth) == (2, 3, 3)  # true tagged, tagged, true
