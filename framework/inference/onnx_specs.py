"""A model's inputs and outputs read from its ONNX file, as repository tensor specs.

Used to write a repository entry for a project model without restating what the ONNX file already
says (``sonic server add-model``): element types map to Triton data types, symbolic or unknown
dimensions become ``-1``, and with a batch dimension the first axis is left out (Triton's ``dims``
exclude it).
"""

from __future__ import annotations

import os

import onnx

from ..errors import InferenceError
from .repository import TensorSpec

#: ONNX TensorProto element types → Triton data type names
ONNX_TO_TRITON = {
    onnx.TensorProto.FLOAT: "FP32", onnx.TensorProto.DOUBLE: "FP64", onnx.TensorProto.FLOAT16: "FP16",
    onnx.TensorProto.INT8: "INT8", onnx.TensorProto.INT16: "INT16", onnx.TensorProto.INT32: "INT32",
    onnx.TensorProto.INT64: "INT64", onnx.TensorProto.UINT8: "UINT8", onnx.TensorProto.UINT16: "UINT16",
    onnx.TensorProto.UINT32: "UINT32", onnx.TensorProto.UINT64: "UINT64", onnx.TensorProto.BOOL: "BOOL",
    onnx.TensorProto.STRING: "STRING",
}


def _spec(value: onnx.ValueInfoProto, batched: bool, path: str) -> TensorSpec:
    tensor = value.type.tensor_type
    if tensor.elem_type not in ONNX_TO_TRITON:
        raise InferenceError(f"{path}: tensor {value.name!r} has ONNX type "
                             f"{onnx.TensorProto.DataType.Name(tensor.elem_type)}, which Triton cannot carry")
    dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim]
    if batched:
        if not dims:
            raise InferenceError(f"{path}: tensor {value.name!r} is a scalar, so it has no batch dimension; "
                                 f"use max_batch_size 0")
        dims = dims[1:]
    return TensorSpec(value.name, ONNX_TO_TRITON[tensor.elem_type], tuple(dims))


def onnx_specs(path: str | os.PathLike, batched: bool) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """``(inputs, outputs)`` of the ONNX model at ``path`` (initializers are not inputs)."""
    path = os.fspath(path)
    try:
        model = onnx.load(path, load_external_data=False)
    except Exception as err:  # noqa: BLE001 - onnx raises several types for a bad file
        raise InferenceError(f"{path}: not a readable ONNX model: {err}") from None
    weights = {init.name for init in model.graph.initializer}
    inputs = [_spec(v, batched, path) for v in model.graph.input if v.name not in weights]
    outputs = [_spec(v, batched, path) for v in model.graph.output]
    return inputs, outputs
