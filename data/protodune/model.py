"""EmTrkMichelId, the CNN that classifies every ProtoDUNE hit from the 48×48 patch around it.

The architecture is the one LArSoft runs (``EmTrackMichelId``, trained in Keras)::

    patch 48×48×1 ─ Conv2D 48 × 5×5, valid, ReLU ─ Dropout ─ Flatten (44·44·48 = 92,928)
                  ─ Dense 128, ReLU ─ Dropout ─ Dense 32, ReLU ─┬─ Dense 3, softmax  → em_trk_none
                                                                 └─ Dense 1, sigmoid  → michel
    1,248 + 11,894,912 + 4,128 + 99 + 33 = 11,900,420 parameters

``em_trk_none`` gives P(track), P(EM shower), P(none); ``michel`` P(Michel electron). LArSoft
stores them per hit as a 4-value MVA output ``[track, em, none, michel]``.

Two conventions of this project's copy (neither changes the function class or the parameter
count): the input is the **uint8** patch code (the model computes ``x = code / 255`` itself, so
patches travel as 1 byte per pixel), and Flatten is channels-first (``c, h, w``), the order of
torch and ONNX, where Keras flattens ``h, w, c`` (a fixed permutation of the Dense-128 rows).

**ONNX file** (:func:`to_onnx`): opset 17, input ``patches`` uint8 ``[batch, 48, 48, 1]``, outputs
``em_trk_none`` ``[batch, 3]`` and ``michel`` ``[batch, 1]`` (float32). The 11.9M-weight Dense-128
matrix is stored as **int8 with one float32 scale per output column**, dequantised by a standard
``DequantizeLinear`` node (ONNX weight-only quantisation): 11.9 MB instead of 47.6 MB, with a
relative weight error below 0.4 % (symmetric rounding to 127 levels). Every consumer reads the same
file — onnxruntime on CPU in-process and in the Triton server, and the GPU copy that rebuilds the
network in torch from these initialisers — so direct and SONIC compute the same function.

``torch_model()`` (needs the optional ``torch``) is the trainable version; :func:`weights_of` takes
its weights as numpy arrays for :func:`to_onnx`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

PATCH = 48
KERNEL = 5
FILTERS = 48
FLAT = FILTERS * (PATCH - KERNEL + 1) ** 2     # 92,928
HIDDEN = (128, 32)
PARAMETERS = 11_900_420
OPSET = 17
INPUT, OUTPUTS = "patches", ("em_trk_none", "michel")
CLASSES = ("track", "em", "none")


@dataclass
class Weights:
    """The network's parameters as numpy float32 arrays (Dense matrices as ``[in, out]``)."""

    conv_w: np.ndarray      # [48, 1, 5, 5]
    conv_b: np.ndarray      # [48]
    dense1_w: np.ndarray    # [92928, 128]
    dense1_b: np.ndarray    # [128]
    dense2_w: np.ndarray    # [128, 32]
    dense2_b: np.ndarray    # [32]
    em_w: np.ndarray        # [32, 3]
    em_b: np.ndarray        # [3]
    michel_w: np.ndarray    # [32, 1]
    michel_b: np.ndarray    # [1]

    def count(self) -> int:
        return sum(getattr(self, f.name).size for f in fields(self))

    @classmethod
    def random(cls, seed: int = 0) -> Weights:
        """Glorot-scaled random weights (for tests and timing before training)."""
        rng = np.random.default_rng(seed)

        def glorot(shape: tuple[int, ...], fan_in: int, fan_out: int) -> np.ndarray:
            return (rng.uniform(-1, 1, shape) * np.sqrt(6 / (fan_in + fan_out))).astype(np.float32)

        return cls(glorot((FILTERS, 1, KERNEL, KERNEL), KERNEL * KERNEL, FILTERS * KERNEL * KERNEL),
                   np.full(FILTERS, 0.01, np.float32), glorot((FLAT, 128), FLAT, 128), np.zeros(128, np.float32),
                   glorot((128, 32), 128, 32), np.zeros(32, np.float32), glorot((32, 3), 32, 3),
                   np.zeros(3, np.float32), glorot((32, 1), 32, 1), np.zeros(1, np.float32))


