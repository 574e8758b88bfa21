"""Vectorised per-event quantities and selections on NanoAOD-style collections."""

from __future__ import annotations

import awkward as ak
import numpy as np

from ...framework import Filter, InputTag, Output, Param, Producer


class CollectionSum(Producer):
    """Scalar sum of one field over a collection's objects above a threshold (e.g. HT from jets)."""

    src = InputTag("Jet", fields=("pt",), doc="collection to sum over (needs the field 'pt')")
    min_pt = Param(float, 0.0, doc="objects with pt below this (GeV) are ignored")
    sum = Output("float: scalar sum of pt (GeV) of the selected objects")
    count = Output("int: number of selected objects")

    def produce(self, event):
        pt = ak.to_numpy(event.get(self.src).pt)
        keep = pt >= self.min_pt
        event.put("sum", float(pt[keep].sum()))
        event.put("count", int(keep.sum()))


class MinCountFilter(Filter):
    """Keeps events with at least ``min_count`` objects of a collection above ``min_pt``."""

    src = InputTag("Jet", fields=("pt",), doc="collection to count (needs the field 'pt')")
    min_pt = Param(float, 20.0, doc="pt threshold (GeV)")
    min_count = Param(int, 1, doc="objects needed to keep the event")

    def filter(self, event):
        pt = ak.to_numpy(event.get(self.src).pt)
        return int(np.count_nonzero(pt >= self.min_pt)) >= self.min_count


class SelectObjects(Producer):
    """The objects of a collection passing a pt/|eta| selection, as a new collection (chosen fields)."""

    src = InputTag("Jet", fields=("pt", "eta", "phi", "mass"), doc="collection to select from")
    min_pt = Param(float, 20.0, doc="minimum pt (GeV)")
    max_abs_eta = Param(float, 2.5, doc="maximum |eta|")
    objects = Output("collection of the selected objects (same fields as src)")

    def produce(self, event):
        objs = event.get(self.src)
        keep = (objs.pt >= self.min_pt) & (abs(objs.eta) <= self.max_abs_eta)
        event.put("objects", {field: ak.to_numpy(objs[field][keep]) for field in objs.fields})
