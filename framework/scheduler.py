"""The scheduler: S batches of events in flight on T worker threads, modules run as soon as their inputs exist.

How it works (a task-based design, like CMSSW's TBB scheduler in miniature, over batches of events):

* The main thread cuts the source's chunks into batches of ``events_per_call`` consecutive events and
  starts each on a free *stream* (a set of module instances); at most S batches are in flight.
* A module becomes *ready* for a batch when all its upstream modules have finished for that batch.
  Ready modules go to one queue served by T worker threads; a worker that finishes a module runs one
  of the newly ready modules itself (no queue round trip) and queues the others, so independent
  modules of one batch run concurrently.
* A columnar module is called once for the batch (:class:`~.batch.EventBatch`); a per-event module once
  per event of it (:class:`~.event.EventView`), exactly as with one event per batch. A filter removes the
  events it rejects from the modules it guards; a module left with no event is not called.
* ``ExternalWork.acquire`` returns an awaitable; the worker attaches a callback and goes on with other
  work. When the result is in, ``produce`` is queued like any ready module. No thread waits on it.
* Finished batches are handed back in input order (a reorder buffer of at most S batches), so the output
  is identical whatever S, T and the batch size are.
* The first exception stops the run: it is re-raised in the main thread as a
  :class:`~sonic_hep.framework.errors.ModuleError` naming the module label, phase and event. An error in a
  columnar call is narrowed to its event by rerunning the batch one event at a time.

The per-batch bookkeeping (which module is ready, which events each runs on, the reorder buffer) lives in
``inflight.py`` and is tested without threads; this file owns only the threads, the queues and the calls
into modules.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from .batch import Batch, EventBatch
from .errors import ConfigError, ModuleError
from .event import Chunk, Event, EventView
from .futures import as_future, completed, gather
from .graph import ModuleGraph
from .inflight import BatchProgress, Flight, Plan
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
    """One entry of the ready queue: run module ``module`` of ``progress``'s batch."""

    progress: BatchProgress
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
        events_per_call (int): events per batch (1: one event at a time, CMSSW's granularity).
    """

    def __init__(self, graph: ModuleGraph, streams: list[dict[str, Module]], threads: int, timing: Timing,
                 seed: int = 0, events_per_call: int = 1):
        if events_per_call < 1:
            raise ConfigError(f"events per call must be at least 1, not {events_per_call}",
                              key="options.events_per_call")
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
        self.columnar = [bool(m.columnar) for m in first]
        self.events_per_call = events_per_call
        self.threads = threads
        self.timing = timing
        self.seed = seed
        self._ready: queue.SimpleQueue[_Task | None] = queue.SimpleQueue()  # None: a worker's signal to exit
        self._done: queue.SimpleQueue[BatchProgress | None] = queue.SimpleQueue()  # None: a worker failed
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
        """Runs one module for one batch, then the modules it made ready, inline, as long as there are any.

        Clocks are read once per module boundary (the end of one call is the start of the next): reading
        the thread CPU clock is a system call, the largest single cost of a module call.
        """
        perf, cpu = time.perf_counter, time.thread_time
        st, i, fut = task
        t0, c0 = perf(), cpu()
        while not self._stopping:
            positions = st.active(i)
            if fut is None:
                if positions is None or len(positions):
                    pending, t0, c0 = self._call(st, i, positions, t0, c0)
                    if pending is not None:
                        st.acquired_at[i] = t0
                        pending.add_done_callback(lambda f, st=st, i=i: self._ready.put(_Task(st, i, f)))
                        return
            else:
                events = st.batch.size if positions is None else len(positions)
                self.timing.add(i, "wait", t0 - st.acquired_at.pop(i), 0.0, events=events)
                try:
                    result = fut.result()
                except Exception as err:
                    module = self.instances[st.batch.stream][i]
                    raise ModuleError(module.label, st.batch.describe(positions), "external work", err) from err
                t0, c0 = self._produce(st, i, positions, result, t0, c0)
            ready, complete = st.finish(i)
            if complete:
                self._done.put(st)
            if not ready:
                return
            for j in ready[1:]:
                self._ready.put(_Task(st, j))
            i, fut = ready[0], None

    def _call(self, st: BatchProgress, i: int, positions: np.ndarray | None, t0: float,
              c0: float) -> tuple[Future | None, float, float]:
        """Calls module ``i``'s method for its kind on the batch's events at ``positions``; returns the pending
        external work (None when there is none to wait for) and the clocks after the call."""
        batch = st.batch
        module = self.instances[batch.stream][i]
        kind = self.kinds[i]
        call = self.calls[batch.stream][i]
        if self.columnar[i]:
            view = EventBatch(batch, module, self.consumes[i], self.optional[i], positions)
            try:
                outcome = call(view)
                if kind.filters:
                    outcome = _mask(module, outcome, len(view))
            except Exception as err:
                raise self._culprit(st, i, positions, kind.phase, err) from err
            events, calls, outcomes = len(view), 1, outcome
        else:
            ks = _events(batch, positions).tolist()
            outcomes = []
            for k in ks:
                event = Event(batch, k)
                try:
                    outcomes.append(call(EventView(event, module, self.consumes[i], self.optional[i])))
                except Exception as err:
                    raise ModuleError(module.label, str(event.id), kind.phase, err) from err
            events = calls = len(outcomes)
            if kind.filters:
                outcomes = np.fromiter((bool(o) for o in outcomes), dtype=bool, count=events)
        t1, c1 = time.perf_counter(), time.thread_time()
        self.timing.add(i, kind.phase, t1 - t0, c1 - c0, events=events, calls=calls)
        if kind.filters and i in self.plan.skips:  # a filter off the path ran for its products: it selects nothing
            rejected = _events(batch, positions)[~outcomes]
            st.reject(i, rejected)
            self.timing.reject(i, len(rejected))
        elif kind.external:
            pending = self._pending(outcomes, columnar=self.columnar[i])
            if pending is not None:
                return pending, t1, c1
            t1, c1 = self._produce(st, i, positions, outcomes, t1, c1)
        return None, t1, c1

    @staticmethod
    def _pending(outcomes: Any, columnar: bool) -> Future | None:
        """One awaitable for what ``acquire`` returned: the columnar call's, or all per-event calls' together
        (a list of results, in event order). None when every result is already known."""
        if columnar:
            return as_future(outcomes)
        futures = [as_future(o) for o in outcomes]
        if all(f is None for f in futures):
            return None
        return gather([f if f is not None else completed(o) for f, o in zip(futures, outcomes)])

    def _produce(self, st: BatchProgress, i: int, positions: np.ndarray | None, result: Any, t0: float,
                 c0: float) -> tuple[float, float]:
        batch = st.batch
        module = self.instances[batch.stream][i]
        if self.columnar[i]:
            try:
                module.produce(EventBatch(batch, module, self.consumes[i], self.optional[i], positions), result)
            except Exception as err:
                raise self._culprit(st, i, positions, "produce", err) from err
        else:
            ks = _events(batch, positions).tolist()
            for k, value in zip(ks, result):
                event = Event(batch, k)
                try:
                    module.produce(EventView(event, module, self.consumes[i], self.optional[i]), value)
                except Exception as err:
                    raise ModuleError(module.label, str(event.id), "produce", err) from err
        t1, c1 = time.perf_counter(), time.thread_time()
        self.timing.add(i, "produce", t1 - t0, c1 - c0)
        return t1, c1

    def _culprit(self, st: BatchProgress, i: int, positions: np.ndarray | None, phase: str,
                 err: Exception) -> ModuleError:
        """The error of a columnar call, narrowed to the event that causes it: the batch is rerun one event at
        a time (products of the reruns are discarded) and the first event that fails alone is named, with its
        own error. When none fails alone, the error names the batch's entries."""
        batch = st.batch
        module = self.instances[batch.stream][i]
        every = _events(batch, positions)
        if len(every) > 1:
            for k in every:
                one = np.array([k])
                try:
                    self._run_alone(module, i, EventBatch(batch, module, self.consumes[i], self.optional[i], one,
                                                          store={}))
                except Exception as single:  # noqa: BLE001 - the culprit's own error is the one to report
                    error = ModuleError(module.label, batch.describe(one), phase, single)
                    error.add_note(f"found by rerunning the call's {len(every)} events ({batch.describe(every)}) "
                                   f"one at a time")
                    return error
        error = ModuleError(module.label, batch.describe(every), phase, err)
        if len(every) > 1:
            error.add_note("each event alone runs without error: the failure depends on the events' combination")
        return error

    def _run_alone(self, module: Module, i: int, view: EventBatch) -> None:
        """Runs module ``i``'s whole call sequence on a one-event view (blocking on external work)."""
        kind = self.kinds[i]
        outcome = getattr(module, kind.method)(view)
        if kind.filters:
            _mask(module, outcome, len(view))
        elif kind.external:
            pending = as_future(outcome)
            module.produce(view, pending.result() if pending is not None else outcome)

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
                batch = Batch(chunk, 0, chunk.length, 0, self.seed)
                for k in range(chunk.length):
                    emit(Event(batch, k), True)
                processed += chunk.length
            return processed
        workers = self._start_workers()
        flight: Flight[BatchProgress] = Flight(len(self.instances))

        def collect() -> None:
            st = self._done.get()  # interruptible by SIGINT; a failing worker puts None to wake us
            if st is None or self._failure is not None:
                raise self._failure or RuntimeError("scheduler stopped without a recorded failure")
            batch = st.batch
            for done in flight.done(batch.first_index, batch.stream, st, batch.size):
                passed = done.passed.tolist()
                for k in range(done.batch.size):
                    emit(Event(done.batch, k), passed[k])

        roots = self.plan.roots
        step = self.events_per_call
        try:
            for chunk in chunks:
                for start in range(0, chunk.length, step):
                    while not flight.can_start():
                        collect()
                    stream = flight.start(chunk.first_index + start)
                    size = min(step, chunk.length - start)
                    st = BatchProgress(Batch(chunk, start, size, stream, self.seed), self.plan)
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


def _events(batch: Batch, positions: np.ndarray | None) -> np.ndarray:
    """The batch positions a call covers (``None``: every event of the batch)."""
    return np.arange(batch.size) if positions is None else positions


def _mask(module: Module, outcome: Any, events: int) -> np.ndarray:
    """A columnar filter's decision as a boolean array with one entry per event (or a clear error)."""
    try:
        mask = np.asarray(outcome)
    except Exception:  # noqa: BLE001 - anything that is not array-like is named below
        mask = None
    if mask is None or mask.dtype != bool or mask.shape != (events,):
        what = type(outcome).__name__ if mask is None else f"{mask.dtype} array of shape {list(mask.shape)}"
        raise TypeError(f"columnar filter '{module.label}' returned {what}; it must return a boolean array with "
                        f"one entry per event ({events})")
    return mask
