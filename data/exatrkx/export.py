"""Writes the Exa.TrkX Triton repository: three ONNX models, three python models, one ensemble.

::

    data/models/exatrkx/
      exatrkx_embedding/       onnxruntime_onnx  features [N,9] → embedding [N,8]
      exatrkx_graph_building/  python            embedding → edge_index [2,E], num_hits [1]   (radius, k_max)
      exatrkx_filter/          onnxruntime_onnx  features, edge_index → score [E]
      exatrkx_edge_selection/  python            edge_index, score → kept_edge_index          (cut)
      exatrkx_gnn/             onnxruntime_onnx  features, edge_index → score [E]
      exatrkx_labeling/        python            num_hits, edge_index, score → labels [N]     (cut, min_hits)
      exatrkx_pipeline/        ensemble          features → labels

No model has a batch dimension (``max_batch_size: 0``): one request is one event, with variable
numbers of hits and edges (``-1`` dims). The python models' ``model.py`` import the stage functions
from ``sonic_hep.modules.exatrkx``; their working point is in their ``parameters``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from ...framework.inference import TensorSpec, add_tensors, write_model
from ...modules.exatrkx.features import FEATURES

F = len(FEATURES)
FEATURES_SPEC = TensorSpec("features", "FP32", (-1, F))
EDGES_SPEC = TensorSpec("edge_index", "INT64", (2, -1))
SCORE_SPEC = TensorSpec("score", "FP32", (-1,))

#: python stage models: (stage function in sonic_hep.modules.exatrkx.ensemble_stages, inputs, outputs)
PYTHON_MODELS: dict[str, tuple[str, list[TensorSpec], list[TensorSpec]]] = {
    "exatrkx_graph_building": ("graph_building", [TensorSpec("embedding", "FP32", (-1, 8))],
                               [EDGES_SPEC, TensorSpec("num_hits", "INT64", (1,))]),
    "exatrkx_edge_selection": ("edge_selection", [EDGES_SPEC, SCORE_SPEC],
                               [TensorSpec("kept_edge_index", "INT64", (2, -1))]),
    "exatrkx_labeling": ("labeling", [TensorSpec("num_hits", "INT64", (1,)), EDGES_SPEC, SCORE_SPEC],
                         [TensorSpec("labels", "INT64", (-1,))]),
}

#: ensemble steps: (model, {model input: ensemble tensor}, {model output: ensemble tensor})
ENSEMBLE_STEPS = [
    ("exatrkx_embedding", {"features": "features"}, {"embedding": "embedding"}),
    ("exatrkx_graph_building", {"embedding": "embedding"}, {"edge_index": "candidate_edges", "num_hits": "num_hits"}),
    ("exatrkx_filter", {"features": "features", "edge_index": "candidate_edges"}, {"score": "filter_score"}),
    ("exatrkx_edge_selection", {"edge_index": "candidate_edges", "score": "filter_score"},
     {"kept_edge_index": "gnn_edge_index"}),
    ("exatrkx_gnn", {"features": "features", "edge_index": "gnn_edge_index"}, {"score": "gnn_score"}),
    ("exatrkx_labeling", {"num_hits": "num_hits", "edge_index": "gnn_edge_index", "score": "gnn_score"},
     {"labels": "labels"}),
]
#: only the labels: Triton 2.51 deadlocks an ensemble whose outputs include a tensor that later steps
#: also consume when a request asks for a subset of the outputs ("at least one output is not set")
ENSEMBLE_OUTPUTS = [TensorSpec("labels", "INT64", (-1,))]


def write_python_model(repository: Path, name: str, parameters: dict[str, Any]) -> Path:
    """A python-backend entry whose ``model.py`` runs a stage of :mod:`sonic_hep.modules.exatrkx.ensemble_stages`
    through the generic glue :mod:`sonic_hep.framework.inference.backends.python_stage`."""
    stage, inputs, outputs = PYTHON_MODELS[name]
    config = mc.ModelConfig(name=name, backend="python", max_batch_size=0)
    add_tensors(config, inputs, outputs)
    for key, value in parameters.items():
        config.parameters[key].string_value = str(value)
    config.instance_group.add(count=1, kind=mc.ModelInstanceGroup.KIND_CPU)
    model_dir = repository / name
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    (model_dir / "1" / "model.py").write_text(
        f'"""Triton python model {name}: the stage function of sonic_hep.modules.exatrkx, run on the server."""\n\n'
        f"from sonic_hep.framework.inference.backends.python_stage import stage_model\n"
        f"from sonic_hep.modules.exatrkx.ensemble_stages import {stage}\n\n"
        f"TritonPythonModel = stage_model({stage})\n")
    (model_dir / "config.pbtxt").write_text(text_format.MessageToString(config))
    return model_dir


def write_ensemble(repository: Path, name: str = "exatrkx_pipeline") -> Path:
    """The ensemble chaining all six stages (its version directory holds only a note: Triton needs it)."""
    config = mc.ModelConfig(name=name, platform="ensemble", max_batch_size=0)
    add_tensors(config, [FEATURES_SPEC], ENSEMBLE_OUTPUTS)
    for model, inputs, outputs in ENSEMBLE_STEPS:
        step = config.ensemble_scheduling.step.add(model_name=model, model_version=-1)
        step.input_map.update(inputs)
        step.output_map.update(outputs)
    model_dir = repository / name
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    (model_dir / "1" / "README.md").write_text("An ensemble has no model file; Triton requires this version "
                                              "directory to exist.\n")
    (model_dir / "config.pbtxt").write_text(text_format.MessageToString(config))
    return model_dir


def write_repository(repository: str | os.PathLike, onnx: dict[str, bytes], point: dict[str, dict[str, Any]]) -> Path:
    """Writes every entry.

    Args:
        repository: the directory (e.g. ``data/models/exatrkx``).
        onnx: serialized ONNX by stage: ``embedding``, ``filter``, ``gnn``.
        point: working point by stage: ``graph_building`` {radius, k_max}, ``edge_selection`` {cut},
            ``labeling`` {cut, min_hits}.
    """
    repository = Path(repository)
    repository.mkdir(parents=True, exist_ok=True)
    write_model(repository, "exatrkx_embedding", onnx["embedding"], [FEATURES_SPEC],
                [TensorSpec("embedding", "FP32", (-1, 8))], max_batch_size=0)
    for stage in ("filter", "gnn"):
        write_model(repository, f"exatrkx_{stage}", onnx[stage], [FEATURES_SPEC, EDGES_SPEC], [SCORE_SPEC],
                    max_batch_size=0)
    for stage in ("graph_building", "edge_selection", "labeling"):
        write_python_model(repository, f"exatrkx_{stage}", point[stage])
    write_ensemble(repository)
    return repository
