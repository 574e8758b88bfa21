"""The shared kinematics helpers: angle wrapping and ranking within groups, with exact expected values."""

from __future__ import annotations

import numpy as np

from sonic_hep.modules.common.kinematics import delta_phi, rank_within


def test_delta_phi_wraps_into_minus_pi_to_pi():
    got = delta_phi(np.array([3.0, -3.0, 0.5, np.pi]), np.array([-3.0, 3.0, 0.25, 0.0]))
    np.testing.assert_allclose(got, [6.0 - 2 * np.pi, 2 * np.pi - 6.0, 0.25, -np.pi])


def test_rank_within_orders_each_group_by_decreasing_key():
    groups = np.array([2, 0, 2, 0, 2])
    key = np.array([1.0, 5.0, 3.0, 7.0, 2.0])
    order, rank = rank_within(groups, key)
    assert order.tolist() == [3, 1, 2, 4, 0]
    assert rank.tolist() == [0, 1, 0, 1, 2]


def test_rank_within_empty():
    order, rank = rank_within(np.zeros(0, np.int64), np.zeros(0))
    assert order.size == 0 and rank.size == 0
