"""The demo jet tagger: one InferenceProducer, run in-process or on Triton by configuration alone."""

from __future__ import annotations

import numpy as np

from ...framework import InputTag, Output, Param
from ...framework.inference import InferenceProducer


class ToyTagger(InferenceProducer):
    """Scores every toy jet with the ``demo_mlp`` model (``data/models/demo``): class probabilities.

    Identical code for ``--inference direct`` and ``--inference sonic``; an event's jets go as one
    request (the client splits it at the model's max_batch_size).
    """

    jets = InputTag("toyJets:jets", doc="float32 [n, 16] features per jet")
    model = Param(str, "demo_mlp", doc="model name in the repository")
    labels = Param(list[str], ["b", "c", "uds", "g"], doc="names of the model's output classes")
    scores = Output("per-jet class probabilities: one branch per label")

    def acquire(self, event):
        x = event.get(self.jets)
        if len(x) == 0:
            return {"probs": np.zeros((0, len(self.labels)), np.float32)}  # nothing to ask the model
        return self.infer({"x": x}, outputs=["probs"])

    def produce(self, event, result):
        probs = result["probs"]
        event.put("scores", {label: probs[:, i] for i, label in enumerate(self.labels)})
