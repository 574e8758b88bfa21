"""Triton python-based backend ``onnxruntime``: serves ``platform: "onnxruntime_onnx"`` models unmodified.

The pip-installed Triton has no onnxruntime backend library. When a model's platform maps to backend
``onnxruntime`` and ``<backend-directory>/onnxruntime/model.py`` exists, Triton runs that file through
the python backend for every such model; this is that file. It reads the model's own config (what
Triton passes as ``args["model_config"]``), so a repository written for the official Triton (CMS's
ParticleNet, DeepMET) is served as it is:

* ``max_batch_size`` and ``dynamic_batching``: Triton's batcher hands ``execute`` several requests;
  those with equal non-batch shapes and the same requested outputs are concatenated and run as one
  onnxruntime call (one execution serves many requests), then split back per request; when that
  call fails, each request is run alone, so a bad request fails alone (each with its own error) —
  the body every python-based backend shares, ``common/batched_model.py``;
* ``instance_group``: Triton starts one stub process per instance, each with its own session;
  ``KIND_GPU`` instances use onnxruntime's CUDA provider when it exists;
* variable dims (``-1``): any size; requests of different sizes run in separate calls;
* ``label_filename``: classification (``class_count`` on an output) is done by Triton's core;
* ``optimization.graph.level`` and the ``intra_op_thread_count``/``inter_op_thread_count`` parameters,
  as the official backend reads them (see ``ort_session.py``); ``SONIC_ORT_THREADS`` sets the default.

Only onnxruntime and numpy are imported (this file runs in the stub's interpreter, not necessarily
sonic-hep's), with numpy 1 or 2 (``stub_tensors.py``).
"""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.realpath(__file__))
sys.path[:0] = [_HERE, os.path.join(os.path.dirname(_HERE), "common")]
from batched_model import BatchedModel  # noqa: E402  (found through the path above)
from ort_session import open_session  # noqa: E402


class TritonPythonModel(BatchedModel):
    """One model instance: an onnxruntime session and the config's tensor names and types."""

    engine = "onnxruntime"

    def default_filename(self) -> str:
        return "model.onnx"

    def open(self, path: str, args: dict[str, str]):
        providers: list = ["CPUExecutionProvider"]
        if args.get("model_instance_kind") == "GPU":
            import onnxruntime as ort

            if "CUDAExecutionProvider" in ort.get_available_providers():
                device = int(args.get("model_instance_device_id") or 0)
                providers = [("CUDAExecutionProvider", {"device_id": device}), "CPUExecutionProvider"]
        threads = int(os.environ.get("SONIC_ORT_THREADS", "1"))
        return open_session(path, self.config, providers, intra_op_threads=threads)
