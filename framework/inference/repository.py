"""Triton model repositories: one directory serves both direct and SONIC inference.

A model is identified by its repository entry, as Triton lays it out::

    <repository>/<model name>/config.pbtxt
    <repository>/<model name>/<version>/model.onnx
    <repository>/<model name>/<labels file>           (optional, named by an output's label_filename)

``config.pbtxt`` is parsed with Triton's own protobuf schema (``tritonclient``'s ``model_config_pb2``),
so a repository written for the official Triton (e.g. CMS's, with ``platform: "onnxruntime_onnx"``)
is read exactly as the server reads it. Direct inference opens the same ONNX file, which is what
makes direct and SONIC results comparable.

CMS configs carry ``model_repository_agents { checksum { "MD5:1/model.onnx": ... } }``; the checksum
is verified here before a model is used, in either mode.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2 as mc

from ..errors import InferenceError, did_you_mean

#: Triton data types (config enum names without TYPE_) → numpy dtypes
TRITON_TO_NUMPY: dict[str, np.dtype] = {
    "BOOL": np.dtype(bool), "UINT8": np.dtype(np.uint8), "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32), "UINT64": np.dtype(np.uint64), "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16), "INT32": np.dtype(np.int32), "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16), "FP32": np.dtype(np.float32), "FP64": np.dtype(np.float64),
    "STRING": np.dtype(object),
}


@dataclass(frozen=True)
class TensorSpec:
    """One input or output of a model, as its config declares it (dims exclude the batch dimension)."""

    name: str
    datatype: str  # Triton name: FP32, INT64, ...
    dims: tuple[int, ...]
    labels: str | None = None

    @property
    def dtype(self) -> np.dtype:
        return TRITON_TO_NUMPY[self.datatype]


@dataclass
class ModelInfo:
    """A model's repository entry: what both inference modes need to know about it.

    Attributes:
        name: the model name (its directory name, which Triton requires to equal ``config.name``).
        path: the model's directory (None for a model known only from a server's config).
        config: the parsed ``config.pbtxt`` (``tritonclient.grpc.model_config_pb2.ModelConfig``).
        version: the version served (the highest version directory unless a policy says otherwise).
        local: for a model known from a server's config, the same model's entry in the job's local
            repository (the server was checked to serve the same files, by checksum, before use); it
            supplies what Triton does not send, the label files.
    """

    name: str
    path: Path | None
    config: mc.ModelConfig
    version: int
    inputs: list[TensorSpec] = field(default_factory=list)
    outputs: list[TensorSpec] = field(default_factory=list)
    local: ModelInfo | None = None

    @property
    def max_batch_size(self) -> int:
        """0 means the model has no batch dimension (inputs are sent with their full shape)."""
        return int(self.config.max_batch_size)

    @cached_property
    def config_dict(self) -> dict:
        """The config in Triton's JSON form (snake_case keys), as the server hands it to backends."""
        return json_format.MessageToDict(self.config, preserving_proto_field_name=True)

    @property
    def platform(self) -> str:
        return self.config.platform or self.config.backend

    @property
    def backend(self) -> str:
        """The Triton backend that runs the model (see :func:`backend_of`)."""
        return backend_of(self.config)

    def model_file(self) -> Path:
        """The file direct inference loads (``<version>/<default_model_filename>``, else the platform's
        default name: ``model.onnx``, ``model.pt``, ...)."""
        filename = self.config.default_model_filename or DEFAULT_MODEL_FILES.get(self.platform, "model.onnx")
        return self.path / str(self.version) / filename

    def checksums(self) -> dict[str, str]:
        """``{relative path: md5}`` from the checksum repository agent, as CMS configs declare them."""
        return config_checksums(self.config, self.name)

    def verify_checksums(self) -> None:
        """Raises :class:`InferenceError` naming the file if any declared MD5 does not match."""
        for rel, expected in self.checksums().items():
            target = self.path / rel
            if not target.exists():
                raise InferenceError(f"model {self.name!r}: checksum names {rel}, which does not exist in {self.path}")
            actual = md5(target)
            if actual != expected:
                raise InferenceError(f"model {self.name!r}: MD5 of {target} is {actual}, config.pbtxt expects "
                                     f"{expected}: the file is not the model the config describes")

    @property
    def labels(self) -> dict[str, list[str]]:
        """Class labels per output, from the outputs' ``label_filename`` files (for a model known from a
        server, those of its local repository entry: Triton sends the file names, not the files)."""
        if self.path is None:
            return self.local.labels if self.local is not None else {}
        return self._file_labels

    @cached_property
    def _file_labels(self) -> dict[str, list[str]]:
        out = {}
        for spec in self.outputs:
            if spec.labels:
                out[spec.name] = (self.path / spec.labels).read_text().split()
        return out

    @property
    def parameters(self) -> dict[str, str]:
        """The config's ``parameters`` as ``{name: string value}`` (a model's settings, e.g. a working
        point), the same from a repository entry and from a server; checksum entries left out."""
        return {name: value.string_value for name, value in self.config.parameters.items()
                if not name.startswith(CHECKSUM_PARAMETER)}


