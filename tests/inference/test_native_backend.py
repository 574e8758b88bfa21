"""The native onnxruntime backend: every shipped and CMS model served natively equals direct onnxruntime.

One real server (``backend="native"``) holds every ``onnxruntime_onnx`` model the project ships (and CMS's
when ../shared exists) in three forms: as shipped, without dynamic batching, and with dynamic batching and
two instances; plus forms that hold requests back so that several run as one execution, and a small model
with every fixed-size type the models use. Requests come from many threads at once, with different batch
sizes and variable-dimension sizes; each answer is compared with the same request run alone through
direct inference's onnxruntime session (``ort_session.open_session``, the same settings).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import model_config_pb2 as mc

from sonic_hep.framework.errors import ConfigError, InferenceError
from sonic_hep.framework.inference.backends.native import build
from sonic_hep.framework.inference.backends.onnxruntime.ort_session import open_session
from sonic_hep.framework.inference.serving.runtime_repository import write_entry
from sonic_hep.workflows.bench._fuzz import infer_arrays
from sonic_hep.framework.inference.repository import ModelInfo, ModelRepository
from sonic_hep.framework.inference.serving.server import TritonServer
from sonic_hep.framework.inference.serving.servable import native_library_for
from sonic_hep.framework.inference.serving.triton_install import python_runtime
from sonic_hep.framework.inference.service import InferenceConfig
from sonic_hep.workflows.bench._fuzz import ModelSpec, valid_inputs

from tests.conftest import PROJECT, SHARED

pytestmark = pytest.mark.triton

SHIPPED = [PROJECT / "data" / "models" / name for name in ("demo", "miniaod", "protodune", "exatrkx")]
CMS = SHARED / "real" / "cms-models"
TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}
#: forms of each model: suffix → (dynamic batching, instances); models without batch dimension have no batching
FORMS = {"": None, "__nobatch": (False, 1), "__x2": (True, 2)}
#: forms whose batcher waits for more requests (so that concurrent requests share an execution)
HELD = {"demo_mlp": "demo_mlp__held", "miniaod_deepmet": "miniaod_deepmet__held", "types": "types"}
HOLD_US = 300_000


def onnx_models() -> dict[str, ModelInfo]:
    """Every ``onnxruntime_onnx`` model shipped (and CMS's when ../shared exists), by name."""
    paths = SHIPPED + ([CMS] if CMS.is_dir() else [])
    repository = ModelRepository([str(p) for p in paths])
    infos = {name: repository.get(name) for name in repository.names()}
    return {name: info for name, info in infos.items() if info.config.platform == "onnxruntime_onnx"}


MODELS = onnx_models()
CMS_NAMES = {p.name for p in CMS.iterdir()} if CMS.is_dir() else {"particlenet_AK4", "particlenet", "deepmet"}


def write_form(info: ModelInfo, dest: Path, name: str, batching: bool | None, instances: int | None,
               hold_us: int = 0) -> None:
    """``info`` as model ``name`` in ``dest``: its files linked, its config with the batching and instances asked."""
    config = mc.ModelConfig()
    config.CopyFrom(info.config)
    config.name = name
    if batching is not None:
        config.ClearField("dynamic_batching")
        if batching and config.max_batch_size > 0:
            config.dynamic_batching.SetInParent()
            config.dynamic_batching.max_queue_delay_microseconds = hold_us
    if instances is not None:
        del config.instance_group[:]
        config.instance_group.add(count=instances, kind=mc.ModelInstanceGroup.KIND_CPU)
    write_entry(info, dest / name, config)


def write_types_model(dest: Path) -> None:
    """A model with one input and output of every fixed-size type the shipped and CMS models use."""
    import onnx
    from onnx import TensorProto, helper

    kinds = {"fp16": (TensorProto.FLOAT16, "FP16", "Mul"), "int32": (TensorProto.INT32, "INT32", "Add"),
             "bool": (TensorProto.BOOL, "BOOL", "Not"), "uint8": (TensorProto.UINT8, "UINT8", "Identity"),
             "int64": (TensorProto.INT64, "INT64", "Neg"), "fp32": (TensorProto.FLOAT, "FP32", "Relu")}
    nodes, inputs, outputs, config = [], [], [], ['name: "types"', 'platform: "onnxruntime_onnx"', "max_batch_size: 8"]
    for key, (onnx_type, triton, op) in kinds.items():
        args = [f"in_{key}", f"in_{key}"] if op in ("Mul", "Add") else [f"in_{key}"]
        nodes.append(helper.make_node(op, args, [f"out_{key}"]))
        inputs.append(helper.make_tensor_value_info(f"in_{key}", onnx_type, ["batch", 3]))
        outputs.append(helper.make_tensor_value_info(f"out_{key}", onnx_type, ["batch", 3]))
        config += [f'input {{ name: "in_{key}" data_type: TYPE_{triton} dims: [3] }}',
                   f'output {{ name: "out_{key}" data_type: TYPE_{triton} dims: [3] }}']
    model = helper.make_model(helper.make_graph(nodes, "types", inputs, outputs),
                              opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    (dest / "types" / "1").mkdir(parents=True)
    onnx.save(model, dest / "types" / "1" / "model.onnx")
    config.append(f"dynamic_batching {{ max_queue_delay_microseconds: {HOLD_US} }}")
    (dest / "types" / "config.pbtxt").write_text("\n".join(config) + "\n")


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> dict[str, ModelInfo]:
    """The served model names → the repository entry each is a form of."""
    dest = tmp_path_factory.mktemp("native-forms")
    forms: dict[str, ModelInfo] = {}
    for name, info in MODELS.items():
        for suffix, settings in FORMS.items():
            if settings is None:
                write_form(info, dest, name + suffix, None, None)
            else:
                write_form(info, dest, name + suffix, settings[0] if info.max_batch_size > 0 else None, settings[1])
            forms[name + suffix] = info
    for name, held in HELD.items():
        if name in MODELS:
            write_form(MODELS[name], dest, held, True, 1, hold_us=HOLD_US)
            forms[held] = MODELS[name]
    write_form(MODELS["demo_mlp"], dest, "demo_mlp__threads", None, 2)
    config = (dest / "demo_mlp__threads" / "config.pbtxt")
    config.write_text(config.read_text() + 'parameters { key: "intra_op_thread_count" value { string_value: "3" } }\n'
                      "optimization { graph { level: 1 } }\n")
    forms["demo_mlp__threads"] = MODELS["demo_mlp"]
    write_types_model(dest)
    forms["types"] = ModelRepository([str(dest)]).get("types")
    forms["_repository"] = dest  # type: ignore[assignment]
    return forms


@pytest.fixture(scope="module")
def server(served, tmp_path_factory):
    with TritonServer([served["_repository"]], backend="native", workdir=tmp_path_factory.mktemp("native-server")) as s:
        yield s


@pytest.fixture(scope="module")
def sessions() -> dict[str, object]:
    """Direct inference's onnxruntime sessions by repository entry, opened once (by :func:`session_of`)."""
    return {}


def session_of(sessions: dict, info: ModelInfo):
    if info.name not in sessions:
        sessions[info.name] = open_session(str(info.model_file()), info.config_dict, ["CPUExecutionProvider"])
    return sessions[info.name]


def request_inputs(info: ModelInfo, rng: np.random.Generator, rows: int, size: int) -> dict[str, np.ndarray]:
    """Valid inputs (as the fuzzer makes them) with ``rows`` rows and every variable dimension cut to ``size``."""
    spec = ModelSpec(info.name, info.max_batch_size, tuple((t.name, t.datatype, t.dims) for t in info.inputs),
                     tuple(t.name for t in info.outputs))
    arrays = valid_inputs(spec, rng, rows=rows)
    for t in info.inputs:
        offset = 1 if info.max_batch_size > 0 else 0
        for axis, dim in enumerate(t.dims):
            if dim < 0:
                arrays[t.name] = np.take(arrays[t.name], range(size), axis=axis + offset)
        if list(t.dims) == [1] and np.issubdtype(arrays[t.name].dtype, np.integer):
            arrays[t.name] = np.minimum(arrays[t.name], size)  # a count of the variable dimension
    return arrays


def infer(url: str, model: str, arrays: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
    client = grpcclient.InferenceServerClient(url)
    try:
        return infer_arrays(client, model, arrays, outputs)  # every output the server sent
    finally:
        client.close()


def statistics(url: str, model: str):
    client = grpcclient.InferenceServerClient(url)
    try:
        return client.get_inference_statistics(model).model_stats[0]
    finally:
        client.close()


def check_concurrent(url: str, model: str, info: ModelInfo, session, seed: int, requests: int = 12) -> None:
    """``requests`` requests from 6 threads at once; each answer equals the request run alone in onnxruntime.
    Every other request asks for the last output only (a model with several), so one execution holds
    requests for different outputs."""
    rng = np.random.default_rng(seed)
    batched = info.max_batch_size > 0
    plan = [request_inputs(info, rng, rows=int(rng.integers(1, 4)) if batched else 1, size=int(rng.choice([20, 12])))
            for _ in range(requests)]
    outputs = [t.name for t in info.outputs]
    barrier = threading.Barrier(min(6, requests))

    wanted = [outputs if index % 2 == 0 else outputs[-1:] for index in range(requests)]

    def one(index: int) -> dict[str, np.ndarray]:
        if index < barrier.parties:
            barrier.wait(30)
        return infer(url, model, plan[index], wanted[index])

    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(one, range(requests)))
    for arrays, names, answer in zip(plan, wanted, answers):
        expected = dict(zip(outputs, session.run(outputs, arrays)))
        assert set(answer) == set(names)
        for name in names:
            assert answer[name].dtype == expected[name].dtype, (model, name)
            assert answer[name].shape == expected[name].shape, (model, name)
            np.testing.assert_allclose(answer[name], expected[name], **TOLERANCE, err_msg=f"{model}:{name}")


@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.shared] if n in CMS_NAMES else [])
                                  for n in sorted(MODELS)])
