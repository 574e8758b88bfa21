"""How a Triton server runs: the one options type of every server the project starts.

The fallback server of a job (``services.inference.fallback_server``), ``sonic server start``, fleets
(``FleetSpec`` adds the fleet's own settings to these) and the benchmarks all describe their server with
:class:`ServerOptions`, so an option has one name, one default and one meaning everywhere: a configuration
key is the field's name, a command-line flag is the name with dashes (``python_shm_mb`` →
``--python-shm-mb``, generated from the fields with their help), and the bounds are checked by the
project's one settings validator (``framework/settings.py``) in :meth:`ServerOptions.from_dict`.

TLS of the server side has one vocabulary, checked here once: ``tls_cert`` and ``tls_key`` (gRPC over TLS)
and ``tls_root_cert`` (mutual TLS: the CA that signed the clients' certificates). Clients describe their
side in tritonclient's words (``root_certificates``, ``private_key``, ``certificate_chain`` of a server
entry or ``fleet_tls``): the CA they trust, their key and their certificate.

Example::

    options = ServerOptions.from_dict({"backend": "python", "cpus": "0-3"},
                                      error=lambda problem: ValueError(f"{problem.key}: {problem.message}"))
    TritonServer(["data/models/demo"], options)
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ...errors import ConfigError, InferenceError
from ...settings import LIMITS, Problem, build, check_limits, limits
from .shm_janitor import INTERVAL_S as SHM_JANITOR_S

#: what serves ``onnxruntime_onnx`` models
BACKENDS = ("auto", "native", "python")
DEVICES = ("cpu", "gpu")
MODEL_CONTROL = ("none", "explicit")
#: Triton's levels of gRPC compression of its answers (the algorithm is one the client accepts: gzip or deflate)
RESPONSE_COMPRESSION = ("none", "low", "medium", "high")
#: the metadata key of a field's one-line help (the CLI's ``--help`` and the docs show it)
HELP = "help"
#: the metadata key of a field's other command-line spellings (kept where documented: ``--model``, ``-m``)
FLAGS = "flags"
METAVAR = "metavar"
#: the server-side TLS files, in the order they are checked
TLS_FILES = ("tls_cert", "tls_key", "tls_root_cert")
CORE_LIST_HINT = 'must be a core list such as "0-3,8" or [0, 1]'
#: the options that are lists of indices, each with how it is written (cores as taskset writes them, GPU positions)
INDEX_LISTS = {"cpus": CORE_LIST_HINT, "gpus": 'must be a GPU list such as "0", "1-3" or [0, 2]'}
#: where a job's configuration holds the options of the server it starts when no server has a model
FALLBACK_KEY = "services.inference.fallback_server"


def option(default: Any = None, help: str = "", *, factory: Callable[[], Any] | None = None,
           flags: tuple[str, ...] = (), metavar: str | None = None, **bounds: Any) -> Any:
    """A field of :class:`ServerOptions`: its default, one line of help and its bounds (:func:`limits`)."""
    metadata = {HELP: help, FLAGS: flags, METAVAR: metavar, **(limits(**bounds) if bounds else {})}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(kw_only=True)
class ServerOptions:
    """What a user may choose about a Triton server (see the module docstring); every field has a default."""

    models: list[str] | None = option(None, "serve only these models (default: every model of the repositories)",
                                      flags=("--model", "-m"), metavar="NAME")
    device: str = option("cpu", "cpu hides the GPUs; gpu serves models on their configured instance kinds",
                         choices=DEVICES)
    backend: str = option("auto", "what serves onnxruntime_onnx models: native (the compiled backend), python "
                          "(the python-based one) or auto (native where it builds, else python-based with a notice)",
                          choices=BACKENDS)
    strict: bool = option(False, "refuse to start when a model cannot be served (default: serve the rest, naming "
                          "each one left out with the reason)")
    cpus: list[int] | None = option(None, "cores the server and its python stubs may run on, as taskset -c writes "
                                    "them (e.g. 0-7,12), leaving the others to jobs (default: all of them)",
                                    metavar="LIST")
    gpus: list[int] | None = option(None, "GPUs a gpu server uses, by position among those this process may use "
                                    "(CUDA_VISIBLE_DEVICES, else Slurm's, else the machine's), e.g. 0 or 1-3; each "
                                    "KIND_GPU instance count is per card (default: every card it may use)",
                                    metavar="LIST")
    ort_threads: int = option(1, "onnxruntime threads per model instance (unless its config says)", min=1)
    python: str | None = option(None, "interpreter that runs python models (default: this one)", metavar="EXE")
    python_shm_mb: int | None = option(None, "shared-memory pool of each python stub in MiB, sized up front (e.g. "
                                       "256 for ProtoDUNE patches on a GPU; default: Triton's 1 MiB, grown as needed)",
                                       min=1, metavar="MIB")
    model_control: str = option("none", "none loads every model at start; explicit loads and unloads them through "
                                "the API", choices=MODEL_CONTROL)
    log_verbose: int = option(0, "Triton's --log-verbose level", min=0)
    response_compression: str = option("none", "gRPC compression of the answers to clients that accept it (Triton's "
                                       "--grpc-infer-response-compression-level): none, low, medium or high",
                                       choices=RESPONSE_COMPRESSION)
    startup_timeout: float = option(180.0, "seconds to wait until every model is ready", positive="seconds")
    stop_timeout_s: float = option(30.0, "seconds a stop waits for the requests in flight to finish; each model "
                                   "instance's teardown gets 3 s more on top (Triton's --exit-timeout-secs)",
                                   positive="seconds")
    host: str = option("127.0.0.1", "address gRPC binds (0.0.0.0: every interface; use TLS off loopback)",
                       metavar="H")
    http_host: str = option("127.0.0.1", "address of plain HTTP inference (loopback whatever host is: Triton has no "
                            "TLS for it)", metavar="H")
    metrics_host: str = option("127.0.0.1", "address of the metrics endpoint", metavar="H")
    grpc_port: int | None = option(None, "gRPC port (default: a free one)", min=0, max=65535, metavar="P")
    http_port: int | None = option(None, "HTTP port (default: a free one)", min=0, max=65535, metavar="P")
    metrics_port: int | None = option(None, "metrics port (default: a free one)", min=0, max=65535, metavar="P")
    tls_cert: str | None = option(None, "PEM server certificate: gRPC over TLS (with tls_key)", metavar="PEM")
    tls_key: str | None = option(None, "PEM private key of the server certificate", metavar="PEM")
    tls_root_cert: str | None = option(None, "PEM CA of client certificates: mutual TLS, a client without a "
                                       "certificate it signed is refused", metavar="PEM")
    workdir: str | None = option(None, "folder of the runtime repository, backends and log (default: a new temporary "
                                 "one, removed on a clean stop)", metavar="DIR")
    keep_workdir: bool | None = option(None, "keep the work folder after a clean stop too (default: when "
                                       "SONIC_HEP_KEEP_WORKDIR=1; after a failure it is always kept)")
    shm_janitor_s: float = option(SHM_JANITOR_S, "seconds between checks of the shared memory clients registered, "
                                  "unregistering that of clients that died (0: never)", min=0)
    env: dict[str, str] = option(factory=dict, help="extra environment of the server and its python models",
                                 metavar="KEY=VALUE")
    backends: dict[str, str] = option(factory=dict, help="extra python-based backends: a name and the folder "
                                      "holding its model.py", metavar="NAME=DIR")

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], *, error: Callable[[Problem], Exception]) -> ServerOptions:
        """``raw`` (keys: the field names) checked by the settings validator, then :meth:`checked`.

        ``error`` makes the exception for a :class:`~.settings.Problem`, so each front end names the key its
        own way (``services.inference.fallback_server.cpus``, ``--cpus``).
        """
        def prepare(key: str, value: Any, tp: Any) -> Any:
            if key in INDEX_LISTS and value is not None:
                return _cores_or_problem(value, error, key)
            if key == "models" and isinstance(value, str):
                return [value]
            return os.fspath(value) if isinstance(value, os.PathLike) else value  # a folder given as a Path

        return build(cls, raw, error=lambda problem: error(_worded(problem, raw)), prepare=prepare).checked(error)

    def checked(self, error: Callable[[Problem], Exception]) -> ServerOptions:
        """A copy with ``cpus`` as sorted core numbers, once every field's bounds and the TLS files pass;
        else ``error(problem)`` of the first problem is raised (options built in code are checked too)."""
        cpus = self.cpus if self.cpus is None else _cores_or_problem(self.cpus, error)
        gpus = self.gpus if self.gpus is None else _cores_or_problem(self.gpus, error, "gpus")
        if gpus is not None and self.device != "gpu":  # a cpu server hides every card: the choice would do nothing
            raise error(Problem("gpus", "value", f"{gpus} needs device gpu (a cpu server uses no GPU)"))
        for f in dataclasses.fields(self):
            bounds = f.metadata.get(LIMITS)
            value = getattr(self, f.name)
            reason = check_limits(value, bounds) if bounds else None
            if reason is not None:
                raise error(_worded(Problem(f.name, "value", reason), {f.name: value}))
        problem = tls_problem(self)
        if problem is not None:
            raise error(problem)
        return dataclasses.replace(self, cpus=cpus, gpus=gpus)

    def given(self) -> dict[str, Any]:
        """The options that differ from their defaults (what a record or a report needs to show)."""
        defaults = ServerOptions()
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(ServerOptions)
                if getattr(self, f.name) != getattr(defaults, f.name)}


def fallback_server(raw: Mapping[str, Any]) -> ServerOptions:
    """``services.inference.fallback_server`` of a job's configuration as options; a problem is one line
    naming ``services.inference.fallback_server.<key>``."""
    def error(problem: Problem) -> ConfigError:
        message = (f"unknown fallback server option{problem.suggestion}; known: {sorted(problem.known)}"
                   if problem.kind == "unknown" else problem.message)
        return ConfigError(message, key=f"{FALLBACK_KEY}.{problem.key}")

    return ServerOptions.from_dict(raw, error=error)


def with_default(name: str, default: Any) -> Any:
    """The field ``name`` of :class:`ServerOptions` with another default, for a subclass (a fleet's servers bind
    every interface): its help and bounds stay the field's."""
    return field(default=default, kw_only=True, metadata=ServerOptions.__dataclass_fields__[name].metadata)


