"""The scheduler: S events in flight on T worker threads, modules run as soon as their inputs exist.

How it works (a task-based design, like CMSSW's TBB scheduler in miniature):

* The main thread takes events from the source and starts each on a free *stream* (a set of module
  instances); at most S events are in flight.
* A module becomes *ready* for an event when all its upstream modules have finished for that event.
  Ready modules go to one queue served by T worker threads; a worker that finishes a module runs one
  of the newly ready modules itself (no queue round trip) and queues the others, so independent
  modules of one event run concurrently.
* ``ExternalWork.acquire`` returns an awaitable; the worker attaches a callback and goes on with other
  work. When the result is in, ``produce`` is queued like any ready module. No thread waits on it.
* Finished events are handed back in input order (a reorder buffer of at most S events), so the output
  is identical whatever S and T are.
* The first exception stops the run: it is re-raised in the main thread as a
  :class:`~sonic_hep.framework.errors.ModuleError` naming the module label, phase and event.

The per-event bookkeeping (which module is ready, the reorder buffer) lives in ``inflight.py`` and is
tested without threads; this file owns only the threads, the queues and the calls into modules.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, NamedTuple

from .errors import ConfigError, ModuleError
from .event import Chunk, Event, EventView
from .futures import as_future
from .graph import ModuleGraph
from .inflight import EventProgress, Flight, Plan
from .module import Analyzer, ExternalWork, Filter, Module, Producer
from .timing import Timing


@dataclass(frozen=True)
class Kind:
    """How the scheduler calls one kind of module."""

    #: the method called when the module's inputs are ready
    method: str
    #: the phase its time is booked under, and named in a :class:`ModuleError`
    phase: str
    #: the method returns whether the event passes
    filters: bool = False
    #: the method returns an awaitable; ``produce(view, result)`` follows when it is done
    external: bool = False


#: every module kind, in the order they are tried (``isinstance``): the one table of the scheduler's calls
KINDS: tuple[tuple[type[Module], Kind], ...] = (
    (ExternalWork, Kind("acquire", "acquire", external=True)),
    (Filter, Kind("filter", "run", filters=True)),
    (Analyzer, Kind("analyze", "run")),
    (Producer, Kind("produce", "run")),
)


def kind_of(module: Module) -> Kind:
    """The row of :data:`KINDS` for ``module``."""
    for cls, kind in KINDS:
        if isinstance(module, cls):
            return kind
    raise TypeError(f"module '{module.label}' is of no known kind ({type(module).__mro__})")


class _Task(NamedTuple):
    """One entry of the ready queue: run module ``module`` of ``progress``'s event."""

    progress: EventProgress
    module: int
    #: the finished external work whose result ``produce`` gets; None: the module's first call
    result: Future | None = None


