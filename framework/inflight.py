"""What the scheduler knows of the events in flight, as plain objects, so it is tested without threads.

The scheduler (``scheduler.py``) owns the threads and the queues; every decision about an event is
made here, by objects that only count (like ``workflows/grid/lifecycle.py`` decides a job's state by
a table):

* :class:`Plan`: the module graph as index lists (upstream counts, dependents, roots, what a filter
  skips), computed once per job.
* :class:`BatchProgress`: one batch's progress through the plan: which modules became ready when one
  finished, whether the batch is complete, which events its filters rejected (and so which events each
  module still runs on).
* :class:`Flight`: the batches in flight: which stream is free, and the reorder buffer that hands
  finished batches back in input order, so the output is the same whatever the streams and threads.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, TypeVar

import numpy as np

from .graph import ModuleGraph

T = TypeVar("T")


@dataclass(frozen=True)
class Plan:
    """The module graph as index lists (module ``i`` is ``order[i]``).

    Args:
        order: module labels in the graph's order.
        deps: how many upstream modules each module waits for.
        dependents: the modules each module feeds.
        skips: for each filter, the modules that do not run on an event it rejects.
    """

    order: tuple[str, ...]
    deps: tuple[int, ...]
    dependents: tuple[tuple[int, ...], ...]
    skips: dict[int, frozenset[int]] = field(default_factory=dict)

    @property
    def roots(self) -> list[int]:
        """Modules that wait for nothing: they start an event."""
        return [i for i, n in enumerate(self.deps) if n == 0]

    @classmethod
    def from_graph(cls, graph: ModuleGraph) -> Plan:
        order = tuple(graph.order)
        index = {label: i for i, label in enumerate(order)}
        return cls(order=order,
                   deps=tuple(len(graph.upstream(label)) for label in order),
                   dependents=tuple(tuple(index[d] for d in graph.downstream(label)) for label in order),
                   skips={index[f]: frozenset(index[d] for d in desc) for f, desc in graph.filter_descendants.items()})


class Finished(NamedTuple):
    """What finishing one module of an event led to."""

    #: modules whose last upstream module this was, in the order of ``Plan.dependents``
    ready: list[int]
    #: whether this was the event's last module (the event is complete)
    complete: bool


class BatchProgress:
    """One batch's progress through a :class:`Plan`: the modules done, and which events each module still
    runs on (a filter removes the events it rejects from the modules it guards).

    Finishing a module is safe from several worker threads (independent modules of one batch run
    concurrently); a rejection is recorded under the same lock, since two independent filters may guard
    the same module.
    """

    __slots__ = ("batch", "plan", "remaining", "pending", "removed", "passed", "acquired_at", "_lock")

    def __init__(self, batch: Any, plan: Plan):
        self.batch = batch
        self.plan = plan
        #: upstream modules each module still waits for
        self.remaining = list(plan.deps)
        #: modules not finished yet (skipped ones included: they finish without running)
        self.pending = len(plan.deps)
        #: per module guarded by a filter that rejected something: which batch positions it must not run on
        self.removed: dict[int, np.ndarray] = {}
        #: per event: whether every filter that ran accepted it
        self.passed = np.ones(batch.size, dtype=bool)
        #: when each external work's request went out (perf_counter), for the "wait" time
        self.acquired_at: dict[int, float] = {}
        self._lock = threading.Lock()

    def active(self, i: int) -> np.ndarray | None:
        """The batch positions module ``i`` runs on: ``None`` for all (no filter removed any), else the
        positions in order (empty: the module is skipped)."""
        removed = self.removed.get(i)
        return None if removed is None else np.flatnonzero(~removed)

    def reject(self, i: int, positions: np.ndarray) -> None:
        """Filter ``i`` rejected the events at ``positions``: they are not written, and the modules the
        filter guards do not run on them."""
        if not len(positions):
            return
        with self._lock:
            self.passed[positions] = False
            for j in self.plan.skips[i]:
                removed = self.removed.get(j)
                if removed is None:
                    removed = self.removed[j] = np.zeros(self.batch.size, dtype=bool)
                removed[positions] = True

    def finish(self, i: int) -> Finished:
        """Module ``i`` is done (or skipped) for this batch."""
        ready = []
        with self._lock:
            remaining = self.remaining
            for j in self.plan.dependents[i]:
                remaining[j] -= 1
                if remaining[j] == 0:
                    ready.append(j)
            self.pending -= 1
            complete = self.pending == 0
        return Finished(ready, complete)


class Flight(Generic[T]):
    """The batches in flight: at most one per stream, handed back in input order.

    Args:
        streams: how many batches may be in flight at once.
    """

    def __init__(self, streams: int):
        #: streams with no event, the longest idle first
        self.free: deque[int] = deque(range(streams))
        self.in_flight = 0
        #: events handed back so far
        self.processed = 0
        #: the index of the first event of the next batch to hand back (None before the first start)
        self.next: int | None = None
        #: finished batches that wait for an earlier one, by their first event's index, with their size
        self.waiting: dict[int, tuple[T, int]] = {}

    def can_start(self) -> bool:
        return bool(self.free)

    def start(self, index: int) -> int:
        """The batch whose first event is ``index`` starts; returns its stream. Batches start in input order."""
        if not self.free:
            raise RuntimeError(f"event {index} started with every stream busy")  # a scheduler bug
        if self.next is None:
            self.next = index
        self.in_flight += 1
        return self.free.popleft()

    def done(self, index: int, stream: int, item: T, size: int = 1) -> list[T]:
        """The batch of ``size`` events from ``index`` on ``stream`` is complete; returns the batches now due,
        in input order."""
        self.free.append(stream)
        self.in_flight -= 1
        self.waiting[index] = (item, size)
        due = []
        while self.next in self.waiting:
            item, size = self.waiting.pop(self.next)
            due.append(item)
            self.next += size
            self.processed += size
        return due
