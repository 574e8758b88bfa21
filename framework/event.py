"""The event model: identity, views into the chunk read from the source, and immutable products.

The source reads entries in chunks (one awkward array per consumed key); an :class:`Event` is an
index into its chunk, so ``event.get("Jet")`` is a view into the chunk's buffers, never a copy.
Modules see an event through an :class:`EventView` bound to the module, which enforces what the
module declared: it can read only keys it consumes and put only products it declares. That keeps
the DAG honest: a module cannot silently depend on something the scheduler does not know about.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .batch import Batch, PerEvent, freeze

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
    """One event of a batch in flight: a position in its :class:`~.batch.Batch`.

    Products live in the batch (a columnar module puts one array over the batch's events); an event reads
    its own entry of each.

    Args:
        batch (Batch): the batch holding its input columns and products.
        k (int): its position inside the batch.
    """

    __slots__ = ("batch", "k", "chunk", "i", "index", "stream", "seed", "_id")

    def __init__(self, batch: Batch, k: int):
        self.batch, self.k = batch, k
        self.chunk, self.stream, self.seed = batch.chunk, batch.stream, batch.seed
        self.i = batch.start + k
        self.index = batch.first_index + k
        self._id: EventID | None = None

    @classmethod
    def alone(cls, chunk: Chunk, i: int, stream: int = 0, seed: int = 0) -> Event:
        """Entry ``i`` of ``chunk`` as a batch of its own (for code that runs modules outside the scheduler)."""
        return cls(Batch(chunk, i, 1, stream, seed), 0)

    @property
    def id(self) -> EventID:
        if self._id is None:
            self._id = self.chunk.event_id(self.i)
        return self._id

    @property
    def products(self) -> dict[str, Any]:
        """This event's products by key (its entries of the batch's products)."""
        return {key: product.at(self.k) for key, product in self.batch.products.items() if product.covers(self.k)}

    def get(self, key: str) -> Any:
        """Returns a product or a view of the input column ``key`` for this event (``KeyError`` if absent)."""
        product = self.batch.products.get(key)
        if product is not None:
            return product.at(self.k)
        return self.chunk.columns[key][self.i]

    def has(self, key: str) -> bool:
        product = self.batch.products.get(key)
        if product is not None:
            return product.covers(self.k)
        return key in self.chunk.columns

    def put(self, key: str, value: Any) -> None:
        """Stores product ``key`` for this event (the caller has checked the module declares it)."""
        products = self.batch.products
        product = products.get(key)
        if product is None:
            product = products[key] = PerEvent(self.batch.size)
        elif not isinstance(product, PerEvent) or product.covers(self.k):
            raise KeyError(f"product {key!r} was already put; products are immutable")
        product.values[self.k] = freeze(value)


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
        self._event.put(f"{label}:{instance}", value)

    def rng(self) -> np.random.Generator:
        """A random generator seeded by (job seed, event identity, module label): reproducible whatever
        the number of streams, threads and events per call, different for each module and event (see
        :meth:`~.batch.Batch.event_rng`)."""
        event = self._event
        return event.batch.event_rng(event.k, self._module.label)