#: Triton's platform → backend names (a config names one or the other; ``ensemble`` is the core's own)
PLATFORM_BACKENDS: dict[str, str] = {
    "onnxruntime_onnx": "onnxruntime", "pytorch_libtorch": "pytorch", "tensorflow_savedmodel": "tensorflow",
    "tensorflow_graphdef": "tensorflow", "tensorrt_plan": "tensorrt", "ensemble": "ensemble",
}
#: the model file in a version folder when the config has no ``default_model_filename``, as Triton names it
DEFAULT_MODEL_FILES: dict[str, str] = {
    "onnxruntime_onnx": "model.onnx", "onnxruntime": "model.onnx", "pytorch_libtorch": "model.pt",
    "pytorch": "model.pt", "tensorflow_savedmodel": "model.savedmodel", "tensorflow_graphdef": "model.graphdef",
    "tensorrt_plan": "model.plan",
}


def backend_of(config: mc.ModelConfig) -> str:
    """The backend Triton runs a model with: the config's ``backend``, else the one its ``platform`` maps
    to (``pytorch_libtorch`` → ``pytorch``). The one place that classifies models by what runs them."""
    if config.backend:
        return config.backend
    return PLATFORM_BACKENDS.get(config.platform, config.platform)


#: prefix of the model parameters that carry the checksums in a runtime config (the pip server has no
#: repository agents, so ``runtime_repository`` moves them there and clients can still compare them)
CHECKSUM_PARAMETER = "sonic_checksum:"


def config_checksums(config: mc.ModelConfig, model: str = "") -> dict[str, str]:
    """``{relative path: md5}`` declared by a config: its checksum agent, or the parameters that
    replace it in a runtime copy served by our server."""
    sums: dict[str, str] = {}
    entries = [(k, v) for agent in config.model_repository_agents.agents if agent.name == "checksum"
               for k, v in agent.parameters.items()]
    entries += [(k.removeprefix(CHECKSUM_PARAMETER), v.string_value) for k, v in config.parameters.items()
                if k.startswith(CHECKSUM_PARAMETER)]
    for key, value in entries:
        algo, _, rel = key.partition(":")
        if algo.upper() != "MD5":
            raise InferenceError(f"model {model or config.name!r}: unsupported checksum algorithm {algo!r}")
        sums[rel] = value.lower()
    return sums


def md5(path: str | os.PathLike) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def parse_specs(tensors: list) -> list[TensorSpec]:
    """Tensor specs from a config's ``input`` or ``output`` list."""
    return [TensorSpec(t.name, mc.DataType.Name(t.data_type).removeprefix("TYPE_"), tuple(int(d) for d in t.dims),
                       getattr(t, "label_filename", "") or None) for t in tensors]


def parse_config(path: str | os.PathLike) -> mc.ModelConfig:
    """Parses a ``config.pbtxt``; a syntax error names the file."""
    path = Path(path)
    try:
        return text_format.Parse(path.read_text(), mc.ModelConfig())
    except text_format.ParseError as err:
        raise InferenceError(f"{path}: cannot parse Triton model config: {err}") from None
    except FileNotFoundError:
        raise InferenceError(f"{path}: model config not found") from None


def load_model(model_dir: str | os.PathLike) -> ModelInfo:
    """Reads one model directory (config + versions)."""
    model_dir = Path(model_dir)
    config = parse_config(model_dir / "config.pbtxt")
    name = config.name or model_dir.name
    if config.name and config.name != model_dir.name:
        raise InferenceError(f"{model_dir}/config.pbtxt: name {config.name!r} differs from the directory name "
                             f"{model_dir.name!r} (Triton requires them equal)")
    versions = sorted(int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit())
    if not versions:
        raise InferenceError(f"model {name!r} in {model_dir} has no version directory (e.g. 1/model.onnx)")
    policy = config.version_policy
    if policy.HasField("specific") and policy.specific.versions:
        version = max(int(v) for v in policy.specific.versions)
    else:
        version = versions[-1]
    config.name = name
    return ModelInfo(name=name, path=model_dir, config=config, version=version,
                     inputs=parse_specs(config.input), outputs=parse_specs(config.output))


