"""An ONNX graph run by torch, node by node: the same ``model.onnx`` on a GPU without onnxruntime-gpu.

GPU machines often have torch with CUDA but only the CPU onnxruntime (onnxruntime-gpu is large and
tied to one CUDA version), and shipping a second copy of every network as a ``.pt`` file would let
the two copies drift. So the ONNX file itself is read (``onnx``) and each node becomes the torch call
that computes it, on the instance's device and precision. The operators are those of the project's
MiniAOD models (ParticleNet AK4/AK8, DeepMET, DeepTau) and CMS's ParticleNet (opset 11 and 17); any
other one is refused when the file is opened, naming the operator and the node, never at run time.

Precision: ``float32`` computes like onnxruntime on the CPU (TF32 off on CUDA). ``float16`` is mixed
precision: the layers with weights (``Conv``, ``Gemm``, ``MatMul`` by a weight matrix), where the
FLOPs are, take half-precision inputs and weights and give float32 results; everything else stays
float32. Casting the whole graph does not work for ParticleNet: its k-nearest-neighbour search moves
masked particles 1e9 away, which is infinite in float16, and the NaNs that follow reach every score.
How far float16 scores move is the caller's to check (``sonic bench gpu-models`` reports it).

Tensors of integers (shapes, indices, the ``Shape`` of an input) stay on the CPU, so that ``Reshape``,
``Slice`` or ``TopK`` read their arguments without waiting for the GPU; an operator that mixes them
with device tensors moves them to the device first.

The runner has the call onnxruntime sessions have (``run(output names, {input name: array}) ->
[arrays]``), like ``pytorch/torchscript.py``'s, so callers and the python-based backend do not care
which engine runs a model. Only torch, numpy and onnx are imported: this file also runs inside the
Triton python stub, whose interpreter may not have sonic-hep.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import numpy_helper

#: ONNX element types → torch dtypes (those the supported operators cast to)
DTYPES = {
    onnx.TensorProto.FLOAT: torch.float32, onnx.TensorProto.DOUBLE: torch.float64,
    onnx.TensorProto.FLOAT16: torch.float16, onnx.TensorProto.INT32: torch.int32,
    onnx.TensorProto.INT64: torch.int64, onnx.TensorProto.BOOL: torch.bool,
    onnx.TensorProto.UINT8: torch.uint8, onnx.TensorProto.INT8: torch.int8,
}


class Node:
    """One graph node: its operator, input and output names, attributes and opset."""

    def __init__(self, proto: onnx.NodeProto, opset: int):
        self.op = proto.op_type
        self.name = proto.name or f"{proto.op_type}->{','.join(proto.output)}"
        self.inputs = list(proto.input)
        self.outputs = list(proto.output)
        self.attrs = {a.name: onnx.helper.get_attribute_value(a) for a in proto.attribute}
        self.opset = opset


def _ints(value: Any) -> list[int]:
    """A shape-like argument (a CPU tensor, usually) as Python ints."""
    return [int(v) for v in (value.tolist() if isinstance(value, torch.Tensor) else value)]


def _same_device(*tensors: torch.Tensor | None) -> list[torch.Tensor | None]:
    """The tensors on one device: CPU integer tensors join a device tensor (see the module docstring)."""
    device = next((t.device for t in tensors if t is not None and t.device.type != "cpu"), None)
    if device is None:
        return list(tensors)
    return [t.to(device, non_blocking=True) if t is not None and t.device != device else t for t in tensors]


def _axes(node: Node, args: list, index: int) -> list[int] | None:
    """A reduction's / Unsqueeze's axes: an attribute before opsets 13/18, an input after."""
    if "axes" in node.attrs:
        return list(node.attrs["axes"])
    if len(args) > index and args[index] is not None:
        return _ints(args[index])
    return None


def _reduce(fn: Callable) -> Callable:
    def run(node: Node, args: list) -> list[torch.Tensor]:
        x = args[0]
        axes = _axes(node, args, 1)
        keep = bool(node.attrs.get("keepdims", 1))
        if axes is None or not axes:
            if node.attrs.get("noop_with_empty_axes", 0):
                return [x]
            axes = list(range(x.dim()))
        return [fn(x, [a % x.dim() for a in axes], keep)]
    return run


def _reduce_max(x: torch.Tensor, axes: list[int], keep: bool) -> torch.Tensor:
    return torch.amax(x, dim=axes, keepdim=keep)


def _gather(node: Node, args: list) -> list[torch.Tensor]:
    data, index = _same_device(*args)
    axis = node.attrs.get("axis", 0) % data.dim()
    index = torch.where(index < 0, index + data.shape[axis], index)
    picked = data.index_select(axis, index.reshape(-1))
    return [picked.reshape((*data.shape[:axis], *index.shape, *data.shape[axis + 1:]))]


def _slice(node: Node, args: list) -> list[torch.Tensor]:
    x = args[0]
    starts, ends = _ints(args[1]), _ints(args[2])
    axes = _ints(args[3]) if len(args) > 3 and args[3] is not None else list(range(len(starts)))
    steps = _ints(args[4]) if len(args) > 4 and args[4] is not None else [1] * len(starts)
    index: list[slice] = [slice(None)] * x.dim()
    for start, end, axis, step in zip(starts, ends, axes, steps):
        if step <= 0:
            raise ValueError(f"node {node.name!r}: Slice with step {step} is not supported")
        size = x.shape[axis]
        start = max(0, min(size, start + size if start < 0 else start))
        end = max(0, min(size, end + size if end < 0 else end))
        index[axis % x.dim()] = slice(start, end, step)
    return [x[tuple(index)]]


def _conv(node: Node, args: list) -> list[torch.Tensor]:
    x, w = args[0], args[1]
    b = args[2] if len(args) > 2 else None
    spatial = w.dim() - 2
    if node.attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        raise ValueError(f"node {node.name!r}: Conv auto_pad {node.attrs['auto_pad']!r} is not supported")
    pads = list(node.attrs.get("pads", [0] * 2 * spatial))
    strides = list(node.attrs.get("strides", [1] * spatial))
    dilations = list(node.attrs.get("dilations", [1] * spatial))
    group = node.attrs.get("group", 1)
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[spatial]
    if pads[:spatial] == pads[spatial:]:
        return [conv(x, w, b, strides, pads[:spatial], dilations, group)]
    pairs: list[int] = []
    for axis in reversed(range(spatial)):  # F.pad lists the last axis first
        pairs += [pads[axis], pads[axis + spatial]]
    return [conv(F.pad(x, pairs), w, b, strides, 0, dilations, group)]


def _gemm(node: Node, args: list) -> list[torch.Tensor]:
    a, b = args[0], args[1]
    if node.attrs.get("transA", 0):
        a = a.transpose(-1, -2)
    if node.attrs.get("transB", 0):
        b = b.transpose(-1, -2)
    y = node.attrs.get("alpha", 1.0) * (a @ b)
    if len(args) > 2 and args[2] is not None:
        y = y + node.attrs.get("beta", 1.0) * args[2]
    return [y]


def _softmax(node: Node, args: list) -> list[torch.Tensor]:
    x = args[0]
    if node.opset >= 13:
        return [torch.softmax(x, dim=node.attrs.get("axis", -1))]
    axis = node.attrs.get("axis", 1) % x.dim()  # before opset 13: over all axes from ``axis`` on
    return [torch.softmax(x.reshape(int(np.prod(x.shape[:axis], dtype=np.int64)), -1), dim=1).reshape(x.shape)]


def _unsqueeze(node: Node, args: list) -> list[torch.Tensor]:
    x = args[0]
    axes = _axes(node, args, 1) or []
    rank = x.dim() + len(axes)
    for axis in sorted(a % rank for a in axes):
        x = x.unsqueeze(axis)
    return [x]


def _reshape(node: Node, args: list) -> list[torch.Tensor]:
    x, shape = args[0], _ints(args[1])
    if not node.attrs.get("allowzero", 0):
        shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
    return [x.reshape(tuple(shape))]


def _expand(node: Node, args: list) -> list[torch.Tensor]:
    x = args[0]
    return [x.expand(torch.broadcast_shapes(tuple(x.shape), tuple(_ints(args[1]))))]


def _topk(node: Node, args: list) -> list[torch.Tensor]:
    k = _ints(args[1].reshape(-1))[0]
    values, indices = torch.topk(args[0], k, dim=node.attrs.get("axis", -1), largest=bool(node.attrs.get("largest", 1)),
                                 sorted=bool(node.attrs.get("sorted", 1)))
    return [values, indices]


def _clip(node: Node, args: list) -> list[torch.Tensor]:
    x = args[0]
    low = args[1] if len(args) > 1 else node.attrs.get("min")
    high = args[2] if len(args) > 2 else node.attrs.get("max")
    # tensor bounds stay tensors: ``.item()`` of a device tensor would wait for the GPU at every Clip
    low, high = (v.to(x.device, x.dtype) if isinstance(v, torch.Tensor) else v for v in (low, high))
    return [torch.clamp(x, low, high)]


def _div(node: Node, args: list) -> list[torch.Tensor]:
    a, b = _same_device(*args)
    if a.is_floating_point() or b.is_floating_point():
        return [a / b]
    return [torch.div(a, b, rounding_mode="trunc")]


def _binary(fn: Callable) -> Callable:
    return lambda node, args: [fn(*_same_device(*args))]


def _variadic(fn: Callable) -> Callable:
    def run(node: Node, args: list) -> list[torch.Tensor]:
        tensors = _same_device(*args)
        out = tensors[0]
        for t in tensors[1:]:
            out = fn(out, t)
        return [out]
    return run


def _range(node: Node, args: list) -> list[torch.Tensor]:
    start, limit, delta = (a.item() for a in args)
    return [torch.arange(start, limit, delta, dtype=args[0].dtype, device=args[0].device)]


def _constant_of_shape(node: Node, args: list) -> list[torch.Tensor]:
    value = node.attrs.get("value")
    fill = numpy_helper.to_array(value) if value is not None else np.zeros(1, np.float32)
    return [torch.full(_ints(args[0]), fill.reshape(-1)[0].item(), dtype=torch.from_numpy(np.array(fill)).dtype)]


#: operator → function(node, input tensors) → output tensors (Constant and Cast: see OnnxTorchGraph)
OPS: dict[str, Callable[[Node, list], list[torch.Tensor]]] = {
    "Abs": lambda n, a: [torch.abs(a[0])],
    "Add": _binary(torch.add),
    "BatchNormalization": lambda n, a: [F.batch_norm(a[0], a[3], a[4], a[1], a[2], False, 0.0,
                                                     n.attrs.get("epsilon", 1e-5))],
    "Clip": _clip,
    "Concat": lambda n, a: [torch.cat(_same_device(*a), dim=n.attrs["axis"])],
    "ConstantOfShape": _constant_of_shape,
    "Conv": _conv,
    "Div": _div,
    "Equal": _binary(torch.eq),
    "Expand": _expand,
    "Gather": _gather,
    "Gemm": _gemm,
    "Greater": _binary(torch.gt),
    "Identity": lambda n, a: [a[0]],
    "MatMul": _binary(torch.matmul),
    "Max": _variadic(torch.maximum),
    "Min": _variadic(torch.minimum),
    "Mul": _binary(torch.mul),
    "Neg": lambda n, a: [torch.neg(a[0])],
    "Pow": _binary(torch.pow),
    "Range": _range,
    "ReduceMax": _reduce(_reduce_max),
    "ReduceMean": _reduce(lambda x, axes, keep: torch.mean(x, dim=axes, keepdim=keep)),
    "ReduceSum": _reduce(lambda x, axes, keep: torch.sum(x, dim=axes, keepdim=keep)),
    "Relu": lambda n, a: [torch.relu(a[0])],
    "Reshape": _reshape,
    "Shape": lambda n, a: [torch.tensor(list(a[0].shape), dtype=torch.int64)],
    "Sigmoid": lambda n, a: [torch.sigmoid(a[0])],
    "Slice": _slice,
    "Softmax": _softmax,
    "Sqrt": lambda n, a: [torch.sqrt(a[0])],
    "Sub": _binary(torch.sub),
    "Tile": lambda n, a: [a[0].repeat(*_ints(a[1]))],
    "TopK": _topk,
    "Transpose": lambda n, a: [a[0].permute(*(n.attrs.get("perm") or reversed(range(a[0].dim()))))],
    "Unsqueeze": _unsqueeze,
}


class OnnxTorchGraph:
    """The graph of an ONNX file as torch calls on ``device`` (float32, or mixed with ``half``).

    Args:
        path: the ``.onnx`` file.
        device: "cpu", "cuda", "cuda:1".
        half: weight layers in float16 (see the module docstring).

    Raises:
        ValueError: an operator this file does not implement (naming it and its node).
    """

    #: the layers that run in float16 with ``half`` when their second input is a weight
    HALF_OPS = frozenset({"Conv", "Gemm", "MatMul"})

    def __init__(self, path: str, device: str | torch.device = "cpu", half: bool = False):
        model = onnx.load(str(path))
        opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
        self.device, self.half = torch.device(device), half
        self.nodes = [Node(proto, opset) for proto in model.graph.node]
        missing = sorted({(n.op, n.name) for n in self.nodes if n.op not in OPS and n.op not in ("Constant", "Cast")})
        if missing:
            raise ValueError(f"{path}: operator {missing[0][0]!r} (node {missing[0][1]!r}) is not supported by the "
                             f"torch runner ({len(missing)} unsupported node(s))")
        self.constants = {t.name: self._tensor(numpy_helper.to_array(t)) for t in model.graph.initializer}
        for node in self.nodes:  # Constant nodes become constants once, not at every call
            if node.op == "Constant":
                self.constants[node.outputs[0]] = self._tensor(self._constant_value(node))
        self.nodes = [n for n in self.nodes if n.op != "Constant"]
        self.inputs = [v.name for v in model.graph.input if v.name not in self.constants]
        self.outputs = [v.name for v in model.graph.output]
        #: float16 copies of the weights of the layers that run in half precision (by node position)
        self.half_weights: dict[int, dict[str, torch.Tensor]] = {}
        for index, node in enumerate(self.nodes if half else []):
            if node.op in self.HALF_OPS and len(node.inputs) > 1 and node.inputs[1] in self.constants:
                self.half_weights[index] = {name: self.constants[name].half() for name in node.inputs
                                            if name in self.constants and self.constants[name].is_floating_point()}

    @staticmethod
    def _constant_value(node: Node) -> np.ndarray:
        if "value" in node.attrs:
            return numpy_helper.to_array(node.attrs["value"])
        for key, dtype in (("value_float", np.float32), ("value_int", np.int64), ("value_floats", np.float32),
                           ("value_ints", np.int64)):
            if key in node.attrs:
                return np.asarray(node.attrs[key], dtype=dtype)
        raise ValueError(f"node {node.name!r}: Constant without a numeric value")

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        """A constant: floats on the device in float32, integers on the CPU (in pinned memory with a GPU, so
        that an operator moving one to the GPU does not wait for the kernels before it)."""
        tensor = torch.from_numpy(np.array(array))
        if tensor.is_floating_point():
            return tensor.to(self.device, torch.float32)
        return tensor.pin_memory() if self.device.type == "cuda" else tensor

    @staticmethod
    def _cast(node: Node, args: list) -> list[torch.Tensor]:
        dtype = DTYPES.get(node.attrs["to"])
        if dtype is None:
            raise ValueError(f"node {node.name!r}: Cast to ONNX type {node.attrs['to']} is not supported")
        return [args[0].to(torch.float32 if dtype.is_floating_point else dtype)]

    def _run(self, index: int, node: Node, args: list) -> list[torch.Tensor]:
        if node.op == "Cast":
            return self._cast(node, args)
        weights = self.half_weights.get(index)
        if weights is None:
            return OPS[node.op](node, args)
        args = [weights[name] if name in weights else arg.half() if arg is not None and arg.is_floating_point() else arg
                for name, arg in zip(node.inputs, args)]
        return [r.float() for r in OPS[node.op](node, args)]

    @torch.inference_mode()
    def __call__(self, feed: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The graph's outputs for ``feed`` (tensors on the device; float inputs are taken as float32)."""
        values: dict[str, torch.Tensor | None] = dict(self.constants)
        values[""] = None  # an omitted optional input
        for name in self.inputs:
            tensor = feed[name]
            values[name] = tensor.float() if tensor.is_floating_point() else tensor
        for index, node in enumerate(self.nodes):
            args = [values[name] for name in node.inputs]
            try:
                results = self._run(index, node, args)
                if node.op == "ConstantOfShape" and results[0].is_floating_point():  # made on the CPU here
                    results = [results[0].to(self.device)]
            except Exception as err:  # noqa: BLE001 - torch raises many types; name the node once
                raise RuntimeError(f"node {node.name!r} ({node.op}): {type(err).__name__}: {err}") from None
            values.update(zip(node.outputs, results))
        return {name: values[name] for name in self.outputs}


