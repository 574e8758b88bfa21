"""The generic body of a python-based backend that runs one model file with an engine (onnxruntime, torch, tensorflow).

A python-based backend's ``model.py`` subclasses :class:`BatchedModel` and says how to open the model
file (:meth:`BatchedModel.open` returns an object with ``run(output names, {input name: array}) ->
[arrays]``, the call onnxruntime's ``InferenceSession.run`` has, which direct inference uses too). The
rest is the same for every engine:

* Triton's dynamic batcher hands :meth:`execute` several requests; those with equal non-batch shapes
  and the same requested outputs are concatenated and run as one call, then split back per request;
* when that call fails, each request is run alone, so a bad request fails alone, each with its own
  ``TritonError`` (one error object shared by several responses of a batched execution crashes the server);
* nothing escapes ``execute`` (the stub would fail every request of the execution with one generic
  message that names no culprit);
* the model file is checked before the engine opens it (``model_file.py``: empty, not a model of its
  kind, truncated, too large): such a model fails to load with one line naming the file and why.

Only numpy is imported here; this file runs in the stub's interpreter, which may not have sonic-hep.
``stub_tensors.py`` (numpy 1 or 2 across the stub's boundary) is found beside the onnxruntime backend.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(__file__))), "onnxruntime"))
from stub_tensors import from_numpy, to_numpy  # noqa: E402  (found through the path above)

from model_file import kind_of, problem  # noqa: E402  (beside this file, on the path the backends' model.py set)


class BatchedModel:
    """One model instance of a python-based backend: the config's tensors and an engine's runner.

    Subclasses set :attr:`engine` (named in error messages) and implement :meth:`open`.
    """

    #: the engine's name, as error messages show it ("torch", "tensorflow")
    engine = "?"

    def open(self, path: str, args: dict[str, str]) -> Any:
        """The runner of the model file ``path`` (``args``: what Triton passed to ``initialize``)."""
        raise NotImplementedError

    def default_filename(self) -> str:
        """The model file inside a version folder when the config has no ``default_model_filename``."""
        raise NotImplementedError

    @staticmethod
    def torch_device(args: dict[str, str]) -> str:
        """Where a torch engine runs this instance: ``cuda:<id>`` for a ``KIND_GPU`` instance in a python
        whose torch sees CUDA, else ``"cpu"`` (torch is imported here, not by backends without it)."""
        import torch

        if args.get("model_instance_kind") == "GPU" and torch.cuda.is_available():
            return f"cuda:{int(args.get('model_instance_device_id') or 0)}"
        return "cpu"

    def initialize(self, args: dict[str, str]) -> None:
        self.config = json.loads(args["model_config"])
        self.name = self.config["name"]
        self.max_batch_size = int(self.config.get("max_batch_size", 0))
        self.input_names = [spec["name"] for spec in self.config["input"]]
        self.output_types = {spec["name"]: pb_utils.triton_string_to_numpy(spec["data_type"])
                             for spec in self.config["output"]}
        filename = self.config.get("default_model_filename") or self.default_filename()
        # the user's file, not the runtime repository's link to it, is what messages name
        path = os.path.realpath(os.path.join(args["model_repository"], args["model_version"], filename))
        kind = kind_of(self.config.get("backend", ""), self.config.get("platform", ""))
        unloadable = problem(path, kind)
        if unloadable:  # this model fails to load, with the reason; the server and its other models go on
            raise ValueError(f"model {self.name!r}: {unloadable}")
        try:
            self.runner = self.open(path, args)
        except Exception as err:  # noqa: BLE001 - engines' errors have no common base; said as backend.cc says it
            lines = str(err).strip().splitlines()
            raise RuntimeError(f"model {self.name!r}: {self.engine} cannot open {path}: "
                               f"{lines[-1] if lines else type(err).__name__}") from None

    def execute(self, requests: list) -> list:
        """Runs the requests Triton batched together; one response per request, in order."""
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
            except Exception as err:  # noqa: BLE001 - engines' errors have no common base; report per request
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
            return self._response(wanted, self.runner.run(wanted, arrays))
        except Exception as err:  # noqa: BLE001 - see execute
            return self._failure(err)

    def _response(self, wanted, values: list[np.ndarray]):
        tensors = [from_numpy(pb_utils, name, np.asarray(value, dtype=self.output_types[name]))
                   for name, value in zip(wanted, values)]
        return pb_utils.InferenceResponse(output_tensors=tensors)

    def _failure(self, err: Exception):
        # a TritonError of its own per response (see the module docstring)
        return pb_utils.InferenceResponse(error=pb_utils.TritonError(f"model {self.name!r}: {self.engine} failed: {err}"))

    def _input(self, request, name: str) -> np.ndarray:
        tensor = pb_utils.get_input_tensor_by_name(request, name)
        if tensor is None:
            raise ValueError(f"model {self.name!r}: request has no input {name!r}")
        try:
            return to_numpy(tensor)
        except ValueError as err:
            raise ValueError(f"model {self.name!r}: {err}") from None
        except Exception as err:  # noqa: BLE001 - the stub may refuse a tensor (a type numpy lacks)
            raise ValueError(f"model {self.name!r}: input {name!r} cannot be read: {type(err).__name__}: {err}") from None

    def _run(self, wanted: list[str], members: list[dict[str, np.ndarray]]) -> list[list[np.ndarray]]:
        """One engine call for all ``members`` (concatenated on the batch axis); outputs per member."""
        if len(members) == 1:
            return [self.runner.run(wanted, members[0])]
        sizes = [len(next(iter(arrays.values()))) for arrays in members]
        feed = {name: np.concatenate([arrays[name] for arrays in members]) for name in self.input_names}
        values = self.runner.run(wanted, feed)
        cuts = np.cumsum(sizes)[:-1]
        split = [np.split(value, cuts) for value in values]
        return [[parts[i] for parts in split] for i in range(len(members))]

    def finalize(self) -> None:
        self.runner = None
