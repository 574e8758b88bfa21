"""Triton python models of the ensemble's domain stages: graph building, edge selection, labeling.

Each repository entry's ``1/model.py`` is one line, e.g.::

    from sonic_hep.modules.exatrkx.serving import GraphBuildingModel as TritonPythonModel

so the server runs exactly the functions the per-stage producers run in-process (the server's
python is the project's environment). A model reads its working point from the ``parameters`` of
the config Triton hands it (:mod:`.working_point`); a failure in one request becomes that request's
error, naming the model, instead of taking the model down.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from ...framework.inference.backends.onnxruntime.stub_tensors import from_numpy, to_numpy
from . import working_point
from .edge_selection import select_edges
from .graph_building import radius_graph
from .labeling import label_tracks


class _StageModel:
    """Base of the stage models: config parsing, one ``run`` per request, errors per request."""

    stage = ""

    def initialize(self, args: dict[str, Any]) -> None:
        import triton_python_backend_utils as pb_utils  # only exists inside the Triton python stub

        self.pb = pb_utils
        config = json.loads(args["model_config"])
        self.name = config["name"]
        self.params = working_point.read(self.stage, self.name, config)

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def execute(self, requests: list[Any]) -> list[Any]:
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


class GraphBuildingModel(_StageModel):
    """``embedding`` [hits, 8] → ``edge_index`` int64 [2, edges], ``num_hits`` int64 [1]."""

    stage = "graph_building"

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        embedding = inputs["embedding"]
        edges = radius_graph(embedding, self.params["radius"], self.params["k_max"])
        return {"edge_index": edges, "num_hits": np.array([len(embedding)], dtype=np.int64)}


class EdgeSelectionModel(_StageModel):
    """``edge_index`` [2, edges], ``score`` [edges] → ``kept_edge_index`` [2, kept] (filter score ≥ cut)."""

    stage = "edge_selection"

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        edges, _ = select_edges(inputs["edge_index"], inputs["score"], self.params["cut"])
        return {"kept_edge_index": edges}


class LabelingModel(_StageModel):
    """``num_hits`` [1], ``edge_index`` [2, edges], ``score`` [edges] → ``labels`` int64 [hits]."""

    stage = "labeling"

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        labels = label_tracks(int(inputs["num_hits"][0]), inputs["edge_index"], inputs["score"], self.params["cut"],
                              self.params["min_hits"])
        return {"labels": labels}
