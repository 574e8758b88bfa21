"""onnxruntime sessions opened from a Triton model config: one definition for direct and served models.

Direct inference (``framework/inference/direct.py``) and the server's python-based onnxruntime backend
(``model.py`` beside this file) both open models through :func:`open_session`, so a model gets the
same graph optimization level and thread settings in either mode, which is what makes their outputs
bit-equal. The settings follow the official Triton onnxruntime backend:

* ``optimization { graph { level: L } }``: -1 basic, 1 extended, otherwise (0, unset) all optimizations;
* ``parameters { key: "intra_op_thread_count" value { string_value: "N" } }`` (and ``inter_op_thread_count``).

On CUDA, TF32 is off (``use_tf32=0``), as in the native backend and the torch backends: onnxruntime's
default TF32 matrix products and convolutions move ParticleNet and DeepMET outputs by up to 5e-2 from the
CPU's, far outside the tolerance between modes.

This file must import nothing from sonic-hep: it also runs inside the Triton python stub, whose
interpreter may not have sonic-hep installed (e.g. the GPU machine's system python).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import onnxruntime as ort

_LEVELS = {-1: ort.GraphOptimizationLevel.ORT_ENABLE_BASIC, 1: ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED}


def graph_optimization_level(config: Mapping[str, Any]) -> ort.GraphOptimizationLevel:
    """The level a Triton config asks for (``config`` as Triton's JSON form, snake_case keys)."""
    level = int(config.get("optimization", {}).get("graph", {}).get("level", 0) or 0)
    return _LEVELS.get(level, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)


def config_parameter(config: Mapping[str, Any], key: str) -> str | None:
    """A ``parameters { key: ... value { string_value: ... } }`` entry of the config, or None."""
    value = config.get("parameters", {}).get(key)
    if value is None:
        return None
    return value.get("string_value", value) if isinstance(value, Mapping) else str(value)


def session_options(config: Mapping[str, Any], intra_op_threads: int = 1, inter_op_threads: int = 1) -> ort.SessionOptions:
    """Session options for a model: its config's settings win over the caller's defaults."""
    options = ort.SessionOptions()
    options.graph_optimization_level = graph_optimization_level(config)
    options.intra_op_num_threads = int(config_parameter(config, "intra_op_thread_count") or intra_op_threads)
    options.inter_op_num_threads = int(config_parameter(config, "inter_op_thread_count") or inter_op_threads)
    options.log_severity_level = 3
    return options


#: the first onnxruntime whose CUDA provider knows ``use_tf32`` (older ones refuse unknown options)
TF32_OPTION_SINCE = (1, 18)


def full_precision(providers: list[Any]) -> list[Any]:
    """``providers`` with TF32 turned off for CUDA (an option the caller set itself wins)."""
    if tuple(int(p) for p in ort.__version__.split(".")[:2]) < TF32_OPTION_SINCE:
        return list(providers)
    out: list[Any] = []
    for provider in providers:
        name, options = (provider, {}) if isinstance(provider, str) else (provider[0], dict(provider[1]))
        if name != "CUDAExecutionProvider":
            out.append(provider)
            continue
        options.setdefault("use_tf32", "0")
        out.append((name, options))
    return out


def open_session(path: str, config: Mapping[str, Any], providers: list[Any], intra_op_threads: int = 1,
                 inter_op_threads: int = 1) -> ort.InferenceSession:
    """An ``InferenceSession`` for the ONNX file ``path`` with the settings of its Triton ``config``."""
    return ort.InferenceSession(path, session_options(config, intra_op_threads, inter_op_threads),
                                providers=full_precision(providers))
