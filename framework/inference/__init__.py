"""Inference behind one interface: direct (onnxruntime in-process) or SONIC (Triton over gRPC).

Producers derive from :class:`InferenceProducer` and call ``self.infer(inputs)``; the ``inference``
service (``services.inference`` in the configuration, ``--inference`` on the command line) decides
where the model runs. This package's names are its public API; three rooms sit under it:

* here, what modules and jobs use: ``client.py`` (the interface, input checks, request splitting),
  ``producer.py``, ``service.py`` (the settings and the client they make), ``repository.py`` (Triton
  model repositories and the metadata modules read), ``onnx_specs.py``, ``model_digest.py`` (a model's
  identity), ``direct.py`` (onnxruntime in this process), ``fake.py`` (a scripted client for tests) and
  what client and server share: ``server_spec.py`` (where a server is), ``keepalive.py``, ``compression.py``
  (gRPC message compression, per model), ``owner.py`` (who owns a process: pid and start time), ``shm.py``
  (system shared memory), ``tls_probe.py`` and ``triton_errors.py`` (gRPC errors as sonic-hep errors);
* ``sonic/``, the SONIC client (server pool, breaker, connection, one module per transport);
* ``serving/``, running Triton servers (one options type, launch, install, ownership, the registry);
* ``backends/``, the code that runs inside a server (model repositories name its import path).

Names that pull in heavy dependencies (gRPC, onnx, onnxruntime) are loaded when first used, so a
module that only derives from :class:`InferenceProducer` imports nothing it does not need.
"""

import importlib
import os
from typing import Any

# Servers are forked while gRPC threads run (a fallback started mid-job). gRPC's fork handlers then crash
# the child before it execs (SIGSEGV in an ``event_engine`` thread, about 1 start in 8 under load); they are
# only read when gRPC is first imported, which happens below this package, so they are turned off here.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

from .client import Counters, InferenceClient, InputArray, check_inputs  # noqa: E402
from .producer import InferenceProducer, UsesModel  # noqa: E402
from .repository import ModelInfo, ModelRepository, TensorSpec, add_tensors, parse_config, write_model  # noqa: E402
from .owner import ProcessId  # noqa: E402
from .server_spec import ServerSpec  # noqa: E402

# public name -> the module (in this package) that defines it, imported on first use
_LAZY = {
    "InferenceConfig": "service", "make_client": "service", "resolve_repository": "service",
    "DirectClient": "direct", "use_client": "fake", "onnx_specs": "onnx_specs",
    "add_checksums": "model_digest", "RequestError": "triton_errors",
    "certificate_problem": "tls_probe", "server_tls": "tls_probe",
    "Compression": "compression", "compress": "compression", "decompress": "compression",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Counters", "InferenceClient", "InferenceProducer", "InputArray", "ModelInfo", "ModelRepository",
           "ProcessId", "ServerSpec", "TensorSpec", "UsesModel", "add_tensors", "check_inputs", "parse_config", "write_model",
           *_LAZY]
