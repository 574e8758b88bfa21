"""A bad model file is one unloadable model, never a dead server.

One real server per backend (native, python-based onnxruntime), started once on a repository that holds a
good model and one model per kind of bad ``1/model.onnx`` (configs without a checksum block): empty, 100
zero bytes, 1,000 random bytes, the good model cut in half, a sparse file of 1 GiB of zeros, a sparse
file over 2 GiB, and a well-formed ONNX model that onnxruntime refuses. Each bad model is left out and
named with a reason naming its file; the good one answers. The same files loaded into the running
server (explicit model control) are refused by the backend itself, one by one, and the server goes on.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from sonic_hep.data.demo.models import REPOSITORY as DEMO_REPOSITORY
from sonic_hep.data.demo.models import write_mlp
from sonic_hep.framework.inference.backends.common.model_file import kind_of, problem
from sonic_hep.framework.inference.backends.onnxruntime.ort_session import open_session
from sonic_hep.framework.inference.repository import ModelRepository, TensorSpec, write_model
from sonic_hep.framework.inference.serving.runtime_repository import write_entry
from sonic_hep.framework.inference.serving.server import TritonServer

from tests.conftest import PROJECT

GOOD = "good"
#: bad model → what its reason must say (besides its file)
BAD = {
    "bad_empty": "is empty (0 bytes)",
    "bad_zeros": "is not an ONNX model",
    "bad_random": "is not an ONNX model",
    "bad_truncated": "is truncated",
    "bad_huge": "is not an ONNX model",  # 1 GiB of zeros: refused from its first byte, never read
    "bad_over_2gib": "more than the 2 GiB a protobuf can hold",
    "bad_refused": "NoSuchOp",  # well-formed: onnxruntime's own error
}


def refused_by_onnxruntime() -> bytes:
    """A well-formed ONNX model with an operator onnxruntime does not have."""
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("NoSuchOp", ["x"], ["logits"])], "refused",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    return model.SerializeToString()


def write_bad(repository: Path, name: str, good: bytes) -> None:
    """Model ``name`` of ``repository``: the good model's inputs and outputs, a bad file, no checksum block."""
    contents = {"bad_empty": b"", "bad_zeros": bytes(100), "bad_random": np.random.default_rng(0).bytes(1000),
                "bad_truncated": good[: len(good) // 2], "bad_refused": refused_by_onnxruntime()}
    folder = write_model(repository, name, contents.get(name, b""), inputs=[TensorSpec("x", "FP32", (16,))],
                         outputs=[TensorSpec("logits", "FP32", (4,))], max_batch_size=8, checksum=False)
    sizes = {"bad_huge": 2**30, "bad_over_2gib": 2**31 + 1}
    if name in sizes:  # sparse: no disk and no memory spent
        os.truncate(folder / "1" / "model.onnx", sizes[name])


@pytest.fixture(scope="module")
def repository(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("bad-model-files")
    good = write_mlp(path, name=GOOD) / "1" / "model.onnx"
    for name in BAD:
        write_bad(path, name, good.read_bytes())
    return path


@pytest.fixture(scope="module", params=["native", "python"])
def server(request, repository, tmp_path_factory):
    with TritonServer([repository], backend=request.param, model_control="explicit",
                      workdir=tmp_path_factory.mktemp(f"bad-files-{request.param}")) as s:
        yield s


def answers(server: TritonServer, repository: Path) -> None:
    """The good model answers as direct onnxruntime does."""
    x = np.random.default_rng(1).normal(size=(3, 16)).astype(np.float32)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        request = grpcclient.InferInput("x", list(x.shape), "FP32")
        request.set_data_from_numpy(x)
        served = client.infer(GOOD, [request]).as_numpy("logits")
    direct = open_session(str(repository / GOOD / "1" / "model.onnx"), {}, ["CPUExecutionProvider"])
    np.testing.assert_allclose(served, direct.run(["logits"], {"x": x})[0], rtol=1e-5, atol=1e-6)


@pytest.mark.triton
def test_each_bad_file_is_one_model_left_out_with_its_reason_and_the_good_one_is_served(server, repository):
    assert server.alive() and server.served == [GOOD]
    assert set(server.skipped) == set(BAD)
    for name, words in BAD.items():
        reason = server.skipped[name]
        assert f"{name}/1/model.onnx" in reason and words in reason, (name, reason)
    # the bad files were left out before the server started (servable.py: never handed to a backend); the
    # well-formed model onnxruntime refuses passed those checks and was left out after its load failed
    assert all("did not load" not in server.skipped[name] for name in BAD if name != "bad_refused")
    assert "did not load" in server.skipped["bad_refused"]
    assert server.describe()["skipped"] == server.skipped  # what `sonic server start` records for status
    answers(server, repository)


@pytest.mark.triton
def test_a_clients_error_for_a_model_the_server_could_not_load_carries_the_servers_reason(server, repository):
    """A model the server lists but cannot serve: the job's error says why, as the server's repository index
    does (``sonic server status``), not only that the server "does not have it"."""
    from sonic_hep.framework.inference.triton_errors import NoServerError
    from tests.inference.conftest import sonic_client

    name = "bad_truncated"
    info = ModelRepository([str(repository)]).get(name)
    write_entry(info, server.workdir / "repository" / name, info.config)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        with pytest.raises(InferenceServerException):
            client.load_model(name)
    client = sonic_client([server.grpc_url], repository=ModelRepository([str(repository)]), shared_memory="off")
    try:
        with pytest.raises(NoServerError) as caught:
            client.infer(name, {"x": np.zeros((1, 16), np.float32)})
    finally:
        client.close()
    message = str(caught.value)
    assert f"{server.grpc_url}: has it but cannot serve it (UNAVAILABLE: " in message, message
    assert BAD[name] in message and "does not have it" not in message


@pytest.mark.triton
def test_the_backend_itself_refuses_each_bad_file_and_the_server_serves_on(server, repository):
    """The files loaded into the running server reach the backend (native: backend.cc; python-based:
    model.py): each load fails alone, naming the file and why, and shows in the repository index."""
    models = ModelRepository([str(repository)])
    for name in BAD:
        info = models.get(name)  # its config as it is: no checksum block, no file read
        write_entry(info, server.workdir / "repository" / name, info.config)

    def load(name: str) -> str:
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            try:
                client.load_model(name)
            except InferenceServerException as err:
                return str(err)
        return "loaded"

    with ThreadPoolExecutor(len(BAD)) as pool:  # at once: a python-based model's load starts a stub (~1.5 s)
        refusals = dict(zip(BAD, pool.map(load, BAD)))
    assert server.alive(), f"loading bad model files stopped the server: {server.log_tail()}"
    for name, words in BAD.items():
        assert f"{name}/1/model.onnx" in refusals[name] and words in refusals[name], (name, refusals[name])
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        index = {m.name: m for m in client.get_model_repository_index().models}
    for name, words in BAD.items():
        assert index[name].state == "UNAVAILABLE" and words in index[name].reason, index[name]
    assert index[GOOD].state == "READY"
    answers(server, repository)


@pytest.mark.triton
def test_sonic_server_start_serves_the_good_model_and_status_names_the_bad_one(repository, tmp_path):
    env = {**os.environ, "SONIC_HEP_STATE": str(tmp_path / "state")}
    cmd = [sys.executable, "-m", "sonic_hep.workflows.cli", "server"]
    started = subprocess.Popen([*cmd, "start", "-r", str(repository), "-m", GOOD, "-m", "bad_truncated",
                                "--workdir", str(tmp_path / "work")], env=env, stdout=subprocess.PIPE, text=True)
    try:
        first = started.stdout.readline()
        assert first.startswith("Triton server ready: grpc "), first
        record = json.loads(next((tmp_path / "state").glob("*.json")).read_text())
        assert record["models"] == [GOOD] and "is truncated" in record["skipped"]["bad_truncated"]
        status = subprocess.run([*cmd, "status"], env=env, capture_output=True, text=True, timeout=60)
        lines = status.stdout.splitlines()
        assert any(GOOD in line and "READY" in line for line in lines), status.stdout
        assert any("bad_truncated" in line and "NOT SERVED" in line and "bad_truncated/1/model.onnx is truncated"
                   in line for line in lines), status.stdout
        assert started.poll() is None
    finally:
        started.send_signal(signal.SIGTERM)
        started.wait(60)


@pytest.mark.triton
def test_a_job_whose_fallback_server_meets_a_bad_model_it_does_not_use_runs(repository, tmp_path, sonic_cli):
    repositories = f"services.inference.repository=['{DEMO_REPOSITORY}', '{repository}']"
    result = sonic_cli("run", "demo_inference", "-n", "20", "--no-progress", "--inference", "sonic", "-p",
                       repositories, "-o", tmp_path / "out.root")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "mode sonic" in result.stdout
    assert "model 'bad_truncated' is not served" in result.stderr and "is truncated" in result.stderr


def test_every_shipped_onnx_model_passes_the_file_checks():
    models = sorted(PROJECT.glob("data/models/**/model.onnx"))
    assert models and {str(m): problem(m, "onnx") for m in models} == {str(m): "" for m in models}


def test_torchscript_and_graphdef_files_are_checked_by_their_kind(tmp_path):
    """The other python-based backends' files: TorchScript is a zip archive, a GraphDef a protobuf."""
    import zipfile

    archive = tmp_path / "model.pt"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("model/data.pkl", b"x" * 5000)
    assert kind_of("pytorch", "pytorch_libtorch") == "torchscript" and problem(archive, "torchscript") == ""
    cut = tmp_path / "cut.pt"
    cut.write_bytes(archive.read_bytes()[:3000])
    assert problem(cut, "torchscript") == f"{cut} is truncated (3000 bytes): the zip archive has no end record"
    onnx_file = tmp_path / "model.onnx"
    onnx_file.write_bytes(refused_by_onnxruntime())
    assert problem(onnx_file, "torchscript") == f"{onnx_file} is not a TorchScript model (not a zip archive)"
    graphdef = tmp_path / "model.graphdef"
    with graphdef.open("wb") as sparse:
        sparse.truncate(2**31)
    assert kind_of("tensorflow", "tensorflow_graphdef") == "protobuf"
    assert "more than the 2 GiB a protobuf can hold" in problem(graphdef, "protobuf")
    savedmodel = tmp_path / "model.savedmodel"
    savedmodel.mkdir()
    assert problem(savedmodel, kind_of("tensorflow", "tensorflow_savedmodel")) == ""
