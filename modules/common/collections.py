"""Vectorised per-event quantities and selections on NanoAOD-style collections, a batch of events per call.

Columnar modules (``columnar = True``): each call gets many events and works on the flat rows of all of
them, so the Python cost is paid once per batch, not once per event. Products equal bit for bit what these
modules computed one event at a time (see :mod:`.jagged` for the sums).
"""

from __future__ import annotations

from typing import Any

import awkward as ak
import numpy as np

from ...framework import Filter, InputTag, Output, Param, Producer
from .jagged import counts, event_sums, flat, kept_counts, unflatten


def _passing_pt(objects: Any, min_pt: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Flat pt of a batch's objects, objects per event, and the flat mask of those with pt ≥ ``min_pt``."""
    pt = flat(objects.pt)
    return pt, counts(objects), pt >= min_pt


class CollectionSum(Producer):
    """Scalar sum of one field over a collection's objects above a threshold (e.g. HT from jets)."""

    columnar = True
    src = InputTag("Jet", fields=("pt",), doc="collection to sum over (needs the field 'pt')")
    min_pt = Param(float, 0.0, doc="objects with pt below this (GeV) are ignored")
    sum = Output("float: scalar sum of pt (GeV) of the selected objects")
    count = Output("int: number of selected objects")

    def produce(self, events):
        pt, n, keep = _passing_pt(events.get(self.src), self.min_pt)
        n_kept = kept_counts(n, keep)
        # np.sum's rounding per event, then float64 as the per-event `float(...)` wrote it
        events.put("sum", event_sums(pt[keep], n_kept).astype(np.float64))
        events.put("count", n_kept)


class MinCountFilter(Filter):
    """Keeps events with at least ``min_count`` objects of a collection above ``min_pt``."""

    columnar = True
    src = InputTag("Jet", fields=("pt",), doc="collection to count (needs the field 'pt')")
    min_pt = Param(float, 20.0, doc="pt threshold (GeV)")
    min_count = Param(int, 1, doc="objects needed to keep the event")

    def filter(self, events) -> np.ndarray:
        _, n, keep = _passing_pt(events.get(self.src), self.min_pt)
        return kept_counts(n, keep) >= self.min_count


class SelectObjects(Producer):
    """The objects of a collection passing a pt/|eta| selection, as a new collection (chosen fields)."""

    columnar = True
    src = InputTag("Jet", fields=("pt", "eta", "phi", "mass"), doc="collection to select from")
    min_pt = Param(float, 20.0, doc="minimum pt (GeV)")
    max_abs_eta = Param(float, 2.5, doc="maximum |eta|")
    objects = Output("collection of the selected objects (same fields as src)")

    def produce(self, events):
        objs = events.get(self.src)
        n = counts(objs)
        keep = (flat(objs.pt) >= self.min_pt) & (abs(flat(objs.eta)) <= self.max_abs_eta)
        n_kept = kept_counts(n, keep)
        # plain numpy fields zipped into a list of records per event: the layout the per-event module's
        # dict of arrays was written with (counter nX, branches X_<field>), without the source's parameters
        selected = {field: unflatten(flat(objs[field])[keep], n_kept) for field in objs.fields}
        events.put("objects", ak.zip(selected, depth_limit=2))
