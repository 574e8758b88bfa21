"""Direct inference: the model's engine in this process, off the scheduler's threads (CMSSW's PseudoAsync).

The engine is chosen by the model's backend, as a Triton server chooses it (:data:`ENGINES`):
onnxruntime for ``onnxruntime_onnx``, torch for ``pytorch_libtorch`` (TorchScript ``model.pt``, opened
by the same ``torchscript.py`` the server's python-based pytorch backend uses). Either gives a runner
with onnxruntime's call, ``run(output names, feed)``, so the rest of this file does not care which.

One runner per model is shared by every stream (onnxruntime sessions and TorchScript modules are
thread-safe for inference); calls run on a small thread pool so a worker that issued a request is free
for other modules while the engine (which releases the GIL) computes. Batches larger than the model's
``max_batch_size`` are split exactly as the SONIC client splits them, so both modes see the same
batches.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import onnxruntime as ort

from ..errors import InferenceError
from ..extras import require
from ..futures import gather, then
from .backends.onnxruntime.ort_session import open_session
from .client import (Counters, InferenceClient, InputArray, assemble, check_inputs, is_ragged, payload_bytes,
                     split_requests)
from .repository import ModelInfo, ModelRepository

log = logging.getLogger(__name__)

#: backends (``backend_of`` a model's config) that run in this process → the engine's name
ENGINES = {"onnxruntime": "onnxruntime", "pytorch": "torch"}


def providers(device: str) -> list[str]:
    """Execution providers for ``device`` ("cpu", "gpu" or "auto": GPU when onnxruntime has CUDA)."""
    available = ort.get_available_providers()
    if device == "cpu":
        return ["CPUExecutionProvider"]
    if "CUDAExecutionProvider" in available:
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]
    if device == "gpu":
        raise InferenceError(f"device 'gpu' asked for, but this onnxruntime has only {available} "
                             f"(install onnxruntime-gpu)")
    return ["CPUExecutionProvider"]


class DirectClient(InferenceClient):
    """Runs repository models in-process: onnxruntime for ONNX models, torch for TorchScript ones.

    Args:
        repository (ModelRepository): where models are found (the same directories a server serves).
        workers (int): threads running sessions concurrently (requests beyond wait in a queue).
        intra_op_threads (int): engine threads inside one run (1 keeps jobs polite on shared nodes; torch's
            setting is process-wide).
        inter_op_threads (int): onnxruntime threads across graph branches.
        device (str): "cpu", "gpu" or "auto".
    """

    mode = "direct"

    def __init__(self, repository: ModelRepository, workers: int = 2, intra_op_threads: int = 1,
                 inter_op_threads: int = 1, device: str = "cpu"):
        self.repository = repository
        self.options = (intra_op_threads, inter_op_threads)
        self.device = device
        self._providers: list[str] | None = None
        self._pool = ThreadPoolExecutor(max(1, workers), thread_name_prefix="onnxruntime")
        self._sessions: dict[str, Any] = {}
        self._lock = threading.Lock()
        self.counters = Counters()

    def model_info(self, model: str) -> ModelInfo:
        return self.repository.get(model)

    @property
    def providers(self) -> list[str]:
        """onnxruntime's execution providers for ``device``, decided at the first ONNX model (so a job of
        TorchScript models on a GPU does not need onnxruntime-gpu)."""
        if self._providers is None:
            self._providers = providers(self.device)
        return self._providers

    def check_runnable(self, model: str) -> None:
        """ONNX and TorchScript models run in-process; an ensemble, a python-backend or a TensorFlow model
        needs a Triton server."""
        info = self.model_info(model)
        if info.backend not in ENGINES:
            kind = "an ensemble" if info.platform == "ensemble" else f"a {info.platform!r} model"
            raise InferenceError(f"model {model!r} is {kind}, which runs only on a Triton server: set "
                                 f"services.inference.mode=sonic (--inference sonic)")

    def session(self, model: str) -> Any:
        """The model's shared runner (an onnxruntime session, or a TorchScript runner with the same
        ``run``), created (after checksum verification) on first use."""
        with self._lock:
            if model not in self._sessions:
                self.check_runnable(model)
                info = self.repository.get(model)
                info.verify_checksums()
                path = info.model_file()
                if not path.exists():
                    raise InferenceError(f"model {model!r}: {path} does not exist")
                opener = self._open_torchscript if info.backend == "pytorch" else self._open_onnx
                try:
                    self._sessions[model] = opener(os.fspath(path), info.config_dict)
                except InferenceError:
                    raise
                except Exception as err:
                    lines = str(err).strip().splitlines()
                    raise InferenceError(f"model {model!r}: {ENGINES[info.backend]} cannot load {path}: "
                                         f"{lines[-1] if lines else repr(err)}") from None
                log.debug("loaded %s", path)
            return self._sessions[model]

    def _open_onnx(self, path: str, config: dict[str, Any]) -> ort.InferenceSession:
        return open_session(path, config, self.providers, *self.options)

    def _open_torchscript(self, path: str, config: dict[str, Any]) -> Any:
        torch = require("torch", "a TorchScript (pytorch_libtorch) model in direct mode", InferenceError)
        from .backends.pytorch.torchscript import open_torchscript

        cuda = torch.cuda.is_available()
        if self.device == "gpu" and not cuda:
            raise InferenceError("device 'gpu' asked for, but this torch has no CUDA")
        device = "cuda" if cuda and self.device != "cpu" else "cpu"
        return open_torchscript(path, config, device, threads=self.options[0])

    def run(self, model: str, inputs: Mapping[str, InputArray], outputs: list[str] | None = None) -> dict[str, InputArray]:
        """Synchronous inference on the calling thread (the Future-less form of :meth:`infer`)."""
        info = self.model_info(model)
        batch = check_inputs(info, inputs, outputs)
        names = outputs or [spec.name for spec in info.outputs]
        return self._run_parts(info, split_requests(info, inputs, batch), names, batch, is_ragged(inputs))

    def _run_parts(self, info: ModelInfo, requests: list[dict[str, np.ndarray]], names: list[str], batch: int,
                   ragged: bool) -> dict[str, InputArray]:
        """Checked requests run one after another on the calling thread, their answers assembled."""
        return self._finish(info, [self._run_part(info, part, names) for part in requests], batch, ragged)

    def _run_part(self, info: ModelInfo, part: dict[str, np.ndarray], names: list[str]) -> dict[str, np.ndarray]:
        """One request's worth of inputs through the model's session."""
        session = self.session(info.name)
        start = time.perf_counter()
        try:
            values = session.run(names, part)
        except Exception as err:  # the engines' exceptions carry no common base we can name
            raise InferenceError(f"model {info.name!r}: {ENGINES[info.backend]} failed: {err}") from None
        answer = dict(zip(names, values))
        # the engine's own time, request by request: a call's requests queued on the pool behind other models'
        # would otherwise count their wait as this model's time. And the bytes this request would carry to a
        # server (a planner sizes a link from a direct run too)
        self.counters.add(info.name, seconds=time.perf_counter() - start, bytes_sent=payload_bytes(part),
                          bytes_received=payload_bytes(answer))
        return answer

    def _finish(self, info: ModelInfo, parts: list[dict[str, np.ndarray]], batch: int,
                ragged: bool) -> dict[str, InputArray]:
        self.counters.add(info.name, calls=1, requests=len(parts), rows=batch)
        return assemble(info, parts, ragged)

    def infer(self, model: str, inputs: Mapping[str, InputArray], outputs: list[str] | None = None) -> Future:
        """Starts inference on the pool: the requests a large input splits into (at ``max_batch_size``) run
        side by side on the pool's threads, as a server would run them on its instances."""
        info = self.model_info(model)
        batch = check_inputs(info, inputs, outputs)  # fail in acquire, on the caller's thread, with its context
        requests = split_requests(info, inputs, batch)
        names = outputs or [spec.name for spec in info.outputs]
        if len(requests) == 1:  # checked and split here: the pool runs it as it is
            return self._pool.submit(self._run_parts, info, requests, names, batch, is_ragged(inputs))
        parts = gather([self._pool.submit(self._run_part, info, part, names) for part in requests])
        return then(parts, lambda answers: self._finish(info, answers, batch, is_ragged(inputs)))

    def statistics(self) -> dict[str, Any]:
        return {"mode": self.mode, "providers": self._providers or [], "models": self.counters.as_dict()}

    def provenance(self) -> dict[str, dict[str, Any]]:
        from .model_digest import model_digest

        where = f"in-process ({', '.join(self._providers or [self.device])})"
        return {model: {"mode": "direct", "digest": model_digest(self.repository, model),
                        "answers": {where: c["requests"]}}
                for model, c in self.counters.as_dict().items() if c["requests"]}

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._sessions.clear()
