"""Inference without servers or sessions, for tests (CMSSW SonicCore's ``DummyClient``).

Two stand-ins, each answering from a python function per request:

* :class:`FakeClient` is an :class:`~.client.InferenceClient`: a producer runs through the real
  scheduler against it, with the same input checks, request splitting and reassembly as the real
  clients, and with failures the test scripts. Install it in a process with :func:`use_client`::

      client = FakeClient()
      client.add(repository.get("demo_mlp"), lambda x: {"probs": np.full((len(x["x"]), 3), 1 / 3, "f4")})
      process = Process(config)
      use_client(process, client)
      process.run(progress=False)
      assert client.calls["demo_mlp"] == 8                       # one call per event

* :class:`FakeServer` stands where a :class:`~.connection.ServerConnection` does, so the SONIC
  client's retries and failovers are driven by scripted gRPC statuses (``UNAVAILABLE``,
  ``RESOURCE_EXHAUSTED`` ...) decided by the real table in :mod:`.triton_errors`; :func:`fake_pool`
  puts such servers in a :class:`~.servers.ServerPool`.

Results are computed on the caller's thread and handed back in an already finished Future: what a
test sees does not depend on timing.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from ..errors import InferenceError
from ..testing import GivenClient
from .client import Counters, InferenceClient, InputArray, assemble, check_inputs, is_ragged, split_requests
from .repository import ModelInfo, TensorSpec, add_tensors
from .triton_errors import RequestError, action_for

if TYPE_CHECKING:
    from .sonic.servers import ServerPool

#: one request's computation: input arrays by name → output arrays by name (batch dimension first
#: when the model has one)
Compute = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


def model_info(name: str, inputs: list[TensorSpec], outputs: list[TensorSpec], max_batch_size: int = 0,
               parameters: Mapping[str, Any] | None = None) -> ModelInfo:
    """A model known only from its description (no repository entry, so no labels): for models a test
    makes up. ``parameters`` become the config's string parameters, as ``config.pbtxt`` declares them."""
    config = mc.ModelConfig(name=name, platform="onnxruntime_onnx", max_batch_size=max_batch_size)
    add_tensors(config, inputs, outputs)
    for key, value in (parameters or {}).items():
        config.parameters[key].string_value = str(value)
    return ModelInfo(name=name, path=None, config=config, version=1, inputs=list(inputs), outputs=list(outputs))


