"""Base class of ML producers: an ExternalWork pair whose work is an inference request.

A producer names its model and builds input arrays; it never knows direct from SONIC::

    class MyTagger(InferenceProducer):
        jets = InputTag("Jet", fields=("pt", "eta"))
        model = Param(str, "my_tagger", doc="model name in the repository")
        scores = Output("per-jet score")

        def acquire(self, event):
            x = build_inputs(event.get(self.jets))         # vectorised numpy
            return self.infer({"x": x})                     # returns at once

        def produce(self, event, result):
            event.put("scores", result["score"][:, 0])
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future

import numpy as np

from ..module import ExternalWork
from ..params import Param
from .client import InferenceClient
from .repository import ModelInfo


class InferenceProducer(ExternalWork, abstract=True):
    """ExternalWork whose ``acquire`` sends inputs to a model through the job's inference service."""

    requires = ("inference",)
    model = Param(str, doc="model name in the model repository (a Triton repository entry)")

    @property
    def client(self) -> InferenceClient:
        return self.service("inference").client

    def model_info(self, model: str | None = None) -> ModelInfo:
        """Inputs, outputs and ``max_batch_size`` of the model (from the repository or the server)."""
        return self.client.model_info(model or self.model)

    def infer(self, inputs: Mapping[str, np.ndarray], outputs: list[str] | None = None,
              model: str | None = None) -> Future:
        """Starts inference on this module's model (or ``model``); returns a Future of the outputs."""
        return self.client.infer(model or self.model, inputs, outputs)
