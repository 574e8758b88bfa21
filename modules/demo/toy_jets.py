"""Toy jets made from the events' random streams: inputs for the demo tagger, with no input file."""

from __future__ import annotations

import numpy as np

from ...framework import Output, Param, Producer
from ..common.jagged import unflatten


class ToyJets(Producer):
    """A Poisson number of jets per event, each with ``features`` standard-normal float32 features.

    Reproducible whatever the streams, threads and batches: each event's numbers come from its own
    generator (``events.rng(k)``), drawn in the same order as when the module ran one event at a time.
    """

    columnar = True
    mean_jets = Param(float, 6.0, doc="mean number of jets per event")
    features = Param(int, 16, doc="features per jet (the demo tagger takes 16)")
    jets = Output("float32 jagged array [events, n jets, features]")

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        """One event's jets: their number, then their features, from the event's own generator."""
        n = int(rng.poisson(self.mean_jets))
        return rng.standard_normal((n, self.features)).astype(np.float32)

    def produce(self, events):
        jets = [self.draw(events.rng(k)) for k in range(len(events))]
        n_per_event = np.fromiter((len(j) for j in jets), dtype=np.int64, count=len(jets))
        events.put("jets", unflatten(np.concatenate(jets), n_per_event))
