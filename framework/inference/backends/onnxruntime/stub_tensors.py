"""Tensors across the Triton python stub's boundary, with numpy 1 or 2: one definition for every python model.

The stub's own numpy bridge (``Tensor.as_numpy()``, ``pb_utils.Tensor(name, ndarray)``) is compiled
for numpy 1: under numpy 2 inputs read wrong and outputs come back empty, silently. Under numpy 2
numeric tensors therefore cross through DLPack (which, the other way round, numpy 1's ``__dlpack__``
cannot do for the stub). Strings have no DLPack form; they take the bridge, which numpy 2 breaks.

Used by the python-based onnxruntime backend (``model.py`` beside this file, which finds it on its
own path) and by sonic-hep's python models (Exa.TrkX's ensemble stages). Like ``ort_session.py``,
it imports nothing from sonic-hep: the stub's interpreter may not have it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

NUMPY2 = int(np.__version__.split(".")[0]) >= 2


def to_numpy(tensor: Any) -> np.ndarray:
    """A request's ``pb_utils.Tensor`` as a numpy array (a view of the stub's memory under numpy 2)."""
    if not NUMPY2:
        return tensor.as_numpy()
    try:
        return np.from_dlpack(tensor)
    except (TypeError, BufferError, RuntimeError) as err:
        raise ValueError(f"input {tensor.name()!r} cannot reach numpy {np.__version__} in the server's python "
                         f"(strings have no DLPack form): {err}") from None


def from_numpy(pb_utils: Any, name: str, value: np.ndarray) -> Any:
    """An output ``pb_utils.Tensor`` named ``name`` holding ``value``."""
    value = np.ascontiguousarray(value)
    if NUMPY2 and value.dtype.kind not in "OSU":
        return pb_utils.Tensor.from_dlpack(name, value)
    return pb_utils.Tensor(name, value)
