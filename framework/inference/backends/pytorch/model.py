"""Triton python-based backend ``pytorch``: serves ``platform: "pytorch_libtorch"`` (TorchScript) models.

The pip-installed Triton has no libtorch backend library, so a repository holding CMS's TorchScript
twins (``particlenet_AK4_PT``, ``model.pt``) would not load. When a model's platform maps to backend
``pytorch`` and ``<backend-directory>/pytorch/model.py`` exists, Triton runs this file through the
python backend for each such model, with the model's own config: batching, one error per failed
request and per-request reruns come from ``common/batched_model.py``; names map to ``forward``'s
positions as Triton's libtorch backend maps them (``torchscript.py``).

``KIND_GPU`` instances run on their CUDA device when this torch has CUDA, otherwise (and for
``KIND_CPU``) on the CPU. ``SONIC_ORT_THREADS`` (the server's threads per model instance) sets torch's
intra-op threads. The server reports a model of this platform as not served, with the reason, when
torch cannot be imported in its python (``framework/inference/serving/servable.py``).
"""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.realpath(__file__))
sys.path[:0] = [_HERE, os.path.join(os.path.dirname(_HERE), "common")]
from batched_model import BatchedModel  # noqa: E402  (found through the path above)
from torchscript import open_torchscript  # noqa: E402


class TritonPythonModel(BatchedModel):
    """One instance of a TorchScript model."""

    engine = "torch"

    def default_filename(self) -> str:
        return "model.pt"

    def open(self, path: str, args: dict[str, str]):
        device = self.torch_device(args)
        threads = int(os.environ.get("SONIC_ORT_THREADS", "1"))
        return open_torchscript(path, self.config, device, threads)