def quantize_columns(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-column int8 quantisation: ``w ≈ q * scale[None, :]``, ``q`` in [-127, 127]."""
    scale = np.maximum(np.abs(w).max(axis=0), 1e-12) / 127.0
    q = np.clip(np.rint(w / scale), -127, 127).astype(np.int8)
    return q, scale.astype(np.float32)


def to_onnx(weights: Weights, quantize: bool = True) -> bytes:
    """The inference graph (no dropout) as ONNX bytes; see the module docstring for the interface."""
    init = []

    def const(name: str, array: np.ndarray) -> str:
        init.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    nodes = [
        helper.make_node("Cast", [INPUT], ["x_float"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["x_float", const("code_scale", np.array(1 / 255, np.float32))], ["x_scaled"]),
        helper.make_node("Transpose", ["x_scaled"], ["x_nchw"], perm=[0, 3, 1, 2]),
        helper.make_node("Conv", ["x_nchw", const("conv_w", weights.conv_w), const("conv_b", weights.conv_b)],
                         ["conv"], kernel_shape=[KERNEL, KERNEL]),
        helper.make_node("Relu", ["conv"], ["conv_relu"]),
        helper.make_node("Flatten", ["conv_relu"], ["flat"], axis=1),
    ]
    if quantize:
        q, scale = quantize_columns(weights.dense1_w)
        nodes.append(helper.make_node("DequantizeLinear", [const("dense1_w_int8", q), const("dense1_w_scale", scale),
                                                          const("dense1_w_zero", np.zeros(len(scale), np.int8))],
                                      ["dense1_w"], axis=1))
    else:
        const("dense1_w", weights.dense1_w)
    for name, x, w, out in (("dense1", "flat", "dense1_w", "h1"), ("dense2", "h1", None, "h2")):
        w = w or const(f"{name}_w", getattr(weights, f"{name}_w"))
        nodes += [helper.make_node("MatMul", [x, w], [f"{name}_mm"]),
                  helper.make_node("Add", [f"{name}_mm", const(f"{name}_b", getattr(weights, f"{name}_b"))],
                                   [f"{name}_pre"]),
                  helper.make_node("Relu", [f"{name}_pre"], [out])]
    for head, activation, kwargs in (("em", "Softmax", {"axis": -1}), ("michel", "Sigmoid", {})):
        nodes += [helper.make_node("MatMul", ["h2", const(f"{head}_w", getattr(weights, f"{head}_w"))], [f"{head}_mm"]),
                  helper.make_node("Add", [f"{head}_mm", const(f"{head}_b", getattr(weights, f"{head}_b"))],
                                   [f"{head}_logit"]),
                  helper.make_node(activation, [f"{head}_logit"], [OUTPUTS[head == "michel"]], **kwargs)]
    graph = helper.make_graph(
        nodes, "EmTrkMichelId",
        [helper.make_tensor_value_info(INPUT, TensorProto.UINT8, ["batch", PATCH, PATCH, 1])],
        [helper.make_tensor_value_info(OUTPUTS[0], TensorProto.FLOAT, ["batch", len(CLASSES)]),
         helper.make_tensor_value_info(OUTPUTS[1], TensorProto.FLOAT, ["batch", 1])],
        initializer=init)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="sonic-hep",
                              doc_string="EmTrkMichelId (LArSoft EmTrackMichelId architecture); see "
                                         "sonic_hep/data/protodune/model.py")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def weights_from_onnx(model: str | bytes | onnx.ModelProto) -> Weights:
    """Reads the float32 weights back from an ONNX file made by :func:`to_onnx` (int8 dequantised)."""
    if not isinstance(model, onnx.ModelProto):
        model = onnx.load_from_string(model) if isinstance(model, bytes) else onnx.load(model)
    arrays = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    if "dense1_w_int8" in arrays:
        arrays["dense1_w"] = arrays["dense1_w_int8"].astype(np.float32) * arrays["dense1_w_scale"][None, :]
    return Weights(**{f.name: arrays[f.name].astype(np.float32) for f in fields(Weights)})


@functools.cache
def _torch_network_class() -> Any:
    try:
        import torch
        from torch import nn
    except ImportError:
        raise ImportError("training EmTrkMichelId needs torch: pip install 'sonic-hep[train]'") from None

    class EmTrkMichelIdNet(nn.Module):
        """uint8 patches [N, 48, 48, 1] → (em_trk_none probabilities [N, 3], michel [N, 1]).

        ``pool > 1`` average-pools the conv output before Dense-128 (the training stand-in of
        :func:`pooled_model`); ``pool = 1`` is EmTrkMichelId itself.
        """

        def __init__(self, dropout: float = 0.2, pool: int = 1):
            super().__init__()
            cells = (PATCH - KERNEL + 1) // pool
            self.pool = pool
            self.conv = nn.Conv2d(1, FILTERS, KERNEL)
            self.dense1 = nn.Linear(FILTERS * cells * cells, HIDDEN[0])
            self.dense2 = nn.Linear(HIDDEN[0], HIDDEN[1])
            self.em = nn.Linear(HIDDEN[1], len(CLASSES))
            self.michel = nn.Linear(HIDDEN[1], 1)
            self.dropout = nn.Dropout(dropout)

        def logits(self, patches: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            x = patches.permute(0, 3, 1, 2).float() / 255.0
            x = self.dropout(torch.relu(self.conv(x)))
            if self.pool > 1:
                x = nn.functional.avg_pool2d(x, self.pool)
            x = self.dropout(torch.relu(self.dense1(x.flatten(1))))
            x = torch.relu(self.dense2(x))
            return self.em(x), self.michel(x)

        def forward(self, patches: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            em, michel = self.logits(patches)
            return torch.softmax(em, dim=-1), torch.sigmoid(michel)

    return EmTrkMichelIdNet


def torch_model() -> Any:
    """The trainable torch ``nn.Module`` (imports torch, an optional dependency)."""
    return _torch_network_class()()


def weights_of(net: Any) -> Weights:
    """The numpy weights of a :func:`torch_model` network (Dense matrices transposed to ``[in, out]``)."""
    def array(t: Any) -> np.ndarray:
        return t.detach().cpu().numpy().astype(np.float32)

    return Weights(array(net.conv.weight), array(net.conv.bias), array(net.dense1.weight).T, array(net.dense1.bias),
                   array(net.dense2.weight).T, array(net.dense2.bias), array(net.em.weight).T, array(net.em.bias),
                   array(net.michel.weight).T, array(net.michel.bias))


def pooled_model(pool: int = 4) -> Any:
    """A cheap stand-in for training: EmTrkMichelId with the conv output average-pooled ``pool``×``pool``
    before Dense-128 (48·11·11 = 5,808 inputs instead of 92,928, several times less arithmetic per
    patch on a CPU). The full network represents it exactly (:func:`expand_pooled`): a Dense-128 whose
    weight for conv pixel (c, h, w) is the pooled weight of its cell divided by ``pool²`` computes the
    same function.
    """
    return _torch_network_class()(pool=pool)


def expand_pooled(pooled: Any) -> Any:
    """The full EmTrkMichelId computing exactly what a :func:`pooled_model` network computes."""
    import torch

    net = torch_model()
    pool = pooled.pool
    side, cells = PATCH - KERNEL + 1, (PATCH - KERNEL + 1) // pool
    with torch.no_grad():
        for name in ("conv", "dense2", "em", "michel"):
            getattr(net, name).load_state_dict(getattr(pooled, name).state_dict())
        w = pooled.dense1.weight.reshape(HIDDEN[0], FILTERS, cells, cells) / (pool * pool)
        net.dense1.weight.copy_(w.repeat_interleave(pool, dim=2).repeat_interleave(pool, dim=3)
                                .reshape(HIDDEN[0], FILTERS * side * side))
        net.dense1.bias.copy_(pooled.dense1.bias)
    return net
