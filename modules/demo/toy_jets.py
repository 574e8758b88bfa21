"""Toy jets made from the event's random stream: inputs for the demo tagger, with no input file."""

from __future__ import annotations

import numpy as np

from ...framework import Output, Param, Producer


class ToyJets(Producer):
    """A Poisson number of jets per event, each with ``features`` standard-normal float32 features.

    Reproducible whatever the streams and threads: the numbers come from ``event.rng()``.
    """

    mean_jets = Param(float, 6.0, doc="mean number of jets per event")
    features = Param(int, 16, doc="features per jet (the demo tagger takes 16)")
    jets = Output("float32 array [n jets, features]")

    def produce(self, event):
        rng = event.rng()
        n = int(rng.poisson(self.mean_jets))
        event.put("jets", rng.standard_normal((n, self.features)).astype(np.float32))
