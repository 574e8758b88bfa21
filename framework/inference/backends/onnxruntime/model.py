"""Triton python-based backend ``onnxruntime``: serves ``platform: "onnxruntime_onnx"`` models unmodified.

The pip-installed Triton has no onnxruntime backend library. When a model's platform maps to backend
``onnxruntime`` and ``<backend-directory>/onnxruntime/model.py`` exists, Triton runs that file through
the python backend for every such model; this is that file. It reads the model's own config (what
Triton passes as ``args["model_config"]``), so a repository written for the official Triton (CMS's
ParticleNet, DeepMET) is served as it is:

* ``max_batch_size`` and ``dynamic_batching``: Triton's batcher hands :meth:`execute` several requests;
  those with equal non-batch shapes and the same requested outputs are concatenated and run as one
  onnxruntime call (one execution serves many requests), then split back per request; when that
  call fails, each request is run alone, so a bad request fails alone (each with its own error);
* ``instance_group``: Triton starts one stub process per instance, each with its own session;
  ``KIND_GPU`` instances use onnxruntime's CUDA provider when it exists;
* variable dims (``-1``): any size; requests of different sizes run in separate calls;
* ``label_filename``: classification (``class_count`` on an output) is done by Triton's core;
* ``optimization.graph.level`` and the ``intra_op_thread_count``/``inter_op_thread_count`` parameters,
  as the official backend reads them (see ``ort_session.py``); ``SONIC_ORT_THREADS`` sets the default.

Only onnxruntime and numpy are imported (this file runs in the stub's interpreter, not necessarily
sonic-hep's), with numpy 1 or 2 (``stub_tensors.py``).
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import triton_python_backend_utils as pb_utils

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
from ort_session import open_session  # noqa: E402  (beside this file, found through the path above)
from stub_tensors import from_numpy, to_numpy  # noqa: E402


class TritonPythonModel:
    """One model instance: an onnxruntime session and the config's tensor names and types."""

    def initialize(self, args: dict[str, str]) -> None:
        self.config = json.loads(args["model_config"])
        self.name = self.config["name"]
        self.max_batch_size = int(self.config.get("max_batch_size", 0))
        self.input_names = [spec["name"] for spec in self.config["input"]]
        self.output_types = {spec["name"]: pb_utils.triton_string_to_numpy(spec["data_type"])
                             for spec in self.config["output"]}
        filename = self.config.get("default_model_filename") or "model.onnx"
        path = os.path.join(args["model_repository"], args["model_version"], filename)
        providers: list = ["CPUExecutionProvider"]
        if args.get("model_instance_kind") == "GPU":
            import onnxruntime as ort

            if "CUDAExecutionProvider" in ort.get_available_providers():
                device = int(args.get("model_instance_device_id") or 0)
                providers = [("CUDAExecutionProvider", {"device_id": device}), "CPUExecutionProvider"]
        threads = int(os.environ.get("SONIC_ORT_THREADS", "1"))
        self.session = open_session(path, self.config, providers, intra_op_threads=threads)

    def execute(self, requests: list) -> list:
        """Runs the requests Triton batched together; one response per request, in order.

        Nothing escapes: an exception out of ``execute`` makes the stub fail *every* request of the
        execution with one generic message (not naming the culprit), so valid requests batched with a
        bad one would fail too. Each failure becomes its own request's error response instead.
        """
        responses: list = [None] * len(requests)
        groups: dict[tuple, list[tuple[int, dict[str, np.ndarray]]]] = {}
        for index, request in enumerate(requests):
            try:
                arrays = {name: self._input(request, name) for name in self.input_names}
            except ValueError as err:  # _input says which model and input
                responses[index] = pb_utils.InferenceResponse(error=pb_utils.TritonError(str(err)))
                continue
            wanted = tuple(request.requested_output_names() or self.output_types)
            if self.max_batch_size > 0:
                key = (wanted, tuple(a.shape[1:] for a in arrays.values()))
            else:
                key = (wanted, index)  # no batch dimension: nothing to concatenate
            groups.setdefault(key, []).append((index, arrays))
        for (wanted, _), members in groups.items():
            try:
                outputs = self._run(list(wanted), [arrays for _, arrays in members])
            except Exception as err:  # noqa: BLE001 - onnxruntime errors have no common base; report per request
                if len(members) == 1:
                    responses[members[0][0]] = self._failure(err)
                    continue
                for index, arrays in members:  # one bad request must not fail those batched with it
                    responses[index] = self._alone(list(wanted), arrays)
                continue
            for (index, _), values in zip(members, outputs):
                try:
                    responses[index] = self._response(wanted, values)
                except Exception as err:  # noqa: BLE001 - see execute's docstring
                    responses[index] = self._failure(err)
        return responses

    def _alone(self, wanted: list[str], arrays: dict[str, np.ndarray]):
        """The response of one request run on its own (after its group failed)."""
        try:
            return self._response(wanted, self.session.run(wanted, arrays))
        except Exception as err:  # noqa: BLE001 - see execute
            return self._failure(err)

    def _response(self, wanted, values: list[np.ndarray]):
        tensors = [from_numpy(pb_utils, name, np.asarray(value, dtype=self.output_types[name]))
                   for name, value in zip(wanted, values)]
        return pb_utils.InferenceResponse(output_tensors=tensors)

    def _failure(self, err: Exception):
        # a TritonError of its own per response: one object shared by the responses of a batched
        # execution is freed once per response by the stub, which garbles the texts and crashes the
        # server under concurrency (issue 11)
        return pb_utils.InferenceResponse(error=pb_utils.TritonError(f"model {self.name!r}: onnxruntime failed: {err}"))

    def _input(self, request, name: str) -> np.ndarray:
        tensor = pb_utils.get_input_tensor_by_name(request, name)
        if tensor is None:
            raise ValueError(f"model {self.name!r}: request has no input {name!r}")
        try:
            return to_numpy(tensor)
        except ValueError as err:
            raise ValueError(f"model {self.name!r}: {err}") from None
        except Exception as err:  # noqa: BLE001 - the stub may refuse a tensor (a type numpy lacks)
            detail = f"{type(err).__name__}: {err}"
            raise ValueError(f"model {self.name!r}: input {name!r} cannot be read: {detail}") from None

    def _run(self, wanted: list[str], members: list[dict[str, np.ndarray]]) -> list[list[np.ndarray]]:
        """One onnxruntime call for all ``members`` (concatenated on the batch axis); outputs per member."""
        if len(members) == 1:
            return [self.session.run(wanted, members[0])]
        sizes = [len(next(iter(arrays.values()))) for arrays in members]
        feed = {name: np.concatenate([arrays[name] for arrays in members]) for name in self.input_names}
        values = self.session.run(wanted, feed)
        cuts = np.cumsum(sizes)[:-1]
        split = [np.split(value, cuts) for value in values]
        return [[parts[i] for parts in split] for i in range(len(members))]

    def finalize(self) -> None:
        self.session = None
