"""TorchScript models run from a Triton model config: one definition for direct and served models.

Direct inference (``framework/inference/direct.py``) and the python-based pytorch backend (``model.py``
beside this file) both open ``model.pt`` files through :func:`open_torchscript`, whose runner has the
call onnxruntime sessions have (``run(output names, {input name: array}) -> [arrays]``), so callers
do not care which engine runs a model.

Names are matched to positions as Triton's libtorch backend does, since a TorchScript ``forward`` takes
positional tensors and returns a tensor or a tuple:

* inputs: ``<name>__<i>`` is argument ``i`` of ``forward`` (CMS's ``pf_points__0`` ... ``sv_mask__5``);
  otherwise names equal to ``forward``'s argument names take those places; otherwise the config's order;
* outputs: ``<name>__<i>`` is element ``i`` of the returned tuple (``softmax__0``); otherwise the
  config's order.

The file is loaded onto the instance's device (``map_location``): CMS's files were saved from CUDA and
do not load on a CPU-only torch without it. On CUDA, TF32 is turned off so scores are fp32 scores, as on
the CPU and in the ONNX twin.

Like ``ort_session.py`` this file imports nothing from sonic-hep: it also runs inside the Triton python
stub, whose interpreter may not have sonic-hep installed.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

_INDEXED = re.compile(r"^(?P<base>.+)__(?P<index>\d+)$")


def positions(names: Sequence[str], arguments: Sequence[str] = ()) -> dict[str, int]:
    """``{config name: position}`` by Triton's libtorch rules (see the module docstring)."""
    matches = [_INDEXED.match(name) for name in names]
    if names and all(matches):
        places = {name: int(match["index"]) for name, match in zip(names, matches)}
        if sorted(places.values()) != list(range(len(names))):
            raise ValueError(f"tensor names {list(names)}: the __<index> suffixes must be 0..{len(names) - 1}, once each")
        return places
    if names and set(names) <= set(arguments) and len(names) == len(arguments):
        return {name: list(arguments).index(name) for name in names}
    return {name: i for i, name in enumerate(names)}


def condense(err: BaseException) -> str:
    """One line from a TorchScript error (they carry the scripted code's traceback): its last line."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[-1] if lines else type(err).__name__


class TorchScriptRunner:
    """A TorchScript module with the call of an onnxruntime session.

    Args:
        module: the loaded ``torch.jit.ScriptModule`` (in eval mode).
        config: the Triton config in its JSON form (snake_case keys, as Triton hands it to backends).
        device: where inputs go (the module's device).
    """

    def __init__(self, module: Any, config: Mapping[str, Any], device: str = "cpu"):
        self.module = module
        self.device = torch.device(device)
        try:
            arguments = [a.name for a in module.forward.schema.arguments][1:]  # without self
        except (AttributeError, RuntimeError):
            arguments = []
        inputs = [spec["name"] for spec in config.get("input", [])]
        self.inputs = sorted(inputs, key=positions(inputs, arguments).__getitem__)
        if arguments and len(arguments) != len(inputs):
            raise ValueError(f"forward takes {len(arguments)} tensors ({', '.join(arguments)}); the config declares "
                             f"{len(inputs)} inputs ({', '.join(inputs)})")
        self.outputs = positions([spec["name"] for spec in config.get("output", [])])

    def run(self, output_names: Sequence[str] | None, feed: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """Outputs ``output_names`` (default: all, in config order) for the inputs ``feed``."""
        tensors = [torch.from_numpy(_writable(feed[name])).to(self.device) for name in self.inputs]
        try:
            with torch.inference_mode():
                result = self.module(*tensors)
        except Exception as err:  # noqa: BLE001 - torch.jit.Error is not a RuntimeError everywhere
            raise RuntimeError(condense(err)) from None
        values = list(result) if isinstance(result, (tuple, list)) else [result]
        names = list(output_names or self.outputs)
        out = []
        for name in names:
            index = self.outputs[name]
            if index >= len(values):
                raise RuntimeError(f"output {name!r} is element {index} of what forward returns, which has "
                                   f"{len(values)} element(s)")
            out.append(values[index].detach().cpu().numpy())
        return out


def _writable(array: np.ndarray) -> np.ndarray:
    """torch tensors share numpy memory and may be written: a read-only input (a stub's buffer) is copied."""
    array = np.ascontiguousarray(array)
    return array if array.flags.writeable else array.copy()


def open_torchscript(path: str, config: Mapping[str, Any], device: str = "cpu", threads: int | None = None) -> TorchScriptRunner:
    """A runner for the TorchScript file ``path`` on ``device`` ("cpu", "cuda", "cuda:1").

    Args:
        threads: torch intra-op threads (process-wide in torch: set by whoever owns the process).
    """
    if threads:
        torch.set_num_threads(int(threads))
    if str(device).startswith("cuda"):
        # full fp32 on the GPU: cuDNN's default TF32 convolutions moved ParticleNet AK4's scores by 5e-3 from the
        # CPU / ONNX twin's on an H100; with TF32 off they agree within 1e-4 (process-wide torch settings)
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    with warnings.catch_warnings():  # torch 2.9+ calls TorchScript deprecated; it is what CMS and Triton ship
        warnings.filterwarnings("ignore", "`torch.jit.load` is deprecated", DeprecationWarning)
        module = torch.jit.load(path, map_location=device)
    module.eval()
    return TorchScriptRunner(module, config, device)
