"""Inference behind one interface: direct (onnxruntime in-process) or SONIC (Triton over gRPC).

Producers derive from :class:`InferenceProducer` and call ``self.infer(inputs)``; the ``inference``
service (``services.inference`` in the configuration, ``--inference`` on the command line) decides
where the model runs. See ``service.py`` for the settings.

One idea per file:

* ``client.py`` — the interface, input checks, request splitting/reassembly (shared by both modes);
* ``direct.py`` — onnxruntime in this process; ``sonic.py`` — the SONIC client (retries, failover);
* ``servers.py`` — many servers: discovery, choice, health, fallback; ``connection.py`` — one server;
  ``server_spec.py`` — where a server is; ``calls.py`` — a request's life and local deadline;
  ``transport/`` — what carries requests (``native.py``, ``grpcio.py``, one protocol);
  ``shm.py`` — system shared memory; ``triton_errors.py`` — gRPC errors → sonic-hep errors;
* ``server.py`` — a managed ``tritonserver`` process; ``triton_install.py`` — the pip server's files
  and backend directory; ``runtime_repository.py`` — what a server loads (checksums verified);
  ``backends/onnxruntime/`` — the python-based backend serving ``onnxruntime_onnx`` models;
  ``backends/python_stage.py`` — Triton python models running a workflow's stage function;
* ``repository.py`` — Triton model repositories (and the metadata modules read: labels, parameters);
  ``onnx_specs.py`` — specs read from ONNX files;
* ``fake.py`` — a fake client and fake servers for tests (models as python functions, scripted failures).
"""

import os

# Servers are forked while gRPC threads run (a fallback started mid-job). gRPC's fork handlers then crash
# the child before it execs (SIGSEGV in an ``event_engine`` thread, about 1 start in 8 under load); they are
# only read when gRPC is first imported, which happens below this package, so they are turned off here.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

from .client import InferenceClient, check_inputs  # noqa: E402
from .producer import InferenceProducer, UsesModel
from .repository import ModelInfo, ModelRepository, TensorSpec

__all__ = ["InferenceClient", "InferenceProducer", "ModelInfo", "ModelRepository", "TensorSpec", "UsesModel",
           "check_inputs"]
