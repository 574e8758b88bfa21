"""What the scheduler knows of the events in flight, as plain objects, so it is tested without threads.

The scheduler (``scheduler.py``) owns the threads and the queues; every decision about an event is
made here, by objects that only count (like ``workflows/grid/lifecycle.py`` decides a job's state by
a table):

* :class:`Plan`: the module graph as index lists (upstream counts, dependents, roots, what a filter
  skips), computed once per job.
* :class:`EventProgress`: one event's progress through the plan: which modules became ready when one
  finished, whether the event is complete, what its filters decided.
* :class:`Flight`: the events in flight: which stream is free, and the reorder buffer that hands
  finished events back in input order, so the output is the same whatever the streams and threads.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, TypeVar

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


class EventProgress:
    """One event's progress through a :class:`Plan`.

    Finishing a module is safe from several worker threads (independent modules of one event run
    concurrently); nothing else here needs a lock: a module's skip mark is set by its filter, which
    finishes before the module can become ready.
    """

    __slots__ = ("event", "plan", "remaining", "pending", "skip", "passed", "acquired_at", "_lock")

    def __init__(self, event: Any, plan: Plan):
        self.event = event
        self.plan = plan
        #: upstream modules each module still waits for
        self.remaining = list(plan.deps)
        #: modules not finished yet (skipped ones included: they finish without running)
        self.pending = len(plan.deps)
        #: modules that must not run: a filter upstream rejected the event
        self.skip: set[int] = set()
        #: whether every filter that ran accepted the event
        self.passed = True
        #: when each external work's request went out (perf_counter), for the "wait" time
        self.acquired_at: dict[int, float] = {}
        self._lock = threading.Lock()

    def reject(self, i: int) -> None:
        """Filter ``i`` rejected the event: it is not written, and the modules it guards do not run."""
        self.passed = False
        self.skip |= self.plan.skips[i]

    def finish(self, i: int) -> Finished:
        """Module ``i`` is done (or skipped) for this event."""
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
    """The events in flight: at most one per stream, handed back in input order.

    Args:
        streams: how many events may be in flight at once.
    """

    def __init__(self, streams: int):
        #: streams with no event, the longest idle first
        self.free: deque[int] = deque(range(streams))
        self.in_flight = 0
        #: events handed back so far
        self.processed = 0
        #: the index of the next event to hand back (None before the first start)
        self.next: int | None = None
        #: finished events that wait for an earlier one, by event index
        self.waiting: dict[int, T] = {}

    def can_start(self) -> bool:
        return bool(self.free)

    def start(self, index: int) -> int:
        """Event ``index`` starts; returns its stream. Events start in input order."""
        if not self.free:
            raise RuntimeError(f"event {index} started with every stream busy")  # a scheduler bug
        if self.next is None:
            self.next = index
        self.in_flight += 1
        return self.free.popleft()

    def done(self, index: int, stream: int, item: T) -> list[T]:
        """Event ``index`` on ``stream`` is complete; returns the events now due, in input order."""
        self.free.append(stream)
        self.in_flight -= 1
        self.waiting[index] = item
        due = []
        while self.next in self.waiting:
            due.append(self.waiting.pop(self.next))
            self.next += 1
        self.processed += len(due)
        return due
