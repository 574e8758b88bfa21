"""What the producers send to inference, measured in the job itself.

A benchmark that reports "input MB per event" should not rebuild the producers' inputs beside them
(a second copy of their preprocessing that drifts, and that must know every producer class): it
runs the real configuration and counts the bytes each ``infer`` call carries. :func:`count_sent`
puts a counting wrapper around the job's own inference client, so every producer, direct or SONIC,
runs unchanged and the timing report's inference section stays the real client's.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any

import numpy as np

from ...framework import Process
from ...framework.inference.client import InferenceClient, InputArray
from ...framework.inference.repository import ModelInfo
from ...framework.services import Service


def nbytes(inputs: Mapping[str, InputArray]) -> int:
    """Bytes of one request's inputs (batched arrays, or the per-entry arrays of ragged inputs)."""
    total = 0
    for value in inputs.values():
        total += sum(np.asarray(a).nbytes for a in value) if isinstance(value, (list, tuple)) \
            else np.asarray(value).nbytes
    return total


class SentBytes(InferenceClient):
    """The job's inference client, unchanged, counting the input bytes sent to each model.

    Attributes:
        sent (Counter[str]): input bytes per model name, over the whole job.
    """

    def __init__(self, inner: InferenceClient):
        self.inner = inner
        self.mode = inner.mode
        self.sent: Counter[str] = Counter()
        self._lock = threading.Lock()

    def model_info(self, model: str) -> ModelInfo:
        return self.inner.model_info(model)

    def check_runnable(self, model: str) -> None:
        self.inner.check_runnable(model)

    def infer(self, model: str, inputs: Mapping[str, InputArray], outputs: list[str] | None = None) -> Future:
        size = nbytes(inputs)
        with self._lock:
            self.sent[model] += size
        return self.inner.infer(model, inputs, outputs)

    def statistics(self) -> dict[str, Any]:
        return self.inner.statistics()

    def close(self) -> None:
        self.inner.close()


class CountingInference(Service):
    """Stands for the process's ``inference`` service: the real one starts, reports and stops; its
    client is seen through :class:`SentBytes`."""

    name = "inference"

    def __init__(self, real: Service):
        super().__init__(real.config)
        self.real = real
        self._client: SentBytes | None = None

    @property
    def client(self) -> SentBytes:
        if self._client is None:
            self._client = SentBytes(self.real.client)
        return self._client

    @property
    def sent(self) -> Counter[str]:
        """Input bytes per model so far (empty before the job began)."""
        return self._client.sent if self._client is not None else Counter()

    def begin_job(self) -> None:
        self.real.begin_job()
        self.client  # noqa: B018 - wrap the client the real service just made

    def end_job(self) -> None:
        self.real.end_job()

    def report(self) -> dict[str, Any] | None:
        return self.real.report()


def count_sent(process: Process) -> CountingInference | None:
    """Makes ``process`` (not yet run) count what its producers send; None when no module uses
    inference. Read ``.sent`` after the run. Nothing starts here: the client is made, as always, when
    the job begins (so a failing start is reported and cleaned up by the run)."""
    real = process.services.get("inference")
    if real is None:
        return None
    counting = CountingInference(real)
    process.services["inference"] = counting
    return counting
