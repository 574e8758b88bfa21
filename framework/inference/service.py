"""The ``inference`` service: builds the job's one inference client from ``services.inference``.

::

    services:
      inference:
        mode: direct                 # direct | sonic | auto (direct on a visible GPU, else sonic; auto_mode.py)
        repository: [data/models/miniaod]   # model repositories: direct reads them, a local server serves them
        # direct
        device: cpu                  # cpu | gpu | auto
        workers: 2                   # concurrent onnxruntime runs
        intra_op_threads: 1
        # sonic
        servers: []                  # "host:port" or {address, port, ssl, tls_ca, ...}; --server
        fleet: ""                    # a fleet directory (sonic fleet start): servers found there, joining and leaving
        fleet_wait_s: 60             # wait this long for the fleet's first server
        fleet_tls: {}                # this client's tls_client_cert / tls_client_key (mutual TLS), tls_ca
        fallback: auto               # auto (a local Triton server only when the job names no server) | always
                                     # (also when the named servers cannot serve a model) | never (sonic/fallback.py)
        fallback_server: {}          # options of that server (ServerOptions, server_options.py: the flags of
                                     # sonic server start with underscores): backend, cpus ("1" or "0-3": the
                                     # job keeps all of its own), strict, ort_threads, python, device ...
        timeout_s: 60                # per request
        allowed_tries: 3             # per request and server, before failing over
        breaker_threshold: 3         # consecutive deadlines/unreachable answers that take a server out of rotation
        breaker_backoff_s: 1         # first back-off before a probe may bring it back (doubled per failed probe)
        breaker_max_backoff_s: 30    # the longest back-off
        keepalive_s: 3               # HTTP/2 ping after this long with nothing received (1 to 7200) ...
        keepalive_timeout_s: 3       # ... unanswered this long (1 to 600): the connection is dead (keepalive.py)
        compression: none            # none | gzip | deflate: gRPC compression of requests (SonicTriton's choices)
        model_compression: {}        # model: none | gzip | deflate, for that model's requests (wins over compression)
        shared_memory: auto          # auto (local servers, requests of 16 KiB or more) | on | off; only with a
                                     # server that proves it opens our regions (else the wire)
        transport: auto              # auto | native (compiled, on libnghttp2) | grpcio: what carries requests
        model_versions: {}           # model: version to pin (default: on each server, the version whose files
                                     # are the job's copy's, or the one it took first: version_pins.py)
        token_file: ""               # the bearer token's file; default: WLCG discovery (BEARER_TOKEN,
                                     # BEARER_TOKEN_FILE, $XDG_RUNTIME_DIR/bt_u<uid>, /tmp/bt_u<uid>): sent over
                                     # TLS or to loopback only (sonic/bearer_token.py)

Module code is the same in both modes; only this section (or ``--inference``) changes.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..paths import project_path
from ..services import Service
from ..settings import Problem, build, limits
from .client import InferenceClient
from .compression import Compression
from .keepalive import MIN_TIME_S, TIME_S, TIMEOUT_S
from .repository import ModelRepository
from .server_spec import CLIENT_TLS, client_tls
from .serving.server_options import fallback_server


@dataclass
class InferenceConfig:
    """Validated ``services.inference`` settings (see the module docstring)."""

    mode: str = field(default="direct", metadata=limits(choices=("direct", "sonic", "auto")))
    repository: list[str] = field(default_factory=list)
    device: str = field(default="cpu", metadata=limits(choices=("cpu", "gpu", "auto")))
    workers: int = field(default=2, metadata=limits(min=1))
    intra_op_threads: int = 1
    inter_op_threads: int = 1
    servers: list[Any] = field(default_factory=list)
    fleet: str = ""
    fleet_wait_s: float = field(default=60.0, metadata=limits(min=0))
    fleet_tls: dict[str, str] = field(default_factory=dict)
    fallback: str = field(default="auto", metadata=limits(choices=("auto", "always", "never")))
    fallback_server: dict[str, Any] = field(default_factory=dict)
    timeout_s: float = field(default=60.0, metadata=limits(positive="seconds"))
    allowed_tries: int = field(default=3, metadata=limits(min=1))
    breaker_threshold: int = field(default=3, metadata=limits(min=1))
    breaker_backoff_s: float = field(default=1.0, metadata=limits(positive="seconds"))
    breaker_max_backoff_s: float = field(default=30.0, metadata=limits(positive="seconds"))
    keepalive_s: float = field(default=TIME_S, metadata=limits(positive="seconds", min=MIN_TIME_S, max=7200,
                                                                hint=" (servers refuse more frequent pings)"))
    keepalive_timeout_s: float = field(default=TIMEOUT_S, metadata=limits(positive="seconds", min=1, max=600))
    compression: str = field(default="none", metadata=limits(choices=("none", "gzip", "deflate")))
    model_compression: dict[str, str] = field(default_factory=dict)
    shared_memory: str = field(default="auto", metadata=limits(choices=("auto", "on", "off")))
    transport: str = field(default="auto", metadata=limits(choices=("auto", "native", "grpcio")))
    model_versions: dict[str, int] = field(default_factory=dict)
    token_file: str = ""

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> InferenceConfig:
        """``services.inference`` checked (keys, types, bounds); a problem names ``services.inference.<key>``
        (the process adds the file and line it came from)."""
        def error(problem: Problem) -> ConfigError:
            return ConfigError(problem.message, key=f"services.inference.{problem.key}")

        def prepare(key: str, value: Any, tp: Any) -> Any:
            if key == "shared_memory" and isinstance(value, bool):  # YAML reads a bare on/off as true/false
                return "on" if value else "off"
            if key == "fallback" and isinstance(value, bool):  # the setting's values before it had three
                return "always" if value else "never"
            return [value] if key == "repository" and isinstance(value, str) else value  # one folder as a list

        config = build(cls, raw, error=error, prepare=prepare)
        Compression(config.compression, config.model_compression)  # an unknown algorithm named with its model
        options = fallback_server(config.fallback_server)  # checked now, before the job starts one
        config.fallback_server = {key: getattr(options, key) for key in config.fallback_server}
        return config


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
    return str(project_path(expanded))


def make_client(config: InferenceConfig) -> InferenceClient:
    """The client for ``config.mode`` (``auto`` resolved by the caller: :class:`InferenceService`)."""
    repository = ModelRepository([resolve_repository(p) for p in config.repository]) if config.repository else None
    if config.mode == "direct":
        if repository is None:
            raise ConfigError("direct inference needs a model repository", key="services.inference.repository")
        from .direct import DirectClient

        return DirectClient(repository, workers=config.workers, intra_op_threads=config.intra_op_threads,
                            inter_op_threads=config.inter_op_threads, device=config.device)
    from .sonic.client import SonicClient

    if config.fleet:
        return _fleet_client(config, repository)
    return SonicClient.from_config(config, repository)


FLEET_TLS_KEYS = frozenset({*CLIENT_TLS, *CLIENT_TLS.values()})


def _fleet_client(config: InferenceConfig, repository: ModelRepository | None) -> InferenceClient:
    """A SONIC client on the fleet's live servers (after waiting ``fleet_wait_s`` for the first), following
    the fleet's directory as servers join and leave (``ServerPool.follow``)."""
    from dataclasses import replace

    from .serving.fleet_directory import FLEET_FILE, discover, wait_for_servers
    from .serving.fleet_use import FleetUse
    from .sonic.client import SonicClient
    from .triton_errors import NoServerError

    unknown = set(config.fleet_tls) - FLEET_TLS_KEYS
    if unknown:
        raise ConfigError(f"unknown keys {sorted(unknown)}; known: {sorted(CLIENT_TLS)}",
                          key="services.inference.fleet_tls")
    fleet_tls = client_tls(config.fleet_tls, "services.inference.fleet_tls")
    if not (Path(config.fleet) / FLEET_FILE).is_file():
        raise ConfigError(f"{config.fleet!r} is not a fleet directory (no {FLEET_FILE}); start one with "
                          f"`sonic fleet start {config.fleet}`", key="services.inference.fleet")
    entries = wait_for_servers(config.fleet, config.fleet_wait_s)
    if not entries and not config.servers and config.fallback != "always":  # named, and nobody to serve (fallback.py)
        raise NoServerError(f"fleet {config.fleet} has no live server after {config.fleet_wait_s:.0f} s (`sonic fleet "
                            f"status {config.fleet}` shows why); services.inference.fallback: always would start a "
                            f"local CPU server instead")
    found = [entry.spec(fleet_tls) for entry in entries]
    client = SonicClient.from_config(replace(config, servers=[*config.servers, *found]), repository)
    client.pool.follow(discover(config.fleet, fleet_tls))
    client.pool.pins.watch(FleetUse(config.fleet))  # the fleet keeps the versions this job uses (fleet_use.py)
    return client


