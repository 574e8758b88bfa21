"""Triton python-based backend ``tensorflow``: serves ``tensorflow_savedmodel`` and ``tensorflow_graphdef`` models.

The pip-installed Triton has no TensorFlow backend library. When tensorflow imports in the server's
python, ``<backend-directory>/tensorflow/model.py`` (this file) serves such models with their own
config, batching and per-request errors coming from ``common/batched_model.py``; otherwise the server
leaves them out and names them with the reason (``framework/inference/serving/servable.py``). Names follow
Triton's TensorFlow backend: a SavedModel's config names are the keys of its serving signature
(``serving_default`` unless the config's ``parameters { key: "TF_SIGNATURE_DEF" ... }`` names another);
a GraphDef's config names are tensor names in the graph (``x`` or ``x:0``).

Tensorflow's errors span several lines (``Graph execution error:``, ``Detected at node ...``) and clients
show an error's first line; :func:`one_line` keeps the lines that say what failed ("x has NaN or Inf :
Tensor had NaN values [[{{node CheckNumerics}}]]").

Tested in ``tests/inference/test_tensorflow_backend.py``: a SavedModel and a frozen GraphDef written by
tensorflow, served by a real server whose python is ``.venv-tf`` (``make install-test``), answer as
tensorflow does, and a bad request sent among good ones fails alone, with this one line.
"""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.realpath(__file__))
sys.path[:0] = [os.path.join(os.path.dirname(_HERE), "common")]
from batched_model import BatchedModel  # noqa: E402  (found through the path above)


#: tensorflow's framing lines around an op's own message (eager and session errors)
_FRAMING = ("Graph execution error:", "Detected at node", "<stack traces unavailable>", "Node: ")


def one_line(err: Exception) -> Exception:
    """A tensorflow op error as one line of what failed (its framing dropped); other errors as they are."""
    message = getattr(err, "message", None)
    if not isinstance(message, str) or "\n" not in message:
        return err
    lines = [line.strip() for line in message.split("Original stack trace")[0].splitlines()]
    kept = [line for line in lines if line and not line.startswith(_FRAMING)]
    return RuntimeError(f"{type(err).__name__}: {' '.join(kept) or lines[0]}")


class SavedModelRunner:
    """A SavedModel's serving signature with onnxruntime's call, ``run(output names, feed)``."""

    def __init__(self, path: str, signature: str, device: str):
        import tensorflow as tf

        self.tf, self.device = tf, device
        with tf.device(device):
            self.loaded = tf.saved_model.load(path)
        self.function = self.loaded.signatures[signature]

    def run(self, wanted, feed):
        try:
            with self.tf.device(self.device):
                result = self.function(**{name: self.tf.constant(value) for name, value in feed.items()})
        except self.tf.errors.OpError as err:
            raise one_line(err) from None
        return [result[name].numpy() for name in wanted]


class GraphDefRunner:
    """A frozen GraphDef run in a TF1-style session, with onnxruntime's call."""

    def __init__(self, path: str, device: str):
        import tensorflow as tf

        self.tf, v1 = tf, tf.compat.v1
        graph_def = v1.GraphDef()
        with open(path, "rb") as stream:
            graph_def.ParseFromString(stream.read())
        self.graph = tf.Graph()
        with self.graph.as_default(), tf.device(device):
            v1.import_graph_def(graph_def, name="")
        self.session = v1.Session(graph=self.graph)

    def _tensor(self, name: str):
        return self.graph.get_tensor_by_name(name if ":" in name else name + ":0")

    def run(self, wanted, feed):
        try:
            return self.session.run([self._tensor(name) for name in wanted],
                                    {self._tensor(name): value for name, value in feed.items()})
        except self.tf.errors.OpError as err:
            raise one_line(err) from None


class TritonPythonModel(BatchedModel):
    """One instance of a TensorFlow model."""

    engine = "tensorflow"

    def default_filename(self) -> str:
        return "model.graphdef" if self.config.get("platform") == "tensorflow_graphdef" else "model.savedmodel"

    def open(self, path: str, args: dict[str, str]):
        device = "/CPU:0"
        if args.get("model_instance_kind") == "GPU":
            device = f"/GPU:{int(args.get('model_instance_device_id') or 0)}"
        if self.config.get("platform") == "tensorflow_graphdef":
            return GraphDefRunner(path, device)
        parameter = self.config.get("parameters", {}).get("TF_SIGNATURE_DEF", {})
        return SavedModelRunner(path, parameter.get("string_value") or "serving_default", device)