def test_every_model_served_natively_equals_direct(server, served, sessions, name):
    """As shipped, without dynamic batching, and with dynamic batching and 2 instances; many threads at once."""
    assert server.model_backends[name] == "onnxruntime (native)"
    info = MODELS[name]
    session = session_of(sessions, info)
    for number, suffix in enumerate(FORMS):
        before = statistics(server.grpc_url, name + suffix).inference_stats.success.count
        check_concurrent(server.grpc_url, name + suffix, info, session, seed=number)
        after = statistics(server.grpc_url, name + suffix)
        assert after.inference_stats.success.count - before == 12  # every request reported to Triton
        assert after.execution_count >= 1


def test_cms_models_are_served_natively(served):
    """The CMS repository's models are among those above whenever ../shared exists."""
    if not CMS.is_dir():
        pytest.skip(f"{CMS} not available (../shared is only beside the development checkout)")
    assert {"particlenet_AK4", "particlenet", "deepmet"} <= set(MODELS)


@pytest.mark.parametrize("name", ["demo_mlp", "miniaod_deepmet", "types"])
def test_held_requests_run_as_one_execution_and_equal_direct(server, served, sessions, name):
    """Requests the batcher holds together run as one onnxruntime call (concatenated, then split back)."""
    model = HELD[name]
    info = served[model]
    before = statistics(server.grpc_url, model)
    if name == "types":
        check_types(server.grpc_url, served["_repository"] / "types" / "1" / "model.onnx")
    else:
        check_concurrent(server.grpc_url, model, info, session_of(sessions, info), seed=7, requests=6)
    after = statistics(server.grpc_url, model)
    requests = after.inference_stats.success.count - before.inference_stats.success.count
    executions = after.execution_count - before.execution_count
    assert requests == 6 and executions < requests, (requests, executions)
    assert any(b.batch_size > 1 for b in after.batch_stats)  # batch statistics were reported