class ModelRepository:
    """One or more repository directories searched in order (the first holding a model wins).

    Args:
        paths (list[str]): repository directories.
    """

    def __init__(self, paths: list[str | os.PathLike]):
        self.paths = [Path(p) for p in paths]
        for path in self.paths:
            if not path.is_dir():
                raise InferenceError(f"model repository {str(path)!r} does not exist")
        self._cache: dict[str, ModelInfo] = {}
        self._missing: set[str] = set()

    def names(self) -> list[str]:
        """Every model name in the repositories."""
        found: dict[str, None] = {}
        for path in self.paths:
            for entry in sorted(path.iterdir()):
                if (entry / "config.pbtxt").exists():
                    found.setdefault(entry.name)
        return list(found)

    def get(self, name: str) -> ModelInfo:
        """The model ``name``; an unknown name raises InferenceError listing the repository's models."""
        if name not in self._cache:
            for path in self.paths:
                if (path / name / "config.pbtxt").exists():
                    self._cache[name] = load_model(path / name)
                    break
            else:
                names = self.names()
                raise InferenceError(f"model {name!r} is in no repository {[str(p) for p in self.paths]}"
                                     f"{did_you_mean(name, names)}; available: {names}")
        return self._cache[name]

    def find(self, name: str) -> ModelInfo | None:
        """The model ``name``, or None when no repository holds it (looked up once per name)."""
        if name not in self._cache and name not in self._missing:
            if any((path / name / "config.pbtxt").exists() for path in self.paths):
                return self.get(name)
            self._missing.add(name)
        return self._cache.get(name)


def add_tensors(config: mc.ModelConfig, inputs: list[TensorSpec], outputs: list[TensorSpec]) -> dict[str, mc.ModelOutput]:
    """Declares ``inputs`` and ``outputs`` in a model config (an output's ``labels`` becomes its label
    file); returns the output entries by name. Every repository entry the project writes uses it."""
    for spec in inputs:
        config.input.add(name=spec.name, data_type=mc.DataType.Value("TYPE_" + spec.datatype), dims=list(spec.dims))
    declared = {}
    for spec in outputs:
        declared[spec.name] = config.output.add(name=spec.name, data_type=mc.DataType.Value("TYPE_" + spec.datatype),
                                                dims=list(spec.dims))
        if spec.labels:
            declared[spec.name].label_filename = spec.labels
    return declared


def write_model(repository: str | os.PathLike, name: str, onnx_model: bytes | str | os.PathLike,
                inputs: list[TensorSpec], outputs: list[TensorSpec], max_batch_size: int,
                preferred_batch_sizes: tuple[int, ...] = (), max_queue_delay_us: int = 0, instance_count: int = 1,
                labels: dict[str, list[str]] | None = None, version: int = 1, checksum: bool = True) -> Path:
    """Writes a standard Triton repository entry for an ONNX model (``platform: "onnxruntime_onnx"``).

    The result is what the official Triton serves as it is, and what our server and direct mode read:
    ``<repository>/<name>/config.pbtxt`` (with dynamic batching and, if ``checksum``, an MD5 checksum
    agent entry as CMS writes them) and ``<repository>/<name>/<version>/model.onnx``.

    Args:
        repository: the repository directory (created if needed).
        name: model name.
        onnx_model: serialized ONNX bytes or a path to an ONNX file.
        inputs, outputs: tensor specs; ``dims`` exclude the batch dimension; ``-1`` for variable sizes.
        max_batch_size: 0 for a model without batch dimension.
        preferred_batch_sizes, max_queue_delay_us: dynamic batching settings (batching is on when
            ``max_batch_size > 0``).
        instance_count: model instances the server runs in parallel.
        labels: class labels per output name (written as ``<output>_labels.txt``).
    """
    model_dir = Path(repository) / name
    (model_dir / str(version)).mkdir(parents=True, exist_ok=True)
    target = model_dir / str(version) / "model.onnx"
    data = onnx_model if isinstance(onnx_model, bytes) else Path(onnx_model).read_bytes()
    target.write_bytes(data)
    config = mc.ModelConfig(name=name, platform="onnxruntime_onnx", max_batch_size=max_batch_size)
    declared = add_tensors(config, inputs, outputs)
    for output, classes in (labels or {}).items():
        if output in declared:
            filename = f"{output}_labels.txt".replace("/", "_").replace(":", "_")
            (model_dir / filename).write_text("\n".join(classes) + "\n")
            declared[output].label_filename = filename
    if max_batch_size > 0:
        config.dynamic_batching.preferred_batch_size.extend(preferred_batch_sizes)
        config.dynamic_batching.max_queue_delay_microseconds = max_queue_delay_us
    config.instance_group.add(count=instance_count, kind=mc.ModelInstanceGroup.KIND_CPU)
    if checksum:
        agent = config.model_repository_agents.agents.add(name="checksum")
        agent.parameters[f"MD5:{version}/model.onnx"] = hashlib.md5(data).hexdigest()
    (model_dir / "config.pbtxt").write_text(text_format.MessageToString(config))
    return model_dir
