"""Helpers shared by the MiniAOD producers: numpy columns from an event's awkward views (views, not
copies) or from a batch's jagged collections (flattened over events) for vectorised preprocessing, and the
class names of a model."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import awkward as ak
import numpy as np

from ..common.jagged import event_of_rows
from ...framework.inference import ModelInfo


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


@dataclass(frozen=True)
class Flat:
    """One collection of a batch of events, flattened: the rows of every event one after another (numpy
    columns, like :func:`columns` gives for one event) and how many rows each event has.

    Vectorising over a batch needs the rows of all events in one array; ``counts`` keeps which event each
    row came from, so per-event indices (``jetIdx``...) and per-event pairings can be rebuilt.
    """

    columns: dict[str, np.ndarray]
    counts: np.ndarray

    @property
    def offsets(self) -> np.ndarray:
        """``[events + 1]``: the first row of each event, then the total."""
        return np.concatenate([[0], np.cumsum(self.counts)]).astype(np.int64)

    @property
    def event(self) -> np.ndarray:
        """The event of each row."""
        return event_of_rows(self.counts)


def flat_columns(records: ak.Array | None, names: Iterable[str], n_events: int) -> Flat:
    """The fields ``names`` of a batch's jagged collection (one list of records per event), flattened.

    A list-offset layout of records is read from its buffers (views; the batch is usually a slice of the
    chunk, so only the offsets' range is taken); other layouts go through ``ak.flatten``. ``None`` (an
    optional collection that is absent) is an empty collection for every event. A field the records do not
    have is left out, so the error comes from the feature that needs it, naming it.
    """
    names = tuple(names)
    if records is None:
        return Flat({name: np.zeros(0) for name in names}, np.zeros(n_events, np.int64))
    layout = records.layout
    if isinstance(layout, ak.contents.ListOffsetArray) and isinstance(layout.content, ak.contents.RecordArray):
        # the buffers themselves: ak.num and RecordArray.content cost more than the numpy work of a small batch
        offsets = np.asarray(layout.offsets.data)
        start, stop = int(offsets[0]), int(offsets[-1])
        fields = dict(zip(layout.content.fields, layout.content.contents))
        out = {}
        for name in (n for n in names if n in fields):  # a missing one fails where a feature needs it
            field = fields[name]
            out[name] = field.data[start:stop] if isinstance(field, ak.contents.NumpyArray) \
                else ak.to_numpy(ak.Array(field)[start:stop])
        return Flat(out, np.diff(offsets).astype(np.int64))
    flat = ak.flatten(records, axis=1)
    counts = np.asarray(ak.num(records, axis=1), dtype=np.int64)
    return Flat({name: ak.to_numpy(flat[name]) for name in names if name in flat.fields}, counts)


def event_pairs(group: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every item paired with every row of its own event: ``item`` i (of event ``group[i]``) with the rows
    ``offsets[e]`` to ``offsets[e + 1] - 1``, item-major and rows ascending — the order a per-event
    ``repeat``/``tile`` gives, so a stable ranking of the pairs is the same as per event.

    Args:
        group: the event of each item (a jet, a candidate row).
        offsets: ``[events + 1]`` the first row of each event of the other collection, then the total.

    Returns:
        ``(item, row)``: index arrays of equal length.
    """
    start = offsets[:-1][group]
    count = offsets[1:][group] - start
    item = event_of_rows(count)
    first = np.cumsum(count) - count
    return item, np.arange(item.size) - np.repeat(first - start, count)


def model_labels(info: ModelInfo, output: str) -> list[str]:
    """The class names of ``output``: the model's labels (the inference client gives them the same way
    in every mode), or ``class<i>`` when the model has no labels file."""
    labels = info.labels.get(output)
    if labels:
        return list(labels)
    spec = next(s for s in info.outputs if s.name == output)
    return [f"class{i}" for i in range(spec.dims[-1])]
