"""The committed Triton repository: entries load, ONNX models take any number of hits/edges, the ensemble is wired."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from sonic_hep.data.exatrkx.export import ENSEMBLE_STEPS, PYTHON_MODELS
from sonic_hep.framework.inference.direct import DirectClient
from sonic_hep.framework.inference.repository import ModelRepository
from sonic_hep.modules.exatrkx import serving, working_point
from sonic_hep.modules.exatrkx.features import FEATURES

from .conftest import REPOSITORY

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
        spec = importlib.util.spec_from_file_location(f"model_{name}", info.path / "1" / "model.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        assert issubclass(module.TritonPythonModel, serving._StageModel)


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