def option_fields() -> list[dataclasses.Field]:
    """The fields of :class:`ServerOptions`, in declaration order (the CLI's flags and the docs' table)."""
    return list(dataclasses.fields(ServerOptions))


def tls_problem(options: ServerOptions) -> Problem | None:
    """The first problem of the server-side TLS files: a certificate without its key or the reverse, a CA of
    client certificates without the server's own pair, or a file that does not exist."""
    cert, key, root = options.tls_cert, options.tls_key, options.tls_root_cert
    if bool(cert) != bool(key) or (root and not cert):
        missing = "tls_key" if cert else "tls_cert"
        why = "mutual TLS (tls_root_cert) needs" if root and not cert and not key else "TLS needs"
        return Problem(missing, "value", f"is missing: {why} both tls_cert and tls_key")
    for name in TLS_FILES:
        path = getattr(options, name)
        if path and not os.path.isfile(path):
            return Problem(name, "value", f"file {path} does not exist")
    return None


def parse_cpus(text: str) -> list[int]:
    """A CPU list as ``taskset -c`` and Slurm write it (``"0-7,12,14-15"``) → sorted core numbers."""
    cpus: set[int] = set()
    try:
        for part in filter(None, (p.strip() for p in text.split(","))):
            first, _, last = part.partition("-")
            cpus.update(range(int(first), int(last or first) + 1))
    except ValueError:
        raise InferenceError(f"bad CPU list {text!r}: write it like 0-7,12") from None
    if not cpus:
        raise InferenceError(f"bad CPU list {text!r}: no cores in it")
    return sorted(cpus)


