"""Per-event reductions and splits of jagged data, for columnar modules (a batch of events per call).

A columnar module's products must equal, bit for bit, what the same module computed one event at a time,
whatever events share its batch. Counts and selections are exact anyway; floating-point sums are not: numpy's
``np.sum`` adds pairwise (eight partial sums, blocks of 128), ``ak.sum`` adds in sequence, so the two round
differently as soon as an event has three objects. :func:`event_sums` reproduces ``np.sum`` per event with
one numpy call over the batch.
"""

from __future__ import annotations

from typing import Any

import awkward as ak
import numpy as np


def flat(array: Any) -> np.ndarray:
    """The values of a jagged array (one list per event) as one flat numpy array, events in order."""
    return ak.to_numpy(ak.flatten(array, axis=1))


def counts(array: Any) -> np.ndarray:
    """Objects per event of a jagged (or regular) array, as int64."""
    return ak.to_numpy(ak.num(array, axis=1)).astype(np.int64, copy=False)


def event_of_rows(n_per_event: np.ndarray) -> np.ndarray:
    """For each flat row, the index of the event it belongs to."""
    return np.repeat(np.arange(len(n_per_event)), n_per_event)


def kept_counts(n_per_event: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Per event, how many of its rows ``keep`` (a flat boolean mask over all rows) selects."""
    return np.bincount(event_of_rows(n_per_event)[keep], minlength=len(n_per_event)).astype(np.int64)


def event_sums(values: np.ndarray, n_per_event: np.ndarray) -> np.ndarray:
    """``np.sum`` of each event's rows, bit for bit as numpy sums one event's array.

    ``np.sum(a)`` is ``0 + pairwise(a)``, while ``np.add.reduceat`` starts a segment from its first element
    and adds ``pairwise(rest)``; with a zero put before every event's rows, each segment becomes
    ``0 + pairwise(a)`` — the same inner loop over the same elements, so the same rounding. The sum's dtype is
    ``np.sum``'s (integers accumulate as the platform integer, as ``np.sum`` does).

    Args:
        values (np.ndarray): the rows of all events, flat, events in order.
        n_per_event (np.ndarray): rows per event (sums to ``len(values)``).

    Returns:
        np.ndarray: one sum per event (0 for an event without rows).

    Example::

        >>> event_sums(np.array([1.0, 2.0, 3.0], np.float32), np.array([2, 0, 1])).tolist()
        [3.0, 0.0, 3.0]
    """
    dtype = np.zeros(0, values.dtype).sum().dtype
    if len(n_per_event) == 0:
        return np.zeros(0, dtype)
    starts = np.cumsum(n_per_event) - n_per_event
    with_zeros = np.insert(values.astype(dtype, copy=False), starts, 0)
    return np.add.reduceat(with_zeros, starts + np.arange(len(n_per_event)))


def unflatten(rows: np.ndarray, n_per_event: np.ndarray) -> ak.Array:
    """Rows of all events (``[rows, ...]``) back into one list per event (``var * ...``)."""
    return ak.unflatten(rows, n_per_event)
