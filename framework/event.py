"""The event model: identity, views into the chunk read from the source, and immutable products.

The source reads entries in chunks (one awkward array per consumed key); an :class:`Event` is an
index into its chunk, so ``event.get("Jet")`` is a view into the chunk's buffers, never a copy.
Modules see an event through an :class:`EventView` bound to the module, which enforces what the
module declared: it can read only keys it consumes and put only products it declares. That keeps
the DAG honest: a module cannot silently depend on something the scheduler does not know about.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from .module import Module


@dataclass(frozen=True)
class EventID:
    """Where an event comes from: the file and entry, and CMS-style run/lumi/event numbers if present."""

    file: str
    entry: int
    run: int | None = None
    lumi: int | None = None
    event: int | None = None

    def __str__(self) -> str:
        text = f"{self.file} entry {self.entry}"
        numbers = [f"{name} {value}" for name, value in (("run", self.run), ("lumi", self.lumi), ("event", self.event))
                   if value is not None]
        return text + (f" ({', '.join(numbers)})" if numbers else "")


@dataclass(eq=False)
class Chunk:
    """A block of consecutive entries of one file, read together.

    Attributes:
        columns: chunk-level arrays by event key (a branch, or a zipped NanoAOD-style collection).
        file: the file the entries come from (``"<empty>"`` for an empty source).
        entry_start: the first entry's number in ``file``.
        length: number of entries.
        first_index: the first entry's position in the whole job's event sequence.
    """

    columns: dict[str, Any]
    file: str
    entry_start: int
    length: int
    first_index: int
    ids: dict[str, np.ndarray] = field(default_factory=dict)

    def event_id(self, i: int) -> EventID:
        ids = {name: int(values[i]) for name, values in self.ids.items()}
        return EventID(self.file, self.entry_start + i, ids.get("run"), ids.get("luminosityBlock"), ids.get("event"))


class Event:
    """One event in flight: a position in a chunk plus the products put so far.

    Args:
        chunk (Chunk): the chunk holding its input columns.
        i (int): the position inside the chunk.
        stream (int): the stream (set of module instances) processing it.
        seed (int): the job's random seed, combined with the event index for :meth:`EventView.rng`.
    """

    __slots__ = ("chunk", "i", "index", "stream", "products", "seed", "_id")

    def __init__(self, chunk: Chunk, i: int, stream: int = 0, seed: int = 0):
        self.chunk, self.i, self.stream, self.seed = chunk, i, stream, seed
        self.index = chunk.first_index + i
        self.products: dict[str, Any] = {}
        self._id: EventID | None = None

    @property
    def id(self) -> EventID:
        if self._id is None:
            self._id = self.chunk.event_id(self.i)
        return self._id

    def get(self, key: str) -> Any:
        """Returns a product or a view of the input column ``key`` for this event (``KeyError`` if absent)."""
        products = self.products
        if key in products:
            return products[key]
        return self.chunk.columns[key][self.i]

    def has(self, key: str) -> bool:
        return key in self.products or key in self.chunk.columns


def freeze(value: Any) -> Any:
    """Makes a product read-only where Python allows it (numpy arrays and dicts of them)."""
    if isinstance(value, np.ndarray):
        value.flags.writeable = False
    elif isinstance(value, dict):
        for item in value.values():
            freeze(item)
    return value


class EventView:
    """What a module sees of an event: only the keys it consumes, and puts of its declared products.

    Args:
        event (Event): the event.
        module (Module): the module running on it.
        consumes (frozenset[str]): keys the module may read.
        optional (frozenset[str]): consumed keys that may be absent (``get`` returns ``None``).
    """

    __slots__ = ("_event", "_module", "_consumes", "_optional")

    def __init__(self, event: Event, module: Module, consumes: frozenset[str], optional: frozenset[str]):
        self._event, self._module, self._consumes, self._optional = event, module, consumes, optional

    @property
    def id(self) -> EventID:
        return self._event.id

    @property
    def index(self) -> int:
        """Position of the event in the job's sequence (0-based), stable for any number of streams."""
        return self._event.index

    @property
    def stream(self) -> int:
        return self._event.stream

    def get(self, key: str) -> Any:
        """The value of a consumed key: a product, or a view into the chunk's input column."""
        if key not in self._consumes:
            raise KeyError(f"module '{self._module.label}' reads {key!r} but does not consume it; "
                           f"declare it with an InputTag (consumes: {sorted(self._consumes)})")
        try:
            return self._event.get(key)
        except KeyError:
            if key in self._optional:
                return None
            raise KeyError(f"{key!r} is not in the event (not produced upstream, or filtered out)") from None

    __getitem__ = get

    def put(self, instance: str, value: Any) -> None:
        """Stores a product ``<label>:<instance>``; it becomes read-only and cannot be replaced."""
        label = self._module.label
        if instance not in self._module.outputs():
            raise KeyError(f"module '{label}' puts {instance!r}, which it does not declare "
                           f"(declared: {sorted(self._module.outputs())})")
        key = f"{label}:{instance}"
        products = self._event.products
        if key in products:
            raise KeyError(f"product {key!r} was already put; products are immutable")
        products[key] = freeze(value)

    def rng(self) -> np.random.Generator:
        """A random generator seeded by (job seed, event identity, module label): reproducible whatever
        the number of streams and threads, different for each module and event.

        The identity is the event's run/luminosityBlock/event numbers when the source has them (the
        empty source numbers events 1..N), else its index in the job; so a task split into jobs
        (``sonic submit``) draws the same numbers as one process over all events.
        """
        label_hash = zlib.crc32(self._module.label.encode())
        event = self._event
        ids = event.chunk.ids
        identity = [int(ids[name][event.i]) for name in ("run", "luminosityBlock", "event") if name in ids]
        return np.random.default_rng([event.seed, *(identity or [event.index]), label_hash])
