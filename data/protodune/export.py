"""Writes EmTrkMichelId's two Triton repository entries from one ONNX file.

* ``data/models/protodune/emtrkmichelid``: ``platform: "onnxruntime_onnx"``, the standard entry that
  direct inference (onnxruntime in-process) and CPU Triton servers run;
* ``data/models/protodune_gpu/emtrkmichelid``: ``backend: "python"`` with ``KIND_GPU`` instances,
  whose ``1/model.py`` (committed, hand-written) rebuilds the network in torch from ``1/model.onnx``,
  a relative symlink to the file above. Its config pins the MD5 of both files, so a server refuses
  to serve weights other than the ONNX ones.

Both entries have the same name, inputs and outputs, so a configuration switches between them by
``services.inference.repository`` alone. Dynamic batching is on in both. The ONNX entry's
``max_batch_size`` is 1693, the larger of the ProtoDUNE SONIC paper's batch sizes (235 and 1693). The
GPU entry's is 16384, so that the batcher merges ~9 of a producer's 1693-patch requests into one
execution, run as one forward pass (``chunk`` 16384, ~3 GB of device memory per instance), and it
runs 16 instances: on an H100 with 16 host cores, 8, 12 and 16 instances gave 63, 67.5 and 68.7
events/s (``sonic bench gpu``), the host copies of some instances overlapping the others' forward
passes. On a GPU with less memory than an H100, lower ``count`` or ``chunk`` in its config.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from ...framework.inference import TensorSpec, add_tensors, write_model
from ...framework.paths import MODELS
from .model import CLASSES, INPUT, OUTPUTS, PATCH

NAME = "emtrkmichelid"
MAX_BATCH = 1693
GPU_MAX_BATCH = 16384
GPU_INSTANCES = 16
GPU_CHUNK = 16384
INPUTS = [TensorSpec(INPUT, "UINT8", (PATCH, PATCH, 1))]
OUTPUT_SPECS = [TensorSpec(OUTPUTS[0], "FP32", (len(CLASSES),), f"{OUTPUTS[0]}_labels.txt"),
                TensorSpec(OUTPUTS[1], "FP32", (1,))]


def write_cpu_entry(onnx_model: bytes, repository: Path = MODELS / "protodune") -> Path:
    """The standard ONNX entry (see the module docstring)."""
    return write_model(repository, NAME, onnx_model, INPUTS, OUTPUT_SPECS, max_batch_size=MAX_BATCH,
                       instance_count=1, labels={OUTPUTS[0]: list(CLASSES)})


def write_gpu_entry(cpu_entry: Path = MODELS / "protodune" / NAME, repository: Path = MODELS / "protodune_gpu",
                    instances: int = GPU_INSTANCES, precision: str = "float16") -> Path:
    """The torch-on-GPU entry next to the hand-written ``1/model.py`` (see the module docstring)."""
    model_dir = Path(repository) / NAME
    version = model_dir / "1"
    if not (version / "model.py").exists():
        raise FileNotFoundError(f"{version / 'model.py'} is missing: it is part of the repository, not generated")
    link = version / "model.onnx"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(os.path.relpath(Path(cpu_entry) / "1" / "model.onnx", version))
    labels = model_dir / f"{OUTPUTS[0]}_labels.txt"
    labels.write_text("\n".join(CLASSES) + "\n")
    config = mc.ModelConfig(name=NAME, backend="python", max_batch_size=GPU_MAX_BATCH)
    add_tensors(config, INPUTS, OUTPUT_SPECS)
    config.dynamic_batching.SetInParent()
    config.instance_group.add(count=instances, kind=mc.ModelInstanceGroup.KIND_GPU)
    config.parameters["precision"].string_value = precision
    config.parameters["chunk"].string_value = str(GPU_CHUNK)
    config.parameters["sync"].string_value = "blocking"
    agent = config.model_repository_agents.agents.add(name="checksum")
    for rel in ("1/model.onnx", "1/model.py"):
        agent.parameters[f"MD5:{rel}"] = hashlib.md5((model_dir / rel).read_bytes()).hexdigest()
    (model_dir / "config.pbtxt").write_text(text_format.MessageToString(config))
    return model_dir


def export(onnx_model: bytes) -> tuple[Path, Path]:
    """Writes both entries; returns their directories."""
    cpu = write_cpu_entry(onnx_model)
    return cpu, write_gpu_entry(cpu)


def pin_gpu_onnx(repository: Path = MODELS / "protodune_gpu") -> Path:
    """Re-pins the MD5 of the GPU entry's ``1/model.onnx`` (the link to the ONNX entry's file) after
    new weights, leaving the rest of its config as it is: its ``model.py`` and instance settings are
    that entry's own, and :func:`write_gpu_entry` would rewrite them."""
    model_dir = Path(repository) / NAME
    config = text_format.Parse((model_dir / "config.pbtxt").read_text(), mc.ModelConfig())
    agents = [a for a in config.model_repository_agents.agents if a.name == "checksum"]
    if not agents or "MD5:1/model.onnx" not in agents[0].parameters:
        raise ValueError(f"{model_dir / 'config.pbtxt'}: no checksum agent pinning 1/model.onnx")
    agents[0].parameters["MD5:1/model.onnx"] = hashlib.md5((model_dir / "1" / "model.onnx").read_bytes()).hexdigest()
    (model_dir / "config.pbtxt").write_text(text_format.MessageToString(config))
    return model_dir


def install(onnx_model: bytes) -> tuple[Path, Path]:
    """New weights for both entries: the ONNX entry rewritten, the GPU entry's ONNX pin updated."""
    cpu = write_cpu_entry(onnx_model)
    return cpu, pin_gpu_onnx()


if __name__ == "__main__":  # refresh the GPU entry's config (e.g. after editing its model.py)
    print(write_gpu_entry())
