"""Analyzers that fill ``hist`` histograms, saved at end of job under ``<label>/<name>``."""

from __future__ import annotations

from typing import Any

import awkward as ak
import hist
import numpy as np

from ...framework import Analyzer, InputTag, Param


def all_values(value: Any, name: str = "the value") -> np.ndarray:
    """Every number of a batch's scalars or jagged lists, flat (a histogram does not care which event).

    Records (a leaf-list struct, a collection) are refused by ``name``: flattening them would mix every
    field in one histogram.
    """
    if isinstance(value, (ak.Array, ak.Record)):
        if value.fields:
            shown = ", ".join(value.fields[:6]) + (", ..." if len(value.fields) > 6 else "")
            raise ValueError(f"{name!r} is a record of fields ({shown}), not numbers: histogram one field "
                             f"(for a branch's leaf, src: {name}.{value.fields[0]})")
        return np.ravel(ak.to_numpy(ak.flatten(value, axis=None)))
    return np.ravel(value)


class Histogram1D(Analyzer):
    """Fills a 1D histogram of a per-event scalar or of every value of a jagged branch/product.

    Columnar: one ``fill`` per batch. Unit weights in double storage are exact integers, so the histogram
    is the same whatever the batches.
    """

    columnar = True
    src = InputTag(doc="branch or product to histogram (scalar or jagged numbers)")
    bins = Param(int, 50, doc="number of regular bins")
    low = Param(float, 0.0, doc="lower edge")
    high = Param(float, 500.0, doc="upper edge")
    name = Param(str, "h", doc="histogram name in the output file")
    title = Param(str, "", doc="axis label")

    def begin_job(self):
        self.hist = hist.Hist.new.Reg(self.bins, self.low, self.high, name="x", label=self.title or self.src).Double()

    def analyze(self, events):
        self.hist.fill(x=all_values(events.get(self.src), self.src))

    def histograms(self):
        return {self.name: self.hist}
