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
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

from .errors import ConfigError, ModuleError
from .event import Chunk, Event, EventView
from .futures import as_future
from .graph import ModuleGraph
from .module import Analyzer, ExternalWork, Filter, Module, Producer
from .timing import Timing

_PRODUCER, _FILTER, _ANALYZER, _EXTERNAL = range(4)


class _EventState:
    """Book-keeping of one event in flight."""

    __slots__ = ("event", "remaining", "pending", "lock", "skip", "passed", "acquired_at")

    def __init__(self, event: Event, deps: list[int]):
        self.event = event
        self.remaining = list(deps)
        self.pending = len(deps)
        self.lock = threading.Lock()
        self.skip: set[int] = set()
        self.passed = True
        self.acquired_at: dict[int, float] = {}


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
        self.order = list(graph.order)
        index = {label: i for i, label in enumerate(self.order)}
        self.deps = [len(graph.upstream(label)) for label in self.order]
        self.dependents = [[index[d] for d in graph.downstream(label)] for label in self.order]
        self.roots = [i for i, n in enumerate(self.deps) if n == 0]
        self.skips = {index[f]: frozenset(index[d] for d in desc) for f, desc in graph.filter_descendants.items()}
        self.instances = [[stream[label] for label in self.order] for stream in streams]
        first = self.instances[0] if self.instances else []
        self.kinds = [self._kind(m) for m in first]
        self.consumes = [frozenset(m.consumes()) for m in first]
        self.optional = [frozenset(k for k, tag in m.inputs().items() if tag.optional) for m in first]
        self.threads = threads
        self.timing = timing
        self.seed = seed
        self._ready: queue.SimpleQueue = queue.SimpleQueue()
        self._done: queue.SimpleQueue = queue.SimpleQueue()
        self._failure: BaseException | None = None
        self._stopping = False

    @staticmethod
    def _kind(module: Module) -> int:
        if isinstance(module, ExternalWork):
            return _EXTERNAL
        if isinstance(module, Filter):
            return _FILTER
        if isinstance(module, Analyzer):
            return _ANALYZER
        if isinstance(module, Producer):
            return _PRODUCER
        raise TypeError(f"module '{module.label}' is of no known kind ({type(module).__mro__})")

    # -- worker side ----------------------------------------------------------------------------------
    def _worker(self) -> None:
        get = self._ready.get
        while True:
            task = get()
            if task is None:
                return
            try:
                self._execute(*task)
            except BaseException as err:  # noqa: BLE001 - everything reaches the main thread
                self._fail(err)

    def _fail(self, err: BaseException) -> None:
        if self._failure is None:
            self._failure = err
        self._stopping = True
        self._done.put(None)

    def _execute(self, st: _EventState, i: int, fut: Future | None) -> None:
        """Runs module ``i`` for one event, then the modules it made ready, inline, as long as there are any.

        Clocks are read once per module boundary (the end of one call is the start of the next): reading
        the thread CPU clock is a system call, the largest single cost of a module call.
        """
        perf, cpu = time.perf_counter, time.thread_time
        timing = self.timing
        t0, c0 = perf(), cpu()
        while not self._stopping:
            module = self.instances[st.event.stream][i]
            kind = self.kinds[i]
            if i in st.skip:
                pass
            elif fut is None:
                view = EventView(st.event, module, self.consumes[i], self.optional[i])
                try:
                    if kind == _PRODUCER:
                        module.produce(view)
                    elif kind == _FILTER:
                        if not module.filter(view):
                            st.passed = False
                            st.skip |= self.skips[i]
                    elif kind == _ANALYZER:
                        module.analyze(view)
                    else:
                        result = module.acquire(view)
                except Exception as err:
                    raise self._error(module, st, "acquire" if kind == _EXTERNAL else "run", err) from err
                t1, c1 = perf(), cpu()
                timing.add(i, "acquire" if kind == _EXTERNAL else "run", t1 - t0, c1 - c0)
                t0, c0 = t1, c1
                if kind == _EXTERNAL:
                    pending = as_future(result)
                    if pending is not None:
                        st.acquired_at[i] = t1
                        pending.add_done_callback(lambda f, st=st, i=i: self._ready.put((st, i, f)))
                        return
                    t0, c0 = self._produce(module, st, i, result, t0, c0)
            else:
                timing.add(i, "wait", t0 - st.acquired_at.pop(i), 0.0)
                try:
                    result = fut.result()
                except Exception as err:
                    raise self._error(module, st, "external work", err) from err
                t0, c0 = self._produce(module, st, i, result, t0, c0)
            ready = self._finish(st, i)
            if not ready:
                return
            for j in ready[1:]:
                self._ready.put((st, j, None))
            i, fut = ready[0], None

    def _produce(self, module: Any, st: _EventState, i: int, result: Any, t0: float, c0: float) -> tuple[float, float]:
        view = EventView(st.event, module, self.consumes[i], self.optional[i])
        try:
            module.produce(view, result)
        except Exception as err:
            raise self._error(module, st, "produce", err) from err
        t1, c1 = time.perf_counter(), time.thread_time()
        self.timing.add(i, "produce", t1 - t0, c1 - c0)
        return t1, c1

    @staticmethod
    def _error(module: Module, st: _EventState, phase: str, err: Exception) -> ModuleError:
        return ModuleError(module.label, str(st.event.id), phase, err)  # the message names module, phase, event

    def _finish(self, st: _EventState, i: int) -> list[int]:
        ready = []
        with st.lock:
            remaining = st.remaining
            for j in self.dependents[i]:
                remaining[j] -= 1
                if remaining[j] == 0:
                    ready.append(j)
            st.pending -= 1
            done = st.pending == 0
        if done:
            self._done.put(st)
        return ready

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
        n_streams = len(self.instances)
        workers = self._start_workers()
        free = deque(range(n_streams))
        buffer: dict[int, _EventState] = {}
        state = {"next": None, "in_flight": 0, "processed": 0}

        def collect() -> None:
            st = self._done.get()  # interruptible by SIGINT; a failing worker puts None to wake us
            if st is None or self._failure is not None:
                raise self._failure or RuntimeError("scheduler stopped without a recorded failure")
            free.append(st.event.stream)
            state["in_flight"] -= 1
            buffer[st.event.index] = st
            while state["next"] in buffer:
                done = buffer.pop(state["next"])
                emit(done.event, done.passed)
                state["processed"] += 1
                state["next"] += 1

        try:
            for chunk in chunks:
                if state["next"] is None:
                    state["next"] = chunk.first_index
                for i in range(chunk.length):
                    while not free:
                        collect()
                    stream = free.popleft()
                    st = _EventState(Event(chunk, i, stream, self.seed), self.deps)
                    state["in_flight"] += 1
                    for r in self.roots:
                        self._ready.put((st, r, None))
                    if self._failure is not None:
                        raise self._failure
            while state["in_flight"]:
                collect()
        except BaseException:
            self._stopping = True
            raise
        finally:
            for _ in workers:
                self._ready.put(None)
            for worker in workers:
                worker.join(timeout=10 if self._stopping else None)
        return state["processed"]
