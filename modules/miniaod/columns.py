"""Helpers shared by the MiniAOD producers: numpy columns from an event's awkward views (views, not
copies) for vectorised preprocessing, and the class names of a model."""

from __future__ import annotations

from collections.abc import Iterable

import awkward as ak
import numpy as np

from ...framework.inference.repository import ModelInfo, ModelRepository
from ...framework.inference.service import resolve_repository


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


def model_labels(module, info: ModelInfo, output: str) -> list[str]:
    """The class names of ``output``: the model's labels file, read from the job's local repository when
    the model information came from a server (Triton does not send label files); ``class<i>`` if none."""
    labels = info.labels.get(output)
    if not labels:
        paths = [resolve_repository(p) for p in module.service("inference").settings.repository]
        repository = ModelRepository(paths) if paths else None
        if repository is not None and info.name in repository.names():
            labels = repository.get(info.name).labels.get(output)
    if labels:
        return list(labels)
    spec = next(s for s in info.outputs if s.name == output)
    return [f"class{i}" for i in range(spec.dims[-1])]
