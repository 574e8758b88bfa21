"""Triton's compute time: the three execution phases, never the queue, and missing counters as 0."""

from __future__ import annotations

from sonic_hep.framework.inference.sonic.server_statistics import compute_ns


def test_compute_is_input_infer_output_without_the_queue():
    stats = {"queue_ns": 1000, "compute_input_ns": 1, "compute_infer_ns": 20, "compute_output_ns": 300,
             "requests": 7}
    assert compute_ns(stats) == 321.0


def test_a_report_read_back_without_some_counters():
    assert compute_ns({"compute_infer_ns": 5.5}) == 5.5
    assert compute_ns({}) == 0.0
