"""Direct GPU inference for the ProtoDUNE benchmark: the GPU repository's torch model, in-process.

The baseline SONIC is compared with on the GPU machine, whose onnxruntime has no CUDA provider.
It runs *the same file* the Triton server runs (``data/models/protodune_gpu/emtrkmichelid/1/model.py``,
imported by path) on the same weights, behind the :class:`InferenceClient` interface, so the
benchmark drives direct CPU, direct GPU and SONIC through one code path. One worker thread owns the
device (requests queue in order, as on one CUDA stream).
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from ...framework.inference import Counters, InferenceClient, check_inputs
from ...framework.inference import ModelInfo, ModelRepository


def load_model_file(path: str | Path) -> ModuleType:
    """Imports a python-backend ``model.py`` by path (it imports torch, not sonic-hep)."""
    spec = importlib.util.spec_from_file_location(f"_sonic_model_{abs(hash(str(path)))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class TorchDirectClient(InferenceClient):
    """Runs a repository's torch python model in this process.

    Args:
        repository (ModelRepository): holding the model (a ``backend: "python"`` entry with
            ``1/model.py`` defining ``EmTrkMichelIdTorch`` and ``1/model.onnx``).
        model (str): the model name.
        device (str): torch device, e.g. "cuda:0" or "cpu".
        precision (str): "float16" or "float32".
    """

    mode = "direct-torch"

    def __init__(self, repository: ModelRepository, model: str = "emtrkmichelid", device: str = "cuda:0",
                 precision: str = "float16"):
        import torch

        self.torch = torch
        self.info = repository.get(model)
        version = self.info.path / str(self.info.version)
        module = load_model_file(version / "model.py")
        self.device = torch.device(device)
        # the network the entry's parameters describe, as its server instances run it
        self.net = module.network_from_config(version / "model.onnx", self.device, self.info.config_dict,
                                              precision=precision)
        self.net(torch.zeros((8, 48, 48, 1), dtype=torch.uint8, device=self.device))
        self.counters = Counters()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="torch-direct")

    def model_info(self, model: str) -> ModelInfo:
        return self.info

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        torch = self.torch
        start = time.perf_counter()
        codes = torch.from_numpy(np.ascontiguousarray(inputs["patches"])).to(self.device, non_blocking=True)
        em, michel = self.net(codes)
        out = {"em_trk_none": em.cpu().numpy(), "michel": michel.cpu().numpy()}
        self.counters.add(self.info.name, calls=1, requests=1, rows=len(codes), seconds=time.perf_counter() - start)
        return out

    def infer(self, model: str, inputs: Mapping[str, np.ndarray], outputs: list[str] | None = None) -> Future:
        check_inputs(self.info, inputs, outputs)
        return self._pool.submit(self.run, inputs)

    def statistics(self) -> dict[str, Any]:
        return {"mode": self.mode, "device": str(self.device), "models": self.counters.as_dict()}

    def close(self) -> None:
        self._pool.shutdown(wait=True)