def check_types(url: str, model_file: Path) -> None:
    """6 concurrent requests of the every-type model; answers equal onnxruntime's, bit for bit."""
    import onnxruntime as ort

    rng = np.random.default_rng(3)
    dtypes = {"fp16": np.float16, "int32": np.int32, "bool": np.bool_, "uint8": np.uint8, "int64": np.int64,
              "fp32": np.float32}
    plans = []
    for rows in (1, 2, 3, 1, 2, 3):
        arrays = {}
        for key, dtype in dtypes.items():
            raw = rng.normal(size=(rows, 3)) * 50
            if dtype is np.bool_:
                arrays[f"in_{key}"] = raw > 0
            elif dtype is np.uint8:
                arrays[f"in_{key}"] = np.abs(raw).astype(dtype)
            else:
                arrays[f"in_{key}"] = raw.astype(dtype)
        plans.append(arrays)
    outputs = [f"out_{key}" for key in dtypes]
    barrier = threading.Barrier(6)

    def one(arrays: dict) -> dict:
        barrier.wait(30)
        return infer(url, "types", arrays, outputs)

    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(one, plans))
    session = ort.InferenceSession(str(model_file), providers=["CPUExecutionProvider"])
    for arrays, answer in zip(plans, answers):
        for name, expected in zip(outputs, session.run(outputs, arrays)):
            assert answer[name].dtype == expected.dtype, name
            np.testing.assert_array_equal(answer[name], expected, err_msg=name)


