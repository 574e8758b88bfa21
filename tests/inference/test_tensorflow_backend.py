"""The python-based ``tensorflow`` backend served for real: a SavedModel and a frozen GraphDef,
built by tensorflow itself, served by a real Triton server whose python is ``.venv-tf`` (tensorflow cannot
share the main venv: tensorflow-cpu 2.18 wants protobuf < 6, tritonclient needs protobuf 6).

The numbers tensorflow computes when it builds the models are the reference: the SONIC client's answers
must equal them within 1e-5; one bad request (a NaN that the models' ``check_numerics`` refuses, with
the same shapes as good ones, so it can be batched with them) fails alone, naming the model.
Skipped when ``.venv-tf`` is absent (``make install-test`` makes it).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from concurrent.futures import wait
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from sonic_hep.framework.errors import InferenceError
from sonic_hep.framework.inference.repository import ModelRepository, TensorSpec, add_tensors
from sonic_hep.framework.inference.serving.servable import unservable
from sonic_hep.framework.inference.serving.server import TritonServer
from sonic_hep.framework.inference.service import InferenceConfig, make_client

TF_PYTHON = Path(__file__).resolve().parents[2] / ".venv-tf" / "bin" / "python"
SAVED, GRAPH = "dense_savedmodel", "dense_graphdef"
FEATURES, CLASSES = 6, 3

pytestmark = [pytest.mark.triton,
              pytest.mark.skipif(not TF_PYTHON.exists(), reason="no .venv-tf (made by `make install-test`)")]

# Run by .venv-tf's python: one dense layer (fixed weights, tanh) as a SavedModel with a named serving
# signature, and the same layer as a frozen GraphDef (constants, placeholder "x", output "y"). Both refuse
# NaN/Inf (check_numerics). Tensorflow's own answers on inputs.npy are saved beside the models.
BUILD = textwrap.dedent('''
    import sys
    from pathlib import Path

    import numpy as np
    import tensorflow as tf

    out = Path(sys.argv[1])
    x = np.load(out / "inputs.npy")
    rng = np.random.default_rng(14)
    w = rng.standard_normal((x.shape[1], {classes})).astype(np.float32)
    b = rng.standard_normal({classes}).astype(np.float32)

    class Dense(tf.Module):
        def __init__(self):
            self.w, self.b = tf.Variable(w), tf.Variable(b)

        @tf.function(input_signature=[tf.TensorSpec([None, x.shape[1]], tf.float32, name="features")])
        def serve(self, features):
            features = tf.debugging.check_numerics(features, "features has NaN or Inf")
            return {{"scores": tf.tanh(tf.matmul(features, self.w) + self.b)}}

    dense = Dense()
    tf.saved_model.save(dense, str(out / "saved"), signatures={{"serving_default": dense.serve}})
    np.save(out / "saved_expected.npy", dense.serve(tf.constant(x))["scores"].numpy())

    graph = tf.Graph()
    with graph.as_default():
        v1 = tf.compat.v1
        placeholder = v1.placeholder(tf.float32, [None, x.shape[1]], name="x")
        checked = tf.debugging.check_numerics(placeholder, "x has NaN or Inf")
        y = tf.identity(tf.tanh(tf.matmul(checked, tf.constant(w)) + tf.constant(b)), name="y")
        with v1.Session(graph=graph) as session:
            np.save(out / "graph_expected.npy", session.run(y, {{placeholder: x}}))
    (out / "model.graphdef").write_bytes(graph.as_graph_def().SerializeToString())
''').format(classes=CLASSES)


def write_config(folder: Path, platform: str, inputs: list[TensorSpec], outputs: list[TensorSpec]) -> None:
    config = mc.ModelConfig(name=folder.name, platform=platform, max_batch_size=16)
    add_tensors(config, inputs, outputs)
    config.dynamic_batching.max_queue_delay_microseconds = 5000
    config.instance_group.add(count=1, kind=mc.ModelInstanceGroup.KIND_CPU)
    (folder / "config.pbtxt").write_text(text_format.MessageToString(config))


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, np.ndarray, dict[str, np.ndarray]]:
    """A repository of both models as tensorflow wrote them, the inputs, and tensorflow's own answers."""
    work = tmp_path_factory.mktemp("tf-build")
    inputs = np.random.default_rng(7).standard_normal((40, FEATURES)).astype(np.float32)
    np.save(work / "inputs.npy", inputs)
    done = subprocess.run([str(TF_PYTHON), "-c", BUILD, str(work)], capture_output=True, text=True, timeout=300,
                          env={"TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-3000:]
    repository = work / "models"
    for name in (SAVED, GRAPH):
        (repository / name / "1").mkdir(parents=True)
    (work / "saved").rename(repository / SAVED / "1" / "model.savedmodel")
    (work / "model.graphdef").rename(repository / GRAPH / "1" / "model.graphdef")
    write_config(repository / SAVED, "tensorflow_savedmodel",
                 [TensorSpec("features", "FP32", (FEATURES,))], [TensorSpec("scores", "FP32", (CLASSES,))])
    write_config(repository / GRAPH, "tensorflow_graphdef",
                 [TensorSpec("x", "FP32", (FEATURES,))], [TensorSpec("y", "FP32", (CLASSES,))])
    expected = {SAVED: np.load(work / "saved_expected.npy"), GRAPH: np.load(work / "graph_expected.npy")}
    return repository, inputs, expected


@pytest.fixture(scope="module")
def server(built, tmp_path_factory):
    repository, _, _ = built
    with TritonServer([repository], python=str(TF_PYTHON), workdir=tmp_path_factory.mktemp("tf-server"),
                      env={"TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""}) as running:
        yield running


@pytest.fixture(scope="module")
def client(server, built):
    repository, _, _ = built
    sonic = make_client(InferenceConfig(mode="sonic", repository=[str(repository)], servers=[server.grpc_url],
                                        fallback=False, timeout_s=120))
    yield sonic
    sonic.close()


NAMES = {SAVED: ("features", "scores"), GRAPH: ("x", "y")}


def test_both_tensorflow_platforms_are_served_by_the_tensorflow_backend(server, built):
    # "tensorflow importable" is decided in the server's python (.venv-tf), not in this test's
    assert server.skipped == {} and server.describe()["python"] == str(TF_PYTHON)
    if importlib.util.find_spec("tensorflow") is None:  # with this python, both would be left out
        infos = [ModelRepository([built[0]]).get(name) for name in (SAVED, GRAPH)]
        assert set(unservable(infos, sys.executable)) == {SAVED, GRAPH}
    assert sorted(server.served) == sorted([SAVED, GRAPH])
    assert server.describe()["model_backends"] == {SAVED: "tensorflow (python-based)",
                                                   GRAPH: "tensorflow (python-based)"}
    probe = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        for name, platform in ((SAVED, "tensorflow_savedmodel"), (GRAPH, "tensorflow_graphdef")):
            assert probe.is_model_ready(name)
            config = probe.get_model_config(name).config  # as Triton loaded it: our model.py serves it
            assert (config.platform, config.backend, config.runtime) == (platform, "tensorflow", "model.py")
    finally:
        probe.close()


@pytest.mark.parametrize("model", [SAVED, GRAPH])
def test_served_scores_equal_tensorflows_own(client, built, model):
    _, inputs, expected = built
    source, target = NAMES[model]
    cuts = [0, 1, 4, 11, 19, 27, 40]  # requests of different batch sizes, sent at once so they may be batched
    futures = [client.infer(model, {source: inputs[a:b]}) for a, b in zip(cuts, cuts[1:])]
    wait(futures, timeout=120)
    served = np.concatenate([future.result()[target] for future in futures])
    assert served.shape == expected[model].shape == (40, CLASSES)
    np.testing.assert_allclose(served, expected[model], rtol=0, atol=1e-5)


@pytest.mark.parametrize("model", [SAVED, GRAPH])
def test_a_bad_request_fails_alone(server, client, built, model):
    """A NaN row has the good requests' shapes, so Triton may batch it with them; tensorflow's check_numerics
    fails the whole call, the backend reruns each request alone, and only the bad one fails."""
    _, inputs, expected = built
    source, target = NAMES[model]
    bad = inputs[:4].copy()
    bad[2, 1] = np.nan
    parts = [(0, 4), (4, 8), (8, 12), (12, 16), (16, 20)]
    futures = [client.infer(model, {source: inputs[a:b]}) for a, b in parts[:2]] + [client.infer(model, {source: bad})]
    futures += [client.infer(model, {source: inputs[a:b]}) for a, b in parts[2:]]
    wait(futures, timeout=120)
    failure = futures[2].exception()
    assert isinstance(failure, InferenceError), failure
    assert model in str(failure) and "tensorflow failed: InvalidArgumentError" in str(failure)
    assert "NaN or Inf : Tensor had NaN values" in str(failure)  # what failed, not only TF's first line
    for (a, b), future in zip(parts, futures[:2] + futures[3:]):
        np.testing.assert_allclose(future.result()[target], expected[model][a:b], rtol=0, atol=1e-5)
    assert server.alive()
    again = client.infer(model, {source: inputs[:4]}).result(120)[target]
    np.testing.assert_allclose(again, expected[model][:4], rtol=0, atol=1e-5)


def test_the_repository_reads_both_platforms(built):
    repository = ModelRepository([built[0]])
    assert repository.get(SAVED).model_file().is_dir() and repository.get(GRAPH).model_file().is_file()
