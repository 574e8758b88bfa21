"""Triton's per-model statistics as the framework reports them: one definition of "compute time".

``ServerConnection.statistics`` returns, per model, Triton's cumulative counters in nanoseconds
(``queue_ns``, ``compute_input_ns``, ``compute_infer_ns``, ``compute_output_ns``). The job report,
``sonic plan`` and the benchmarks all need the server's compute time from them; summing the three
phases here keeps them agreeing on what it includes (not the queue: that is waiting, not work).
"""

from __future__ import annotations

from collections.abc import Mapping

#: Triton's three execution phases: copying inputs in, running the model, copying outputs out
COMPUTE_KEYS = ("compute_input_ns", "compute_infer_ns", "compute_output_ns")


def compute_ns(stats: Mapping[str, float]) -> float:
    """Nanoseconds the server spent executing one model (input + infer + output), queue excluded.

    Args:
        stats (Mapping[str, float]): one model's counters, as ``ServerConnection.statistics`` gives them or
            as read back from a JSON report (a missing counter counts as 0).
    """
    return float(sum(stats.get(key, 0) for key in COMPUTE_KEYS))
