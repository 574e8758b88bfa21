"""Analyzers that fill ``hist`` histograms, saved at end of job under ``<label>/<name>``."""

from __future__ import annotations

import awkward as ak
import hist
import numpy as np

from ...framework import Analyzer, InputTag, Param


class Histogram1D(Analyzer):
    """Fills a 1D histogram of a per-event scalar or of every value of a jagged branch/product."""

    src = InputTag(doc="branch or product to histogram (scalar or jagged numbers)")
    bins = Param(int, 50, doc="number of regular bins")
    low = Param(float, 0.0, doc="lower edge")
    high = Param(float, 500.0, doc="upper edge")
    name = Param(str, "h", doc="histogram name in the output file")
    title = Param(str, "", doc="axis label")

    def begin_job(self):
        self.hist = hist.Hist.new.Reg(self.bins, self.low, self.high, name="x", label=self.title or self.src).Double()

    def analyze(self, event):
        value = event.get(self.src)
        values = np.ravel(ak.to_numpy(ak.flatten(value, axis=None))) if isinstance(value, ak.Array) else np.ravel(value)
        self.hist.fill(x=values)

    def histograms(self):
        return {self.name: self.hist}
