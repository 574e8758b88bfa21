"""Prepared gRPC bodies: one ``ModelInferRequest``, serialised and framed once, replayed by a C load generator.

A load generator in Python spends more CPU per request than a native Triton backend does, so on a
small machine it measures itself. ``h2load`` (nghttp2) posting the same prepared body over and over
costs a few microseconds per request; the body must then be exactly what a gRPC client would put on
the wire for ``inference.GRPCInferenceService/ModelInfer``:

* the message: a ``ModelInferRequest`` (tritonclient's generated protobuf class), tensors as
  ``raw_input_contents`` in input order, as tritonclient sends them;
* its gRPC framing (length-prefixed message): one byte 0 (not compressed), the length as 4 bytes
  big-endian, then the message bytes.

::

    request = infer_request("demo_mlp", {"x": np.zeros((1, 16), np.float32)})
    Path("body.bin").write_bytes(frame(request.SerializeToString()))
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

import numpy as np
from tritonclient.grpc import service_pb2
from tritonclient.utils import np_to_triton_dtype

#: the HTTP/2 path of the inference call, and the headers a gRPC request carries
INFER_PATH = "/inference.GRPCInferenceService/ModelInfer"
GRPC_HEADERS = ("content-type: application/grpc", "te: trailers")

_PREFIX = struct.Struct(">BI")  # compressed flag, message length


def infer_request(model: str, inputs: Mapping[str, np.ndarray], outputs: list[str] | None = None,
                  version: str = "") -> service_pb2.ModelInferRequest:
    """A ``ModelInferRequest`` for ``model`` carrying ``inputs`` (name → array, batch dimension included).

    Args:
        model (str): model name as the server knows it.
        inputs (Mapping[str, ndarray]): fixed-size numeric arrays (copied as C-contiguous bytes).
        outputs (list[str] | None): outputs to return (default: all the model has).
        version (str): model version ("" lets the server choose).
    """
    request = service_pb2.ModelInferRequest(model_name=model, model_version=version)
    for name, array in inputs.items():
        array = np.ascontiguousarray(array)
        if array.dtype == object:
            raise ValueError(f"input {name!r} of {model!r}: prepared bodies carry numeric tensors only")
        tensor = request.inputs.add(name=name, datatype=np_to_triton_dtype(array.dtype))
        tensor.shape.extend(array.shape)
        request.raw_input_contents.append(array.tobytes())
    for name in outputs or []:
        request.outputs.add(name=name)
    return request


def frame(message: bytes) -> bytes:
    """``message`` as one gRPC length-prefixed message (uncompressed)."""
    return _PREFIX.pack(0, len(message)) + message


def unframe(body: bytes) -> bytes:
    """The message inside one framed body (the inverse of :func:`frame`); ValueError when ``body`` is not one
    uncompressed gRPC message."""
    if len(body) < _PREFIX.size:
        raise ValueError(f"a gRPC body has at least {_PREFIX.size} bytes, this one {len(body)}")
    compressed, length = _PREFIX.unpack_from(body)
    if compressed or length != len(body) - _PREFIX.size:
        raise ValueError(f"not one uncompressed gRPC message: flag {compressed}, length {length} for "
                         f"{len(body) - _PREFIX.size} bytes")
    return body[_PREFIX.size:]


def body(model: str, inputs: Mapping[str, np.ndarray], outputs: list[str] | None = None) -> bytes:
    """The framed body of one inference request: what ``h2load --data`` posts."""
    return frame(infer_request(model, inputs, outputs).SerializeToString())
