"""Inference behind one interface: direct (onnxruntime in-process) or SONIC (Triton over gRPC).

Producers derive from :class:`InferenceProducer` and call ``self.infer(inputs)``; the ``inference``
service (``services.inference`` in the configuration, ``--inference`` on the command line) decides
where the model runs. See ``service.py`` for the settings.
"""

from .client import InferenceClient, check_inputs
from .producer import InferenceProducer
from .repository import ModelInfo, ModelRepository, TensorSpec

__all__ = ["InferenceClient", "InferenceProducer", "ModelInfo", "ModelRepository", "TensorSpec", "check_inputs"]
