"""Helpers shared by the MiniAOD producers: numpy columns from an event's awkward views (views, not
copies) for vectorised preprocessing, and the class names of a model."""

from __future__ import annotations

from collections.abc import Iterable

import awkward as ak
import numpy as np

from ...framework.inference.repository import ModelInfo


def columns(records: ak.Array | None, names: Iterable[str]) -> dict[str, np.ndarray]:
    """The fields ``names`` of one event's collection as numpy arrays (empty arrays for ``None``).

    Reads the record layout's buffers directly (a view, ~10× faster than ``ak.to_numpy(records[name])``
    per field, which matters with the 40 τ fields of every event); other layouts go through awkward.
    """
    if records is None:
        return {name: np.zeros(0) for name in names}
    layout = records.layout
    out = {}
    for name in names:
        content = layout.content(name) if isinstance(layout, ak.contents.RecordArray) else None
        out[name] = content.data if isinstance(content, ak.contents.NumpyArray) else ak.to_numpy(records[name])
    return out


def model_labels(info: ModelInfo, output: str) -> list[str]:
    """The class names of ``output``: the model's labels (the inference client gives them the same way
    in every mode), or ``class<i>`` when the model has no labels file."""
    labels = info.labels.get(output)
    if labels:
        return list(labels)
    spec = next(s for s in info.outputs if s.name == output)
    return [f"class{i}" for i in range(spec.dims[-1])]
