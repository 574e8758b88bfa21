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

A module that only reads a model's metadata (labels, parameters), the same in every mode, derives
from :class:`UsesModel`.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future

import numpy as np

from ..module import ExternalWork, Module
from ..params import Param
from .client import InferenceClient
from .repository import ModelInfo


class UsesModel(Module, abstract=True):
    """Mixin of a module that reads a model's metadata (labels, parameters such as a working point)
    from the job's inference service, whichever mode it runs in, without sending requests itself::

        class Clustering(UsesModel, Producer):
            model = Param(str, "my_clustering", doc="repository entry holding the working point")

            def begin_job(self):
                self.radius = float(self.model_info(self.model).parameters["radius"])
    """

    requires = ("inference",)

    @property
    def client(self) -> InferenceClient:
        return self.service("inference").client

    def model_info(self, model: str | None = None) -> ModelInfo:
        """Inputs, outputs, ``max_batch_size``, labels and parameters of ``model`` (default: ``self.model``)."""
        return self.client.model_info(model or self.model)


class InferenceProducer(UsesModel, ExternalWork, abstract=True):
    """ExternalWork whose ``acquire`` sends inputs to a model through the job's inference service."""

    model = Param(str, doc="model name in the model repository (a Triton repository entry)")

    def infer(self, inputs: Mapping[str, np.ndarray], outputs: list[str] | None = None,
              model: str | None = None) -> Future:
        """Starts inference on this module's model (or ``model``); returns a Future of the outputs."""
        return self.client.infer(model or self.model, inputs, outputs)
