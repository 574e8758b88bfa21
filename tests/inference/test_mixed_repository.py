"""A mixed model repository: CMS's ONNX models, the TorchScript twin of ParticleNet AK4 and a
model no backend here can run, served by one ``sonic server start`` for the module.

What is served answers and equals direct inference; what cannot be served is named with its reason at
start and in ``sonic server status``; ``--strict`` refuses with one line; the TorchScript twin gives
the ONNX twin's scores in both modes; a bad request to the torch model fails alone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from concurrent.futures import wait
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from sonic_hep.framework import config as cfgmod
from sonic_hep.framework.errors import InferenceError
from sonic_hep.framework.inference.direct import DirectClient
from sonic_hep.framework.inference.repository import ModelInfo, ModelRepository, TensorSpec, add_tensors
from sonic_hep.framework.inference.serving.servable import unservable
from sonic_hep.framework.process import Process

from tests.conftest import PROJECT, shared_path
from tests.miniaod.conftest import branches, small_file  # noqa: F401 - small_file is a fixture
from tests.inference.conftest import sonic_client
from tests.polling import read_line
from tests.reliability.test_model_errors import FakeRequest, args, assert_one_error_each, load, pb_utils  # noqa: F401

CLI = [sys.executable, "-m", "sonic_hep.workflows.cli"]
TORCH_BACKEND = PROJECT / "framework" / "inference" / "backends" / "pytorch" / "model.py"
ONNX_TWIN, TORCH_TWIN, UNSUPPORTED = "particlenet_AK4", "particlenet_AK4_PT", "tagger_tf"
ONNX_MODELS = ["particlenet_AK4", "particlenet", "deepmet"]


def write_entry(repository: Path, name: str, platform: str, model_file: str | None = None,
                steps: list[str] = ()) -> Path:
    """A repository entry of ``platform`` with one FP32 input ``x`` [4] and output ``y`` [2]; the model file
    (a folder for a SavedModel) only when named; an ensemble of ``steps`` when given."""
    folder = repository / name
    (folder / "1").mkdir(parents=True, exist_ok=True)
    config = mc.ModelConfig(name=name, platform=platform, max_batch_size=8)
    add_tensors(config, [TensorSpec("x", "FP32", (4,))], [TensorSpec("y", "FP32", (2,))])
    for step in steps:
        entry = config.ensemble_scheduling.step.add(model_name=step, model_version=-1)
        entry.input_map["x"], entry.output_map["y"] = "x", "y"
    if model_file:
        (folder / "1" / model_file).mkdir()
    (folder / "config.pbtxt").write_text(text_format.MessageToString(config))
    return folder


def torch_available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def needs_torch() -> None:
    if not torch_available():
        pytest.skip("torch is not installed (make install-test installs it where /opt/wheels has the wheel)")


def inputs_for(info: ModelInfo, rng: np.random.Generator, batch: int = 3, length: int = 21) -> dict[str, np.ndarray]:
    """Inputs of a model's declared shapes (variable dims ``length``): masks 0/1, categories small integers."""
    out = {}
    for spec in info.inputs:
        shape = (batch, *(length if d < 0 else d for d in spec.dims))
        if "mask" in spec.name:
            out[spec.name] = (rng.random(shape) < 0.8).astype(spec.dtype)
        elif "cat" in spec.name:
            out[spec.name] = rng.integers(0, 3, shape).astype(spec.dtype)
        else:
            out[spec.name] = rng.standard_normal(shape).astype(spec.dtype)
    return out


def as_torch_twin(inputs: dict[str, np.ndarray], twin: ModelInfo) -> dict[str, np.ndarray]:
    """The ONNX twin's inputs under the TorchScript twin's names (``pf_points`` → ``pf_points__0``)."""
    return {spec.name: inputs[spec.name.rsplit("__", 1)[0]] for spec in twin.inputs}


@pytest.fixture(scope="module")
def repositories(tmp_path_factory) -> list[Path]:
    """CMS's ONNX repository, its TorchScript twin, and a TensorFlow SavedModel entry (tensorflow is absent)."""
    extra = tmp_path_factory.mktemp("unsupported")
    write_entry(extra, UNSUPPORTED, "tensorflow_savedmodel", "model.savedmodel")
    return [shared_path("real", "cms-models"), shared_path("real", "cms-models-torchscript"), extra]


@pytest.fixture(scope="module")
def repository(repositories) -> ModelRepository:
    return ModelRepository(repositories)


