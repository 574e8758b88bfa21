"""Cheap checks of a model file before an engine opens it: one bad file is one unloadable model, with a reason.

An engine handed an empty, random, cut or enormous file at best answers with a generic parse error
("Protobuf parsing failed") that names neither the file nor what is wrong with it, and some read the
whole file into memory first (a frozen GraphDef is parsed from one ``read()``). These checks look at
the file's size and at most its top-level structure, without reading the file into memory (a 1 GB
sparse file costs a few reads), and say in one line what is wrong, naming the file:

* every kind: the file is empty;
* protobuf files (ONNX, GraphDef): larger than the 2 GiB a protobuf message can hold (an ONNX model
  that large keeps its weights in external data files);
* ONNX: the top-level fields of the ``ModelProto`` are walked (key, then a varint or a length-prefixed
  payload that is skipped with a seek): a key that is no field of a ModelProto (or a field with the wrong
  wire type) at the start means "not an ONNX model"; a field whose payload runs past the end of the
  file, after a well-formed ``ir_version`` (the first field every writer emits), means "truncated"; a
  well-formed message without a graph is not a model either;
* TorchScript (a zip archive): the zip signature at the start and the end-of-archive record near the end
  (a cut archive has none).

A file that passes may still be refused by its engine; that error is the engine's own. The native
onnxruntime backend (``native/backend.cc``, ``onnx_file_problem``) applies the same ONNX rules with the
same messages, before its file reaches onnxruntime; ``servable.py`` applies them before a server starts,
so such a model is left out and named instead of stopping the server.

Only the standard library is imported: this file also runs inside the Triton python stub.

Example::

    problem("m/1/model.onnx", kind_of("onnxruntime", "onnxruntime_onnx"))
    # "m/1/model.onnx is truncated (1552 bytes): its graph field at byte 22 needs 3083 bytes, 1527 are left"
"""

from __future__ import annotations

import os

#: the largest message protobuf parses (2 GiB - 1)
PROTOBUF_LIMIT = 2**31 - 1
#: top-level fields of onnx.ModelProto: number → (name, wire type: 0 varint, 2 length-prefixed)
ONNX_FIELDS = {1: ("ir_version", 0), 2: ("producer_name", 2), 3: ("producer_version", 2), 4: ("domain", 2),
               5: ("model_version", 0), 6: ("doc_string", 2), 7: ("graph", 2), 8: ("opset_import", 2),
               14: ("metadata_props", 2), 20: ("training_info", 2), 25: ("functions", 2), 26: ("configuration", 2)}
#: what a file of each kind is checked for (see the module docstring)
KINDS = ("onnx", "torchscript", "protobuf", "any")


def kind_of(backend: str, platform: str = "") -> str:
    """The kind of model file a backend (``repository.backend_of``) or platform opens: "onnx",
    "torchscript", "protobuf" (a frozen GraphDef) or "any" (a SavedModel folder, a custom backend's file)."""
    if backend in ("onnxruntime", "onnxtorch") or platform.startswith("onnxruntime"):
        return "onnx"
    if backend == "pytorch" or platform.startswith("pytorch"):
        return "torchscript"
    return "protobuf" if platform == "tensorflow_graphdef" else "any"


def problem(path: str | os.PathLike, kind: str) -> str:
    """What is wrong with the model file ``path`` of ``kind`` (see :data:`KINDS`), in one line naming it;
    "" when it looks like one (a folder, e.g. a SavedModel, is not looked into)."""
    path = os.fspath(path)
    try:
        if os.path.isdir(path):
            return ""
        size = os.path.getsize(path)
        if size == 0:
            return f"{path} is empty (0 bytes)"
        if kind in ("onnx", "protobuf") and size > PROTOBUF_LIMIT:
            return (f"{path} is {size} bytes, more than the 2 GiB a protobuf can hold (an ONNX model that "
                    f"large keeps its weights in external data files)")
        with open(path, "rb") as stream:
            if kind == "onnx":
                return _onnx_problem(path, stream, size)
            if kind == "torchscript":
                return _zip_problem(path, stream, size)
    except OSError as err:
        return f"{path} cannot be read: {err.strerror or err}"
    return ""


def _varint(stream) -> int | None:
    """The varint at the stream's position, or None when the file ends inside it (or it is over 10 bytes)."""
    value = 0
    for shift in range(0, 70, 7):
        byte = stream.read(1)
        if not byte:
            return None
        value |= (byte[0] & 0x7F) << shift
        if byte[0] < 0x80:
            return value
    return None


def _onnx_problem(path: str, stream, size: int) -> str:
    seen: set[int] = set()
    while (start := stream.tell()) < size:
        key = _varint(stream)
        field, wire = (key >> 3, key & 7) if key is not None else (0, -1)
        name, expected = ONNX_FIELDS.get(field, ("", -1))
        if key is None or not name or wire != expected:
            return f"{path} is not an ONNX model (no ONNX ModelProto field at byte {start})"
        length = _varint(stream)
        need = 0 if wire == 0 else length
        left = size - stream.tell()
        if length is None or need > left:
            if 1 not in seen:
                return f"{path} is not an ONNX model (no ONNX ModelProto field at byte {start})"
            needs = "is cut off" if length is None else f"needs {need} bytes, {left} are left"
            return f"{path} is truncated ({size} bytes): its {name} field at byte {start} {needs}"
        stream.seek(need, os.SEEK_CUR)
        seen.add(field)
    if 7 not in seen:
        return f"{path} is not an ONNX model (it has no graph)"
    return ""


def _zip_problem(path: str, stream, size: int) -> str:
    if stream.read(4) != b"PK\x03\x04":
        return f"{path} is not a TorchScript model (not a zip archive)"
    tail = min(size, 65_557)  # the end record (22 bytes) and the longest archive comment (65,535)
    stream.seek(size - tail)
    if b"PK\x05\x06" not in stream.read(tail):
        return f"{path} is truncated ({size} bytes): the zip archive has no end record"
    return ""
