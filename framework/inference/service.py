"""The ``inference`` service: builds the job's one inference client from ``services.inference``.

::

    services:
      inference:
        mode: direct                 # direct | sonic   (--inference on the command line)
        repository: [data/models/miniaod]   # model repositories: direct reads them, a local server serves them
        # direct
        device: cpu                  # cpu | gpu | auto
        workers: 2                   # concurrent onnxruntime runs
        intra_op_threads: 1
        # sonic
        servers: []                  # "host:port" or {address, port, ssl, root_certificates, ...}; --server
        fallback: true               # start a local Triton server when no server has a model
        fallback_server: {}          # options of that server: ort_threads, python, device, startup_timeout ...
        timeout_s: 60                # per request
        allowed_tries: 3             # per request and server, before failing over
        breaker_threshold: 3         # consecutive deadlines/unreachable answers that take a server out of rotation
        breaker_backoff_s: 1         # first back-off before a probe may bring it back (doubled per failed probe)
        breaker_max_backoff_s: 30    # the longest back-off
        compression: none            # none | gzip | deflate
        shared_memory: auto          # auto (local servers, requests of 16 KiB or more) | on | off
        model_versions: {}           # model: version to pin (default: the server's choice)

Module code is the same in both modes; only this section (or ``--inference``) changes.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError, did_you_mean
from ..params import coerce
from ..services import Service
from .client import InferenceClient
from .repository import ModelRepository


@dataclass
class InferenceConfig:
    """Validated ``services.inference`` settings (see the module docstring)."""

    mode: str = "direct"
    repository: list[str] = field(default_factory=list)
    device: str = "cpu"
    workers: int = 2
    intra_op_threads: int = 1
    inter_op_threads: int = 1
    servers: list[Any] = field(default_factory=list)
    fallback: bool = True
    fallback_server: dict[str, Any] = field(default_factory=dict)
    timeout_s: float = 60.0
    allowed_tries: int = 3
    breaker_threshold: int = 3
    breaker_backoff_s: float = 1.0
    breaker_max_backoff_s: float = 30.0
    compression: str = "none"
    shared_memory: str = "auto"
    model_versions: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> InferenceConfig:
        hints = typing.get_type_hints(cls)
        names = {f.name for f in dataclasses.fields(cls)}
        values = {}
        for key, value in raw.items():
            if key not in names:
                raise ConfigError(f"unknown key{did_you_mean(key, names)}; known: {sorted(names)}",
                                  key=f"services.inference.{key}")
            if key == "repository" and isinstance(value, str):
                value = [value]
            try:
                values[key] = coerce(value, hints[key])
            except TypeError as err:
                raise ConfigError(str(err), key=f"services.inference.{key}") from None
        config = cls(**values)
        known_server_options = {"ort_threads", "python", "device", "startup_timeout", "log_verbose", "workdir", "env",
                                "models", "host", "backends"}
        for key in config.fallback_server:
            if key not in known_server_options:
                raise ConfigError(f"unknown fallback server option{did_you_mean(key, known_server_options)}; "
                                  f"known: {sorted(known_server_options)}", key=f"services.inference.fallback_server.{key}")
        seconds = ("timeout_s", "breaker_backoff_s", "breaker_max_backoff_s")  # > 0; counts: at least 1
        for key in (*seconds, "allowed_tries", "workers", "breaker_threshold"):
            value = getattr(config, key)
            if key in seconds and (not math.isfinite(value) or value <= 0):
                raise ConfigError(f"must be a positive number of seconds, got {value}", key=f"services.inference.{key}")
            if key not in seconds and value < 1:
                raise ConfigError(f"must be at least 1, got {value}", key=f"services.inference.{key}")
        for key, allowed in (("mode", ("direct", "sonic")), ("device", ("cpu", "gpu", "auto")),
                             ("compression", ("none", "gzip", "deflate")), ("shared_memory", ("auto", "on", "off"))):
            if getattr(config, key) not in allowed:
                raise ConfigError(f"{getattr(config, key)!r} is not one of {list(allowed)}",
                                  key=f"services.inference.{key}")
        return config


PROJECT_ROOT = Path(__file__).resolve().parents[2]


def resolve_repository(path: str) -> str:
    """A repository path as given if it exists, else relative to the project (so ``data/models/miniaod``
    in a shipped configuration works from any working directory). ``$NAME`` / ``${NAME}`` are taken from the
    environment, so a shipped configuration can name a model folder only the user has (``miniaod_cms``)."""
    expanded = os.path.expandvars(path)
    unset = re.search(r"\$\{?(\w+)", expanded)
    if unset:
        name = unset.group(1)
        raise ConfigError(f"{path!r} needs the environment variable {name}: export {name}=DIR (a Triton model "
                          f"repository), or replace the list with -p 'services.inference.repository=[DIR, ...]'",
                          key="services.inference.repository")
    path = expanded
    if os.path.isabs(path) or os.path.exists(path):
        return path
    candidate = PROJECT_ROOT / path
    return str(candidate) if candidate.exists() else path


def make_client(config: InferenceConfig) -> InferenceClient:
    """The client for ``config.mode``."""
    repository = ModelRepository([resolve_repository(p) for p in config.repository]) if config.repository else None
    if config.mode == "direct":
        if repository is None:
            raise ConfigError("direct inference needs a model repository", key="services.inference.repository")
        from .direct import DirectClient

        return DirectClient(repository, workers=config.workers, intra_op_threads=config.intra_op_threads,
                            inter_op_threads=config.inter_op_threads, device=config.device)
    from .sonic import SonicClient

    return SonicClient.from_config(config, repository)


class InferenceService(Service):
    """Owns the job's inference client (and any server it started) from begin to end of job."""

    name = "inference"

    def __init__(self, config: dict[str, Any]):
        super().__init__(config)
        self.settings = InferenceConfig.from_dict(config)
        self._client: InferenceClient | None = None

    @property
    def client(self) -> InferenceClient:
        if self._client is None:
            self._client = make_client(self.settings)
        return self._client

    def begin_job(self) -> None:
        self.client  # noqa: B018 - connect or load now, so configuration errors come before the first event

    def end_job(self) -> None:
        if self._client is not None:
            self._client.close()

    def report(self) -> dict[str, Any] | None:
        if self._client is None:
            return None
        stats = self._client.statistics()
        lines = [f"mode {stats.get('mode', self.settings.mode)}",
                 f"{'model':<24} {'calls':>7} {'requests':>9} {'rows':>9} {'client ms/call':>15}"]
        for model, c in stats.get("models", {}).items():
            per = 1000 * c["seconds"] / c["calls"] if c["calls"] else 0.0
            lines.append(f"{model:<24} {c['calls']:7d} {c['requests']:9d} {c['rows']:9d} {per:15.3f}")
        for line in stats.get("extra_lines", []):
            lines.append(line)
        return {**stats, "table": "\n".join(lines)}