def core_list(value: Any, hint: str = CORE_LIST_HINT) -> list[int]:
    """``cpus`` (or ``gpus``) as sorted numbers: ``"0-3,8"`` (as ``taskset -c`` writes it), one number, or a list.

    Raises:
        ValueError: anything else (an empty list, a negative number, a boolean, a float), worded with ``hint``.
    """
    if isinstance(value, bool) or not isinstance(value, (str, int, list, tuple, set)):
        raise ValueError(f"{hint}, not {value!r}")
    if isinstance(value, (list, tuple, set)):
        if not value or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in value):
            raise ValueError(f"{hint}, not {value!r}")
        return sorted(set(value))
    try:
        return parse_cpus(str(value))
    except InferenceError:
        raise ValueError(f"{hint}, not {value!r}") from None


def _cores_or_problem(value: Any, error: Callable[[Problem], Exception], key: str = "cpus") -> list[int]:
    try:
        return core_list(value, INDEX_LISTS[key])
    except ValueError as err:
        raise error(Problem(key, "type", str(err), raw_key=key)) from None


def _worded(problem: Problem, raw: Mapping[str, Any]) -> Problem:
    """A value outside a field's choices said as "must be one of a, b, not 'x'" (the words every server
    front end used before the options had one home)."""
    declared = {f.name: f for f in dataclasses.fields(ServerOptions)}.get(problem.key)
    choices = declared.metadata.get(LIMITS, {}).get("choices") if declared is not None else None
    if problem.kind != "value" or not choices:
        return problem
    value = raw.get(problem.raw_key if problem.raw_key is not None else problem.key)
    return dataclasses.replace(problem, message=f"must be one of {', '.join(choices)}, not {value!r}")
