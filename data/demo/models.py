"""Builds the demo model repository ``data/models/demo`` with onnx.helper (fixed seeds; no torch needed).

Three models, each small enough to commit and each covering a case of the inference interface:

* ``demo_mlp`` — a toy jet-flavour tagger: 16 features → 32 → 4 classes (``probs``, with labels, and
  ``logits``); batch dimension, max_batch_size 128, dynamic batching: the everyday case.
* ``demo_points`` — a point cloud per entry (``points`` [3, -1], variable length) → ``score`` [1]:
  ragged inputs (a different length per entry go as separate requests).
* ``demo_sum`` — no batch dimension (max_batch_size 0): ``x`` [-1, 4] → column sums ``y`` [4].

``mlp(...)`` also builds bigger MLPs on the fly for ``sonic bench inference``. Run
``python -m sonic_hep.data.demo.models [REPOSITORY]`` to rewrite the committed repository (the
outputs are deterministic, so the files only change if this code does).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ...framework.inference import TensorSpec, write_model
from ...framework.paths import MODELS

OPSET = 17
LABELS = ["b", "c", "uds", "g"]
REPOSITORY = MODELS / "demo"


def _serialize(graph: onnx.GraphProto) -> bytes:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="sonic-hep")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _dense(name: str, x: str, n_in: int, n_out: int, rng: np.random.Generator, relu: bool) -> tuple[list, list, str]:
    w = numpy_helper.from_array((rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)).astype(np.float32), f"{name}_w")
    b = numpy_helper.from_array((0.1 * rng.standard_normal(n_out)).astype(np.float32), f"{name}_b")
    nodes = [helper.make_node("MatMul", [x, w.name], [f"{name}_mm"]),
             helper.make_node("Add", [f"{name}_mm", b.name], [f"{name}_out" if not relu else f"{name}_pre"])]
    out = f"{name}_out"
    if relu:
        nodes.append(helper.make_node("Relu", [f"{name}_pre"], [out]))
    return nodes, [w, b], out


def mlp(n_in: int = 16, hidden: tuple[int, ...] = (32,), n_out: int = 4, seed: int = 1) -> bytes:
    """An MLP ``x`` [batch, n_in] → ``logits`` and ``probs`` [batch, n_out] (softmax) as ONNX bytes."""
    rng = np.random.default_rng(seed)
    nodes, weights, x, width = [], [], "x", n_in
    for i, size in enumerate(hidden):
        n, w, x = _dense(f"h{i}", x, width, size, rng, relu=True)
        nodes += n
        weights += w
        width = size
    n, w, x = _dense("out", x, width, n_out, rng, relu=False)
    nodes += n + [helper.make_node("Identity", [x], ["logits"]), helper.make_node("Softmax", ["logits"], ["probs"], axis=-1)]
    weights += w
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", n_in])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", n_out]),
                               helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", n_out])],
                              initializer=weights)
    return _serialize(graph)


def points(seed: int = 2) -> bytes:
    """``points`` [batch, 3, n] → ``score`` [batch, 1]: a per-point linear map, max over points, sigmoid."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((8, 3)).astype(np.float32), "w")  # [8, 3] @ [batch, 3, n]
    v = numpy_helper.from_array(rng.standard_normal((8, 1)).astype(np.float32), "v")
    nodes = [helper.make_node("MatMul", ["w", "points"], ["per_point"]),          # [batch, 8, n]
             helper.make_node("Tanh", ["per_point"], ["act"]),
             helper.make_node("ReduceMax", ["act"], ["pooled"], axes=[2], keepdims=0),  # [batch, 8]
             helper.make_node("MatMul", ["pooled", "v"], ["z"]),                  # [batch, 1]
             helper.make_node("Sigmoid", ["z"], ["score"])]
    graph = helper.make_graph(nodes, "points", [helper.make_tensor_value_info("points", TensorProto.FLOAT, ["batch", 3, "n"])],
                              [helper.make_tensor_value_info("score", TensorProto.FLOAT, ["batch", 1])], initializer=[w, v])
    return _serialize(graph)


def column_sum() -> bytes:
    """``x`` [n, 4] → ``y`` [4], the sum over rows (a model without batch dimension)."""
    axes = numpy_helper.from_array(np.array([0], dtype=np.int64), "axes")
    nodes = [helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)]
    graph = helper.make_graph(nodes, "column_sum", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], initializer=[axes])
    return _serialize(graph)


def write_mlp(repository: str | os.PathLike, name: str = "demo_mlp", n_in: int = 16, hidden: tuple[int, ...] = (32,),
              n_out: int = 4, max_batch_size: int = 128, preferred_batch_sizes: tuple[int, ...] = (),
              max_queue_delay_us: int = 0, instance_count: int = 1, dynamic_batching: bool = True, seed: int = 1) -> Path:
    """Writes an MLP repository entry (``dynamic_batching=False`` writes none: one execution per request)."""
    path = write_model(repository, name, mlp(n_in, hidden, n_out, seed),
                       inputs=[TensorSpec("x", "FP32", (n_in,))],
                       outputs=[TensorSpec("logits", "FP32", (n_out,)), TensorSpec("probs", "FP32", (n_out,))],
                       max_batch_size=max_batch_size, preferred_batch_sizes=preferred_batch_sizes,
                       max_queue_delay_us=max_queue_delay_us, instance_count=instance_count,
                       labels={"probs": LABELS} if n_out == len(LABELS) else None)
    if not dynamic_batching:
        _drop_dynamic_batching(path)
    return path


def _drop_dynamic_batching(model_dir: Path) -> None:
    from google.protobuf import text_format

    from ...framework.inference import parse_config

    config = parse_config(model_dir / "config.pbtxt")
    config.ClearField("dynamic_batching")
    (model_dir / "config.pbtxt").write_text(text_format.MessageToString(config))


def write_demo_repository(repository: str | os.PathLike = REPOSITORY) -> Path:
    """Writes the three demo models (see the module docstring) into ``repository``."""
    write_mlp(repository)
    write_model(repository, "demo_points", points(), inputs=[TensorSpec("points", "FP32", (3, -1))],
                outputs=[TensorSpec("score", "FP32", (1,))], max_batch_size=64)
    write_model(repository, "demo_sum", column_sum(), inputs=[TensorSpec("x", "FP32", (-1, 4))],
                outputs=[TensorSpec("y", "FP32", (4,))], max_batch_size=0)
    return Path(repository)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("repository", nargs="?", default=str(REPOSITORY), help="where to write (default: %(default)s)")
    args = parser.parse_args(argv)
    print(write_demo_repository(args.repository))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
