"""Triton python models that run one of the project's functions per request (the glue, physics-free).

A repository entry's ``1/model.py`` names the function a workflow defines, e.g.::

    from sonic_hep.framework.inference.backends.python_stage import stage_model
    from sonic_hep.modules.exatrkx.ensemble_stages import graph_building

    TritonPythonModel = stage_model(graph_building)

so the server runs exactly the code the workflow's producers run in-process (the server's python is
the project's environment). A *stage* is a factory ``stage(model name, parameters) -> run``: it is
called once when the server loads the model, with the ``parameters`` of the entry's config.pbtxt as
``{name: string value}`` (a working point, say), and returns ``run(inputs) -> outputs`` on
``{name: numpy array}``. A failure in one request becomes that request's error, naming the model,
instead of taking the model down.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .onnxruntime.stub_tensors import from_numpy, to_numpy

#: one request's computation: input tensors by name → output tensors by name
Run = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]
#: what a repository entry names: (model name, its config parameters) → the computation
Stage = Callable[[str, Mapping[str, str]], Run]


def config_parameters(config: Mapping[str, Any]) -> dict[str, str]:
    """``{name: string value}`` from the JSON config Triton hands a python model."""
    return {name: value["string_value"] for name, value in config.get("parameters", {}).items()}


class StageModel:
    """Base of the python models :func:`stage_model` makes: one ``run`` per request, errors per request."""

    #: the factory the entry names (a staticmethod on the class :func:`stage_model` makes)
    stage: Stage

    def initialize(self, args: dict[str, Any]) -> None:
        """Triton's load hook: reads the config it passes and builds the run function."""
        import triton_python_backend_utils as pb_utils  # only exists inside the Triton python stub

        self.pb = pb_utils
        config = json.loads(args["model_config"])
        self.name = config["name"]
        self.run = self.stage(self.name, config_parameters(config))

    def execute(self, requests: list[Any]) -> list[Any]:
        """Triton's request hook: one response per request, a failed one carrying only its error."""
        responses = []
        for request in requests:
            try:
                inputs = {tensor.name(): to_numpy(tensor) for tensor in request.inputs()}
                outputs = self.run(inputs)
                tensors = [from_numpy(self.pb, name, value) for name, value in outputs.items()]
                responses.append(self.pb.InferenceResponse(output_tensors=tensors))
            except Exception as err:  # noqa: BLE001 - reported to the client as this request's error
                message = f"model {self.name!r}: {type(err).__name__}: {err}"
                responses.append(self.pb.InferenceResponse(output_tensors=[], error=self.pb.TritonError(message)))
        return responses


def stage_model(stage: Stage) -> type[StageModel]:
    """The ``TritonPythonModel`` class that runs ``stage`` (see the module's docstring)."""
    return type(f"{stage.__name__}_model", (StageModel,), {"stage": staticmethod(stage),
                                                            "__doc__": f"Triton python model running {stage.__qualname__}."})
