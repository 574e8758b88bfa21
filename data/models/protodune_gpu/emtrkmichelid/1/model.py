"""EmTrkMichelId on a GPU: a Triton python-backend model running torch, weights from the ONNX file.

The GPU machine's onnxruntime has no CUDA provider (onnxruntime-gpu is too large to ship), so this
repository entry serves the *same* ``model.onnx`` as ``data/models/protodune`` (``1/model.onnx`` here
is a link to it, and config.pbtxt pins its MD5) by rebuilding the network in torch from the ONNX
initialisers: the int8 Dense-128 matrix is dequantised exactly as ``DequantizeLinear`` does, then
cast to the compute precision (``parameters { key: "precision" }``: float16 on GPUs, float32 on CPU).

Interface, identical to the ONNX model: ``patches`` uint8 ``[batch, 48, 48, 1]`` → ``em_trk_none``
float32 ``[batch, 3]``, ``michel`` float32 ``[batch, 1]``. Patches cross into the stub as 1 byte per
pixel and are widened on the device. Requests that Triton's dynamic batcher hands over together are
copied to the device one by one and concatenated there into one forward pass. Tensors pass through DLPack in both directions, so the stub's
numpy version does not matter (with numpy 2, ``pb_utils.Tensor(name, ndarray)`` outputs come back
empty).

Outside Triton (tests, in-process GPU timing) import this file and use :class:`EmTrkMichelIdTorch`.
Only torch, onnx and numpy are imported: the file runs in the stub's interpreter, not sonic-hep's.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import numpy_helper
from torch.utils import dlpack

try:
    import triton_python_backend_utils as pb_utils
except ImportError:  # imported outside the Triton stub
    pb_utils = None

WEIGHTS = ("conv_w", "conv_b", "dense1_w", "dense1_b", "dense2_w", "dense2_b", "em_w", "em_b", "michel_w", "michel_b")


def onnx_weights(path: str | Path) -> dict[str, np.ndarray]:
    """float32 weights of the EmTrkMichelId ONNX file (Dense matrices ``[in, out]``, int8 dequantised)."""
    arrays = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}
    if "dense1_w_int8" in arrays:
        arrays["dense1_w"] = arrays["dense1_w_int8"].astype(np.float32) * arrays["dense1_w_scale"][None, :]
    return {name: arrays[name].astype(np.float32) for name in WEIGHTS}


class EmTrkMichelIdTorch(torch.nn.Module):
    """The inference network (no dropout) with fixed weights, in ``dtype`` on ``device``."""

    def __init__(self, weights: dict[str, np.ndarray], device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.float32):
        super().__init__()
        self.dtype = dtype

        def tensor(name: str, transpose: bool = False) -> torch.Tensor:
            value = weights[name].T if transpose else weights[name]
            return torch.from_numpy(np.ascontiguousarray(value)).to(device=device, dtype=dtype)

        self.conv_w, self.conv_b = tensor("conv_w"), tensor("conv_b")
        # F.linear takes [out, in]
        self.dense = [(tensor(f"{n}_w", True), tensor(f"{n}_b")) for n in ("dense1", "dense2", "em", "michel")]

    @classmethod
    def from_onnx(cls, path: str | Path, device: torch.device | str = "cpu",
                  dtype: torch.dtype = torch.float32) -> EmTrkMichelIdTorch:
        return cls(onnx_weights(path), device, dtype)

    @torch.inference_mode()
    def forward(self, codes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """uint8 ``[N, 48, 48, 1]`` (on the model's device) → (``em_trk_none`` [N, 3], ``michel`` [N, 1]), float32."""
        x = codes.permute(0, 3, 1, 2).to(self.dtype) * (1.0 / 255.0)
        x = F.relu(F.conv2d(x, self.conv_w, self.conv_b)).flatten(1)
        (w1, b1), (w2, b2), (we, be), (wm, bm) = self.dense
        x = F.relu(F.linear(x, w1, b1))
        x = F.relu(F.linear(x, w2, b2))
        return torch.softmax(F.linear(x, we, be).float(), dim=-1), torch.sigmoid(F.linear(x, wm, bm).float())


class TritonPythonModel:
    """One model instance: the network on the instance's device."""

    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        self.name = config["name"]
        precision = config.get("parameters", {}).get("precision", {}).get("string_value", "float16")
        if args.get("model_instance_kind") == "GPU":
            self.device = torch.device(f"cuda:{int(args.get('model_instance_device_id') or 0)}")
            dtype = torch.float16 if precision == "float16" else torch.float32
            # no cudnn.benchmark: it autotunes every new batch size (each event's last request, each
            # dynamically batched total), which costs far more than it gains here
        else:  # the CPU fallback server: half precision convolutions are slow or missing on CPUs
            self.device, dtype = torch.device("cpu"), torch.float32
        path = Path(args["model_repository"]) / args["model_version"] / "model.onnx"
        self.net = EmTrkMichelIdTorch.from_onnx(path, self.device, dtype)
        self.net(torch.zeros((8, 48, 48, 1), dtype=torch.uint8, device=self.device))  # load kernels now

    def execute(self, requests: list) -> list:
        """One forward pass for all requests handed over together; one response per request, in order."""
        try:
            # each request's patches go to the device on their own and are concatenated there: a
            # torch.cat of the stub's shared-memory tensors on the host took ~30 ms per execution
            # on an H100 machine (6× the forward pass), a copy per request 0.5 ms
            codes = [dlpack.from_dlpack(pb_utils.get_input_tensor_by_name(r, "patches").to_dlpack())
                     .to(self.device, non_blocking=True) for r in requests]
            sizes = [len(c) for c in codes]
            em, michel = self.net(torch.cat(codes) if len(codes) > 1 else codes[0])
            em, michel = em.cpu(), michel.cpu()
        except Exception as err:  # noqa: BLE001 - reported per request, the server keeps running
            if len(requests) > 1:  # one bad request must not fail those handed over with it: one by one
                return [self.execute([request])[0] for request in requests]
            # a TritonError of its own per response: an error object shared by several responses
            # crashes the pip Triton 2.51 under concurrency and garbles the messages (issue 11)
            return [pb_utils.InferenceResponse(error=pb_utils.TritonError(f"model {self.name!r}: "
                                                                          f"{type(err).__name__}: {err}"))]
        responses = []
        for em_part, michel_part in zip(torch.split(em, sizes), torch.split(michel, sizes)):
            tensors = [pb_utils.Tensor.from_dlpack("em_trk_none", dlpack.to_dlpack(em_part.contiguous())),
                       pb_utils.Tensor.from_dlpack("michel", dlpack.to_dlpack(michel_part.contiguous()))]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return responses

    def finalize(self) -> None:
        self.net = None
