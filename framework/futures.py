"""Awaitables for external work: one background asyncio loop, and helpers to combine futures.

``ExternalWork.acquire`` may return a ``concurrent.futures.Future`` (thread-safe, what gRPC callbacks
and executors give), a coroutine (run on the framework's background event loop), or a plain value.
:func:`as_future` turns any of them into a ``concurrent.futures.Future`` so the scheduler can attach
a callback and free the worker thread.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def background_loop() -> asyncio.AbstractEventLoop:
    """The framework's asyncio loop, running on a daemon thread (started on first use)."""
    global _loop
    with _loop_lock:
        if _loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="sonic-asyncio", daemon=True).start()
            _loop = loop
        return _loop


async def _await(awaitable: Any) -> Any:
    return await awaitable


def as_future(value: Any) -> Future | None:
    """A concurrent Future for ``value`` if it is awaitable; ``None`` for a plain (already known) value."""
    if isinstance(value, Future):
        return value
    if inspect.iscoroutine(value):
        return asyncio.run_coroutine_threadsafe(value, background_loop())
    if inspect.isawaitable(value):
        return asyncio.run_coroutine_threadsafe(_await(value), background_loop())
    return None


def completed(value: Any) -> Future:
    """A Future already holding ``value``."""
    fut: Future = Future()
    fut.set_result(value)
    return fut


def gather(futures: Sequence[Future]) -> Future:
    """A Future of the list of results, in order; fails with the first exception of any of them.

    Lets one ``acquire`` start several requests (e.g. one per batch) and hand back a single awaitable.
    """
    result: Future = Future()
    futures = list(futures)
    if not futures:
        result.set_result([])
        return result
    remaining = [len(futures)]
    lock = threading.Lock()

    def done(_: Future) -> None:
        with lock:
            remaining[0] -= 1
            last = remaining[0] == 0
        if not last or result.done():
            return
        for fut in futures:
            if fut.exception() is not None:
                result.set_exception(fut.exception())
                return
        result.set_result([fut.result() for fut in futures])

    for fut in futures:
        fut.add_done_callback(done)
    return result


def delayed(value: Any, seconds: float) -> Future:
    """A Future that gets ``value`` after ``seconds`` without holding any thread (a timer on the loop)."""
    fut: Future = Future()
    loop = background_loop()
    loop.call_soon_threadsafe(loop.call_later, seconds, lambda: fut.done() or fut.set_result(value))
    return fut


def then(future: Future, fn: Callable[[Any], Any]) -> Future:
    """A Future of ``fn(result)``; failures pass through unchanged (and an exception in ``fn`` reaches the
    caller through the Future, never a callback thread)."""
    out: Future = Future()

    def done(f: Future) -> None:
        err = f.exception()
        if err is not None:
            out.set_exception(err)
            return
        try:
            out.set_result(fn(f.result()))
        except Exception as exc:  # noqa: BLE001 - reaches the caller through the Future
            out.set_exception(exc)

    future.add_done_callback(done)
    return out
