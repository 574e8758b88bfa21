"""The repository a server actually loads: a runtime copy of the project's, checked and adapted.

The pip-installed Triton has no repository agents, so a config carrying
``model_repository_agents { checksum ... }`` (as every CMS config does) would not load. The project
verifies those MD5 checksums itself (:meth:`ModelInfo.verify_checksums`) and serves a runtime copy::

    <runtime>/<model>/config.pbtxt      the original without model_repository_agents; the MD5 sums of
                                        the served files (declared or computed, ``model_digest``) in
                                        parameters ``sonic_checksum:MD5:<file>``, where clients compare
                                        them with their own repository before using the server
    <runtime>/<model>/<anything else>   symlinks to the original files (versions, labels, model.py)

A model whose checksum is wrong is never served. The original repository is never written.

``device="cpu"`` (the fallback server, like CMSSW's) turns ``KIND_GPU`` instance groups into
``KIND_CPU``, with at most one instance per core this process may use: a GPU group's count is chosen
to keep a GPU fed (the ProtoDUNE GPU entry runs 16), and as many CPU instances only compete for the
cores and multiply the memory. ``device="gpu"`` leaves the config as it is (unset kinds then pick the GPU).
"""

from __future__ import annotations

import os
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from .model_digest import file_digests
from .repository import CHECKSUM_PARAMETER, ModelInfo, ModelRepository


def runtime_config(info: ModelInfo, device: str = "cpu", cores: int | None = None) -> mc.ModelConfig:
    """The config a server loads for ``info``: no repository agents; instance kinds for ``device``
    (``cores``: the cores a GPU group's count is capped at on the CPU; default: this process's)."""
    config = mc.ModelConfig()
    config.CopyFrom(info.config)
    for rel, value in file_digests(info).items():  # where clients can compare them (see model_digest.py)
        config.parameters[CHECKSUM_PARAMETER + "MD5:" + rel].string_value = value
    config.ClearField("model_repository_agents")
    if device == "cpu":
        cores = cores or len(os.sched_getaffinity(0))
        for group in config.instance_group:
            if group.kind in (mc.ModelInstanceGroup.KIND_GPU, mc.ModelInstanceGroup.KIND_AUTO):
                group.kind = mc.ModelInstanceGroup.KIND_CPU
                group.ClearField("gpus")
                if group.count > cores:
                    group.count = cores
    return config


def prepare(repository: ModelRepository, dest: str | os.PathLike, models: list[str] | None = None,
            device: str = "cpu", cores: int | None = None) -> list[ModelInfo]:
    """Writes the runtime repository for ``models`` (default: every model) into ``dest``.

    Args:
        repository: the project's repositories (the first one holding a model wins, as in direct mode).
        dest: an empty folder; it becomes the server's ``--model-repository``.
        models: names to serve.
        device: "cpu" or "gpu" (see the module docstring).
        cores: the cores the server runs on, which cap a GPU group's count on the CPU (default: this
            process's).

    Returns:
        The served models, checksums verified.

    Raises:
        InferenceError: an unknown model, or a checksum that does not match (naming file and model).
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    served = []
    for name in models if models is not None else repository.names():
        info = repository.get(name)
        info.verify_checksums()
        write_entry(info, dest / name, runtime_config(info, device, cores))
        served.append(info)
    return served


def write_entry(info: ModelInfo, target: str | os.PathLike, config: mc.ModelConfig) -> Path:
    """A repository entry in ``target`` that serves ``info``'s own files (linked, never copied or
    written) under ``config``: a runtime copy, or a variant that differs from the model in its config
    alone (instances, batching, parameters). Returns the entry's folder."""
    target = Path(target)
    target.mkdir(parents=True, exist_ok=True)
    for entry in info.path.iterdir():
        if entry.name == "config.pbtxt":
            continue
        link = target / entry.name
        if link.is_symlink():
            link.unlink()
        link.symlink_to(entry.resolve())
    (target / "config.pbtxt").write_text(text_format.MessageToString(config))
    return target