class InferenceService(Service):
    """Owns the job's inference client (and any server it started) from begin to end of job."""

    name = "inference"

    def __init__(self, config: dict[str, Any]):
        super().__init__(config)
        self.settings = InferenceConfig.from_dict(config)
        self._client: InferenceClient | None = None
        self.auto_reason = ""  # mode auto: what it chose and why (the timing report shows it)

    @property
    def client(self) -> InferenceClient:
        if self._client is None:
            settings = self.settings
            if settings.mode == "auto":
                from dataclasses import replace

                from .auto_mode import choose

                choice = choose()
                self.auto_reason = choice.reason
                settings = replace(settings, mode=choice.mode, device="gpu" if choice.mode == "direct" else
                                   settings.device)
            self._client = make_client(settings)
        return self._client

    def begin_job(self) -> None:
        self.client  # noqa: B018 - connect or load now, so configuration errors come before the first event

    def end_job(self) -> None:
        if self._client is not None:
            self._client.close()

    def provenance(self) -> dict[str, Any] | None:
        """Per model used: the mode (direct, sonic, fallback), who answered and the digest of its files."""
        return self._client.provenance() if self._client is not None else None

    def report(self) -> dict[str, Any] | None:
        if self._client is None:
            return None
        stats = self._client.statistics()
        if self.auto_reason:
            stats = {**stats, "auto": self.auto_reason}
        chosen = f" ({self.auto_reason})" if self.auto_reason else ""
        lines = [f"mode {stats.get('mode', self.settings.mode)}{chosen}",
                 f"{'model':<24} {'calls':>7} {'requests':>9} {'rows':>9} {'client ms/call':>15}"]
        for model, c in stats.get("models", {}).items():
            per = 1000 * c["seconds"] / c["calls"] if c["calls"] else 0.0
            lines.append(f"{model:<24} {c['calls']:7d} {c['requests']:9d} {c['rows']:9d} {per:15.3f}")
        for line in stats.get("extra_lines", []):
            lines.append(line)
        return {**stats, "table": "\n".join(lines)}
