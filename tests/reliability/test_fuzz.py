"""A shared server outlives any client: hostile requests fail alone, intact.

One real server holds every shipped model that loads on CPU. A burst of out-of-range categorical
inputs (what crashed it before each python model made one error per response), then >= 2,000
hostile requests from 16 concurrent raw tritonclient clients in 2 processes
(``workflows/bench/_fuzz.py``); afterwards the server is alive and its answers to valid requests
equal direct onnxruntime inference (or, for python and ensemble models, its own answers before).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import tritonclient.grpc as grpcclient

from sonic_hep.framework.inference.direct import DirectClient
from sonic_hep.framework.inference.repository import ModelRepository
from sonic_hep.workflows.bench._fuzz import DEFAULT_CASES, fuzz, infer_valid, served_models, valid_inputs

from tests.reliability.conftest import CPU_REPOSITORIES

DEEPMET_INPUTS = {"input": (4500, 8), "input_cat0": (4500, 1), "input_cat1": (4500, 1), "input_cat2": (4500, 1)}


def deepmet_request(cat0: float) -> list:
    tensors = []
    for name, dims in DEEPMET_INPUTS.items():
        array = np.full((1, *dims), cat0 if name == "input_cat0" else 0.0, np.float32)
        tensor = grpcclient.InferInput(name, list(array.shape), "FP32")
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    return tensors


def send(url: str, cat0: float, barrier: threading.Barrier | None = None) -> str:
    """'ok', or the status and message of the failure; sent when all parties reached ``barrier``."""
    client = grpcclient.InferenceServerClient(url)
    request = deepmet_request(cat0)
    try:
        if barrier is not None:
            barrier.wait(30)  # all at once, so Triton's dynamic batcher hands them to one execution
        client.infer("miniaod_deepmet", request)
        return "ok"
    except Exception as err:  # noqa: BLE001 - the outcome is what the test looks at
        return f"{err.status()} {err.message()}"
    finally:
        client.close()


def test_a_burst_of_bad_categorical_inputs_fails_alone(every_model_server):
    """16 concurrent requests with an out-of-range embedding index, as in the issue (then 12 of them
    among 4 valid ones): each bad one gets its own intact error naming the model, the server lives,
    the valid ones batched with them are served."""
    url = every_model_server.grpc_url
    with ThreadPoolExecutor(16) as pool:
        for cat0 in [[1e6] * 16] * 3 + [[1e6, 1e6, 1e6, 0.0] * 4] * 3:
            barrier = threading.Barrier(16)
            outcomes = list(pool.map(send, [url] * 16, cat0, [barrier] * 16))
            assert every_model_server.alive(), every_model_server.log_tail()
            for value, outcome in zip(cat0, outcomes):
                if value == 0.0:
                    assert outcome == "ok"
                    continue
                assert outcome.startswith("StatusCode.INTERNAL model 'miniaod_deepmet': onnxruntime failed:"), outcome
                assert "idx=1000000 must be within the inclusive range" in outcome, outcome


def test_hostile_clients_leave_the_server_serving_what_direct_computes(every_model_server):
    url = every_model_server.grpc_url
    models = served_models(url)
    names = {spec.name for spec in models}
    assert {"demo_mlp", "miniaod_deepmet", "miniaod_deeptau", "emtrkmichelid", "exatrkx_pipeline",
            "exatrkx_labeling"} <= names
    repository = ModelRepository(CPU_REPOSITORIES)
    onnx = {spec.name for spec in models if repository.get(spec.name).platform == "onnxruntime_onnx"}
    control = grpcclient.InferenceServerClient(url)
    before = {spec.name: infer_valid(control, spec, spec.valid_seed) for spec in models
              if spec.name not in onnx and spec.valid_seed is not None}

    result = fuzz(url, requests=2000, clients=16, processes=2, models=models, seed=11, time_limit_s=150)
    print(result.summary())  # the counts of the report (pytest -s)

    assert every_model_server.alive(), every_model_server.log_tail()
    assert result.requests == 2000 and result.hung == 0
    assert set(result.outcomes) == set(DEFAULT_CASES)  # every kind of hostile request was sent
    assert not result.bad_messages, result.bad_messages[:5]
    assert not result.valid_failures, result.valid_failures[:5]
    failures = result.failures_by_kind()
    assert failures["INVALID_ARGUMENT"] > 0 and failures["INTERNAL"] > 0 and failures["NOT_FOUND"] > 0
    assert result.outcomes["timed_out"]["timed_out"] > 0  # some were left to finish after the deadline

    direct = DirectClient(repository)
    try:
        for spec in models:
            assert spec.valid_seed is not None, f"no valid request found for {spec.name}"
            served = infer_valid(control, spec, spec.valid_seed)
            if spec.name in onnx:
                expected = direct.run(spec.name, valid_inputs(spec, np.random.default_rng(spec.valid_seed)))
            else:
                expected = before[spec.name]
            for name, value in expected.items():
                np.testing.assert_allclose(served[name], value, rtol=1e-5, atol=1e-6, err_msg=f"{spec.name}:{name}")
    finally:
        direct.close()
        control.close()