def constant(outputs: Mapping[str, Any]) -> Compute:
    """A computation answering every row with the same values (``outputs``: one row per output, without
    the batch dimension); the answer has as many rows as the request."""
    rows = {name: np.asarray(value) for name, value in outputs.items()}

    def compute(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        batch = len(next(iter(inputs.values())))
        return {name: np.repeat(row[np.newaxis], batch, axis=0) for name, row in rows.items()}

    return compute


class FakeClient(InferenceClient):
    """An inference client whose models are python functions.

    Attributes:
        calls (Counter[str]): ``infer`` calls per model that passed the input checks.
        requests (list[tuple[str, dict]]): every request computed or failed, in order: (model, inputs).
    """

    mode = "fake"

    def __init__(self) -> None:
        self._models: dict[str, tuple[ModelInfo, Compute]] = {}
        self._failures: dict[str, deque[BaseException]] = {}
        self._lock = threading.Lock()
        self.calls: Counter[str] = Counter()
        self.requests: list[tuple[str, dict[str, np.ndarray]]] = []
        self.counters = Counters()
        self.closed = False

    def add(self, info: ModelInfo, compute: Compute) -> FakeClient:
        """Serves ``info.name`` with ``compute`` (called once per request: batches larger than
        ``max_batch_size`` are split first, as the real clients split them)."""
        self._models[info.name] = (info, compute)
        return self

    def fail(self, model: str, error: BaseException, times: int = 1) -> FakeClient:
        """The next ``times`` requests of ``model`` fail with ``error`` (after the input checks)."""
        with self._lock:
            self._failures.setdefault(model, deque()).extend([error] * times)
        return self

    def model_info(self, model: str) -> ModelInfo:
        if model not in self._models:
            raise InferenceError(f"model {model!r} is not served by this fake client; it has {sorted(self._models)}")
        return self._models[model][0]

    def infer(self, model: str, inputs: Mapping[str, InputArray], outputs: list[str] | None = None) -> Future:
        info = self.model_info(model)
        compute = self._models[model][1]
        batch = check_inputs(info, inputs, outputs)
        future: Future = Future()
        with self._lock:
            self.calls[model] += 1
        parts = []
        try:
            for request in split_requests(info, inputs, batch):
                with self._lock:
                    self.requests.append((model, request))
                    failures = self._failures.get(model)
                    error = failures.popleft() if failures else None
                if error is not None:
                    self.counters.add(model, failures=1)
                    raise error
                answer = compute(request)
                parts.append({name: answer[name] for name in (outputs or [s.name for s in info.outputs])})
        except BaseException as err:  # noqa: BLE001 - the caller gets it from the Future, as from a real client
            future.set_exception(err)
            return future
        self.counters.add(model, calls=1, requests=len(parts), rows=batch)
        future.set_result(assemble(info, parts, is_ragged(inputs)))
        return future

    def statistics(self) -> dict[str, Any]:
        return {"mode": self.mode, "models": self.counters.as_dict()}

    def close(self) -> None:
        self.closed = True


class FakeService(GivenClient):
    """The ``inference`` service of a process, holding a given client, closed with the job."""

    def end_job(self) -> None:
        self.client.close()


def use_client(process: Any, client: InferenceClient) -> None:
    """Makes ``process`` (a :class:`~sonic_hep.framework.process.Process` not yet run) use ``client`` for
    inference instead of the one its configuration describes."""
    process.services["inference"] = FakeService(client)


class FakeServer:
    """A Triton server stand-in for :class:`~.servers.ServerPool`: serves models with python functions,
    failing the requests the test scripts with a gRPC status.

    Args:
        address: its ``host:port`` (only a name here).
        models: ``{model name: (ModelInfo, compute)}``.
    """

    def __init__(self, address: str, models: Mapping[str, tuple[ModelInfo, Compute]]):
        self.address = address
        self.models = dict(models)
        self._script: deque[tuple[str, str]] = deque()
        self._lock = threading.Lock()
        self.received = 0
        self.closed = False
        self.model_versions: dict[str, str] = {}  # pinned per model, as on a ServerConnection

    def ready_versions(self, model: str) -> list[str]:
        """Each model is ready in the version its ModelInfo names (1 for a model known only by its config)."""
        return [str(self.models[model][0].version or 1)] if model in self.models else []

    def fail(self, status: str, message: str = "scripted failure", times: int = 1) -> FakeServer:
        """The next ``times`` requests fail with gRPC ``status`` (what the client then does is decided
        by :func:`~.triton_errors.action_for`, as for a real server)."""
        with self._lock:
            self._script.extend([(status, message)] * times)
        return self

    def model_info(self, model: str, version: str = "") -> ModelInfo:
        if model not in self.models:
            raise RequestError(model, self.address, "NOT_FOUND", "model not loaded", "failover")
        return self.models[model][0]

    def send(self, info: ModelInfo, inputs: Mapping[str, np.ndarray], outputs: list[str]) -> Future:
        """One request: the scripted failure, if any, else the model's answer."""
        future: Future = Future()
        with self._lock:
            self.received += 1
            scripted = self._script.popleft() if self._script else None
        if scripted is not None:
            status, message = scripted
            future.set_exception(RequestError(info.name, self.address, status, message, action_for(status, message)))
            return future
        answer = self.models[info.name][1](dict(inputs))
        future.set_result({name: answer[name] for name in outputs})
        return future

    def probe(self, timeout: float) -> dict[str, str]:
        return dict.fromkeys(self.models, "1")

    def statistics(self, model: str = "") -> dict:
        return {}

    def close(self, grace_s: float | None = None) -> None:
        self.closed = True


def fake_pool(*servers: FakeServer, **options: Any) -> ServerPool:
    """A :class:`~.servers.ServerPool` of ``servers`` (no fallback, no background refresh), each with its
    models in rotation and already verified; the first is preferred while it is in rotation."""
    from .sonic.servers import ServerPool, ServerState  # gRPC only where a pool is made

    pool = ServerPool([], fallback=False, refresh_s=1e9, **options)
    pool.states = [ServerState(server, models=dict.fromkeys(server.models, "1"),
                               queue_ms=dict.fromkeys(server.models, float(5 * rank)), verified=set(server.models))
                   for rank, server in enumerate(servers)]
    return pool
