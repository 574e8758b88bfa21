"""The inference interface: one call, two implementations (direct and SONIC).

::

    future = client.infer("particlenet_ak4", {"pf_points": x, ...})   # returns at once
    outputs = future.result()                                         # {"softmax": array}

``infer`` returns a ``concurrent.futures.Future`` (awaitable from asyncio with
``asyncio.wrap_future``), which is what an ``ExternalWork.acquire`` hands to the scheduler. What
happens behind it (a thread running onnxruntime, or gRPC requests to Triton servers with batching,
splitting at ``max_batch_size``, retries and failover) is the implementation's business.

Input checking lives here, shared, so both modes reject the same mistakes with the same message.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import InferenceError
from .repository import ModelInfo


class InferenceClient(abc.ABC):
    """Runs models by name. Thread-safe: one client serves every stream of a job."""

    #: "direct" or "sonic", for reports
    mode: str = ""

    @abc.abstractmethod
    def model_info(self, model: str) -> ModelInfo:
        """The model's inputs, outputs and batching (from the repository or the server)."""

    @abc.abstractmethod
    def infer(self, model: str, inputs: Mapping[str, np.ndarray], outputs: list[str] | None = None) -> Future:
        """Starts inference; the Future gives ``{output name: array}`` (only ``outputs`` if given).

        Args:
            model: the model name in the repository.
            inputs: every input of the model, batch dimension first when the model has one.
            outputs: a subset of the model's outputs to return (default: all).
        """

    def statistics(self) -> dict[str, Any]:
        """Per-model counters and times for the timing report."""
        return {}

    def close(self) -> None:
        """Releases sessions, connections and servers."""


def check_inputs(info: ModelInfo, inputs: Mapping[str, np.ndarray], outputs: list[str] | None = None) -> int:
    """Validates names, dtypes and shapes against the model's config; returns the batch size (0: none).

    Raises:
        InferenceError: naming the model, the input, and expected vs. given shape or type.
    """
    expected = {spec.name: spec for spec in info.inputs}
    missing = [name for name in expected if name not in inputs]
    extra = [name for name in inputs if name not in expected]
    if missing or extra:
        raise InferenceError(f"model {info.name!r}: inputs {sorted(inputs)} do not match the model's "
                             f"{sorted(expected)} (missing {missing}, unexpected {extra})")
    known_outputs = [spec.name for spec in info.outputs]
    for name in outputs or []:
        if name not in known_outputs:
            raise InferenceError(f"model {info.name!r} has no output {name!r}; outputs: {known_outputs}")
    batch = None
    for name, spec in expected.items():
        array = inputs[name]
        if not isinstance(array, np.ndarray):
            raise InferenceError(f"model {info.name!r} input {name!r}: expected a numpy array, got {type(array).__name__}")
        if array.dtype != spec.dtype:
            raise InferenceError(f"model {info.name!r} input {name!r}: dtype {array.dtype} but the model "
                                 f"expects {spec.datatype} ({spec.dtype})")
        shape = array.shape
        if info.max_batch_size > 0:
            if not shape:
                raise InferenceError(f"model {info.name!r} input {name!r}: a batch dimension is required")
            if batch is None:
                batch = shape[0]
            elif shape[0] != batch:
                raise InferenceError(f"model {info.name!r}: input {name!r} has batch size {shape[0]}, "
                                     f"others {batch}")
            shape = shape[1:]
        if len(shape) != len(spec.dims) or any(d != -1 and d != s for d, s in zip(spec.dims, shape)):
            want = ("[batch, " if info.max_batch_size > 0 else "[") + ", ".join(map(str, spec.dims)) + "]"
            raise InferenceError(f"model {info.name!r} input {name!r}: shape {list(array.shape)} does not match "
                                 f"{want} (-1: any size)")
    return int(batch or 0)


def batches(info: ModelInfo, inputs: Mapping[str, np.ndarray], batch: int) -> Iterator[dict[str, np.ndarray]]:
    """Slices of the inputs of at most ``max_batch_size`` rows (the whole input when it fits or when
    the model has no batch dimension)."""
    limit = info.max_batch_size
    if limit <= 0 or batch <= limit:
        yield dict(inputs)
        return
    for start in range(0, batch, limit):
        yield {name: array[start:start + limit] for name, array in inputs.items()}


def concatenate(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Reassembles per-batch outputs in order."""
    if len(parts) == 1:
        return parts[0]
    return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}


@dataclass
class ModelCounters:
    """Client-side counters of one model: requests, rows (batch entries) and time."""

    calls: int = 0
    requests: int = 0
    rows: int = 0
    seconds: float = 0.0
    failures: int = 0
    retries: int = 0
    failovers: int = 0
    servers: dict[str, int] = field(default_factory=dict)


class Counters:
    """Thread-safe per-model counters, shared by both client implementations."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.models: dict[str, ModelCounters] = {}

    def add(self, model: str, **increments: float) -> None:
        with self._lock:
            counters = self.models.setdefault(model, ModelCounters())
            for name, value in increments.items():
                setattr(counters, name, getattr(counters, name) + value)

    def count_server(self, model: str, server: str) -> None:
        with self._lock:
            servers = self.models.setdefault(model, ModelCounters()).servers
            servers[server] = servers.get(server, 0) + 1

    def as_dict(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {name: dict(vars(c)) for name, c in self.models.items()}
