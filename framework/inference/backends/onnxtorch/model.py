"""Triton python-based backend ``onnxtorch``: an ONNX model run by torch (``onnx_graph.py``), on the GPU for KIND_GPU.

Batching, one error per failed request and per-request reruns come from ``common/batched_model.py``
(requests run together are concatenated on the device: ``OnnxTorchRunner.run_parts``);
tensors cross the stub through ``stub_tensors`` (DLPack under numpy 2). The config's parameters say
``precision`` ("float32", the default, or "float16"); ``SONIC_ORT_THREADS`` sets torch's intra-op
threads of a CPU instance. A ``KIND_GPU`` instance in a python without CUDA runs on the CPU, as the
``pytorch`` backend's do.
"""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.realpath(__file__))
sys.path[:0] = [_HERE, os.path.join(os.path.dirname(_HERE), "common")]
from batched_model import BatchedModel  # noqa: E402  (found through the path above)
from onnx_graph import open_onnx_torch  # noqa: E402


class TritonPythonModel(BatchedModel):
    """One instance of an ONNX model run by torch."""

    engine = "torch (onnx graph)"

    def default_filename(self) -> str:
        return "model.onnx"

    def open(self, path: str, args: dict[str, str]):
        device = self.torch_device(args)
        precision = self.config.get("parameters", {}).get("precision", {}).get("string_value", "float32")
        threads = int(os.environ.get("SONIC_ORT_THREADS", "1")) if device == "cpu" else None
        return open_onnx_torch(path, device, precision, threads)

    def _run(self, wanted: list[str], members: list[dict]) -> list[list]:
        """Requests handed over together: concatenated on the device, not on the host (``run_parts``)."""
        if len(members) == 1:
            return super()._run(wanted, members)
        return self.runner.run_parts(wanted, members)
