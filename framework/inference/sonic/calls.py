"""A request from its sending to its end, and the local deadline that fails its caller in time.

Why apart from the connection and its transports: what happens to a call does not depend on what carries
it. A call is sent (or queued to be), its caller may be failed at ``timeout_s`` while the call runs on
(deadlines are local, :class:`~.connection.ServerConnection` says why), and it ends when the server answers
or its connection ends. A transport sees only :meth:`Call.begin` (may I send it?) and :meth:`Call.end` (it
ended); the :class:`CallLedger` of each connection counts the calls still running and those whose caller
timed out, and one thread (:class:`_Deadlines`) keeps the deadlines of every connection.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from typing import Any

from ..triton_errors import ACTIONS, RequestError

log = logging.getLogger(__name__)

#: timed-out calls still running on one server beyond which new requests fail at once (and fail over)
ORPHAN_LIMIT = 256

#: ``on_end(call, answer or None, error or None)``: reads the answer and finishes the call
OnEnd = Callable[["Call", Any, "BaseException | None"], None]


class Call:
    """One request between ``send`` and the end of its RPC (slots: thousands may wait for their deadline).

    ``slots`` and ``region`` are the connection's: where the answer's outputs are read from shared memory.
    ``compression`` is the gRPC encoding its transport sends the request in ("none", "gzip", "deflate").
    """

    __slots__ = ("ledger", "model", "request", "outputs", "slots", "region", "future", "deadline", "expired",
                 "started", "finished", "compression")

    def __init__(self, ledger: CallLedger, model: str, request: Any, outputs: list[str], slots: list[Any],
                 region: Any, future: Future, deadline: float, compression: str = "none"):
        self.ledger, self.model, self.request, self.outputs = ledger, model, request, outputs
        self.slots, self.region, self.future, self.deadline = slots, region, future, deadline
        self.compression = compression
        self.expired = False  # its caller was failed with DEADLINE_EXCEEDED
        self.started = False  # a transport took it to send it
        self.finished = False  # its RPC ended (or it was never sent)

    def begin(self) -> bool:
        """A transport is about to send it: False when its caller no longer waits (deadline passed, or the
        connection closed), and then it must not be sent, only ended with ``end(None, None)``."""
        return self.ledger.begin(self)

    def end(self, answer: Any, error: BaseException | None) -> None:
        """Its RPC ended (or it was never sent): ``answer`` is the server's ``ModelInferResponse``."""
        self.ledger.end(self, answer, error)

    def release(self) -> tuple[Future, bool]:
        """Drops what the deadline keeper need not hold until the deadline; the caller's Future and
        whether the deadline already failed it. Called under the ledger's lock."""
        future, self.future, self.request, self.region = self.future, None, None, None
        return future, self.expired