def test_a_bad_request_in_a_batch_fails_alone(server, served, sessions):
    """Out-of-range categorical inputs among valid requests in one execution: each bad one gets its own
    error naming the model, the valid ones are served and equal direct, the server lives, failures are counted."""
    model = HELD["miniaod_deepmet"]
    info = served[model]
    session = session_of(sessions, info)
    rng = np.random.default_rng(11)
    plans = []
    for bad in [True, False] * 4:
        arrays = request_inputs(info, rng, rows=1, size=20)
        if bad:
            arrays["input_cat0"][:] = 1e6
        plans.append(arrays)
    before = statistics(server.grpc_url, model)
    barrier = threading.Barrier(len(plans))

    def one(arrays: dict) -> str | dict:
        barrier.wait(30)
        try:
            return infer(server.grpc_url, model, arrays, ["output"])
        except Exception as err:  # noqa: BLE001 - the outcome is what the test looks at
            return f"{err.status()} {err.message()}"

    with ThreadPoolExecutor(len(plans)) as pool:
        outcomes = list(pool.map(one, plans))
    assert server.alive(), server.log_tail()
    for bad, arrays, outcome in zip([True, False] * 4, plans, outcomes):
        if bad:
            assert isinstance(outcome, str) and outcome.startswith(
                f"StatusCode.INTERNAL model '{model}': onnxruntime failed:"), outcome
            assert "\n" not in outcome
        else:
            assert isinstance(outcome, dict), outcome
            np.testing.assert_allclose(outcome["output"], session.run(["output"], arrays)[0], **TOLERANCE)
    after = statistics(server.grpc_url, model)
    assert after.inference_stats.fail.count - before.inference_stats.fail.count == 4
    assert after.inference_stats.success.count - before.inference_stats.success.count == 4


def test_status_of_a_server_started_elsewhere_names_each_models_backend(server):
    """No record of this server (started in-process): status names the backend its configs name."""
    status = subprocess.run([sys.executable, "-m", "sonic_hep.workflows.cli", "server", "status", server.grpc_url],
                            capture_output=True, text=True, timeout=120)
    assert status.returncode == 0, status.stdout + status.stderr
    row = next(line for line in status.stdout.splitlines() if line.split()[:1] == ["demo_mlp"])
    assert row.split()[2] == "onnxruntime" and "READY" in row, status.stdout


def test_thread_count_and_instances_come_from_the_config(server):
    """``intra_op_thread_count`` of the config's parameters, for each of its 2 instances (the server's log says)."""
    log = server.log_path.read_text()
    for instance in ("demo_mlp__threads_0_0", "demo_mlp__threads_0_1"):
        assert f"instance {instance} (CPU, 3 intra-op threads)" in log
    assert "instance demo_mlp_0_0 (CPU, 1 intra-op threads)" in log  # the server's default (--ort-threads)


