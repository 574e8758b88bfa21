"""The ONNX graphs run by torch (``backends/onnxtorch/onnx_graph.py``) give onnxruntime's numbers on the CPU.

This is what lets ``sonic bench gpu-models`` (and a KIND_GPU ``onnxtorch`` server) run MiniAOD's models on a
GPU without onnxruntime-gpu: the same ``model.onnx``, node by node in torch. Inputs: the benchmark's own,
from each model's shapes (variable lengths at preprocess.json's maximum, padded jets).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

from sonic_hep.framework.inference.backends.onnxtorch.onnx_graph import open_onnx_torch  # noqa: E402
from sonic_hep.framework.inference.repository import ModelRepository  # noqa: E402
from sonic_hep.framework.inference.service import resolve_repository  # noqa: E402
from sonic_hep.workflows.bench.gpu_models import make_inputs, max_diff  # noqa: E402
from tests.conftest import shared_path  # noqa: E402

MINIAOD = ["miniaod_particlenet_ak4", "miniaod_particlenet_ak8", "miniaod_deeptau", "miniaod_deepmet"]


def outputs_both_ways(info, rows: int, precision: str = "float32") -> tuple[list[np.ndarray], list[np.ndarray]]:
    inputs = make_inputs(info, rows, seed=11)
    names = [o.name for o in info.outputs]
    session = ort.InferenceSession(str(info.model_file()), providers=["CPUExecutionProvider"])
    return session.run(names, inputs), open_onnx_torch(str(info.model_file()), "cpu", precision).run(names, inputs)


def miniaod(name: str):
    return ModelRepository([resolve_repository("data/models/miniaod")]).get(name)


@pytest.mark.parametrize("name", MINIAOD)
def test_fp32_matches_onnxruntime(name):
    info = miniaod(name)
    reference, got = outputs_both_ways(info, rows=5)
    assert [r.shape for r in reference] == [g.shape for g in got]
    assert all(np.isfinite(g).all() for g in got)
    # DeepMET's outputs are GeV: compared relative to their size, as the benchmark does
    assert max_diff(reference, got, relative=name == "miniaod_deepmet") <= 1e-4


@pytest.mark.parametrize("name", MINIAOD)
def test_mixed_fp16_stays_close(name):
    """fp16 = weight layers in half precision; a whole-graph cast made ParticleNet's scores NaN (its 1e9 shift
    of masked particles is infinite in fp16)."""
    info = miniaod(name)
    reference, got = outputs_both_ways(info, rows=3, precision="float16")
    assert all(np.isfinite(g).all() for g in got)
    assert max_diff(reference, got, relative=name == "miniaod_deepmet") <= 1e-2


@pytest.mark.shared
def test_cms_particlenet_opset11_matches_onnxruntime():
    folder = shared_path("real", "cms-models", "particlenet_AK4")
    info = ModelRepository([folder.parent]).get(folder.name)
    reference, got = outputs_both_ways(info, rows=4)
    assert max_diff(reference, got, relative=False) <= 1e-4


def test_unsupported_operator_is_refused_at_open_naming_it(tmp_path):
    node = helper.make_node("Erf", ["x"], ["y"], name="the_erf")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    path = tmp_path / "erf.onnx"
    onnx.save(helper.make_model(graph), str(path))
    with pytest.raises(ValueError, match=r"operator 'Erf' \(node 'the_erf'\)"):
        open_onnx_torch(str(path))


def test_missing_input_names_the_inputs():
    info = miniaod("miniaod_deepmet")
    runner = open_onnx_torch(str(info.model_file()))
    with pytest.raises(ValueError, match="missing input"):
        runner.run(None, {"input": np.zeros((1, 4500, 8), np.float32)})
