"""Every python model the project ships answers a failed batch with one TritonError *per response*,
and a bad request handed over together with good ones fails alone.

One error object shared by the responses of a batched execution is freed once per response by the
Triton 2.51 python stub: the messages come back garbled and the server dies under concurrency
(reproduced end to end in test_fuzz.py, where it is a race). Here the models run in this
process against a stand-in for ``triton_python_backend_utils`` that records what they build, so a
shared error is caught every time, without a server.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from sonic_hep.framework.inference.repository import ModelRepository

from tests.reliability.conftest import PROJECT

ONNX_BACKEND = PROJECT / "framework" / "inference" / "backends" / "onnxruntime" / "model.py"
GPU_ENTRY = PROJECT / "data" / "models" / "protodune_gpu" / "emtrkmichelid"


class FakeTensor:
    def __init__(self, name: str, value: np.ndarray, dlpack: bool = True):
        self._name, self.value, self.dlpack = name, value, dlpack

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self.value

    def to_dlpack(self):
        if not self.dlpack:
            raise RuntimeError("this tensor cannot cross by DLPack")
        return self.value.__dlpack__()

    @classmethod
    def from_dlpack(cls, name: str, capsule) -> FakeTensor:
        import torch

        return cls(name, torch.utils.dlpack.from_dlpack(capsule).numpy())


class FakeRequest:
    def __init__(self, dlpack: bool = True, **inputs: np.ndarray):
        self.tensors = [FakeTensor(name, value, dlpack) for name, value in inputs.items()]

    def inputs(self) -> list[FakeTensor]:
        return self.tensors

    def requested_output_names(self) -> list[str]:
        return []


class TritonError:
    INVALID_ARG = 3

    def __init__(self, message: str, code: int | None = None):
        self.text, self.code = message, code

    def message(self) -> str:
        return self.text


class InferenceResponse:
    def __init__(self, output_tensors=None, error=None):
        self.output_tensors, self.error = output_tensors, error


def fake_pb_utils() -> types.ModuleType:
    module = types.ModuleType("triton_python_backend_utils")
    module.TritonError, module.InferenceResponse = TritonError, InferenceResponse
    module.Tensor = FakeTensor
    module.get_input_tensor_by_name = lambda request, name: next((t for t in request.tensors if t.name() == name), None)
    module.triton_string_to_numpy = lambda name: np.dtype(name.removeprefix("TYPE_").lower()
                                                           .replace("fp", "float"))
    return module


@pytest.fixture
def pb_utils(monkeypatch) -> types.ModuleType:
    module = fake_pb_utils()
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", module)
    return module


def load(path: Path, name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def args(entry: Path, config: dict) -> dict[str, str]:
    return {"model_config": json.dumps(config), "model_repository": str(entry), "model_version": "1",
            "model_instance_kind": "CPU"}


def assert_one_error_each(responses: list, model: str, count: int) -> None:
    errors = [response.error for response in responses if response.error is not None]
    assert len(errors) == count and all(isinstance(e, TritonError) for e in errors)
    assert len({id(e) for e in errors}) == count, f"{model}: responses share a TritonError object"
    for error in errors:
        assert error.message().startswith(f"model {model!r}: "), error.message()


def test_onnxruntime_backend_batch_failure(pb_utils):
    entry = PROJECT / "data" / "models" / "miniaod" / "miniaod_deepmet"
    info = ModelRepository([entry.parent]).get("miniaod_deepmet")
    model = load(ONNX_BACKEND, "_onnx_backend_model").TritonPythonModel()
    model.initialize(args(entry, info.config_dict))
    bad = {name: np.full((1, 4500, d), 1e6 if name == "input_cat0" else 0.0, np.float32)
           for name, d in (("input", 8), ("input_cat0", 1), ("input_cat1", 1), ("input_cat2", 1))}
    good = {name: np.zeros_like(value) for name, value in bad.items()}
    responses = model.execute([FakeRequest(**bad) for _ in range(4)])  # one group: one onnxruntime call
    assert_one_error_each(responses, "miniaod_deepmet", 4)
    assert "idx=1000000" in responses[0].error.message()
    # a bad request batched with good ones fails alone
    mixed = model.execute([FakeRequest(**good), FakeRequest(**bad), FakeRequest(**good), FakeRequest(**bad)])
    assert_one_error_each([mixed[1], mixed[3]], "miniaod_deepmet", 2)
    for response in (mixed[0], mixed[2]):
        assert response.error is None and response.output_tensors[0].value.shape == (1, 2)


def test_exatrkx_stage_failure(pb_utils):
    entry = PROJECT / "data" / "models" / "exatrkx" / "exatrkx_labeling"
    info = ModelRepository([entry.parent]).get("exatrkx_labeling")
    model = load(entry / "1" / "model.py", "_exatrkx_labeling_model").TritonPythonModel()
    model.initialize(args(entry, info.config_dict))
    bad = {"num_hits": np.array([3]), "edge_index": np.array([[0, 10**6], [1, 2]]), "score": np.ones(2, np.float32)}
    assert_one_error_each(model.execute([FakeRequest(**bad) for _ in range(3)]), "exatrkx_labeling", 3)


def test_protodune_gpu_model_failure(pb_utils):
    pytest.importorskip("torch")
    info = ModelRepository([GPU_ENTRY.parent]).get("emtrkmichelid")
    model = load(GPU_ENTRY / "1" / "model.py", "_protodune_gpu_model").TritonPythonModel()
    model.initialize(args(GPU_ENTRY, info.config_dict))
    patches = np.zeros((2, 48, 48, 1), np.uint8)
    # tensors the stub would not hand over (no DLPack): the execution of all of them fails
    assert_one_error_each(model.execute([FakeRequest(False, patches=patches) for _ in range(3)]), "emtrkmichelid", 3)
    # one such request among good ones fails alone
    mixed = model.execute([FakeRequest(patches=patches), FakeRequest(False, patches=patches),
                           FakeRequest(patches=patches)])
    assert_one_error_each([mixed[1]], "emtrkmichelid", 1)
    for response in (mixed[0], mixed[2]):
        assert response.error is None and response.output_tensors[0].value.shape == (2, 3)


class RefusedTensor(FakeTensor):
    """A tensor the stub will not hand to numpy (e.g. a type numpy lacks): ``as_numpy`` raises."""

    def as_numpy(self) -> np.ndarray:
        raise RuntimeError("tensor dtype is not supported in numpy")


def test_onnxruntime_backend_nothing_escapes_execute(pb_utils):
    """An exception out of execute fails every request of the execution with the stub's one generic
    message; a request the backend cannot read fails alone, with its own error naming model and input."""
    entry = PROJECT / "data" / "models" / "miniaod" / "miniaod_deepmet"
    info = ModelRepository([entry.parent]).get("miniaod_deepmet")
    model = load(ONNX_BACKEND, "_onnx_backend_model").TritonPythonModel()
    model.initialize(args(entry, info.config_dict))
    good = {name: np.zeros((1, 4500, d), np.float32)
            for name, d in (("input", 8), ("input_cat0", 1), ("input_cat1", 1), ("input_cat2", 1))}
    refused = FakeRequest(**good)
    refused.tensors[1] = RefusedTensor("input_cat0", good["input_cat0"])
    responses = model.execute([FakeRequest(**good), refused, FakeRequest(**good)])
    assert_one_error_each([responses[1]], "miniaod_deepmet", 1)
    assert "input 'input_cat0' cannot be read" in responses[1].error.message()
    for response in (responses[0], responses[2]):
        assert response.error is None and response.output_tensors[0].value.shape == (1, 2)
