"""Many events per call: the batch the scheduler keeps in flight, its products, and the columnar view.

Why batches: in Python the cost is per call, not per event. A module that works on a batch of events
(``columnar = True``) reads each consumed key as one array with an entry per event and puts one array per
product; a per-event module (CMSSW's idiom) is called once per event of the same batch. Both kinds mix in
one DAG because products are stored per batch in one of two forms and converted where they are read:

* :class:`Stacked` — what a columnar module put: one array over the events it ran on;
* :class:`PerEvent` — what a per-event module put: one Python value per event.

A per-event reader of a stacked product gets its event's entry (``values[k]``); a columnar reader of
per-event products gets them stacked (:func:`stack`, the rule the ROOT output has always used, so a
product is written the same whichever way it was made). A filter upstream of a module narrows the
events it sees; every view carries the batch positions it covers (``None``: all of them).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from numbers import Number
from typing import TYPE_CHECKING, Any

import awkward as ak
import numpy as np

from .errors import OutputError

if TYPE_CHECKING:  # pragma: no cover
    from .event import Chunk, EventID
    from .module import Module


def _stack_numpy(values: Sequence[np.ndarray]) -> Any:
    shapes = {v.shape for v in values}
    if len(shapes) == 1:
        return np.stack(values) if values else np.zeros(0)
    counts = np.fromiter((len(v) for v in values), dtype=np.int64, count=len(values))
    inner = {v.shape[1:] for v in values}
    if len(inner) != 1:
        raise OutputError(f"per-event arrays differ in inner shape {sorted(inner)}; only the first dimension may vary")
    return ak.unflatten(np.concatenate(values), counts)


def _jagged(values: Sequence[np.ndarray]) -> Any:
    counts = np.fromiter((len(v) for v in values), dtype=np.int64, count=len(values))
    return ak.unflatten(np.concatenate(values), counts)


def stack(values: Sequence[Any]) -> Any:
    """One product's per-event values as one array over the events (numpy or awkward).

    Accepts numbers, numpy arrays (same shape → regular; first dimension varying → jagged), dicts of
    those (→ records), and awkward arrays/records.
    """
    first = values[0]
    if isinstance(first, (Number, np.generic, bool)):
        return np.asarray(values)
    if isinstance(first, np.ndarray):
        return _stack_numpy(values)
    if isinstance(first, dict):
        # a dict of per-event arrays is a collection (nX + X_field): jagged even when every event of
        # the chunk happens to have the same length (a chunk of one event, say)
        fields = {name: _jagged([v[name] for v in values]) if isinstance(first[name], np.ndarray) and first[name].ndim
                  else stack([v[name] for v in values]) for name in first}
        return ak.zip(fields, depth_limit=1 if all(f.ndim == 1 for f in fields.values()) else 2)
    if isinstance(first, ak.Array):
        counts = np.fromiter((len(v) for v in values), dtype=np.int64, count=len(values))
        return ak.unflatten(ak.concatenate(values), counts)
    return ak.from_iter(values)


def concatenate(parts: Sequence[Any]) -> Any:
    """Stacked arrays of consecutive batches as one array (numpy kept numpy)."""
    if len(parts) == 1:
        return parts[0]
    if all(isinstance(p, np.ndarray) for p in parts):
        return np.concatenate(parts)
    return ak.concatenate([ak.Array(p) if isinstance(p, np.ndarray) else p for p in parts])


def freeze(value: Any) -> Any:
    """Makes a product read-only where Python allows it (numpy arrays and dicts of them)."""
    if isinstance(value, np.ndarray):
        value.flags.writeable = False
    elif isinstance(value, dict):
        for item in value.values():
            freeze(item)
    return value


_MISSING = object()


class PerEvent:
    """A product put event by event: one value per batch position (missing where it was not put)."""

    __slots__ = ("values",)

    def __init__(self, size: int):
        self.values: list[Any] = [_MISSING] * size

    def at(self, k: int) -> Any:
        value = self.values[k]
        if value is _MISSING:
            raise KeyError(k)
        return value

    def covers(self, k: int) -> bool:
        return self.values[k] is not _MISSING

    def take(self, positions: np.ndarray | None) -> Any:
        """The values at ``positions`` (all when None), stacked; KeyError when one was not put."""
        values = self.values if positions is None else [self.values[int(k)] for k in positions]
        if any(v is _MISSING for v in values):
            raise KeyError("not put for every event")
        return stack(values) if values else None


class Stacked:
    """A product put by a columnar module: ``values`` has one entry per position of ``positions``
    (``None``: every event of the batch)."""

    __slots__ = ("values", "positions")

    def __init__(self, values: Any, positions: np.ndarray | None):
        self.values, self.positions = values, positions

    def _where(self, k: int) -> int:
        if self.positions is None:
            return k
        j = int(np.searchsorted(self.positions, k))
        if j >= len(self.positions) or self.positions[j] != k:
            raise KeyError(k)
        return j

    def at(self, k: int) -> Any:
        return self.values[self._where(k)]

    def covers(self, k: int) -> bool:
        try:
            self._where(k)
        except KeyError:
            return False
        return True

    def take(self, positions: np.ndarray | None) -> Any:
        """The values at ``positions`` (all when None); KeyError when one was not put."""
        if self.positions is None:
            return self.values if positions is None else self.values[positions]
        if positions is None:
            raise KeyError("not put for every event")
        if np.array_equal(positions, self.positions):
            return self.values
        index = np.searchsorted(self.positions, positions)
        found = index < len(self.positions)
        if not found.all() or np.any(self.positions[index] != positions):
            raise KeyError("not put for every event")
        return self.values[index]


class Batch:
    """Consecutive events of one chunk processed together, with the products put so far.

    Args:
        chunk (Chunk): the chunk holding the input columns.
        start (int): the batch's first position in the chunk.
        size (int): number of events.
        stream (int): the stream (set of module instances) processing it.
        seed (int): the job's random seed.
    """

    __slots__ = ("chunk", "start", "size", "stream", "seed", "first_index", "products", "_columns")

    def __init__(self, chunk: Chunk, start: int, size: int, stream: int = 0, seed: int = 0):
        self.chunk, self.start, self.size, self.stream, self.seed = chunk, start, size, stream, seed
        self.first_index = chunk.first_index + start
        self.products: dict[str, PerEvent | Stacked] = {}
        self._columns: dict[str, Any] = {}

    def column(self, key: str) -> Any:
        """The input column ``key`` over the batch's events (a view into the chunk's buffers)."""
        column = self._columns.get(key)
        if column is None:
            full = self.chunk.columns[key]  # KeyError when absent
            whole = self.start == 0 and self.size == self.chunk.length
            column = full if whole else full[self.start:self.start + self.size]
            self._columns[key] = column
        return column

    def has(self, key: str) -> bool:
        return key in self.products or key in self.chunk.columns

    def describe(self, positions: np.ndarray | None = None) -> str:
        """The events of the batch (or of ``positions``) as a reader finds them: file and entry range."""
        if positions is not None and len(positions) == 1:
            return str(self.chunk.event_id(self.start + int(positions[0])))
        first = self.chunk.entry_start + self.start
        return f"{self.chunk.file} entries {first}-{first + self.size - 1}"

    def event_rng(self, k: int, label: str) -> np.random.Generator:
        """The generator of event ``k`` for module ``label``: seeded by (job seed, event identity, label), so
        it is the same whatever the batch, stream or thread. The identity is the event's run/lumi/event numbers
        when the source has them (the empty source numbers events 1..N), else its index in the job; so a task
        split into jobs (``sonic submit``) draws the same numbers as one process over all events."""
        label_hash = zlib.crc32(label.encode())
        ids = self.chunk.ids
        i = self.start + k
        identity = [int(ids[name][i]) for name in ("run", "luminosityBlock", "event") if name in ids]
        return np.random.default_rng([self.seed, *(identity or [self.first_index + k]), label_hash])


class EventBatch:
    """What a columnar module sees: the events of one call, each consumed key as one array over them.

    Args:
        batch (Batch): the batch in flight.
        module (Module): the module running on it.
        consumes (frozenset[str]): keys the module may read.
        optional (frozenset[str]): consumed keys that may be absent (``get`` returns ``None``).
        positions (np.ndarray | None): the batch positions this call covers (a filter upstream removed the
            others); ``None``: all.
        store (dict | None): where puts go (default: the batch's products; a scratch dict when the framework
            reruns a failed batch event by event to find the culprit).
    """

    __slots__ = ("_batch", "_module", "_consumes", "_optional", "positions", "_store", "_len")

    def __init__(self, batch: Batch, module: Module, consumes: frozenset[str], optional: frozenset[str],
                 positions: np.ndarray | None = None, store: dict[str, Any] | None = None):
        self._batch, self._module, self._consumes, self._optional = batch, module, consumes, optional
        self.positions = positions
        self._store = batch.products if store is None else store
        self._len = batch.size if positions is None else len(positions)

    def __len__(self) -> int:
        return self._len

    @property
    def index(self) -> np.ndarray:
        """Each event's position in the job's sequence (0-based), stable for any batch size and streams."""
        local = np.arange(self._batch.size) if self.positions is None else self.positions
        return self._batch.first_index + local

    def _position(self, k: int) -> int:
        if not 0 <= k < self._len:
            raise IndexError(f"event {k} of a call over {self._len} events")
        return k if self.positions is None else int(self.positions[k])

    def id(self, k: int) -> EventID:
        """The identity (file, entry, run/lumi/event) of the ``k``-th event of this call."""
        return self._batch.chunk.event_id(self._batch.start + self._position(k))

    def rng(self, k: int) -> np.random.Generator:
        """The random generator of the ``k``-th event: the same one a per-event module gets from
        ``event.rng()`` for that event, so numbers do not depend on how events are batched."""
        return self._batch.event_rng(self._position(k), self._module.label)

    def get(self, key: str) -> Any:
        """A consumed key over this call's events: an input column or an upstream product (stacked)."""
        if key not in self._consumes:
            raise KeyError(f"module '{self._module.label}' reads {key!r} but does not consume it; "
                           f"declare it with an InputTag (consumes: {sorted(self._consumes)})")
        product = self._batch.products.get(key)
        if product is not None:
            try:
                value = product.take(self.positions)
            except KeyError:
                raise KeyError(f"{key!r} was not produced for every event of this call (is its producer "
                               f"after a filter that skipped some of them?)") from None
            return value if value is not None else ak.Array([])
        try:
            column = self._batch.column(key)
        except KeyError:
            if key in self._optional:
                return None
            raise KeyError(f"{key!r} is not in the event (not produced upstream, or filtered out)") from None
        return column if self.positions is None else column[self.positions]

    __getitem__ = get

    def put(self, instance: str, values: Any) -> None:
        """Stores product ``<label>:<instance>``: one entry per event of this call (an array, or a list of
        per-event values, stacked); it becomes read-only and cannot be replaced."""
        label = self._module.label
        if instance not in self._module.outputs():
            raise KeyError(f"module '{label}' puts {instance!r}, which it does not declare "
                           f"(declared: {sorted(self._module.outputs())})")
        if isinstance(values, (list, tuple)):
            values = stack(values) if values else np.zeros(0)
        try:
            length = len(values)
        except TypeError:
            raise ValueError(f"module '{label}' put {instance!r} as {type(values).__name__}; a columnar module "
                             f"puts one entry per event (an array of length {self._len})") from None
        if length != self._len:
            raise ValueError(f"module '{label}' put {instance!r} with {length} entries for {self._len} events")
        key = f"{label}:{instance}"
        if key in self._store:
            raise KeyError(f"product {key!r} was already put; products are immutable")
        self._store[key] = Stacked(freeze(values), self.positions)
