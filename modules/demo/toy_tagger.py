"""The demo jet tagger: one InferenceProducer, run in-process or on Triton by configuration alone."""

from __future__ import annotations

from typing import Any

import awkward as ak
import numpy as np

from ...framework import InputTag, Output, Param
from ...framework.inference import InferenceProducer
from ..common.jagged import counts, unflatten


def as_jagged(jets: Any) -> ak.Array:
    """The batch's jets as an awkward array: the jagged one a columnar ToyJets puts, or the regular numpy
    array stacked from per-event arrays that all had the same length."""
    return ak.Array(jets) if isinstance(jets, np.ndarray) else jets


def jet_rows(jets: ak.Array) -> np.ndarray:
    """All jets of a batch as one rectangular ``[jets, features]`` float32 array (the model's rows)."""
    return np.ascontiguousarray(ak.to_numpy(ak.flatten(jets, axis=1)), dtype=np.float32)


class ToyTagger(InferenceProducer):
    """Scores every toy jet with the ``demo_mlp`` model (``data/models/demo``): class probabilities.

    Identical code for ``--inference direct`` and ``--inference sonic``; the jets of all events of a batch
    go as one request (the client splits it at the model's max_batch_size), so a batch costs one round trip.
    """

    columnar = True
    jets = InputTag("toyJets:jets", doc="float32 [n, 16] features per jet")
    model = Param(str, "demo_mlp", doc="model name in the repository")
    labels = Param(list[str], ["b", "c", "uds", "g"], doc="names of the model's output classes")
    scores = Output("per-jet class probabilities: one branch per label")

    def acquire(self, events):
        x = jet_rows(as_jagged(events.get(self.jets)))
        if len(x) == 0:
            return {"probs": np.zeros((0, len(self.labels)), np.float32)}  # nothing to ask the model
        return self.infer({"x": x}, outputs=["probs"])

    def produce(self, events, result):
        n_per_event = counts(as_jagged(events.get(self.jets)))
        probs = result["probs"]
        # one list of records per event: the layout the per-event dict of per-label arrays was written with
        events.put("scores", ak.zip({label: unflatten(np.ascontiguousarray(probs[:, i]), n_per_event)
                                     for i, label in enumerate(self.labels)}, depth_limit=2))
