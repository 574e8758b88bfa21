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
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import InferenceError
from .repository import ModelInfo, TensorSpec


class InferenceClient(abc.ABC):
    """Runs models by name. Thread-safe: one client serves every stream of a job."""

    #: "direct" or "sonic", for reports
    mode: str = ""

    @abc.abstractmethod
    def model_info(self, model: str) -> ModelInfo:
        """The model's inputs, outputs and batching (from the repository or the server)."""

    def check_runnable(self, model: str) -> None:
        """Raises :class:`InferenceError` when this client cannot run ``model`` (unknown, or of a kind it
        cannot execute), so a module can refuse a job in ``begin_job`` instead of on its first event."""
        self.model_info(model)

    @abc.abstractmethod
    def infer(self, model: str, inputs: Mapping[str, InputArray], outputs: list[str] | None = None) -> Future:
        """Starts inference; the Future gives ``{output name: array}`` (only ``outputs`` if given).

        Args:
            model: the model name in the repository.
            inputs: every input of the model, batch dimension first when the model has one; or, for
                inputs whose shape differs per entry (ragged), a list of per-entry arrays for each
                input (sent as several requests; see :func:`split_requests`).
            outputs: a subset of the model's outputs to return (default: all).

        Raises:
            InferenceError: at once, for inputs that do not match the model (names, dtypes, shapes).
        """

    def statistics(self) -> dict[str, Any]:
        """Per-model counters and times for the timing report."""
        return {}

    def provenance(self) -> dict[str, dict[str, Any]]:
        """Per model used, what answered it: ``{"mode", "digest", "answers": {who: requests}}`` (mode
        ``direct``, ``sonic``, ``fallback`` or ``sonic+fallback``; the digest of the model files that
        answered, ``model_digest.digest``), for the output file's provenance."""
        return {}

    def close(self) -> None:
        """Releases sessions, connections and servers."""


#: an input: one array (batch dimension first when the model has one), or, for ragged inputs, a list
#: of per-entry arrays (without batch dimension) whose shapes may differ
InputArray = np.ndarray | Sequence[np.ndarray]


def is_ragged(inputs: Mapping[str, InputArray]) -> bool:
    """True when the inputs are given per entry (lists of arrays) rather than as batched arrays."""
    return any(isinstance(value, (list, tuple)) for value in inputs.values())


def _shape_error(info: ModelInfo, name: str, shape: tuple[int, ...], spec: TensorSpec, batched: bool) -> InferenceError:
    want = ("[batch, " if batched else "[") + ", ".join(map(str, spec.dims)) + "]"
    return InferenceError(f"model {info.name!r} input {name!r}: shape {list(shape)} does not match {want} (-1: any size)")


def _check_array(info: ModelInfo, name: str, array: Any, spec: TensorSpec, batched: bool) -> None:
    if not isinstance(array, np.ndarray):
        raise InferenceError(f"model {info.name!r} input {name!r}: expected a numpy array, got {type(array).__name__}")
    if array.dtype != spec.dtype:
        raise InferenceError(f"model {info.name!r} input {name!r}: dtype {array.dtype} but the model "
                             f"expects {spec.datatype} ({spec.dtype})")
    shape = array.shape[1:] if batched else array.shape
    if batched and not array.shape:
        raise InferenceError(f"model {info.name!r} input {name!r}: a batch dimension is required")
    if len(shape) != len(spec.dims) or any(d != -1 and d != s for d, s in zip(spec.dims, shape)):
        raise _shape_error(info, name, array.shape, spec, batched)


