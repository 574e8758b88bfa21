"""The committed Triton repository: entries load, ONNX models take any number of hits/edges, the ensemble is wired."""

from __future__ import annotations

import importlib.util
import json
import sys
import types

import numpy as np
import pytest

from sonic_hep.data.exatrkx.export import ENSEMBLE_STEPS, PYTHON_MODELS
from sonic_hep.framework.inference.direct import DirectClient
from sonic_hep.framework.inference.repository import ModelRepository
from sonic_hep.framework.inference.backends.python_stage import StageModel, stage_model
from sonic_hep.modules.exatrkx import ensemble_stages, working_point
from sonic_hep.modules.exatrkx.features import FEATURES
from sonic_hep.modules.exatrkx.labeling import label_tracks

from tests.exatrkx.conftest import REPOSITORY

ONNX_MODELS = ("exatrkx_embedding", "exatrkx_filter", "exatrkx_gnn")


@pytest.fixture(scope="module")
def repository() -> ModelRepository:
    return ModelRepository([REPOSITORY])


def test_every_entry_loads_and_is_small(repository):
    names = set(repository.names())
    assert names == {*ONNX_MODELS, *PYTHON_MODELS, "exatrkx_pipeline"}
    for name in ONNX_MODELS:
        info = repository.get(name)
        info.verify_checksums()
        assert info.max_batch_size == 0 and info.platform == "onnxruntime_onnx"
        assert info.model_file().stat().st_size < 2_000_000
    for name in PYTHON_MODELS:
        info = repository.get(name)
        assert info.config.backend == "python"
        stage = name.removeprefix("exatrkx_")
        point = working_point.read(stage, name, info.config)  # the declared working point is complete and typed
        assert set(point) == set(working_point.DECLARED[stage])
        assert working_point.read(stage, name, info.parameters) == point  # as the client hands it to modules
        spec = importlib.util.spec_from_file_location(f"model_{name}", info.path / "1" / "model.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        assert issubclass(module.TritonPythonModel, StageModel)
        assert module.TritonPythonModel.stage is getattr(ensemble_stages, stage)


def test_ensemble_wiring(repository):
    """Every step's inputs are produced earlier (or are the ensemble's input) and match the step model's names."""
    ensemble = repository.get("exatrkx_pipeline").config
    assert ensemble.platform == "ensemble"
    available = {t.name for t in ensemble.input}
    for step in ensemble.ensemble_scheduling.step:
        model = repository.get(step.model_name)
        assert set(step.input_map) == {t.name for t in model.inputs}, step.model_name
        assert set(step.output_map) <= {t.name for t in model.outputs}, step.model_name
        assert set(step.input_map.values()) <= available, step.model_name
        available |= set(step.output_map.values())
    assert {t.name for t in ensemble.output} <= available
    assert [s.model_name for s in ensemble.ensemble_scheduling.step] == [s[0] for s in ENSEMBLE_STEPS]


@pytest.mark.parametrize("hits, edges", [(1, 1), (37, 5), (5000, 40000)])
def test_onnx_models_take_any_size(repository, hits, edges):
    rng = np.random.default_rng(hits)
    client = DirectClient(repository)
    try:
        features = rng.random((hits, len(FEATURES)), dtype=np.float32)
        edge_index = rng.integers(0, hits, size=(2, edges))
        embedding = client.infer("exatrkx_embedding", {"features": features}).result()["embedding"]
        assert embedding.shape == (hits, 8) and np.isfinite(embedding).all()
        for model in ("exatrkx_filter", "exatrkx_gnn"):
            score = client.infer(model, {"features": features, "edge_index": edge_index}).result()["score"]
            assert score.shape == (edges,) and np.all((score >= 0) & (score <= 1))
    finally:
        client.close()


def test_edge_models_ignore_the_order_of_a_pair(repository):
    """The filter and GNN orient each edge by r themselves: (i, j) and (j, i) score the same."""
    rng = np.random.default_rng(3)
    client = DirectClient(repository)
    try:
        features = rng.random((50, len(FEATURES)), dtype=np.float32)
        edges = rng.integers(0, 50, size=(2, 80))
        for model in ("exatrkx_filter", "exatrkx_gnn"):
            a = client.infer(model, {"features": features, "edge_index": edges}).result()["score"]
            b = client.infer(model, {"features": features, "edge_index": edges[::-1].copy()}).result()["score"]
            np.testing.assert_allclose(a, b, atol=1e-6)
    finally:
        client.close()


class _Tensor:
    """A ``pb_utils.Tensor`` as the python stub hands it over (numpy reads it through DLPack or as_numpy)."""

    def __init__(self, name: str, value: np.ndarray):
        self._name, self.value = name, value

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self.value

    def __dlpack__(self, **kwargs):
        return self.value.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.value.__dlpack_device__()

    @classmethod
    def from_dlpack(cls, name: str, value: np.ndarray) -> _Tensor:
        return cls(name, value)


def _fake_pb_utils() -> types.SimpleNamespace:
    """The parts of ``triton_python_backend_utils`` the glue uses, recording what it answers."""
    return types.SimpleNamespace(
        Tensor=_Tensor, TritonError=lambda message: message,
        InferenceResponse=lambda output_tensors, error=None: types.SimpleNamespace(outputs=output_tensors, error=error))


def test_the_stage_glue_runs_the_stage_per_request_and_fails_only_the_bad_one(repository, monkeypatch):
    """The python model the server loads for exatrkx_labeling, driven as Triton drives it (no server)."""
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", _fake_pb_utils())
    info = repository.get("exatrkx_labeling")
    model = stage_model(ensemble_stages.labeling)()
    model.initialize({"model_config": json.dumps(info.config_dict)})
    point = working_point.read("labeling", info.name, info.parameters)
    edges, score = np.array([[0, 1, 2], [1, 2, 3]]), np.array([0.99, 0.99, 0.99], dtype=np.float32)
    good = types.SimpleNamespace(inputs=lambda: [_Tensor("num_hits", np.array([5])), _Tensor("edge_index", edges),
                                                 _Tensor("score", score)])
    bad = types.SimpleNamespace(inputs=lambda: [_Tensor("num_hits", np.array([5]))])  # edges missing
    first, second, third = model.execute([good, bad, good])
    expected = label_tracks(5, edges, score, point["cut"], point["min_hits"])
    for response in (first, third):
        assert response.error is None
        np.testing.assert_array_equal(response.outputs[0].value, expected)
    assert second.outputs == [] and second.error == "model 'exatrkx_labeling': KeyError: 'edge_index'"
