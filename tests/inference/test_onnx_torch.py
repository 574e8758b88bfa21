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
from sonic_hep.workflows.bench._model_inputs import load, record  # noqa: E402
from sonic_hep.workflows.bench.gpu_models import make_inputs, max_diff  # noqa: E402
from tests.conftest import shared_path  # noqa: E402

MINIAOD = ["miniaod_particlenet_ak4", "miniaod_particlenet_ak8", "miniaod_deeptau", "miniaod_deepmet"]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> dict[str, dict[str, np.ndarray]]:
    """What the MiniAOD producers send each model for a few generated events (held-out seed)."""
    path = tmp_path_factory.mktemp("gpu-models") / "inputs.npz"
    per_event = record(path, events=6, seed=4242, rows=6)
    rows, loaded_per_event = load(path)
    assert loaded_per_event == pytest.approx(per_event)
    assert per_event["miniaod_deepmet"] == 1.0 and per_event["miniaod_particlenet_ak4"] > 1
    return rows


def outputs_both_ways(info, rows: int, precision: str = "float32",
                      recorded: dict[str, np.ndarray] | None = None) -> tuple[list[np.ndarray], list[np.ndarray]]:
    inputs = make_inputs(info, rows, seed=11, recorded=recorded)
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
def test_fp32_matches_onnxruntime_on_recorded_events(name, recorded):
    """The producers' own inputs (scores away from 0 and 1, unlike inputs drawn from the shapes), padded to the
    longest length as the benchmark sends them."""
    info = miniaod(name)
    assert name in recorded  # the boosted tt̄ sample gives AK8 rows too
    reference, got = outputs_both_ways(info, rows=7, recorded=recorded[name])
    if name != "miniaod_deepmet":
        assert np.any((reference[0] > 1e-5) & (reference[0] < 1 - 1e-5))  # not saturated: the comparison means something
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


def test_requests_run_together_give_each_its_own_outputs(recorded):
    """``run_parts`` (how the served model runs requests the dynamic batcher merged): one batch, split back."""
    info = miniaod("miniaod_particlenet_ak4")
    runner = open_onnx_torch(str(info.model_file()))
    feeds = [make_inputs(info, rows, seed=0, recorded=recorded[info.name]) for rows in (2, 5)]
    for feed in feeds:  # read-only buffers, as the stub hands them over, are used without a copy
        for array in feed.values():
            array.flags.writeable = False
    together = runner.run_parts(None, feeds)
    assert [[a.shape[0] for a in outputs] for outputs in together] == [[2], [5]]
    for feed, outputs in zip(feeds, together):
        np.testing.assert_allclose(outputs[0], runner.run(None, feed)[0], atol=1e-6)
