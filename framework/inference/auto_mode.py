"""``mode: auto`` — run models in-process on a GPU this job can see, else as a service (SONIC).

The ProtoDUNE SONIC study's advice: a job that lands on a node with a GPU should use it directly (no network,
no server), and a job on a CPU-only node should send its inference to GPU servers. Direct mode runs models
with onnxruntime, so "a GPU the job can use" means both:

* a GPU is visible to the job — ``torch.cuda.is_available()`` when torch is installed, else an NVIDIA device
  node (``/dev/nvidia0``) with ``CUDA_VISIBLE_DEVICES`` not hiding every device (a batch system's GPU
  binding sets it), and
* onnxruntime can run on it — its ``CUDAExecutionProvider`` is available (``onnxruntime-gpu``).

With only the first, running direct would silently run on the CPU; such a job goes through SONIC and its
report says why. The chosen mode and the reason appear in the job's timing report.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Choice:
    """The mode ``auto`` resolved to, and the reason shown in the timing report."""

    mode: str  # "direct" (on the GPU) or "sonic"
    reason: str


def visible_gpu() -> str:
    """How a GPU is visible to this job ("" when none is)."""
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES", None)
    if hidden is not None and hidden.strip() in ("", "-1", "none", "NoDevFiles"):
        return ""
    if importlib.util.find_spec("torch") is not None:
        import torch

        return f"torch.cuda sees {torch.cuda.device_count()} GPU(s)" if torch.cuda.is_available() else ""
    return "/dev/nvidia0 exists" if os.path.exists("/dev/nvidia0") else ""


def onnxruntime_cuda() -> bool:
    """Whether this onnxruntime has the CUDA execution provider."""
    import onnxruntime as ort

    return "CUDAExecutionProvider" in ort.get_available_providers()


def choose(gpu: Callable[[], str] | None = None, ort_cuda: Callable[[], bool] | None = None) -> Choice:
    """Direct on the GPU when the job sees one and onnxruntime can use it; SONIC otherwise.

    Args:
        gpu, ort_cuda: the two probes (default :func:`visible_gpu`, :func:`onnxruntime_cuda`).
    """
    seen = (gpu or visible_gpu)()
    if not seen:
        return Choice("sonic", "auto: no GPU visible to this job, so SONIC")
    if not (ort_cuda or onnxruntime_cuda)():
        return Choice("sonic", f"auto: a GPU is visible ({seen}) but onnxruntime has no CUDA provider "
                               f"(install onnxruntime-gpu to run direct), so SONIC")
    return Choice("direct", f"auto: {seen} and onnxruntime has CUDA, so direct on the GPU")