@pytest.fixture(scope="module")
def server(repositories, tmp_path_factory):
    """``sonic server start`` on the mixed repository: its address, the lines it printed, its environment."""
    state = tmp_path_factory.mktemp("state")
    env = {**os.environ, "SONIC_HEP_STATE": str(state)}
    args = [arg for path in repositories for arg in ("-r", str(path))]
    process = subprocess.Popen([*CLI, "server", "start", *args, "--workdir", str(state / "work")], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    try:
        while not lines or not lines[-1].startswith("log:"):
            line = read_line(process.stdout, 240)
            if not line:
                raise AssertionError(f"sonic server start ended: {lines}\n{process.stderr.read()}")
            lines.append(line.rstrip("\n"))
        address = lines[0].split()[4]
        yield SimpleNamespace(address=address, lines=lines, env=env)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def client(server, repository):
    sonic = sonic_client([server.address], repository)
    yield sonic
    sonic.close()


# -- what the server serves, and what it names -----------------------------------------------------------
@pytest.mark.triton
@pytest.mark.shared
def test_unservable_model_is_named_with_its_reason_at_start_and_in_status(server):
    served = next(line for line in server.lines if line.startswith("models:"))
    assert UNSUPPORTED not in served and all(model in served for model in ONNX_MODELS)
    assert (TORCH_TWIN in served) == torch_available()
    named = [line for line in server.lines if line.startswith(f"not served: {UNSUPPORTED}:")]
    assert len(named) == 1 and "tensorflow_savedmodel" in named[0] and "No module named 'tensorflow'" in named[0]
    status = subprocess.run([*CLI, "server", "status"], env=server.env, capture_output=True, text=True, timeout=120)
    assert status.returncode == 0, status.stderr
    row = next(line for line in status.stdout.splitlines() if line.split()[:1] == [UNSUPPORTED])
    assert "NOT SERVED" in row and "No module named 'tensorflow'" in row
    assert all(any(line.split()[:1] == [model] and "READY" in line for line in status.stdout.splitlines())
               for model in ONNX_MODELS)
    if torch_available():
        row = next(line for line in status.stdout.splitlines() if line.split()[:1] == [TORCH_TWIN])
        assert "pytorch (python-based)" in row and "READY" in row


@pytest.mark.triton
@pytest.mark.shared
@pytest.mark.parametrize("model", [*ONNX_MODELS, TORCH_TWIN])
def test_each_served_model_answers_and_equals_direct(server, client, repository, model):
    if model == TORCH_TWIN:
        needs_torch()
    info = repository.get(model)
    inputs = inputs_for(info, np.random.default_rng(len(model)))
    sonic = client.infer(model, inputs).result(120)
    direct = DirectClient(repository).run(model, inputs)
    assert sorted(sonic) == sorted(direct) == sorted(spec.name for spec in info.outputs)
    for name in direct:
        assert sonic[name].shape == direct[name].shape and np.isfinite(direct[name]).all()
        np.testing.assert_allclose(sonic[name], direct[name], rtol=0, atol=1e-5)


@pytest.mark.triton
@pytest.mark.shared
def test_torchscript_twin_gives_the_onnx_twins_scores_in_both_modes(server, client, repository):
    needs_torch()
    inputs = inputs_for(repository.get(ONNX_TWIN), np.random.default_rng(14), batch=40, length=37)
    twin_inputs = as_torch_twin(inputs, repository.get(TORCH_TWIN))
    direct = DirectClient(repository)
    reference = direct.run(ONNX_TWIN, inputs)["softmax"]
    assert reference.shape == (40, 8)
    np.testing.assert_allclose(direct.run(TORCH_TWIN, twin_inputs)["softmax__0"], reference, rtol=0, atol=1e-4)
    np.testing.assert_allclose(client.infer(TORCH_TWIN, twin_inputs).result(120)["softmax__0"], reference,
                               rtol=0, atol=1e-4)


@pytest.mark.triton
@pytest.mark.shared
def test_a_bad_request_to_the_torch_model_fails_alone(server, client, repository):
    """Particle features of 40 particles beside points of 50: every dim agrees with the config, so Triton
    hands it to the backend, and torch fails on it; requests sent with it still get their scores."""
    needs_torch()
    twin = repository.get(TORCH_TWIN)
    rng = np.random.default_rng(5)
    good = [inputs_for(twin, rng, batch=2, length=50) for _ in range(6)]
    bad = inputs_for(twin, rng, batch=2, length=50)
    bad["pf_features__1"] = bad["pf_features__1"][:, :, :40].copy()
    futures = [client.infer(TORCH_TWIN, inputs) for inputs in good[:3]] + [client.infer(TORCH_TWIN, bad)]
    futures += [client.infer(TORCH_TWIN, inputs) for inputs in good[3:]]
    wait(futures, timeout=120)
    failure = futures[3].exception()
    assert isinstance(failure, InferenceError) and TORCH_TWIN in str(failure) and "torch failed" in str(failure)
    direct = DirectClient(repository)
    for inputs, future in zip(good, futures[:3] + futures[4:]):
        np.testing.assert_allclose(future.result()["softmax__0"], direct.run(TORCH_TWIN, inputs)["softmax__0"],
                                   rtol=0, atol=1e-5)
    probe = grpcclient.InferenceServerClient(server.address)
    try:
        assert probe.is_server_live() and probe.is_model_ready(TORCH_TWIN)
    finally:
        probe.close()
    again = client.infer(TORCH_TWIN, good[0]).result(120)["softmax__0"]
    np.testing.assert_allclose(again, futures[0].result()["softmax__0"], rtol=0, atol=1e-6)


@pytest.mark.triton
@pytest.mark.shared
def test_the_tagger_module_never_knows_which_engine_runs_its_model(server, repositories, small_file, tmp_path):
    """CMS's AK4 tagger configuration (BoostedJetTags) with only its model switched to the TorchScript twin (the
    twin's own preprocess.json names its inputs ``pf_points__0`` ...): the same jet scores as with the ONNX
    model, direct and over SONIC."""
    needs_torch()
    repositories = [*map(str, repositories), str(PROJECT / "data" / "models" / "miniaod")]
    scores = {}
    for model, mode in ((ONNX_TWIN, "direct"), (TORCH_TWIN, "direct"), (TORCH_TWIN, "sonic")):
        path = tmp_path / f"{model}-{mode}.root"
        config = cfgmod.load("miniaod_cms", [
            f"source.files=['{small_file}']", f"output.file='{path}'", "options.progress=false",
            "source.max_events=12", "output.products=['pnetAK4:scores as JetPNet']", f"modules.pnetAK4.model={model}",
            f"services.inference.repository={repositories}", f"services.inference.mode={mode}",
            f"services.inference.servers=['{server.address}']", "services.inference.fallback=false"])
        Process(config).run(progress=False)
        scores[model, mode] = branches(path)
    reference = scores[ONNX_TWIN, "direct"]
    assert "JetPNet_BvsAll" in reference and reference["JetPNet_BvsAll"].size > 20
    for key, columns in scores.items():
        assert columns.keys() == reference.keys(), key
        for column, values in reference.items():
            np.testing.assert_allclose(columns[column], values, rtol=0, atol=1e-4, err_msg=f"{key} {column}")


@pytest.mark.shared
def test_torch_backend_reruns_a_failed_batch_request_by_request(pb_utils, repository):
    """In process, against a stand-in for the stub: requests of equal shapes run as one torch call; when it
    fails (here one request's float64 features make the whole concatenation float64), each request is
    run alone, and only the bad one fails, with an error of its own naming the model."""
    needs_torch()
    info = repository.get(TORCH_TWIN)
    model = load(TORCH_BACKEND, "_torch_backend_model").TritonPythonModel()
    model.initialize(args(info.path, info.config_dict))
    rng = np.random.default_rng(7)
    good = [inputs_for(info, rng, batch=2, length=30) for _ in range(2)]
    bad = inputs_for(info, rng, batch=2, length=30)
    bad["pf_features__1"] = bad["pf_features__1"].astype(np.float64)
    responses = model.execute([FakeRequest(**good[0]), FakeRequest(**bad), FakeRequest(**good[1])])
    assert_one_error_each([responses[1]], TORCH_TWIN, 1)
    assert "torch failed" in responses[1].error.message()
    direct = DirectClient(repository)
    for inputs, response in zip(good, (responses[0], responses[2])):
        assert response.error is None
        np.testing.assert_allclose(response.output_tensors[0].value, direct.run(TORCH_TWIN, inputs)["softmax__0"],
                                   rtol=0, atol=1e-6)
    batched = model.execute([FakeRequest(**inputs) for inputs in good])  # one call, split back per request
    assert all(r.error is None and r.output_tensors[0].value.shape == (2, 8) for r in batched)


# -- strict ----------------------------------------------------------------------------------------------
@pytest.mark.shared
def test_strict_refuses_with_one_line_naming_the_model_and_reason(repositories, tmp_path):
    env = {**os.environ, "SONIC_HEP_STATE": str(tmp_path / "state")}
    args = [arg for path in repositories for arg in ("-r", str(path))]
    config = tmp_path / "server.yaml"
    config.write_text("process: mixed\nsource: {type: empty, events: 1}\nmodules: {toyJets: {type: ToyJets}}\n"
                      "path: [toyJets]\nservices:\n  inference:\n    mode: sonic\n"
                      f"    repository: [{', '.join(str(p) for p in repositories)}]\n"
                      "    fallback_server: {strict: true}\n")
    for how in ([*args, "--strict"], ["--config", str(config)]):
        result = subprocess.run([*CLI, "server", "start", *how, "--workdir", str(tmp_path / "work")], env=env,
                                capture_output=True, text=True, timeout=240)
        assert result.returncode != 0 and result.stdout == ""
        # the error is one line; INFO records of housekeeping (folders of dead servers swept) may precede it
        lines = [line for line in result.stderr.splitlines() if not line.startswith("INFO ")]
        assert len(lines) == 1 and lines[0].startswith("sonic: error: "), result.stderr
        assert "strict" in lines[0] and f"'{UNSUPPORTED}'" in lines[0] and "No module named 'tensorflow'" in lines[0]
        assert (f"'{TORCH_TWIN}'" in lines[0]) != torch_available()
    assert not list((tmp_path / "state").glob("*.json"))


@pytest.mark.triton
def test_a_job_asking_for_a_model_its_fallback_server_left_out_is_told_why(tmp_path):
    """A SONIC job whose local fallback server left a model out: the error names the model and the reason."""
    from sonic_hep.data.demo.models import write_mlp
    from sonic_hep.framework.inference.sonic.servers import ServerPool
    from sonic_hep.framework.inference.triton_errors import NoServerError

    write_mlp(tmp_path, name="mlp")
    write_entry(tmp_path, UNSUPPORTED, "tensorflow_savedmodel", "model.savedmodel")
    pool = ServerPool([], repository=ModelRepository([tmp_path]), fallback_options={"workdir": str(tmp_path / "w")})
    try:
        assert pool.choose("mlp") is not None
        with pytest.raises(NoServerError, match=rf"no server can run model '{UNSUPPORTED}': .*\(fallback\): cannot serve "
                                                r"it: platform 'tensorflow_savedmodel' .*No module named 'tensorflow'"):
            pool.choose(UNSUPPORTED)
    finally:
        pool.close()


# -- the decision, without a server ---------------------------------------------------------------------
def test_unservable_names_each_reason(tmp_path):
    write_entry(tmp_path, "tf", "tensorflow_graphdef", None)
    write_entry(tmp_path, "plan", "tensorrt_plan", "model.plan")
    write_entry(tmp_path, "fileless", "onnxruntime_onnx", None)
    write_entry(tmp_path, "steps", "ensemble", steps=["tf"])
    write_entry(tmp_path, "outer", "ensemble", steps=["steps"])
    infos = [ModelRepository([tmp_path]).get(name) for name in ("tf", "plan", "fileless", "steps", "outer")]
    skipped = unservable(infos, sys.executable)
    assert set(skipped) == {"tf", "plan", "fileless", "steps", "outer"}
    assert "needs tensorflow in the server's python" in skipped["tf"]
    assert "no 'tensorrt' backend" in skipped["plan"]
    assert "model.onnx does not exist" in skipped["fileless"]
    assert skipped["steps"].startswith("ensemble step 'tf' is not served (platform 'tensorflow_graphdef'")
    assert skipped["outer"].startswith("ensemble step 'steps' is not served (ensemble step 'tf'")
    assert unservable([], sys.executable) == {}
    custom = write_entry(tmp_path, "custom", "", None)  # a backend of the caller's, reading files of its own
    (custom / "config.pbtxt").write_text((custom / "config.pbtxt").read_text() + 'backend: "mine"\n')
    info = ModelRepository([tmp_path]).get("custom")
    assert unservable([info], sys.executable, extra_backends=["mine"]) == {}
    assert "this server has no 'mine' backend" in unservable([info], sys.executable)["custom"]


def test_torch_names_map_to_forward_positions_as_triton_maps_them():
    needs_torch()
    from sonic_hep.framework.inference.backends.pytorch.torchscript import positions

    assert positions(["b__1", "a__0", "c__2"], ["x", "y", "z"]) == {"b__1": 1, "a__0": 0, "c__2": 2}
    assert positions(["pf_mask", "pf_points"], ["pf_points", "pf_mask"]) == {"pf_mask": 1, "pf_points": 0}
    assert positions(["u", "v"], ["x", "y"]) == {"u": 0, "v": 1}  # neither convention: the config's order
    with pytest.raises(ValueError, match=r"__<index> suffixes must be 0\.\.1, once each"):
        positions(["a__0", "b__0"])


def test_direct_mode_refuses_a_tensorflow_model_naming_it(tmp_path):
    write_entry(tmp_path, "tf", "tensorflow_savedmodel", "model.savedmodel")
    with pytest.raises(InferenceError, match=r"model 'tf' is a 'tensorflow_savedmodel' model, which runs only on a "
                                             r"Triton server"):
        DirectClient(ModelRepository([tmp_path])).check_runnable("tf")