class CallLedger:
    """The calls of one connection that have not ended, timed-out ones included.

    Args:
        address (str): the server's, for the errors it gives callers.
        timeout_s (float): each call's deadline from its opening.
        on_end (OnEnd): runs when a call ends, before :meth:`finish` (which it calls): reads the answer.
    """

    def __init__(self, address: str, timeout_s: float, on_end: OnEnd):
        self.address, self.timeout_s, self._on_end = address, timeout_s, on_end
        self._lock = threading.Lock()  # guards everything below
        self._idle = threading.Condition(self._lock)  # notified when the last call ends (close waits for it)
        self._calls: set[Call] = set()  # sent (or queued) and not finished, timed-out ones included
        self._orphans = 0  # those of them whose caller timed out
        self.orphaned = 0  # requests that timed out locally and were left to finish

    @property
    def orphans(self) -> int:
        """Calls still running whose caller timed out."""
        with self._lock:
            return self._orphans

    @property
    def in_flight(self) -> int:
        """Calls not finished yet, including those whose caller stopped waiting (timed out)."""
        with self._lock:
            return len(self._calls)

    def open(self, model: str, request: Any, outputs: list[str], slots: list[Any], region: Any,
             future: Future, compression: str = "none") -> Call:
        """A new call, counted and under its deadline from now on."""
        call = Call(self, model, request, outputs, slots, region, future, time.monotonic() + self.timeout_s,
                    compression)
        with self._lock:
            self._calls.add(call)
        _DEADLINES.add(call)
        return call

    def begin(self, call: Call) -> bool:
        with self._lock:
            call.started = not call.expired  # an expired request still queued is not sent
            return call.started

    def end(self, call: Call, answer: Any, error: BaseException | None) -> None:
        self._on_end(call, answer, error)

    def finish(self, call: Call, values: Any, error: BaseException | None) -> None:
        """The call ended: its caller gets the outcome unless its deadline already failed it."""
        with self._lock:
            call.finished = True
            self._calls.discard(call)
            if call.expired:
                self._orphans -= 1
            if not self._calls:
                self._idle.notify_all()
            future, expired = call.release()
        if expired:
            return  # nobody waits for it any more: the outcome is dropped
        try:
            if error is None:
                future.set_result(values)
            else:
                future.set_exception(error)
        except InvalidStateError:  # the caller cancelled it
            pass

    def expire(self, call: Call) -> None:
        """The deadline keeper's verdict: fail the caller now, let the call run on (never cancelled)."""
        with self._lock:
            if call.finished:
                return
            call.expired = True
            self._orphans += 1
            self.orphaned += 1
            future = call.future
        try:
            future.set_exception(RequestError(call.model, self.address, "DEADLINE_EXCEEDED",
                                              f"no answer within {self.timeout_s:g} s (the request was left to finish "
                                              "on the server, or not sent if still queued; its answer will be dropped)",
                                              ACTIONS["DEADLINE_EXCEEDED"]))
        except InvalidStateError:  # the caller cancelled it
            pass

    def wait_idle(self, grace_s: float) -> None:
        """Waits up to ``grace_s`` for every call to end."""
        with self._lock:
            end = time.monotonic() + grace_s
            while self._calls and (left := end - time.monotonic()) > 0:
                self._idle.wait(left)

    def cancel_unsent(self) -> None:
        """Fails (CANCELLED) the callers of calls no transport has begun: the connection closes, so they are
        never sent (the transport that takes one later skips it, as one whose deadline passed)."""
        with self._lock:
            unsent = [call for call in self._calls if not call.started and not call.expired]
            for call in unsent:
                call.expired = True
                self._orphans += 1
        for call in unsent:
            try:
                call.future.set_exception(RequestError(call.model, self.address, "CANCELLED",
                                                       "the connection was closed before this request was sent",
                                                       ACTIONS["CANCELLED"]))
            except InvalidStateError:
                pass


class _Deadlines:
    """One thread that fails the callers of every connection whose requests pass ``timeout_s``.

    Calls are kept in a heap by deadline and not removed when they finish (a finished call is skipped
    when it reaches the top), so ``send`` only pushes, and the thread sleeps until the earliest deadline
    of a call still running: with one ``timeout_s`` it wakes about once per ``timeout_s``, not per request.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Call]] = []
        self._cond = threading.Condition(threading.Lock())
        self._order = itertools.count()
        self._pid: int | None = None

    def add(self, call: Call) -> None:
        with self._cond:
            if self._pid != os.getpid():  # first use (or a forked child, which has no such thread)
                self._pid = os.getpid()
                self._heap.clear()
                threading.Thread(target=self._run, name="sonic-deadlines", daemon=True).start()
            heapq.heappush(self._heap, (call.deadline, next(self._order), call))
            if self._heap[0][2] is call:
                self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if not self._heap:
                        self._cond.wait()
                        continue
                    deadline, _, call = self._heap[0]
                    if call.finished:
                        heapq.heappop(self._heap)
                        continue
                    left = deadline - time.monotonic()
                    if left > 0:
                        self._cond.wait(min(left, 3600.0))
                        continue
                    heapq.heappop(self._heap)
                    break
            try:
                call.ledger.expire(call)  # outside the lock: the caller's callbacks run here
            except Exception:  # noqa: BLE001 - this thread serves every connection: it must not die
                log.exception("failing a request at its deadline")


_DEADLINES = _Deadlines()