def check_inputs(info: ModelInfo, inputs: Mapping[str, InputArray], outputs: list[str] | None = None) -> int:
    """Validates names, dtypes and shapes against the model's config; returns the batch size.

    The batch size is the number of entries: the first dimension of batched inputs, the length of
    the lists of ragged inputs, 0 for a model without batch dimension given plain arrays.

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
    if is_ragged(inputs):
        lengths = {name: len(value) if isinstance(value, (list, tuple)) else None for name, value in inputs.items()}
        if len(set(lengths.values())) != 1 or None in lengths.values():
            raise InferenceError(f"model {info.name!r}: ragged inputs must all be lists of the same length "
                                 f"(one array per entry); got lengths {lengths}")
        for name, spec in expected.items():
            for array in inputs[name]:
                _check_array(info, name, array, spec, batched=False)
        return next(iter(lengths.values()))
    batched = info.max_batch_size > 0
    batch = None
    for name, spec in expected.items():
        array = inputs[name]
        _check_array(info, name, array, spec, batched)
        if batched:
            if batch is None:
                batch = array.shape[0]
            elif array.shape[0] != batch:
                raise InferenceError(f"model {info.name!r}: input {name!r} has batch size {array.shape[0]}, "
                                     f"others {batch}")
    return int(batch or 0)


def split_requests(info: ModelInfo, inputs: Mapping[str, InputArray], batch: int) -> list[dict[str, np.ndarray]]:
    """The requests that carry ``inputs``, in order (both modes send exactly these).

    * batched arrays: slices of at most ``max_batch_size`` rows (one request when they fit);
    * ragged lists: consecutive entries of equal shapes stacked into one request (at most
      ``max_batch_size``), so every request is a rectangular tensor;
    * a model without batch dimension: the inputs as they are (or one request per ragged entry).
    """
    limit = info.max_batch_size
    if not is_ragged(inputs):
        if limit <= 0 or batch <= limit:
            return [dict(inputs)]
        return [{name: array[start:start + limit] for name, array in inputs.items()} for start in range(0, batch, limit)]
    names = list(inputs)
    if limit <= 0:
        return [{name: inputs[name][i] for name in names} for i in range(batch)]
    requests, start = [], 0
    while start < batch:
        shapes = [inputs[name][start].shape for name in names]
        stop = start + 1
        while stop < batch and stop - start < limit and [inputs[n][stop].shape for n in names] == shapes:
            stop += 1
        requests.append({name: np.stack(inputs[name][start:stop]) for name in names})
        start = stop
    return requests


def assemble(info: ModelInfo, parts: list[dict[str, np.ndarray]], ragged: bool = False) -> dict[str, InputArray]:
    """Reassembles per-request outputs in request order.

    Batched parts are concatenated on the batch axis (stacked for a model without batch dimension
    given ragged entries). When the entries' output shapes differ (ragged outputs), the output is a
    list with one array per entry instead.
    """
    if len(parts) == 1 and not (ragged and info.max_batch_size <= 0):
        return parts[0]
    out: dict[str, InputArray] = {}
    for name in parts[0]:
        arrays = [part[name] for part in parts]
        if info.max_batch_size <= 0:
            same = all(a.shape == arrays[0].shape for a in arrays)
            out[name] = np.stack(arrays) if same else arrays
        elif all(a.shape[1:] == arrays[0].shape[1:] for a in arrays):
            out[name] = np.concatenate(arrays)
        else:
            out[name] = [row for a in arrays for row in a]
    return out


def payload_bytes(tensors: Mapping[str, np.ndarray]) -> int:
    """Tensor bytes of one request's inputs or one answer's outputs (what a planner multiplies by the
    event rate to size a network link; message framing is not counted)."""
    return sum(int(np.asarray(array).nbytes) for array in tensors.values())


@dataclass
class ModelCounters:
    """Client-side counters of one model: requests, rows (batch entries), time and bytes.

    ``bytes_sent`` / ``bytes_received`` are tensor bytes per request as each implementation defines
    them (direct: what the requests would carry; SONIC: what was put on the wire or in shared memory,
    ``shm_bytes`` of it in shared memory).
    """

    calls: int = 0
    requests: int = 0
    rows: int = 0
    seconds: float = 0.0
    bytes_sent: int = 0
    bytes_received: int = 0
    shm_bytes: int = 0
    failures: int = 0
    retries: int = 0
    failovers: int = 0
    servers: dict[str, int] = field(default_factory=dict)
    answers: dict[str, int] = field(default_factory=dict)  # server → requests it answered


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

    def count_answer(self, model: str, server: str) -> None:
        with self._lock:
            answers = self.models.setdefault(model, ModelCounters()).answers
            answers[server] = answers.get(server, 0) + 1

    def as_dict(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {name: dict(vars(c)) for name, c in self.models.items()}