def test_labels_come_from_the_config(server):
    """Classification (class_count) of a natively served output uses the model's label file."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    x = np.zeros((2, 16), np.float32)
    tensor = grpcclient.InferInput("x", [2, 16], "FP32")
    tensor.set_data_from_numpy(x)
    result = client.infer("demo_mlp", [tensor], outputs=[grpcclient.InferRequestedOutput("probs", class_count=2)])
    labels = (PROJECT / "data" / "models" / "demo" / "demo_mlp" / "probs_labels.txt").read_text().split()
    top = result.as_numpy("probs")
    assert top.shape == (2, 2)
    assert all(entry.decode().split(":")[2] in labels for entry in top.ravel())
    client.close()


# -- building, caching, falling back ---------------------------------------------------------------------------
def test_missing_compiler_falls_back_with_a_notice(tmp_path, monkeypatch, caplog):
    """CXX pointing at a missing binary and nothing cached: "auto" serves with the python-based backend after
    one line saying why; "native" is an error naming the compiler."""
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-g++"))
    monkeypatch.setattr(build, "cache_folders", lambda: [tmp_path / "cache"])
    with pytest.raises(InferenceError, match="native onnxruntime backend is not available: .*no-such-g\\+\\+"):
        TritonServer([SHIPPED[0]], models=["demo_sum"], backend="native", workdir=tmp_path / "w1").start()
    with caplog.at_level(logging.WARNING):
        with TritonServer([SHIPPED[0]], models=["demo_sum"], workdir=tmp_path / "w2") as server:
            assert server.model_backends == {"demo_sum": "onnxruntime (python-based)"}
            assert not (server.workdir / "backends" / "onnxruntime" / build.LIBRARY_NAME).exists()
            info = ModelRepository([str(SHIPPED[0])]).get("demo_sum")
            arrays = request_inputs(info, np.random.default_rng(0), rows=2, size=20)
            answer = infer(server.grpc_url, "demo_sum", arrays, ["y"])
            expected = open_session(str(info.model_file()), info.config_dict, ["CPUExecutionProvider"]).run(["y"], arrays)
            np.testing.assert_allclose(answer["y"], expected[0], **TOLERANCE)
    notices = [r.getMessage() for r in caplog.records if "native onnxruntime backend unavailable" in r.getMessage()]
    assert len(notices) == 1 and "\n" not in notices[0] and "no-such-g++" in notices[0], notices


def test_sonic_run_starts_its_local_server_with_the_configured_backend_and_cores(tmp_path):
    """``services.inference.fallback_server.backend`` and ``.cpus`` reach the server ``sonic run --inference
    sonic`` starts (the job itself keeps every core)."""
    timing = tmp_path / "timing.json"
    last = max(os.sched_getaffinity(0))
    run = subprocess.run([sys.executable, "-m", "sonic_hep.workflows.cli", "run", "demo_inference", "-n", "3", "-o",
                          str(tmp_path / "out.root"), "--inference", "sonic", "--no-progress", "--timing-json",
                          str(timing), "-p", "services.inference.fallback_server.backend=native",
                          "-p", f"services.inference.fallback_server.cpus='{last}'"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    fallback = json.loads(timing.read_text())["inference"]["fallback"]
    assert fallback["backend"] == "native" and fallback["model_backends"]["demo_mlp"] == "onnxruntime (native)"
    assert fallback["cpus"] == [last]


@pytest.mark.parametrize("value, cores", [("0", [0]), ("0-1,3", [0, 1, 3]), (2, [2]), ([3, 1, 3], [1, 3])])
def test_the_fallback_servers_cores_are_read_as_taskset_writes_them(value, cores):
    assert InferenceConfig.from_dict({"fallback_server": {"cpus": value}}).fallback_server["cpus"] == cores


@pytest.mark.parametrize("value", ["0-x", "", [], [-1], ["0"], True, 1.5])
def test_a_bad_core_list_for_the_fallback_server_names_the_key(value):
    with pytest.raises(ConfigError, match=r"^services\.inference\.fallback_server\.cpus: must be a core list such as "):
        InferenceConfig.from_dict({"fallback_server": {"cpus": value}})


def test_server_start_takes_the_backend_from_the_configuration(tmp_path, monkeypatch):
    """``sonic server start --config`` uses the configuration's ``fallback_server.backend`` and ``.cpus`` unless
    ``--backend`` / ``--cpus`` say otherwise; the configuration is read once for all of them."""
    import argparse

    from sonic_hep.framework import config as cfgmod
    from sonic_hep.workflows.cli.server import repositories_of, server_options

    def _backend(args):
        return server_options(args).backend

    def _cpus(args):
        return server_options(args).cpus

    loads = []
    load = cfgmod.load
    monkeypatch.setattr(cfgmod, "load", lambda path, *a, **k: loads.append(path) or load(path, *a, **k))

    text = (PROJECT / "configs" / "demo_inference.yaml").read_text()
    config = tmp_path / "cfg.yaml"
    config.write_text(text.replace("    mode: direct\n",
                                   "    mode: direct\n    fallback_server: {backend: python, cpus: '0'}\n"))
    assert _backend(argparse.Namespace(backend=None, config=str(config))) == "python"
    assert _backend(argparse.Namespace(backend="native", config=str(config))) == "native"
    assert _backend(argparse.Namespace(backend=None, config=None)) == "auto"
    assert _cpus(argparse.Namespace(cpus=None, config=str(config))) == [0]  # the configuration's cores
    assert _cpus(argparse.Namespace(cpus="0-1", config=str(config))) == [0, 1]  # --cpus wins
    assert _cpus(argparse.Namespace(cpus=None, config=None)) is None
    assert repositories_of(argparse.Namespace(repository=None, config=str(config)))  # the same read, not another
    assert loads == [str(config)]


def test_a_bad_backend_in_the_configuration_names_the_key():
    with pytest.raises(ConfigError, match=r"^services\.inference\.fallback_server\.backend: must be one of auto, "
                                          r"native, python, not 'fast'$"):
        InferenceConfig.from_dict({"fallback_server": {"backend": "fast"}})


def test_a_model_native_cannot_serve_makes_auto_python_based(tmp_path, caplog):
    """One backend serves every ONNX model of a server: a string tensor among them means python-based with
    "auto" (one line naming the model), an error with "native" (instead of a server that fails to start)."""
    folder = tmp_path / "repo" / "names"
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.onnx").write_bytes(b"")
    (folder / "config.pbtxt").write_text('name: "names" platform: "onnxruntime_onnx" max_batch_size: 4\n'
                                         'input { name: "x" data_type: TYPE_STRING dims: [1] }\n'
                                         'output { name: "y" data_type: TYPE_FP32 dims: [1] }\n')
    served = [ModelRepository([str(tmp_path / "repo")]).get("names"), MODELS["demo_mlp"]]
    with caplog.at_level(logging.WARNING):
        assert native_library_for(served, "auto", python_runtime()) is None
    notices = [r.getMessage() for r in caplog.records if "native onnxruntime backend unavailable" in r.getMessage()]
    assert len(notices) == 1 and "model 'names': input 'x' is TYPE_STRING" in notices[0], notices
    with pytest.raises(InferenceError, match="model 'names': input 'x' is TYPE_STRING"):
        native_library_for(served, "native", python_runtime())
    assert native_library_for(served[1:], "auto", python_runtime()) is not None


def test_bad_backend_value_is_one_line():
    with pytest.raises(InferenceError, match=r"^server backend must be one of auto, native, python, not 'fast'$"):
        TritonServer([SHIPPED[0]], backend="fast")


def test_cache_reused_and_rebuilt_when_version_or_source_changes(tmp_path, monkeypatch):
    """A cached library is used as it is; another onnxruntime version or changed sources build a new one.
    (Builds are recorded, not compiled: the real compile and check are what the next test runs.)"""
    monkeypatch.setattr(build, "cache_folders", lambda: [tmp_path / "cache"])
    built = []

    def fake_build(library: Path, key: str) -> Path:
        built.append(key)
        target = tmp_path / "cache" / key / build.LIBRARY_NAME
        target.parent.mkdir(parents=True)
        target.write_bytes(b"built")
        return target

    monkeypatch.setattr(build, "_build", fake_build)
    library, version = build.onnxruntime_library()
    first = build.native_library()
    assert first.parent.name.startswith(f"ort-{version}-") and len(built) == 1
    assert build.native_library() == first and len(built) == 1  # cached: not built again
    monkeypatch.setattr(build, "onnxruntime_library", lambda python=None: (library, "1.99.0"))
    newer = build.native_library()
    assert newer != first and newer.parent.name.startswith("ort-1.99.0-") and len(built) == 2
    monkeypatch.setattr(build, "onnxruntime_library", lambda python=None: (library, version))
    sources = tmp_path / "sources"
    sources.mkdir()
    for name in build.SOURCES:
        (sources / name).write_bytes((build.HERE / name).read_bytes())
    with open(sources / "backend.cc", "a") as f:
        f.write("\n// changed\n")
    monkeypatch.setattr(build, "HERE", sources)
    changed = build.native_library()
    assert changed not in (first, newer) and changed.parent.name.startswith(f"ort-{version}-") and len(built) == 3


def test_cuda_sessions_of_direct_and_python_served_models_compute_in_full_fp32(monkeypatch):
    """Direct inference and the python-based backend open sessions through ``open_session``; on CUDA it turns
    TF32 off, as the native backend does (TF32 moved ParticleNet's GPU scores by up to 5e-2 from the CPU's).
    An option the caller set wins, and providers other than CUDA pass unchanged. (No GPU here: the session
    is a stand-in that records its providers; the GPU run is in docs/benchmarks.md, native-gpu.)"""
    from sonic_hep.framework.inference.backends.onnxruntime import ort_session

    seen = []
    monkeypatch.setattr(ort_session.ort, "__version__", "1.22.0")
    monkeypatch.setattr(ort_session.ort, "InferenceSession", lambda path, options, providers: seen.append(providers))
    ort_session.open_session("m.onnx", {}, ["CUDAExecutionProvider", "CPUExecutionProvider"])
    ort_session.open_session("m.onnx", {}, [("CUDAExecutionProvider", {"device_id": 1}), "CPUExecutionProvider"])
    ort_session.open_session("m.onnx", {}, [("CUDAExecutionProvider", {"use_tf32": "1"})])
    assert seen == [[("CUDAExecutionProvider", {"use_tf32": "0"}), "CPUExecutionProvider"],
                    [("CUDAExecutionProvider", {"device_id": 1, "use_tf32": "0"}), "CPUExecutionProvider"],
                    [("CUDAExecutionProvider", {"use_tf32": "1"})]]
    monkeypatch.setattr(ort_session.ort, "__version__", "1.17.3")  # an onnxruntime that does not know the option
    ort_session.open_session("m.onnx", {}, ["CUDAExecutionProvider"])
    assert seen[-1] == ["CUDAExecutionProvider"]


def test_a_new_build_removes_the_builds_nobody_used_for_30_days(tmp_path, monkeypatch):
    """After a new build, cached builds of other onnxruntime versions or older sources that no server used for
    30 days are removed; recently used ones, builds in progress and unrelated files stay, and using a cached
    build marks it as used. (The compiler is a stand-in that writes its output file.)"""
    cache = tmp_path / "cache"
    monkeypatch.setattr(build, "cache_folders", lambda: [cache])
    fake = tmp_path / "fake-cxx"
    fake.write_text("#!/bin/sh\nwhile [ $# -gt 0 ]; do [ \"$1\" = -o ] && echo built > \"$2\"; shift; done\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CXX", str(fake))
    monkeypatch.setattr(build, "check", lambda path: "probe ok")
    old = time.time() - 40 * 86400
    entries = {}
    for name in ("ort-1.18.0-0123456789abcdef", "ort-1.20.0-fedcba9876543210", ".build-abc", "notes.txt"):
        entry = cache / name
        if name.endswith(".txt"):
            cache.mkdir(parents=True, exist_ok=True)
            entry.write_text("kept")
        else:
            (entry / build.LIBRARY_NAME).parent.mkdir(parents=True)
            (entry / build.LIBRARY_NAME).write_bytes(b"old")
        os.utime(entry, (old, old))
        entries[name] = entry
    recent = cache / "ort-1.21.0-00000000aaaaaaaa"
    (recent / build.LIBRARY_NAME).parent.mkdir(parents=True)
    (recent / build.LIBRARY_NAME).write_bytes(b"used last week")
    os.utime(recent, (time.time() - 7 * 86400,) * 2)
    built = build.native_library()
    assert built.read_text().strip() == "built"
    left = {p.name for p in cache.iterdir()}
    assert "ort-1.18.0-0123456789abcdef" not in left and "ort-1.20.0-fedcba9876543210" not in left
    assert {built.parent.name, recent.name, ".build-abc", "notes.txt"} <= left
    os.utime(built.parent, (old, old))
    assert build.native_library() == built and built.parent.stat().st_mtime > old + 86400  # marked as used


def test_concurrent_builds_never_expose_a_partial_library(tmp_path):
    """Two processes build into one empty cache at once: each gets a library that loads (compiled here, then
    checked by loading it and opening this onnxruntime), none sees a partial file, and one library remains."""
    script = ("import sys; from sonic_hep.framework.inference.backends.native import build; "
              "p = build.native_library(); print(build.check(p), p)")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    procs = [subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    results = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), results
    assert {out.split()[0] for out, _ in results} == {build.onnxruntime_library()[1]}
    paths = {out.split()[1] for out, _ in results}
    assert len(paths) == 1
    assert len(list((tmp_path / "xdg").rglob(build.LIBRARY_NAME))) == 1
    assert not list((tmp_path / "xdg").rglob(".build-*"))


def test_a_wrong_onnxruntime_function_table_is_refused_at_build_time(tmp_path, monkeypatch):
    """The build's check calls onnxruntime through the declared positions: a wrong one (here GetErrorCode read
    from the next entry) is refused with one line and nothing is cached."""
    sources = tmp_path / "sources"
    sources.mkdir()
    for name in build.SOURCES:
        (sources / name).write_bytes((build.HERE / name).read_bytes())
    table = (sources / "ort_api.h").read_text()
    assert "X(1, GetErrorCode," in table
    (sources / "ort_api.h").write_text(table.replace("X(1, GetErrorCode,", "X(2, GetErrorCode,"))
    monkeypatch.setattr(build, "HERE", sources)
    monkeypatch.setattr(build, "cache_folders", lambda: [tmp_path / "cache"])
    with pytest.raises(build.NativeUnavailable, match="the API table does not match"):
        build.native_library()
    assert not list((tmp_path / "cache").rglob("*.so"))


def test_check_refuses_a_library_that_does_not_load(tmp_path):
    bogus = tmp_path / build.LIBRARY_NAME
    bogus.write_bytes(b"not a library")
    with pytest.raises(build.NativeUnavailable, match="does not work"):
        build.check(bogus)


def test_cli_start_backend_and_status_column(tmp_path):
    env = {**os.environ, "SONIC_HEP_STATE": str(tmp_path / "state")}
    cmd = [sys.executable, "-m", "sonic_hep.workflows.cli", "server"]
    server = subprocess.Popen([*cmd, "start", "-r", str(SHIPPED[0]), "-m", "demo_sum", "--backend", "native",
                               "--workdir", str(tmp_path / "work")], env=env, stdout=subprocess.PIPE, text=True)
    try:
        first = server.stdout.readline()
        url = first.split()[4]
        lines = [server.stdout.readline() for _ in range(2)]
        assert lines[1].strip() == "backends: onnxruntime (native): demo_sum", lines
        status = subprocess.run([*cmd, "status"], env=env, capture_output=True, text=True, timeout=60)
        row = next(line for line in status.stdout.splitlines() if "demo_sum" in line)
        assert "onnxruntime (native)" in row and "READY" in row, status.stdout
        subprocess.run([*cmd, "stop", url], env=env, capture_output=True, text=True, timeout=60)
        assert server.wait(30) == 0
    finally:
        if server.poll() is None:
            server.terminate()
            server.wait(30)
    bad = subprocess.run([*cmd, "start", "-r", str(SHIPPED[0]), "--backend", "fast"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and "invalid choice: 'fast'" in bad.stderr


@pytest.mark.triton
def test_the_gpu_check_runs_without_a_gpu_and_refuses_to_pass_for_one(tmp_path):
    """``sonic bench native-gpu`` (the check run on a GPU machine) run with ``--cpu-only``: both entries of each
    model served, every answer compared and recorded; with ``--expect-cuda`` on a machine whose instances are not on CUDA it fails."""
    def command(out: str) -> list[str]:
        return [sys.executable, "-m", "sonic_hep.workflows.cli", "bench", "native-gpu", "--out", out,
                "--models", "demo_mlp,miniaod_particlenet_ak4", "--requests", "3", "--cpu-only"]

    done = subprocess.run(command(str(tmp_path / "out")), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert set(results["models"]) == {"demo_mlp", "miniaod_particlenet_ak4"}
    for entry in results["models"].values():
        assert entry["requests"] == 3
        for key in ("native_gpu_vs_cpu", "native_cpu_vs_cpu"):
            assert entry[key] and all(worst[0] <= 1e-5 for worst in entry[key].values())
    refused = subprocess.run(command(str(tmp_path / "again")) + ["--expect-cuda"],
                             capture_output=True, text=True, timeout=600)
    assert refused.returncode != 0 and "not every KIND_GPU instance runs on CUDA" in refused.stderr


def test_building_the_preload_library_prunes_old_builds_of_both_layouts(tmp_path, monkeypatch):
    """The library that keeps Triton's shared memory private moved from ``lib/libsonic_private_shm-<hash>.so`` to
    ``lib/shm-<hash>-<arch>/``: a new build removes unused builds of either layout, and leaves recent ones."""
    from sonic_hep.framework.inference.serving import private_memory

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    folder = tmp_path / "sonic-hep" / "lib"
    folder.mkdir(parents=True)
    old = time.time() - 40 * 86400
    stale_file, stale_dir = folder / "libsonic_private_shm-0123456789ab.so", folder / "shm-0123456789ab-x86_64"
    recent = folder / "libsonic_private_shm-ba9876543210.so"
    stale_dir.mkdir()
    (stale_dir / private_memory.LIBRARY_NAME).write_bytes(b"old")
    for path in (stale_file, recent):
        path.write_bytes(b"old")
    for path in (stale_file, stale_dir):
        os.utime(path, (old, old))
    private_memory.preload_library.cache_clear()
    try:
        built = private_memory.preload_library()
    finally:
        private_memory.preload_library.cache_clear()
    assert built is not None and Path(built).parent.parent == folder
    assert not stale_file.exists() and not stale_dir.exists() and recent.exists()


def test_a_failed_compile_is_one_line_with_the_compilers_first_error(tmp_path):
    """``library_cache.compile_library``, which builds the native backend and the transport: the compiler's first
    error line, or what ``explain`` makes of its output."""
    from sonic_hep.framework.inference.serving.library_cache import compile_library

    fake = tmp_path / "fake-cxx"
    fake.write_text("#!/bin/sh\necho 'In file included from x.cc:1:' >&2\necho 'x.cc:3:1: error: boom' >&2\n"
                    "echo 'x.cc:4:1: error: again' >&2\nexit 1\n")
    fake.chmod(0o755)
    with pytest.raises(RuntimeError, match=r"^fake-cxx failed to compile x\.cc: x\.cc:3:1: error: boom$"):
        compile_library([str(fake), "x.cc"], "x.cc", RuntimeError)
    with pytest.raises(RuntimeError, match=r"^no libfoo$"):
        compile_library([str(fake), "x.cc"], "x.cc", RuntimeError,
                        lambda stderr: "no libfoo" if "boom" in stderr else None)