class Scheduler:
    """Runs the modules of a :class:`ModuleGraph` over events.

    Args:
        graph (ModuleGraph): the checked DAG (its ``order`` is the module order).
        streams (list[dict[str, Module]]): one dict of module instances per stream.
        threads (int): worker threads.
        timing (Timing): where per-module times go.
        seed (int): the job's random seed (for ``EventView.rng``).
    """

    def __init__(self, graph: ModuleGraph, streams: list[dict[str, Module]], threads: int, timing: Timing,
                 seed: int = 0):
        self.plan = Plan.from_graph(graph)
        self.order = list(self.plan.order)
        self.instances = [[stream[label] for label in self.order] for stream in streams]
        first = self.instances[0] if self.instances else []
        self.kinds = [kind_of(m) for m in first]
        #: each instance's method for its kind, looked up once (not per call)
        self.calls = [[getattr(m, kind.method) for m, kind in zip(instances, self.kinds)]
                      for instances in self.instances]
        self.consumes = [frozenset(m.consumes()) for m in first]
        self.optional = [frozenset(k for k, tag in m.inputs().items() if tag.optional) for m in first]
        self.threads = threads
        self.timing = timing
        self.seed = seed
        self._ready: queue.SimpleQueue[_Task | None] = queue.SimpleQueue()  # None: a worker's signal to exit
        self._done: queue.SimpleQueue[EventProgress | None] = queue.SimpleQueue()  # None: a worker failed
        self._failure: BaseException | None = None
        self._stopping = False

    # -- worker side ----------------------------------------------------------------------------------
    def _worker(self) -> None:
        get = self._ready.get
        while True:
            task = get()
            if task is None:
                return
            try:
                self._execute(task)
            except BaseException as err:  # noqa: BLE001 - everything reaches the main thread
                self._fail(err)

    def _fail(self, err: BaseException) -> None:
        if self._failure is None:
            self._failure = err
        self._stopping = True
        self._done.put(None)

    def _execute(self, task: _Task) -> None:
        """Runs one module for one event, then the modules it made ready, inline, as long as there are any.

        Clocks are read once per module boundary (the end of one call is the start of the next): reading
        the thread CPU clock is a system call, the largest single cost of a module call.
        """
        perf, cpu = time.perf_counter, time.thread_time
        timing = self.timing
        st, i, fut = task
        t0, c0 = perf(), cpu()
        while not self._stopping:
            module = self.instances[st.event.stream][i]
            kind = self.kinds[i]
            if i in st.skip:
                pass
            elif fut is None:
                view = EventView(st.event, module, self.consumes[i], self.optional[i])
                try:
                    outcome = self.calls[st.event.stream][i](view)
                except Exception as err:
                    raise self._error(module, st, kind.phase, err) from err
                t1, c1 = perf(), cpu()
                timing.add(i, kind.phase, t1 - t0, c1 - c0)
                t0, c0 = t1, c1
                if kind.filters and not outcome:
                    st.reject(i)
                    timing.reject(i)
                elif kind.external:
                    pending = as_future(outcome)
                    if pending is not None:
                        st.acquired_at[i] = t1
                        pending.add_done_callback(lambda f, st=st, i=i: self._ready.put(_Task(st, i, f)))
                        return
                    t0, c0 = self._produce(module, st, i, outcome, t0, c0)
            else:
                timing.add(i, "wait", t0 - st.acquired_at.pop(i), 0.0)
                try:
                    result = fut.result()
                except Exception as err:
                    raise self._error(module, st, "external work", err) from err
                t0, c0 = self._produce(module, st, i, result, t0, c0)
            ready, complete = st.finish(i)
            if complete:
                self._done.put(st)
            if not ready:
                return
            for j in ready[1:]:
                self._ready.put(_Task(st, j))
            i, fut = ready[0], None

    def _produce(self, module: Any, st: EventProgress, i: int, result: Any, t0: float,
                 c0: float) -> tuple[float, float]:
        view = EventView(st.event, module, self.consumes[i], self.optional[i])
        try:
            module.produce(view, result)
        except Exception as err:
            raise self._error(module, st, "produce", err) from err
        t1, c1 = time.perf_counter(), time.thread_time()
        self.timing.add(i, "produce", t1 - t0, c1 - c0)
        return t1, c1

    @staticmethod
    def _error(module: Module, st: EventProgress, phase: str, err: Exception) -> ModuleError:
        return ModuleError(module.label, str(st.event.id), phase, err)  # the message names module, phase, event

    # -- main-thread side ----------------------------------------------------------------------------
    def _start_workers(self) -> list[threading.Thread]:
        """Starts the worker threads; a system that refuses one is a configuration error, not a crash."""
        workers: list[threading.Thread] = []
        try:
            for k in range(self.threads):
                worker = threading.Thread(target=self._worker, name=f"sonic-worker-{k}", daemon=True)
                worker.start()
                workers.append(worker)
        except RuntimeError as err:  # "can't start new thread": a process or memory limit
            for _ in workers:
                self._ready.put(None)
            raise ConfigError(f"the system refused worker thread {len(workers) + 1} of {self.threads} ({err}); "
                              f"use fewer threads", key="options.threads") from None
        return workers

    def run(self, chunks: Iterator[Chunk], emit: Callable[[Event, bool], None]) -> int:
        """Processes every event of ``chunks``; calls ``emit(event, passed)`` in input order.

        Returns the number of events processed. Raises the first module error, or KeyboardInterrupt.
        """
        if not self.order:  # nothing to run (a pure copy job): events go straight to the output, in order
            processed = 0
            for chunk in chunks:
                for i in range(chunk.length):
                    emit(Event(chunk, i, 0, self.seed), True)
                    processed += 1
            return processed
        workers = self._start_workers()
        flight: Flight[EventProgress] = Flight(len(self.instances))

        def collect() -> None:
            st = self._done.get()  # interruptible by SIGINT; a failing worker puts None to wake us
            if st is None or self._failure is not None:
                raise self._failure or RuntimeError("scheduler stopped without a recorded failure")
            for done in flight.done(st.event.index, st.event.stream, st):
                emit(done.event, done.passed)

        roots = self.plan.roots
        try:
            for chunk in chunks:
                for i in range(chunk.length):
                    while not flight.can_start():
                        collect()
                    stream = flight.start(chunk.first_index + i)
                    st = EventProgress(Event(chunk, i, stream, self.seed), self.plan)
                    for r in roots:
                        self._ready.put(_Task(st, r))
                    if self._failure is not None:
                        raise self._failure
            while flight.in_flight:
                collect()
        except BaseException:
            self._stopping = True
            raise
        finally:
            for _ in workers:
                self._ready.put(None)
            for worker in workers:
                worker.join(timeout=10 if self._stopping else None)
        return flight.processed