class OnnxTorchRunner:
    """An :class:`OnnxTorchGraph` with the call of an onnxruntime session (numpy in, float32 numpy out)."""

    def __init__(self, graph: OnnxTorchGraph):
        self.graph = graph

    def run(self, output_names: Sequence[str] | None, feed: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """Outputs ``output_names`` (default: all, in the graph's order) for the inputs ``feed``."""
        return self.run_parts(output_names, [feed])[0]

    def run_parts(self, output_names: Sequence[str] | None,
                  feeds: Sequence[Mapping[str, np.ndarray]]) -> list[list[np.ndarray]]:
        """The outputs of each feed (batch dimension first), all run as one batch: each feed's arrays go to the
        device on their own and are concatenated there. Requests that Triton's dynamic batcher hands over
        together are run this way, because concatenating large requests on the host (DeepTau's are ~100 MB)
        costs more than copying them one by one."""
        device = self.graph.device
        for feed in feeds:
            missing = [name for name in self.graph.inputs if name not in feed]
            if missing:
                raise ValueError(f"missing input(s) {missing}; the model takes {self.graph.inputs}")
        names = list(output_names or self.graph.outputs)
        unknown = [name for name in names if name not in self.graph.outputs]
        if unknown:
            raise ValueError(f"unknown output(s) {unknown}; the model has {self.graph.outputs}")
        parts = {name: [_tensor(feed[name], device) for feed in feeds] for name in self.graph.inputs}
        outputs = self.graph({name: torch.cat(tensors) if len(tensors) > 1 else tensors[0]
                              for name, tensors in parts.items()})
        values = [_numpy(outputs[name]) for name in names]
        if len(feeds) == 1:
            return [values]
        cuts = np.cumsum([len(tensor) for tensor in parts[self.graph.inputs[0]]])[:-1]
        split = [np.split(value, cuts) for value in values]
        return [[pieces[i] for pieces in split] for i in range(len(feeds))]


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    tensor = tensor.detach()
    return (tensor.float() if tensor.is_floating_point() else tensor).cpu().numpy()


def _tensor(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """``array`` on ``device``. A read-only array (the stub's request buffer) is used as it is, not copied:
    every operator here makes new tensors, none writes into its inputs."""
    array = np.ascontiguousarray(array)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "The given NumPy array is not writable")
        tensor = torch.from_numpy(array)
    return tensor.to(device, non_blocking=True)


def open_onnx_torch(path: str, device: str = "cpu", precision: str = "float32",
                    threads: int | None = None) -> OnnxTorchRunner:
    """A runner of the ONNX file ``path`` in torch on ``device``, in ``precision`` ("float32" or "float16").

    Args:
        threads: torch intra-op threads (process-wide in torch: set by whoever owns the process).

    Example:
        >>> runner = open_onnx_torch("data/models/miniaod/miniaod_deepmet/1/model.onnx")  # doctest: +SKIP
        >>> px_py, = runner.run(["output"], inputs)  # doctest: +SKIP
    """
    if precision not in ("float32", "float16"):
        raise ValueError(f"precision must be 'float32' or 'float16', not {precision!r}")
    if threads:
        torch.set_num_threads(int(threads))
    if str(device).startswith("cuda"):
        # full fp32 on the GPU, as onnxruntime on the CPU (TF32 moved ParticleNet scores by 5e-3: torchscript.py)
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    return OnnxTorchRunner(OnnxTorchGraph(path, device, half=precision == "float16"))
