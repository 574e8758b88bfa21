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
cores and multiply the memory. ``device="gpu"`` keeps the kinds; on a server whose number of cards is known
(``gpus``), every ``KIND_GPU`` group lists those cards, so its ``count`` is what each card runs, never a count
Triton multiplies by cards the server was not meant to have (``gpu_placement.py``); a group that names cards
the server does not have is placed on the cards it has, with a notice.

An instance count no machine can run is refused with one line naming the model (:func:`check_instances`):
more than :data:`MAX_CPU_INSTANCES_PER_CORE` CPU instances per core the server may use, or more than
:data:`MAX_GPU_INSTANCES_PER_GPU` per GPU. Counts below those bounds are served as written.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from ...errors import InferenceError
from ..model_digest import file_digests
from ..repository import CHECKSUM_PARAMETER, ModelInfo, ModelRepository

log = logging.getLogger(__name__)

#: CPU instances of one model per core the server may use, at most. Each python-based instance is a process
#: of its own and each instance holds the model: past a few per core they only compete for the cores and
#: multiply the memory, and thousands take the machine down before Triton says anything (it aborted after
#: starting ~800 of 10,000).
MAX_CPU_INSTANCES_PER_CORE = 8
#: GPU instances of one model per GPU, at most (each holds the model in GPU memory; the ProtoDUNE GPU entry's
#: 16 keep one GPU fed)
MAX_GPU_INSTANCES_PER_GPU = 64


def check_instances(info: ModelInfo, config: mc.ModelConfig, cores: int) -> None:
    """Refuses instance counts the machine cannot run, naming the model, the count and the bound.

    Raises:
        InferenceError: a CPU group above ``MAX_CPU_INSTANCES_PER_CORE × cores``, a GPU group above
            ``MAX_GPU_INSTANCES_PER_GPU`` (a GPU group's count is per GPU), or a negative count.
    """
    group_kind = mc.ModelInstanceGroup
    cpu_bound = MAX_CPU_INSTANCES_PER_CORE * cores
    for group in config.instance_group:
        if group.kind == group_kind.KIND_MODEL:  # the backend decides where and how many
            continue
        where = f"model {info.name!r}: instance_group count {group.count} ({group_kind.Kind.Name(group.kind)})"
        fix = f"lower it in {info.path / 'config.pbtxt'}" if info.path is not None else "lower it in its config"
        if group.count < 0:
            raise InferenceError(f"{where} must be at least 1; {fix}")
        if group.kind == group_kind.KIND_CPU:
            plural = "s" * (cores != 1)
            bound, why = cpu_bound, f"{MAX_CPU_INSTANCES_PER_CORE} per core × {cores} core{plural} it may use"
        elif group.kind == group_kind.KIND_GPU:
            bound, why = MAX_GPU_INSTANCES_PER_GPU, "per GPU"
        else:  # KIND_AUTO on a GPU server: a GPU if there is one, else the cores
            bound, why = max(cpu_bound, MAX_GPU_INSTANCES_PER_GPU), "on a GPU or on the cores it may use"
        if group.count > bound:
            raise InferenceError(f"{where} is more than this server can run: at most {bound} ({why}); {fix}")


def runtime_config(info: ModelInfo, device: str = "cpu", cores: int | None = None,
                   gpus: int | None = None) -> mc.ModelConfig:
    """The config a server loads for ``info``: no repository agents; instance kinds for ``device``
    (``cores``: the cores a GPU group's count is capped at on the CPU; default: this process's; ``gpus``: the
    number of cards a GPU server has, None when unknown: then Triton places the groups as written)."""
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
    elif gpus:
        place_on_cards(info, config, gpus)
    check_instances(info, config, cores or len(os.sched_getaffinity(0)))
    return config


def place_on_cards(info: ModelInfo, config: mc.ModelConfig, gpus: int) -> None:
    """Every ``KIND_GPU`` group of ``config`` on the server's ``gpus`` cards (positions 0..gpus-1), listed.

    A group without a list runs ``count`` on each card (Triton's meaning, now written down); one listing
    cards past the server's keeps those it has, or takes all of the server's when none is left (a config
    written for a larger node served on a smaller share of it)."""
    for group in config.instance_group:
        if group.kind != mc.ModelInstanceGroup.KIND_GPU:
            continue
        listed = list(group.gpus)
        kept = [g for g in listed if g < gpus] or list(range(gpus))
        if listed and kept != listed:
            log.warning("model %r: instance group on GPUs %s, but this server has %d card(s): placed on %s",
                        info.name, listed, gpus, kept)
        del group.gpus[:]
        group.gpus.extend(kept)


def prepare(repository: ModelRepository, dest: str | os.PathLike, models: list[str] | None = None,
            device: str = "cpu", cores: int | None = None, gpus: int | None = None) -> list[ModelInfo]:
    """Writes the runtime repository for ``models`` (default: every model) into ``dest``.

    Args:
        repository: the project's repositories (the first one holding a model wins, as in direct mode).
        dest: an empty folder; it becomes the server's ``--model-repository``.
        models: names to serve.
        device: "cpu" or "gpu" (see the module docstring).
        cores: the cores the server runs on, which cap a GPU group's count on the CPU (default: this
            process's).
        gpus: the number of cards a GPU server has (its groups are placed on them), None when unknown.

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
        write_entry(info, dest / name, runtime_config(info, device, cores, gpus))
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
