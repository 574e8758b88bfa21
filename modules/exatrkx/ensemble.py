"""The whole Exa.TrkX pipeline as one request per event to a Triton ensemble.

The ensemble ``exatrkx_pipeline`` chains, inside the server, the embedding, graph building
(python model), filter, edge selection (python model), GNN and labeling (python model); the event
sends its hit features once and gets back a track label per hit. Per-stage times are then the
server's (``sonic bench exatrkx`` reads them from Triton's statistics). An ensemble runs only on a
server: the inference client refuses it otherwise, and the job stops before its first event.
"""

from __future__ import annotations

import numpy as np

from ...framework import ConfigError, InferenceError, InputTag, Output, Param
from ...framework.inference import InferenceProducer


class ExaTrkXEnsemble(InferenceProducer):
    """Exa.TrkX in one request per event: hit features in, track labels out (Triton ensemble)."""

    features = InputTag("features:features", doc="hit features (ExaTrkXFeatures)")
    model = Param(str, "exatrkx_pipeline", doc="the ensemble model in the repository")
    labels = Output("int64 [hits]: track candidate of each hit, -1 for none")

    def begin_job(self):
        try:
            self.client.check_runnable(self.model)
        except InferenceError as err:
            raise ConfigError(f"module '{self.label}': {err}; or use the per-stage modules "
                              f"(tracks.labels=labeling:labels)", key="services.inference.mode") from None

    def acquire(self, event):
        features = event.get(self.features)
        if len(features) == 0:
            return {"labels": np.zeros(0, dtype=np.int64)}
        return self.infer({"features": features}, outputs=["labels"])

    def produce(self, event, result):
        event.put("labels", result["labels"])
